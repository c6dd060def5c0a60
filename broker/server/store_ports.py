"""The commit side of the stores: what the group committer (committer.py) and
DurableStorage (durability.py) call on the stores they make durable.

The core declares what it calls on a store (broker/core/ports.py: `QueueStore`,
`StreamStore`, and `BufferedStore`'s `synced`, which Persistence calls after a commit).
Writing, syncing and maintaining the files is the server's own business, declared here:

- `CommitStore`: every store a commit visits (queue files, stream logs, delayed
  exchanges' files);
- `KernelSyncStore`: a store a commit can make durable on the event loop, the kernel
  fdatasyncing its batch (storage/kernel_sync.py), as well as in the worker thread.
"""

from typing import TYPE_CHECKING, Protocol

from storage.queue_file import UnsyncedBatch

if TYPE_CHECKING:
    from broker.core.delayed_exchange import DelayedStore
    from broker.core.ports import QueueStore, StreamStore

    QueueStorePort = QueueStore
    StreamStorePort = StreamStore
    DelayedStorePort = DelayedStore
else:
    # The adapters name the core's ports they implement, and mypy holds them to them as
    # subclasses. Not at run time: in the compiled build the core's ports are mypyc
    # traits, and an instance of an interpreted class that subclasses one cannot be made
    # ("interpreted classes cannot inherit from compiled traits").
    QueueStorePort = StreamStorePort = DelayedStorePort = object


class CommitStore(Protocol):
    """A store with writes for the group commit. `sync`, `maintain`, `drop_files` and
    `close` block: the committer runs them in its worker thread (`close` at shutdown)."""

    __slots__ = ()

    dropped: bool   # its queue (or exchange) was deleted: a commit skips it

    @property
    def written_bytes(self) -> int:
        """Bytes ever written to its files (the disk alarm's accounting)."""

    @property
    def kernel_sync_store(self) -> "KernelSyncStore | None":
        """The store itself if it is a KernelSyncStore, else None: which way a commit
        can make it durable."""

    def sync(self) -> int:
        """Write what was buffered and fsync it."""

    def synced(self) -> None:
        """After a commit that synced it, on the event loop (Persistence.committed)."""

    def maintain(self) -> bool:
        """Compaction or retention, between commits; True when more remains to do."""

    def drop_files(self) -> None:
        """Delete its files (its deletion is committed)."""

    def close(self) -> None:
        """Write what was buffered and close its files (at shutdown)."""


class KernelSyncStore(CommitStore, Protocol):
    """A store whose `sync` comes in two halves, so that the committer can have the
    kernel fdatasync between them while the event loop goes on (`write_for_sync`, then
    `finish_sync`; `collect_garbage` after, in a worker thread, if `garbage_due`)."""

    __slots__ = ()

    @property
    def appends_in_place(self) -> bool:
        """Whether its next write goes into the open segment: nothing to create, so the
        write blocks on nothing but its `pwrite`, and only the segment needs syncing."""

    @property
    def garbage_due(self) -> bool:
        """Whether segments may have become deletable (`collect_garbage`)."""

    def write_for_sync(self) -> UnsyncedBatch | None:
        """Write what was buffered into the page cache; what to fdatasync, or None when
        nothing was to be written."""

    def finish_sync(self, unsynced: UnsyncedBatch,
                    error: Exception | None = None) -> None:
        """The batch is durable (`error` None), or its sync failed: then it is buffered
        again for the next commit."""

    def collect_garbage(self) -> None:
        """Delete the segments that hold nothing needed any more (blocking)."""
