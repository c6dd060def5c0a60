"""Timers for the core (message expiry, delayed messages). The server runs them; the core only asks."""

import heapq
import itertools
import logging
import time
from typing import Callable

log = logging.getLogger("warren.scheduler")


class Timer:
    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when: float, callback: Callable[[], None]):
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler:
    """A heap of timers on an injected monotonic clock (seconds).

    The server waits until `next_deadline()`, then calls `run_due()`; `on_change` is
    called when a timer earlier than every other is added, so the server can wake up.
    """

    def __init__(self, clock: Callable[[], float],
                 wall_clock: Callable[[], float] = time.time):
        self.clock = clock
        self.wall_clock = wall_clock   # seconds since the epoch: due times that outlive
        #                                a restart (delayed messages) are kept on it
        self.on_change: Callable[[], None] = lambda: None
        self._heap: list = []
        self._order = itertools.count()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(when, callback)
        earliest = not self._heap or when < self._heap[0][0]
        heapq.heappush(self._heap, (when, next(self._order), timer))
        if earliest:
            self.on_change()
        return timer

    def next_deadline(self) -> float | None:
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def run_due(self) -> None:
        """Run every timer that is due. A timer that raises is logged and dropped; the
        others still run (one queue's failing expiry must not stop everyone's)."""
        now = self.clock()
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, timer = heapq.heappop(heap)
            if not timer.cancelled:
                try:
                    timer.callback()
                except Exception as error:
                    log.error("event=timer_failed callback=%r", timer.callback,
                              exc_info=error)
