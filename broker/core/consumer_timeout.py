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
"""

from collections import deque
from typing import TYPE_CHECKING

from .errors import precondition_failed

if TYPE_CHECKING:
    from .channel import Channel
    from .queue_base import QueueBase
    from .scheduler import Timer

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

    __slots__ = ("channel", "scheduler", "default_ms", "marks", "timer")

    def __init__(self, channel: "Channel", first_tag: int):
        self.channel = channel
        self.scheduler = channel.vhost.scheduler
        self.default_ms = channel.connection.broker.config.consumer_timeout
        now = self.scheduler.clock()
        self.marks: deque[tuple[float, int]] = deque([(now, first_tag + 1)])
        delivery = channel.unacked[first_tag]
        self.timer: "Timer" = self.scheduler.call_at(
            now + _interval(self._timeout(delivery.queue)), self._check)

    def stop(self) -> None:
        self.timer.cancel()

    def _timeout(self, queue: "QueueBase") -> int | None:
        return queue_consumer_timeout(queue, self.default_ms)

    def _check(self) -> None:
        channel = self.channel
        if channel.closing or not channel.unacked:
            channel.ack_watch = None
            return
        now = self.scheduler.clock()
        oldest = next(iter(channel.unacked.values()))
        timeout_ms = self._timeout(oldest.queue)
        marks = self.marks
        while marks and marks[0][1] <= oldest.tag:
            marks.popleft()   # sent before the oldest: says nothing about it
        if timeout_ms is None:
            marks.clear()
        elif marks and marks[0][0] <= now - timeout_ms / 1000:
            channel.ack_watch = None
            channel.acks_timed_out(timeout_ms)
            return
        next_tag = channel.next_delivery_tag
        if not marks or marks[-1][1] < next_tag:
            marks.append((now, next_tag))
        self.timer = self.scheduler.call_at(now + _interval(timeout_ms), self._check)


def _interval(timeout_ms: int | None) -> float:
    if timeout_ms is None:
        return LONGEST_CHECK_INTERVAL
    return max(SHORTEST_CHECK_INTERVAL, min(timeout_ms / 4000, LONGEST_CHECK_INTERVAL))
