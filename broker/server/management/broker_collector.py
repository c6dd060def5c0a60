"""The Prometheus collector: RabbitMQ's metric names (rabbitmq_prometheus, 3.10) read from
the broker's state at scrape time, plus Warren's own under `warren_`.

`/metrics` aggregates the per-queue metrics into one unlabelled sample each, as RabbitMQ
does by default (`prometheus.return_per_object_metrics = false`); `/metrics/per-object`
labels them with vhost and queue. Message counters are the core's cumulative counts
(broker/core/message_stats.py): the retired counts of every vhost plus those of the live
channels, so they never go backwards while the broker runs.

A scrape runs on the broker's loop: it is one pass over connections, channels and
queues, with no I/O but two reads of /proc and a statvfs (docs/operations.md has the
time of one scrape at 10,000 queues)."""

import os
import resource
import socket
from importlib.metadata import version
from typing import Iterator

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, Metric,
                                    UnknownMetricFamily)

from broker.core.broker import Broker
from broker.core.message_stats import MessageCounts

from ..alarms import free_disk, held_memory
from .context import ManagementContext
from .stats import unacked_by_queue

PROTOCOL = "amqp091"
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PROMETHEUS_CLIENT_VERSION = version("prometheus_client")

# (name, help, value of MessageCounts) of RabbitMQ's rabbitmq_global_messages_*_total
GLOBAL_COUNTERS = (
    ("rabbitmq_global_messages_received",
     "Total number of messages received from publishers", lambda c: c.publish),
    ("rabbitmq_global_messages_routed",
     "Total number of messages routed to queues or streams",
     lambda c: c.publish - c.drop_unroutable - c.return_unroutable),
    ("rabbitmq_global_messages_unroutable_dropped",
     "Total number of messages published as non-mandatory into an exchange and dropped "
     "as unroutable", lambda c: c.drop_unroutable),
    ("rabbitmq_global_messages_unroutable_returned",
     "Total number of messages published as mandatory into an exchange and returned to "
     "the publisher as unroutable", lambda c: c.return_unroutable),
    ("rabbitmq_global_messages_confirmed",
     "Total number of messages confirmed to publishers", lambda c: c.confirm),
    ("rabbitmq_global_messages_delivered",
     "Total number of messages delivered to consumers",
     lambda c: c.deliver + c.deliver_no_ack + c.get + c.get_no_ack),
    ("rabbitmq_global_messages_delivered_consume_auto_ack",
     "Total number of messages delivered to consumers using basic.consume with automatic "
     "acknowledgment", lambda c: c.deliver_no_ack),
    ("rabbitmq_global_messages_delivered_consume_manual_ack",
     "Total number of messages delivered to consumers using basic.consume with manual "
     "acknowledgment", lambda c: c.deliver),
    ("rabbitmq_global_messages_delivered_get_auto_ack",
     "Total number of messages delivered to consumers using basic.get with automatic "
     "acknowledgment", lambda c: c.get_no_ack),
    ("rabbitmq_global_messages_delivered_get_manual_ack",
     "Total number of messages delivered to consumers using basic.get with manual "
     "acknowledgment", lambda c: c.get),
    ("rabbitmq_global_messages_get_empty",
     "Total number of times basic.get operations fetched no message", lambda c: c.get_empty),
    ("rabbitmq_global_messages_redelivered",
     "Total number of messages redelivered to consumers", lambda c: c.redeliver),
    ("rabbitmq_global_messages_acknowledged",
     "Total number of messages acknowledged by consumers", lambda c: c.ack),
)

# (name, help) of the per-queue gauges, in the order of QueueSample's values
QUEUE_GAUGES = (
    ("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers"),
    ("rabbitmq_queue_messages_unacked",
     "Messages delivered to consumers but not yet acknowledged"),
    ("rabbitmq_queue_messages",
     "Sum of ready and unacknowledged messages - total queue depth"),
    ("rabbitmq_queue_consumers", "Consumers on a queue"),
    ("warren_queue_held_bytes",
     "Bytes the memory alarm counts for the queue's ready and unacknowledged messages"),
)


class BrokerCollector:
    """Yields every metric family of one scrape; `per_object` labels the queue metrics."""

    def __init__(self, context: ManagementContext, per_object: bool):
        self.context = context
        self.per_object = per_object

    def describe(self) -> list:
        return []   # the names are not fixed up front: registering does not scrape

    def collect(self) -> Iterator[Metric]:
        broker = self.context.broker
        yield from _object_counts(broker)
        yield from self._queue_metrics(broker)
        yield from _message_counters(broker)
        yield from self._resources()
        yield from _identity(broker)

    def _queue_metrics(self, broker: Broker) -> list[GaugeMetricFamily]:
        labels = ["vhost", "queue"] if self.per_object else []
        families = [GaugeMetricFamily(name, text, labels=labels) for name, text in QUEUE_GAUGES]
        totals = [0] * len(QUEUE_GAUGES)
        unacked, _sizes = unacked_by_queue(broker)
        for vhost in broker.vhosts.values():
            for queue in vhost.queues.values():
                ready = queue.message_count
                delivered = unacked[queue]
                values = (ready, delivered, ready + delivered, queue.consumer_count,
                          queue.held_bytes)
                if self.per_object:
                    names = [vhost.name, queue.name]
                    for family, value in zip(families, values):
                        family.add_metric(names, value)
                else:
                    totals = [total + value for total, value in zip(totals, values)]
        if not self.per_object:
            for family, total in zip(families, totals):
                family.add_metric([], total)
        return families

    def _resources(self) -> Iterator[Metric]:
        server = self.context.server
        alarm = server.alarm
        if not self.per_object:   # RabbitMQ 3.10's per-object endpoint has no alarms
            yield from _alarms(alarm.raised)
        yield _gauge("rabbitmq_process_resident_memory_bytes", "Memory used in bytes",
                     _resident_memory())
        yield _gauge("rabbitmq_resident_memory_limit_bytes",
                     "Memory high watermark in bytes (Warren: of warren_held_memory_bytes)",
                     alarm.memory_limit)
        yield _gauge("warren_held_memory_bytes",
                     "Bytes held for clients, which the memory alarm compares with its "
                     "limit: queued and unacknowledged messages, connection buffers",
                     held_memory(self.context.broker, server.transports))
        yield _gauge("rabbitmq_disk_space_available_bytes", "Disk space available in bytes",
                     free_disk(alarm.data_dir))
        yield _gauge("rabbitmq_disk_space_available_limit_bytes",
                     "Free disk space low watermark in bytes", alarm.disk.limit)
        yield _gauge("rabbitmq_process_open_fds", "Open file descriptors",
                     len(os.listdir("/proc/self/fd")))
        yield _gauge("rabbitmq_process_max_fds", "Open file descriptors limit",
                     resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _object_counts(broker: Broker) -> Iterator[Metric]:
    channels = consumers = publishers = 0
    for connection in broker.connections:
        for channel in connection.channels.values():
            channels += 1
            consumers += len(channel.consumers)
            publishers += channel.published > 0
    queues = sum(len(vhost.queues) for vhost in broker.vhosts.values())
    yield _gauge("rabbitmq_connections", "Connections currently open",
                 len(broker.connections))
    yield _gauge("rabbitmq_channels", "Channels currently open", channels)
    yield _gauge("rabbitmq_consumers", "Consumers currently connected", consumers)
    yield _gauge("rabbitmq_queues", "Queues available", queues)
    yield _gauge("rabbitmq_global_consumers", "Current number of consumers", consumers,
                 protocol=PROTOCOL)
    yield _gauge("rabbitmq_global_publishers",
                 "Current number of publishers (Warren: open channels that have published)",
                 publishers, protocol=PROTOCOL)


def _message_counters(broker: Broker) -> Iterator[Metric]:
    totals = MessageCounts()
    for vhost in broker.vhosts.values():
        totals.add(vhost.retired_counts)
    for connection in broker.connections:
        for channel in connection.channels.values():
            if not channel.counts_retired:
                totals.add(channel.message_counts())
    for name, text, value in GLOBAL_COUNTERS:
        family = CounterMetricFamily(name, text, labels=["protocol"])
        family.add_metric([PROTOCOL], value(totals))
        yield family


def _alarms(raised: frozenset) -> Iterator[Metric]:
    for name, text, value in (
            ("rabbitmq_alarms_file_descriptor_limit",
             "is 1 if file descriptor limit alarm is in effect", False),
            ("rabbitmq_alarms_free_disk_space_watermark",
             "is 1 if free disk space watermark alarm is in effect", "disk" in raised),
            ("rabbitmq_alarms_memory_used_watermark",
             "is 1 if the memory alarm (Warren: memory held for clients, "
             "warren_held_memory_bytes) is in effect", "memory" in raised)):
        yield UnknownMetricFamily(name, text, value=int(value))


def _identity(broker: Broker) -> Iterator[Metric]:
    build = UnknownMetricFamily(
        "rabbitmq_build_info", "The RabbitMQ release Warren emulates (rabbitmq_version) "
        "and library version info",
        labels=["rabbitmq_version", "prometheus_plugin_version",
                "prometheus_client_version"])
    build.add_metric([broker.profile.line.version, broker.version,
                      PROMETHEUS_CLIENT_VERSION], 1)
    yield build
    node = f"warren@{socket.gethostname().split('.')[0]}"
    identity = UnknownMetricFamily("rabbitmq_identity_info", "Warren node identity info",
                                   labels=["rabbitmq_node", "rabbitmq_cluster"])
    identity.add_metric([node, broker.server_properties()["cluster_name"]], 1)
    yield identity


def _gauge(name: str, text: str, value: float, **labels: str) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def _resident_memory() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * PAGE_SIZE
