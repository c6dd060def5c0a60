"""Message rates for the management API: a sampler that reads the core's cumulative
counters every `interval` seconds (RabbitMQ samples every 5 s) and keeps, per object,
the rate of change since the previous sample.

The counters are read, never kept up to date by the hot path: channels' message counts
and the vhosts' retired counts (broker/core/message_stats.py), each queue's published
count (its sequence numbers; a stream's offsets), each connection's bytes received and
sent (broker/server/transport.py). A sample is one pass over plain data.
"""

from collections import Counter
from typing import TYPE_CHECKING, Iterable

import trio

from broker.core.message_stats import COUNTERS, MessageCounts

if TYPE_CHECKING:
    from broker.core.broker import Broker

    from ..listener import Server

DEFAULT_INTERVAL = 5.0
# deliver_get adds these up, as RabbitMQ's message_stats do
DELIVER_GET_PARTS = ("deliver", "deliver_no_ack", "get", "get_no_ack")


def broker_counts(broker: "Broker", vhosts: set[str] | None = None) -> MessageCounts:
    """The message counts of the whole broker (or of the named vhosts): the retired
    counts of closed channels plus those of the live ones."""
    total = MessageCounts()
    for each in broker.vhosts.values():
        if vhosts is None or each.name in vhosts:
            total.add(each.retired_counts)
    for connection in broker.connections:
        if vhosts is not None and _vhost_of(connection) not in vhosts:
            continue
        for channel in connection.channels.values():
            if not channel.counts_retired:
                total.add(channel.message_counts())
    return total


def _vhost_of(connection) -> str:
    return connection.vhost.name if connection.vhost is not None else ""


def unacked_by_queue(broker: "Broker") -> tuple[Counter, Counter]:
    """Unacked deliveries per queue and their body bytes, in one pass over channels."""
    counts: Counter = Counter()
    sizes: Counter = Counter()
    for connection in broker.connections:
        for channel in connection.channels.values():
            for delivery in channel.unacked.values():
                counts[delivery.queue] += 1
                message = getattr(delivery.entry, "message", None)
                if message is not None and message.body is not None:
                    sizes[delivery.queue] += len(message.body)
    return counts, sizes


def with_rates(counts: dict[str, int], rates: dict[str, float]) -> dict:
    """RabbitMQ's shape: each count, then `<name>_details: {"rate": r}`."""
    shown: dict = {}
    for name, value in counts.items():
        shown[name] = value
        shown[name + "_details"] = {"rate": rates.get(name, 0.0)}
    return shown


def message_stats(counts: MessageCounts, rates: dict[str, float],
                  names: Iterable[str] = COUNTERS) -> dict:
    values = counts.as_dict()
    shown = {name: values[name] for name in names}
    shown["deliver_get"] = sum(values[name] for name in DELIVER_GET_PARTS)
    return with_rates(dict(sorted(shown.items())), rates)


class StatsSampler:
    """The latest rates per object: the broker (key "broker"), each channel, connection
    (transport) and queue. Objects that went away drop out at the next sample."""

    def __init__(self, broker: "Broker", server: "Server",
                 interval: float = DEFAULT_INTERVAL):
        self.broker = broker
        self.server = server
        self.interval = interval
        self._previous: dict[object, dict[str, int]] = {}
        self._previous_at: float | None = None
        self._rates: dict[object, dict[str, float]] = {}

    def rates(self, key) -> dict[str, float]:
        return self._rates.get(key, {})

    async def run(self) -> None:
        while True:
            self.sample(trio.current_time())
            await trio.sleep(self.interval)

    def sample(self, now: float) -> None:
        current = self._read_counters()
        elapsed = None if self._previous_at is None else now - self._previous_at
        rates: dict[object, dict[str, float]] = {}
        if elapsed:
            for key, values in current.items():
                before = self._previous.get(key, {})
                rates[key] = {name: max(value - before.get(name, value), 0) / elapsed
                              for name, value in values.items()}
        self._previous, self._previous_at, self._rates = current, now, rates

    def _read_counters(self) -> dict[object, dict[str, int]]:
        current: dict[object, dict[str, int]] = {}
        total = MessageCounts()
        for vhost in self.broker.vhosts.values():
            total.add(vhost.retired_counts)
        for transport in self.server.transports:
            current[transport] = {"recv_oct": transport.received_bytes,
                                  "send_oct": transport.sent_bytes}
        ready = unacked = 0
        for connection in self.broker.connections:
            for channel in connection.channels.values():
                unacked += len(channel.unacked)
                if channel.counts_retired:
                    continue
                counts = channel.message_counts()
                total.add(counts)
                current[channel] = _with_deliver_get(counts)
        unacked_counts, _sizes = unacked_by_queue(self.broker)
        for vhost in self.broker.vhosts.values():
            for queue in vhost.queues.values():
                queue_ready = queue.message_count
                ready += queue_ready
                queue_unacked = unacked_counts.get(queue, 0)
                current[queue] = {"publish": queue.published,
                                  "messages": queue_ready + queue_unacked,
                                  "messages_ready": queue_ready,
                                  "messages_unacknowledged": queue_unacked}
        broker = _with_deliver_get(total)
        broker.update(messages=ready + unacked, messages_ready=ready,
                      messages_unacknowledged=unacked)
        current["broker"] = broker
        return current


def _with_deliver_get(counts: MessageCounts) -> dict[str, int]:
    values = counts.as_dict()
    values["deliver_get"] = sum(values[name] for name in DELIVER_GET_PARTS)
    return values
