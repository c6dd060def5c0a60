"""The interface between a queue and where its messages are kept.

A queue hands every message it accepts to its store and tells the store when a message
is settled (acked, or dropped). The in-memory store keeps nothing beyond the queue's own
deque. This is the core's port: the adapters over storage (queue files, stream logs)
live in broker/server (durable_store.py, stream_store.py).

The core never reads a queue file. It asks its store for paged-out bodies
(`read_bodies`), and the store answers later, on the event loop, once a worker thread
has read them: the queue then delivers what became available.
"""

from typing import Callable, Protocol


class QueueStore(Protocol):
    """Per-queue message persistence. Entries carry `.seq` and `.message`."""

    store_id: str | None   # names the store's directory; None for memory-only stores

    def append(self, entry) -> None:
        """A message entered the queue."""

    def settle(self, entry) -> None:
        """A message left the queue for good (acked, rejected without requeue, purged)."""

    def delivered(self, entry) -> None:
        """A message was handed to a consumer and awaits its ack (after a crash it comes
        back with redelivered=true)."""

    def page_out(self, entry) -> None:
        """Let go of the entry's body if it can be read back later (paging)."""

    def read_bodies(self, entries: list, on_read: Callable[[list, list], None]) -> None:
        """Read the bodies of paged-out `entries` off the event loop, then call
        `on_read(entries, bodies)` on the event loop: one item per entry, its body, or
        None when it could not be read (the failure is logged). Always answers, even
        after `drop`."""

    def drop(self) -> None:
        """The queue was deleted: forget everything."""


class MemoryQueueStore:
    """Keeps messages only in the queue's memory: nothing survives a restart."""

    __slots__ = ()
    store_id = None

    def append(self, entry) -> None:
        pass

    def settle(self, entry) -> None:
        pass

    def delivered(self, entry) -> None:
        pass

    def page_out(self, entry) -> None:
        pass

    def read_bodies(self, entries: list, on_read) -> None:
        raise RuntimeError("a memory store never pages messages out")

    def drop(self) -> None:
        pass


MEMORY_STORE = MemoryQueueStore()
