"""Faults a test broker injects into one vhost's publish path (broker/server/testing
/faults.py sets them): refuse the next publishes of confirm-mode channels, and hold
confirms for a while before sending them. A production vhost has none
(`VirtualHost.faults is None`), and the publish path checks only that."""

from collections import deque
from typing import TYPE_CHECKING

from .handshake import ConnectionState

if TYPE_CHECKING:
    from .channel import Channel
    from .scheduler import Scheduler, Timer


class PublishFaults:
    """The publish faults of one vhost."""

    def __init__(self, scheduler: "Scheduler"):
        self.scheduler = scheduler
        self.nacks_left = 0          # publishes still to refuse (Basic.Nack, not enqueued)
        self.confirm_delay = 0.0     # seconds confirms are held; 0: sent at once
        # Confirms held, oldest first: (channel, confirmed through, refused publishes)
        self._held: deque[tuple["Channel", int, list[int]]] = deque()
        self._timers: deque["Timer"] = deque()

    def refuses_publish(self) -> bool:
        """Whether this publish (of a confirm-mode channel) is to be nacked."""
        if self.nacks_left <= 0:
            return False
        self.nacks_left -= 1
        return True

    def hold_confirms(self, channel: "Channel", through: int, nacked: list[int]) -> None:
        """Send `channel`'s confirms up to publish `through` (with `nacked` refused)
        confirm_delay seconds from now. Every hold lasts as long, so they go out in the
        order they were held."""
        self._held.append((channel, through, nacked))
        when = self.scheduler.clock() + self.confirm_delay
        self._timers.append(self.scheduler.call_at(when, self._release_oldest))

    def set_confirm_delay(self, seconds: float) -> None:
        """Hold confirms `seconds` from now on; the ones held so far go out now (so a
        shorter delay cannot overtake them)."""
        self.release_all()
        self.confirm_delay = seconds

    def release_all(self) -> None:
        while self._held:
            self._timers.popleft().cancel()
            self._send_oldest()

    def _release_oldest(self) -> None:
        self._timers.popleft()
        self._send_oldest()

    def _send_oldest(self) -> None:
        channel, through, nacked = self._held.popleft()
        if not channel.closing and channel.connection.state is ConnectionState.OPEN:
            channel.confirm_through(through, nacked)
