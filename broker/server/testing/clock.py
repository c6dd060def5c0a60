"""Virtual time: the clock of a test broker, which a test moves forward.

One `VirtualClock` is trio's clock (timers of the transports: heartbeats, handshake
and close timeouts), the core scheduler's monotonic clock (message TTL, queue expiry,
consumer timeouts) and its wall clock (due times of delayed messages; the streams'
publish timestamps and max-age retention). It runs at real
speed; `advance(seconds)` (the operation "test.advance") adds the same offset to all
three, so whatever fell due fires at once."""

import logging
import math
import time
from typing import TYPE_CHECKING

import trio

from .refusal import TestHookError

if TYPE_CHECKING:
    from .hooks import TestHooks

log = logging.getLogger("warren.testing")

# Real seconds the operation gives the tasks woken by a jump (a heartbeat timeout
# dropping its connection) to run before it replies; a broker that is never idle (a
# publisher flooding it) replies after this long anyway.
SETTLE_LIMIT = 1.0


class VirtualClock(trio.abc.Clock):
    """Real time plus the seconds advanced so far. trio's MockClock cannot be
    subclassed and has no wall clock: this is the part of it that is needed."""

    def __init__(self) -> None:
        self.advanced = 0.0

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        """Monotonic seconds; callable outside trio (the storage restores queues with
        it before the loop starts)."""
        return time.perf_counter() + self.advanced

    def wall_time(self) -> float:
        """Seconds since the epoch, as far as the broker knows."""
        return time.time() + self.advanced

    def deadline_to_sleep_time(self, deadline: float) -> float:
        return max(deadline - self.current_time(), 0.0)

    def advance(self, seconds: float) -> None:
        self.advanced += seconds


async def advance(hooks: "TestHooks", seconds: int | float) -> float:
    """Move the broker's time `seconds` forward (for every vhost and connection), fire
    what fell due, and return the seconds advanced since the broker started."""
    if not math.isfinite(seconds) or seconds < 0:
        raise TestHookError(
            f"cannot advance time by {seconds} seconds: time only moves forward; pass "
            "a finite number of seconds >= 0")
    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, VirtualClock):
        raise TestHookError(
            "this broker's trio loop does not run on its VirtualClock: start it with "
            "run_until_stopped(node) and no clock of its own")
    clock.advance(seconds)
    hooks.broker.scheduler.run_due()
    # Imported here: trio.testing imports pytest where it is installed, which would
    # add about 0.2 s to every broker's start-up, test hooks or not.
    from trio.testing import wait_all_tasks_blocked
    with trio.move_on_after(SETTLE_LIMIT):
        await wait_all_tasks_blocked()
    log.debug("event=time_advanced seconds=%s total=%s", seconds, clock.advanced)
    return clock.advanced


OPERATIONS = {"advance": advance}
