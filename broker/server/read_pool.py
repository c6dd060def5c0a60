"""Blocking reads of paged-out message bodies and stream records, off the event loop.

The store adapters (durable_store.py, stream_store.py) hand their reads to one ReadPool
per broker. It runs each read in a worker thread, at most `workers` at once (the others
wait their turn in order), and hands the result back on the event loop, where the store
tells its queue that messages are available.
"""

import logging
from collections import deque

import trio

log = logging.getLogger("warren.storage")

WORKERS = 2   # reads at once: the page cache answers most; a slow disk delays only these


class ReadPool:
    """Worker threads for reads; results come back on the event loop (trio's
    run_sync_soon), so the stores' callbacks may change the core's state."""

    def __init__(self, workers: int = WORKERS):
        self.workers = workers
        self._waiting: deque = deque()
        self._running = 0

    def submit(self, read, done) -> None:
        """Run `read()` in a worker thread, then `done(result)` on the event loop.
        `read` reports its failures in its result: one that raises is a bug, logged,
        and `done` is not called. Called on the event loop."""
        if self._running >= self.workers:
            self._waiting.append((read, done))
        else:
            self._start(read, done)

    def _start(self, read, done) -> None:
        self._running += 1
        token = trio.lowlevel.current_trio_token()

        def finished(outcome) -> None:      # in the worker thread
            try:
                token.run_sync_soon(self._finished, outcome, done)
            except trio.RunFinishedError:   # the broker stopped meanwhile
                pass

        trio.lowlevel.start_thread_soon(read, finished)

    def _finished(self, outcome, done) -> None:
        self._running -= 1
        if self._waiting:
            self._start(*self._waiting.popleft())
        try:
            done(outcome.unwrap())
        except Exception as error:   # one queue's read, not the event loop
            log.error("event=read_failed error=%r", error, exc_info=error)
