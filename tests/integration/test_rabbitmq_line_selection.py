"""RabbitMQ lines over the wire: `warren serve --rabbitmq LINE` and the configuration
file's deprecated_features.permit keys, the identity clients see (Connection.Start, the
overview), RabbitMQ's /api/deprecated-features endpoints, a vhost's own line through the
management API, and global qos per line with pika.

The same behaviours against the real nodes of each line: docs/compatibility.md, "RabbitMQ
lines" (4.3.6 measured: global qos per consumer, the 541 of a denied feature)."""

import pika
import pika.exceptions
import pytest

from tests.support.management_client import ManagementApi
from tests.support.pika_helpers import connect, wait_for_count

pytestmark = pytest.mark.warren_only("starts Warren brokers of each RabbitMQ line")


def server_properties(broker) -> dict:
    connection = connect(broker.address())
    try:
        return {key: (value.decode() if isinstance(value, bytes) else value)
                for key, value in connection._impl.server_properties.items()}
    finally:
        connection.close()


@pytest.mark.parametrize("line, version", [("3.10", "3.10.8"), ("4.0", "4.0.5"),
                                           ("4.3", "4.3.6")])
def test_clients_see_the_rabbitmq_release_of_the_line(broker_factory, line, version):
    broker = broker_factory("--rabbitmq", line)
    properties = server_properties(broker)
    assert (properties["product"], properties["version"]) == ("RabbitMQ", version)
    assert properties["platform"].startswith("Warren ")
    overview = ManagementApi(broker.management_url).json("/api/overview")
    assert (overview["product_name"], overview["rabbitmq_version"]) == ("RabbitMQ", version)
    assert overview["warren_version"]


def test_the_default_line_is_4_3_with_global_qos_denied(broker_factory):
    broker = broker_factory()
    assert server_properties(broker)["version"] == "4.3.6"
    features = {feature["name"]: feature for feature in
                ManagementApi(broker.management_url).json("/api/deprecated-features")}
    assert (features["global_qos"]["deprecation_phase"], features["global_qos"]["state"]) \
        == ("denied_by_default", "denied")
    assert features["transient_nonexcl_queues"]["state"] == "permitted"
    assert features["classic_queue_mirroring"]["deprecation_phase"] == "removed"


def test_a_denied_transient_non_exclusive_queue_closes_the_connection_with_541(
        broker_factory, tmp_path):
    config = tmp_path / "warren.toml"
    config.write_text("deprecated_features.permit.transient_nonexcl_queues = false\n")
    broker = broker_factory("--config", str(config))
    connection = connect(broker.address())
    channel = connection.channel()
    channel.queue_declare("durable", durable=True)
    channel.queue_declare("exclusive", exclusive=True)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        channel.queue_declare("transient")
    assert closed.value.reply_code == 541
    assert closed.value.reply_text.startswith(
        "INTERNAL_ERROR - Feature `transient_nonexcl_queues` is deprecated.")
    used = ManagementApi(broker.management_url).json("/api/deprecated-features/used")
    assert [feature["name"] for feature in used] == ["transient_nonexcl_queues"]
    assert broker.wait_for_log("event=upgrade_lint")


def global_prefetch_1_over_two_consumers(target, expected: int) -> int:
    """Deliveries of four messages in two queues to a consumer on each, on a channel with
    prefetch 1 global, once `expected` have left the queues."""
    connection = connect(target)
    try:
        channel, observer = connection.channel(), connection.channel()
        for queue in ("a", "b"):
            channel.queue_declare(queue, durable=True)
            for _ in range(2):
                channel.basic_publish("", queue, b"m")
            assert wait_for_count(observer, queue, 2) == 2
        channel.basic_qos(prefetch_count=1, global_qos=True)
        delivered = []
        for queue in ("a", "b"):
            channel.basic_consume(queue, lambda ch, method, props, body: delivered.append(1))
        for queue, left in (("a", 1), ("b", expected - 1)):
            assert wait_for_count(observer, queue, 2 - left) == 2 - left
        connection.process_data_events(time_limit=0)
        return len(delivered)
    finally:
        connection.close()


def test_a_vhost_behaves_as_the_line_the_management_api_gives_it(warren_broker, api):
    first = warren_broker.new_vhost("line-4-3", rabbitmq_line="4.3")
    second = warren_broker.new_vhost("line-3-10", rabbitmq_line="3.10")
    try:
        assert api.json(f"/api/vhosts/{first.vhost}")["rabbitmq_line"] == "4.3"
        assert global_prefetch_1_over_two_consumers(first, 2) == 2     # per consumer
        assert global_prefetch_1_over_two_consumers(second, 1) == 1    # channel-wide
        assert api.put(f"/api/vhosts/{second.vhost}",
                       {"rabbitmq_line": "4.3"}).status_code == 204
        assert api.json(f"/api/vhosts/{second.vhost}")["rabbitmq_line"] == "4.3"
        assert api.put(f"/api/vhosts/{second.vhost}",
                       {"rabbitmq_line": "2.8"}).status_code == 400
    finally:
        first.remove()
        second.remove()


SIXTEEN_MIB = 16 * 1024 * 1024


def publish_one(target, size: int):
    """Publish a message of `size` bytes; the channel's close, or None once it is
    queued."""
    connection = connect(target)
    try:
        channel = connection.channel()
        channel.queue_declare("sized", durable=True)
        channel.confirm_delivery()
        try:
            channel.basic_publish("", "sized", bytes(size))
        except pika.exceptions.ChannelClosedByBroker as closed:
            return closed.reply_code, closed.reply_text
        return None
    finally:
        if connection.is_open:
            connection.close()


def test_the_largest_message_by_default_is_16_mib_since_4_0_and_128_mib_in_3_10(
        warren_broker):
    for line, refused in (("3.10", None), ("4.0", 406), ("4.3", 406)):
        vhost = warren_broker.new_vhost("sized", rabbitmq_line=line)
        try:
            assert publish_one(vhost, SIXTEEN_MIB) is None
            answer = publish_one(vhost, SIXTEEN_MIB + 1)
            if refused is None:
                assert answer is None
            else:
                assert answer == (406, "PRECONDITION_FAILED - message size 16777217 is "
                                       "larger than configured max size 16777216")
        finally:
            vhost.remove()
