"""A classic queue's two timers: the one that fires when its head message expires
(message TTL, per-message expiration) and x-expires's, which deletes the queue once it
has been unused for the whole period, as RabbitMQ does.

`Expiry` keeps the timers and x-expires's bookkeeping; it knows the queue only by the
two callbacks it is given, so it needs no back pointer (the queue drops and
dead-letters the expired messages itself, and decides whether it is still unused).
"""

from typing import Callable

from .message import Message
from .scheduler import Scheduler, Timer


def expiry_time(queue_ttl: int | None, message: Message, now: float) -> float | None:
    """When the message expires: the queue's TTL or the message's, whichever is
    shorter (milliseconds in AMQP, seconds on the clock); None when neither is set."""
    ttl = queue_ttl
    message_ttl = message.expiration_ms()
    if message_ttl is not None:
        ttl = message_ttl if ttl is None else min(ttl, message_ttl)
    return None if ttl is None else now + ttl / 1000


class Expiry:
    """The head-expiry timer and x-expires for one queue.

    `head_due()` is called when the time `arm` was last given (the earliest) came;
    `idle_due()` when x-expires's period may be over: the queue asks `unused_long_enough`
    whether it was, unless it is in use (then the timer stays off until `touch`).
    """

    __slots__ = ("scheduler", "expires", "_last_used", "_head_timer", "_idle_timer",
                 "_head_due", "_idle_due")

    def __init__(self, scheduler: Scheduler, expires: int | None,
                 head_due: Callable[[], None], idle_due: Callable[[], None]):
        self.scheduler = scheduler
        self.expires = expires          # x-expires in milliseconds, or None
        self._last_used = 0.0
        self._head_timer: Timer | None = None
        self._idle_timer: Timer | None = None
        self._head_due = head_due
        self._idle_due = idle_due

    def arm(self, when: float) -> None:
        """Make sure the head timer fires at `when` (the head message's expiry time)."""
        timer = self._head_timer
        if timer is not None and not timer.cancelled and timer.when <= when:
            return
        if timer is not None:
            timer.cancel()
        self._head_timer = self.scheduler.call_at(when, self._head_timer_due)

    def _head_timer_due(self) -> None:
        self._head_timer = None
        self._head_due()

    def touch(self) -> None:
        """The queue was used (declared, read by Basic.Get, lost its last consumer):
        x-expires counts its idle time from now."""
        if self.expires is None:
            return
        self._last_used = self.scheduler.clock()
        if self._idle_timer is None:
            self._arm_idle_timer(self._last_used + self.expires / 1000)

    def set_expires(self, expires: int | None) -> None:
        """x-expires as a policy changed it: an unused queue's idle time counts from
        now (RabbitMQ restarts the timer whenever the queue's policy changes)."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self.expires = expires
        self.touch()

    def unused_long_enough(self) -> bool:
        """Whether the queue, unused since it was last touched, was so for the whole
        x-expires period; if not yet, the timer is armed again for the rest."""
        assert self.expires is not None, "only queues with x-expires arm the timer"
        deadline = self._last_used + self.expires / 1000
        if self.scheduler.clock() >= deadline:
            return True
        self._arm_idle_timer(deadline)
        return False

    def _arm_idle_timer(self, when: float) -> None:
        self._idle_timer = self.scheduler.call_at(when, self._idle_timer_due)

    def _idle_timer_due(self) -> None:
        self._idle_timer = None
        self._idle_due()
