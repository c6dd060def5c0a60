"""Prometheus metrics: /metrics and /metrics/per-object as rabbitmq_prometheus serves them.
Runs against Warren and, with WARREN_TEST_BROKER and WARREN_TEST_PROMETHEUS (RabbitMQ's
prometheus endpoint), against RabbitMQ (scripts/test.sh's second run does). The queue is
guest's on `/` of the session broker (`warren_broker`), not in a `warren` vhost: the
per-object labels checked name its vhost `/`."""

import os
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.pika_helpers import connect
from tests.support.prometheus_server import PrometheusServer

GAUGES = ("rabbitmq_connections", "rabbitmq_channels", "rabbitmq_consumers",
          "rabbitmq_queues", "rabbitmq_queue_messages_ready",
          "rabbitmq_queue_messages_unacked", "rabbitmq_queue_messages",
          "rabbitmq_queue_consumers", "rabbitmq_global_publishers",
          "rabbitmq_global_consumers", "rabbitmq_process_resident_memory_bytes",
          "rabbitmq_resident_memory_limit_bytes", "rabbitmq_disk_space_available_bytes",
          "rabbitmq_disk_space_available_limit_bytes", "rabbitmq_process_open_fds",
          "rabbitmq_process_max_fds")
COUNTERS = tuple(f"rabbitmq_global_messages_{name}" for name in (
    "received", "routed", "unroutable_dropped", "unroutable_returned", "confirmed",
    "delivered", "delivered_consume_auto_ack", "delivered_consume_manual_ack",
    "delivered_get_auto_ack", "delivered_get_manual_ack", "get_empty", "redelivered",
    "acknowledged"))
UNTYPED = ("rabbitmq_alarms_memory_used_watermark",
           "rabbitmq_alarms_free_disk_space_watermark",
           "rabbitmq_alarms_file_descriptor_limit", "rabbitmq_build_info",
           "rabbitmq_identity_info")


def metrics_url(warren_broker) -> str:
    """The broker's Prometheus endpoint: WARREN_TEST_PROMETHEUS when the tests run
    against RabbitMQ, else Warren's management listener."""
    return os.environ.get("WARREN_TEST_PROMETHEUS") or warren_broker.management_url


def rabbitmq_prometheus_url(rabbitmq_node) -> str:
    """RabbitMQ's Prometheus endpoint: WARREN_TEST_PROMETHEUS, or the listener its
    management API names (the throw-away node's)."""
    if os.environ.get("WARREN_TEST_PROMETHEUS"):
        return os.environ["WARREN_TEST_PROMETHEUS"]
    listeners = rabbitmq_node.management().json("/api/overview")["listeners"]
    port = next(listener["port"] for listener in listeners
                if listener["protocol"] == "http/prometheus")
    return f"http://{rabbitmq_node.host}:{port}"


def families(url: str, path: str = "/metrics") -> dict:
    response = httpx.get(url + path, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def label_names(family) -> set[str]:
    return {name for sample in family.samples for name in sample.labels}


@pytest.fixture
def queue(warren_broker):
    """A queue of the shared broker with 3 ready messages; deleted afterwards."""
    name = f"prom-{uuid.uuid4().hex[:8]}"
    connection = connect(warren_broker)
    channel = connection.channel()
    channel.queue_declare(name)
    for _ in range(3):
        channel.basic_publish("", name, b"counted")
    yield name
    channel.queue_delete(name)
    connection.close()


def test_the_exposition_has_rabbitmqs_names_and_types(warren_broker):
    found = families(metrics_url(warren_broker))
    for names, kind in ((GAUGES, "gauge"), (COUNTERS, "counter"), (UNTYPED, "unknown")):
        for name in names:
            assert name in found, name
            assert found[name].type == kind, (name, found[name].type)
    assert label_names(found["rabbitmq_global_messages_received"]) >= {"protocol"}
    assert label_names(found["rabbitmq_identity_info"]) >= {"rabbitmq_node",
                                                           "rabbitmq_cluster"}


def test_metrics_aggregate_queues_and_per_object_labels_them(warren_broker, queue):
    url = metrics_url(warren_broker)
    assert label_names(families(url)["rabbitmq_queue_messages_ready"]) == set()
    per_object = families(url, "/metrics/per-object")["rabbitmq_queue_messages_ready"]
    labelled = [sample for sample in per_object.samples if sample.labels["queue"] == queue]
    assert [sample.labels["vhost"] for sample in labelled] == ["/"]


def test_prometheus_reads_queue_depth_and_published_count(warren_broker, queue, tmp_path):
    url = metrics_url(warren_broker)
    received = families(url)["rabbitmq_global_messages_received"].samples[0].value
    prometheus = PrometheusServer(url + "/metrics/per-object", tmp_path).start()
    try:
        prometheus.wait_for(f'rabbitmq_queue_messages_ready{{queue="{queue}"}}',
                            lambda value: value == 3)
        prometheus.wait_for(f'rabbitmq_queue_messages{{queue="{queue}"}}',
                            lambda value: value == 3)
        # the shared broker may have published since: at least ours are counted
        prometheus.wait_for("sum(rabbitmq_global_messages_received_total)",
                            lambda value: value >= received)
        connection = connect(warren_broker)
        channel = connection.channel()
        channel.basic_get(queue, auto_ack=False)
        prometheus.wait_for(f'rabbitmq_queue_messages_unacked{{queue="{queue}"}}',
                            lambda value: value == 1)
        for _ in range(5):
            channel.basic_publish("", queue, b"more")
        prometheus.wait_for("sum(rabbitmq_global_messages_received_total)",
                            lambda value: value >= received + 5)
        prometheus.wait_for(f'rabbitmq_queue_messages_ready{{queue="{queue}"}}',
                            lambda value: value == 7)
        connection.close()
    finally:
        prometheus.stop()


@pytest.mark.warren_rabbitmq("3.10")   # (4.3.6 dropped some: not compared yet)
def test_names_types_and_labels_are_rabbitmqs(warren_nodes, rabbitmq_nodes):
    """Every rabbitmq_* metric Warren exposes is one RabbitMQ 3.10 exposes, with the same
    type and labels RabbitMQ also has; Warren's own metrics are named warren_*."""
    warren_node, rabbitmq_node = warren_nodes("3.10"), rabbitmq_nodes("3.10")
    reference_url = rabbitmq_prometheus_url(rabbitmq_node)
    name = f"prom-cmp-{uuid.uuid4().hex[:8]}"
    for node in (warren_node, rabbitmq_node):
        connection = connect(node)
        connection.channel().queue_declare(name, auto_delete=False)
        connection.close()
    try:
        for path in ("/metrics", "/metrics/per-object"):
            reference = families(reference_url, path)
            warren = families(warren_node.management_url, path)
            for family in warren.values():
                if not family.name.startswith("rabbitmq_"):
                    assert family.name.startswith("warren_"), family.name
                    continue
                assert family.name in reference, (path, family.name)
                assert family.type == reference[family.name].type, (path, family.name)
                assert label_names(family) <= label_names(reference[family.name]), (
                    path, family.name)
    finally:
        for node in (warren_node, rabbitmq_node):
            connection = connect(node)
            connection.channel().queue_delete(name)
            connection.close()
