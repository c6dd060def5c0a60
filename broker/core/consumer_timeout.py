"""Consumer timeouts (delivery acknowledgement timeouts), as RabbitMQ has them: a
channel whose oldest unacked delivery has waited longer than the timeout is closed with
406 PRECONDITION_FAILED, and its unacked deliveries go back to their queues.

The timeout of a delivery is its queue's: the lower of the `x-consumer-timeout` argument
and the policy's `consumer-timeout` when either is set (RabbitMQ 3.12 and later; 3.10
knows neither), else the broker's `consumer_timeout`; None for no timeout.

Nothing is done per message. A channel that holds unacked deliveries has one timer,
`AckWatch`, that fires every quarter of the timeout (at most every 30 s). Each firing
notes a mark, (time, next delivery tag): every delivery with a smaller tag was sent by
then. The oldest unacked delivery has timed out once a mark that covers it is at least
the timeout old, so the channel is closed between T and 1.5 T after the delivery (T + 60 s
at most). RabbitMQ checks every channel once a minute (`channel_tick_interval`).

RabbitMQ 4.3 (`consumer_timeout_cancels` of its line record) times out deliveries of
quorum queues only (a consumer's own `x-consumer-timeout` argument, when it gives one,
instead of its queue's: rabbit_queue_type:consume), in the queue (rabbit_fifo's evaluate_consumer_timeout): each timed-out
delivery goes back to its queue as handed back (x-acquired-count, not x-delivery-count),
its consumer is cancelled with Basic.Cancel and the channel stays open
(rabbit_channel's `released` action); a later ack of such a delivery is ignored. A timed-out
Basic.Get, or a consumer of a client without consumer_cancel_notify, closes the channel
with 406 saying "Timeout value used: -1 ms", as RabbitMQ's fallback does.
"""

import logging
from collections import deque
from typing import TYPE_CHECKING

from .errors import precondition_failed

if TYPE_CHECKING:
    from .channel import Channel, Delivery
    from .queue_base import QueueBase
    from .scheduler import Timer

log = logging.getLogger("warren.channel")

LONGEST_CHECK_INTERVAL = 30.0    # seconds between checks of one channel
SHORTEST_CHECK_INTERVAL = 0.05   # so that a timeout of 0 does not spin


def queue_consumer_timeout(queue: "QueueBase", default_ms: int) -> int | None:
    """The timeout, in milliseconds, of a delivery from `queue`; None for none."""
    argument = queue.arguments.get("x-consumer-timeout")
    policy = queue.applied_policies[0]
    from_policy = policy.definition.get("consumer-timeout") if policy is not None else None
    given = [value for value in (argument, from_policy)
             if isinstance(value, int) and not isinstance(value, bool)]
    if given:
        return min(given)
    return default_ms or None


def timed_out_error(channel_number: int, timeout_ms: int):
    """RabbitMQ's Channel.Close for a delivery that was not acked in time."""
    return precondition_failed(
        f"delivery acknowledgement on channel {channel_number} timed out. Timeout value "
        f"used: {timeout_ms} ms. This timeout value can be configured, see consumers doc "
        f"guide to learn more")


class AckWatch:
    """The timer of one channel while it holds unacked deliveries."""

    __slots__ = ("channel", "scheduler", "default_ms", "cancels", "marks", "timer")

    def __init__(self, channel: "Channel", first_tag: int):
        self.channel = channel
        self.scheduler = channel.vhost.scheduler
        self.default_ms = channel.connection.broker.config.consumer_timeout
        self.cancels = channel.vhost.profile.line.consumer_timeout_cancels
        now = self.scheduler.clock()
        self.marks: deque[tuple[float, int]] = deque([(now, first_tag + 1)])
        delivery = channel.unacked[first_tag]
        self.timer: "Timer" = self.scheduler.call_at(
            now + _interval(self._timeout(delivery)), self._check)

    def stop(self) -> None:
        self.timer.cancel()

    def _timeout(self, delivery: "Delivery") -> int | None:
        queue = delivery.queue
        if self.cancels:
            if queue.kind.name != "quorum":
                return None
            own = None if delivery.consumer is None else \
                delivery.consumer.arguments.get("x-consumer-timeout")
            if isinstance(own, int) and not isinstance(own, bool):
                return own   # checked at Basic.Consume: an integer, not negative
        return queue_consumer_timeout(queue, self.default_ms)

    def _check(self) -> None:
        channel = self.channel
        if channel.closing or not channel.unacked:
            channel.ack_watch = None
            return
        now = self.scheduler.clock()
        if self.cancels:
            timeout_ms = self._release_due(now)
        else:
            timeout_ms = self._timeout(next(iter(channel.unacked.values())))
            if self._oldest_timed_out(now, timeout_ms) and timeout_ms is not None:
                channel.ack_watch = None
                channel.acks_timed_out(timeout_ms)
                return
        if channel.closing or not channel.unacked:
            channel.ack_watch = None
            return
        marks = self.marks
        next_tag = channel.next_delivery_tag
        if not marks or marks[-1][1] < next_tag:
            marks.append((now, next_tag))
        self.timer = self.scheduler.call_at(now + _interval(timeout_ms), self._check)

    def _oldest_timed_out(self, now: float, timeout_ms: int | None) -> bool:
        """Whether the channel's oldest unacked delivery has waited `timeout_ms` (the
        marks older than it say nothing about it and go)."""
        marks = self.marks
        oldest = next(iter(self.channel.unacked))
        while marks and marks[0][1] <= oldest:
            marks.popleft()
        if timeout_ms is None:
            marks.clear()
            return False
        return bool(marks) and marks[0][0] <= now - timeout_ms / 1000

    def _release_due(self, now: float) -> int | None:
        """RabbitMQ 4.3: hand back every delivery that has waited its own timeout (a
        delivery is as old as the first mark that covers it); the shortest timeout of
        those left, which sets the pace of the checks."""
        marks = self.marks
        due, shortest, index = [], None, 0
        first_left = None
        for delivery in self.channel.unacked.values():
            timeout_ms = self._timeout(delivery)
            if timeout_ms is None:
                continue
            while index < len(marks) and marks[index][1] <= delivery.tag:
                index += 1
            if index < len(marks) and marks[index][0] <= now - timeout_ms / 1000:
                due.append(delivery)
                continue
            if first_left is None:
                first_left = delivery.tag
            shortest = timeout_ms if shortest is None else min(shortest, timeout_ms)
        while marks and (first_left is None or marks[0][1] <= first_left):
            marks.popleft()   # covers no delivery that can still time out
        if due:
            release_timed_out(self.channel, due)
        return shortest


def release_timed_out(channel: "Channel", deliveries: list["Delivery"]) -> None:
    """Cancel the consumers of timed-out deliveries and hand the deliveries back; a
    Basic.Get among them, or a client that cannot be told of a cancel, closes the
    channel (RabbitMQ 4.3)."""
    consumers = {}
    closes = False
    for delivery in deliveries:
        del channel.unacked[delivery.tag]
        channel.released_tags.add(delivery.tag)
        consumer = delivery.consumer
        if consumer is None:
            closes = True
        else:
            consumers[consumer.tag] = consumer
    log.warning("event=consumer_timeout channel=%d released=%d consumers=%s peer=%s",
                channel.number, len(deliveries), sorted(consumers),
                channel.connection.peer)
    notified = channel.connection.supports("consumer_cancel_notify")
    for consumer in consumers.values():
        if notified and consumer.tag in channel.consumers:
            consumer.queue.remove_consumer(consumer)
            channel.consumer_cancelled_by_broker(consumer)
    channel.settle_rejected(deliveries, True, None)
    if closes or (consumers and not notified):
        channel.connection.close_channel(channel.number,
                                         timed_out_error(channel.number, -1))


def _interval(timeout_ms: int | None) -> float:
    if timeout_ms is None:
        return LONGEST_CHECK_INTERVAL
    return max(SHORTEST_CHECK_INTERVAL, min(timeout_ms / 4000, LONGEST_CHECK_INTERVAL))
