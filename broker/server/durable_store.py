"""A durable queue's store: persistent messages go to its queue file, and their bodies
can be paged out of memory and read back from it.

Writes only touch memory here; the server's group committer calls `sync` (fsync) off
the event loop before the confirms that depend on it, and `drop_files` after the queue's
deletion is committed to the metadata store. Paged-out bodies are read back by the
ReadPool's worker threads (`QueueFile.read` is safe beside a running sync or compaction).
"""

import logging
from functools import partial
from typing import Callable

from broker.core.message import PagedOutPlaceholders
from broker.core.persistence import Persistence
from broker.core.ports import DropStoreFiles
from storage.queue_file import QueueFile, UnsyncedBatch

from .read_pool import ReadPool
from .store_ports import KernelSyncStore, QueueStorePort

log = logging.getLogger("warren.storage")


class QueueFileStore(KernelSyncStore):
    """The commit side of a store over a QueueFile, which forwards to it: a durable
    queue's store, and a delayed exchange's (delayed_store.py)."""

    __slots__ = ("queue_file", "persistence", "store_id", "dropped", "reads")

    def __init__(self, queue_file: QueueFile, persistence: Persistence, store_id: str,
                 reads: ReadPool):
        self.queue_file = queue_file
        self.persistence = persistence
        self.store_id = store_id
        self.dropped = False
        self.reads = reads      # the ReadPool (or a test's stand-in)

    @property
    def last_seq(self) -> int:
        return self.queue_file.last_seq

    def drop(self) -> None:
        """The queue (or exchange) is deleted: its files go once the deletion is
        committed."""
        self.dropped = True
        self.persistence.record(DropStoreFiles(self))

    # -- the group committer's sync without a thread (KernelSync), on the event loop --

    @property
    def kernel_sync_store(self) -> KernelSyncStore:
        return self

    @property
    def appends_in_place(self) -> bool:
        return self.queue_file.appends_in_place

    def write_for_sync(self) -> UnsyncedBatch | None:
        return self.queue_file.write_for_sync()

    def finish_sync(self, unsynced: UnsyncedBatch,
                    error: Exception | None = None) -> None:
        # QueueFile only logs the error (after a fault of Warren's, not an OSError, the
        # committer passes that): its annotation is narrower than what it takes.
        self.queue_file.finish_sync(unsynced, error)  # type: ignore[arg-type]

    @property
    def garbage_due(self) -> bool:
        return self.queue_file.garbage_due

    # -- blocking, in the committer's worker thread -----------------------------------

    @property
    def written_bytes(self) -> int:
        return self.queue_file.written_bytes

    def sync(self) -> int:
        return self.queue_file.sync()

    def collect_garbage(self) -> None:
        self.queue_file.collect_garbage()

    def maintain(self) -> bool:
        """Give a drained queue's segment back, or compact one mostly-dead segment, if
        there is one; True when more remain."""
        self.queue_file.release_drained_segment()
        if self.queue_file.needs_compaction():
            self.queue_file.compact(limit=1)
        return self.queue_file.needs_compaction()

    def drop_files(self) -> None:
        self.queue_file.drop()

    def close(self) -> None:
        self.queue_file.close()


class DurableQueueStore(QueueFileStore, QueueStorePort):
    """QueueStore over a QueueFile; transient messages stay in memory only."""

    __slots__ = ("placeholders",)

    def __init__(self, queue_file: QueueFile, persistence: Persistence, store_id: str,
                 reads: ReadPool):
        super().__init__(queue_file, persistence, store_id, reads)
        self.placeholders = PagedOutPlaceholders()

    def append(self, entry) -> None:
        message = entry.message
        if message.persistent:
            self.queue_file.append(entry.seq, message.exchange, message.routing_key,
                                   message.properties, message.body, entry.redelivered,
                                   True, message.dead_lettered())
            self.persistence.store_written(self)

    def settle(self, entry) -> None:
        if entry.message.persistent:
            self.queue_file.ack(entry.seq)
            self.persistence.store_touched(self)

    def delivered(self, entry) -> None:
        if entry.message.persistent and not entry.redelivered:
            self.queue_file.mark_delivered(entry.seq)
            self.persistence.store_touched(self)

    def page_out(self, entry) -> None:
        """Persistent messages can drop their body: the queue file has it (in its
        write buffer until the next sync, then on disk)."""
        message = entry.message
        if message.persistent and message.body is not None:
            entry.message = self.placeholders.placeholder(
                message.exchange, message.routing_key, message.properties, len(message.body),
                message.dead_lettered())

    def read_bodies(self, entries: list, on_read: Callable[[list, list], None]) -> None:
        """Read paged-out bodies back in a worker thread; `on_read(entries, bodies)`
        follows on the event loop."""
        seqs = [entry.seq for entry in entries]
        self.reads.submit(partial(self._read_bodies, seqs), partial(on_read, entries))

    def _read_bodies(self, seqs: list[int]) -> list[bytes | None]:
        """(worker thread) The bodies of `seqs`; None for one that cannot be read: gone
        (acked meanwhile, or the queue was deleted), damaged, or an I/O error."""
        found: list[bytes | Exception]
        try:
            found = self.queue_file.read_many(seqs)
        except Exception as error:      # e.g. too many open files: all of them failed
            found = [error] * len(seqs)
        bodies: list[bytes | None] = []
        failures: list[tuple[int, Exception]] = []
        for seq, body in zip(seqs, found):
            if isinstance(body, Exception):
                bodies.append(None)
                failures.append((seq, body))
            else:
                bodies.append(body)
        if failures:
            seq, failure = failures[0]
            gone = all(isinstance(error, KeyError) for _seq, error in failures)
            log.log(logging.DEBUG if gone else logging.ERROR,
                    "event=body_read_failed store=%s count=%d first_seq=%d error=%r",
                    self.store_id, len(failures), seq, failure)
        return bodies

    def synced(self) -> None:
        """After a commit: nothing waits on the event loop for a queue file's sync."""
