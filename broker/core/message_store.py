"""The interface between a queue and where its messages are kept.

A queue hands every message it accepts to its store and tells the store when a message
is settled (acked, or dropped). The in-memory store keeps nothing beyond the queue's own
deque. This is the core's port: the adapters over storage (queue files, stream logs)
live in broker/server (durable_store.py, stream_store.py).

The core never reads from disk. It asks its store for paged-out bodies (`read_bodies`)
or stream records (`StreamStore.read`), and the store answers later, on the event loop,
once a worker thread has read them: the queue then delivers what became available.
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


class StreamRecord(Protocol):
    """One message of a stream as a stream store reads it back."""

    offset: int
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes


class StreamStore(Protocol):
    """A stream's log, as a stream queue sees it. Offsets count from 0 per stream."""

    first_offset: int     # the oldest offset still kept (retention removes older ones)
    next_offset: int      # the offset the next append gets
    durable_offset: int   # the highest offset on disk (-1: none)

    def append(self, message) -> int:
        """Append a message (written by the next commit); its offset."""

    def read(self, offset: int, count: int) -> list[StreamRecord]:
        """Up to `count` durable messages from `offset` on (from `first_offset` when
        `offset` is older), in offset order, that are in memory now: possibly none.
        When there are fewer than asked and more are durable, the store reads them off
        the event loop and then calls the queue's `dispatch()` on the event loop."""

    def consumer_offset(self, name: str) -> int | None:
        """The offset last stored for a tracking consumer, or None."""

    def store_consumer_offset(self, name: str, offset: int) -> None:
        """Remember a tracking consumer's offset (written by the next commit)."""

    def offset_for_timestamp(self, seconds: float) -> int:
        """The first offset published at or after `seconds` since the epoch."""

    def offset_for_age(self, seconds: float) -> int:
        """The first offset published at most `seconds` ago."""

    def drop(self) -> None:
        """The stream is deleted: forget everything."""


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
