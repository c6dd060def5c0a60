"""Group commit: one worker-thread pass makes every pending durable write safe
(metadata changes through SQL, queue files through fsync), shared by all connections.

A failed commit (ENOSPC, EIO, a metadata write refused) does not stop the broker: what
it took goes back into the journal for the next commit, and the replies waiting for it
are released refused (`Persistence.failed`). Nothing it took is reported durable."""

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Callable, cast

import trio

from broker.core.persistence import Persistence
from broker.core.ports import JournalEntry
from storage.kernel_sync import CAPACITY as KERNEL_SYNC_CAPACITY, KernelSync
from storage.queue_file import UnsyncedBatch

from .alarms import DiskSpace
from .store_ports import CommitStore, KernelSyncStore

if TYPE_CHECKING:
    import outcome

log = logging.getLogger("warren.storage")


class GroupCommitter:
    """Commits pending writes when the core asks (`Persistence.wait_durable`,
    `request_commit`) and every interval; `Persistence.committed` then releases what
    connections held for them.

    Commits run one after another: while one runs, new writes accumulate and the next
    takes them all at once, so many publishers, channels and reads share one fsync.
    """

    def __init__(self, persistence: Persistence,
                 apply_changes: Callable[[list[JournalEntry]], None],
                 sync_stores: Callable[[list[CommitStore]], int],
                 maintain_stores: Callable[[list[CommitStore]], list[CommitStore]],
                 kernel_sync: KernelSync | None = None):
        self.persistence = persistence
        self._kernel_sync = kernel_sync     # syncs queue-file-only commits on the loop
        # Blocking, in the worker thread: apply journal entries; sync stores, returning
        # the bytes written; maintain stores, returning those with more to do.
        self._apply_changes = apply_changes
        self._sync_stores = sync_stores
        self._maintain_stores = maintain_stores
        self._synced_since_maintenance: dict[CommitStore, None] = {}
        self._take_request()
        persistence.on_commit_request = self._commit_asked
        self._committing = False
        self._storage_job = trio.Lock()     # one commit or maintenance at a time
        self._finished = _CommitDone()      # set when the running commit ends
        self._failing = False               # the last commit failed
        self._disk: DiskSpace | None = None   # told what each commit wrote
        self._disk_checked: Callable[[], None] = lambda: None   # then, on the event loop

    def watch_disk(self, disk: DiskSpace, on_commit: Callable[[], None]) -> None:
        """Report each commit to `disk` (a DiskSpace, in the worker thread), then call
        `on_commit()` on the event loop (the disk alarm looks at it again)."""
        self._disk = disk
        self._disk_checked = on_commit

    def _take_request(self) -> None:
        """Start listening for the next commit request."""
        self._commit_requested = trio.Event()

    def _commit_asked(self) -> None:
        """A commit is asked for (on the event loop, by a connection at the end of a
        read). The committer task starts it on its next turn, not this connection: the
        other connections whose reads are ready in this turn of the scheduler share
        it. Asked for while one runs, it starts two turns after that one ends (the
        committer task resumes, then waits on the request event, a checkpoint), so the
        connections woken with the release share it too. Started by the asking
        connection or chained by the ending commit itself, commits with four
        publishers carried fewer publishes each: confirm-4p fell from about 46,000 to
        31,000-37,000 msg/s (docs/history/benchmarks-rounds.md, issue 18, round 3)."""
        self._commit_requested.set()

    async def flush_periodically(self, interval: float) -> None:
        """Commit what accumulated without anyone waiting (publishes without confirms,
        acks), so it reaches disk within `interval` seconds, or at once when the core
        asks (stream consumers waiting for new data). Every `interval`, stores synced
        since the last pass get their maintenance (compaction, stream retention), off
        the confirm path."""
        maintenance_due = trio.current_time() + interval
        while True:
            with trio.move_on_at(maintenance_due):
                await self._commit_requested.wait()
            self._take_request()
            if self.persistence.has_pending():
                await self._commit()
            if trio.current_time() >= maintenance_due:
                maintenance_due = trio.current_time() + interval
                await self._maintain()

    async def _maintain(self) -> None:
        if self._synced_since_maintenance:
            stores = list(self._synced_since_maintenance)
            self._synced_since_maintenance.clear()
            try:
                async with self._storage_job:
                    unfinished = await trio.to_thread.run_sync(self._maintain_stores,
                                                               stores)
            except Exception as error:      # space is short: try again next period
                log.debug("event=maintenance_failed error=%r", error)
                unfinished = stores
            self._synced_since_maintenance.update(dict.fromkeys(unfinished))

    async def flush(self) -> None:
        """Commit everything pending now (used at shutdown); stops after a failed
        commit (its own or the one running), which leaves its writes pending."""
        while self.persistence.has_pending() or self._committing:
            if self._committing:
                running = self._finished
                await running.wait()
                if not running.succeeded:
                    return
            elif not await self._commit():
                return

    async def _commit(self) -> bool:
        """One commit of everything pending, after the storage job that runs (a commit
        or maintenance); False if it failed. A running commit is never abandoned, even
        when the caller is cancelled."""
        with trio.CancelScope(shield=True):
            async with self._storage_job:
                if not self.persistence.has_pending():
                    return True             # a commit that ran meanwhile took it all
                self._committing = True
                finished = self._finished = _CommitDone()
                changes, pending, writes = self.persistence.take_pending()
                # The stores that tell Persistence of their writes are the server's.
                stores = cast("list[CommitStore]", pending)
                kernel = self._kernel_sync
                in_kernel = (None if kernel is None
                             else self._kernel_sync_stores(changes, stores))
                if kernel is None or in_kernel is None:
                    self._start_thread(changes, stores, writes)
                    await finished.wait()
                else:
                    await self._commit_on_loop(kernel, in_kernel, writes)
        return finished.succeeded

    def _kernel_sync_stores(self, changes: list[JournalEntry],
                            stores: list[CommitStore]) -> list[KernelSyncStore] | None:
        """The stores, if this commit can run on the loop with `KernelSync`: no metadata
        change, only queue files (no more than the kernel takes at once) that write
        into their open segment (nothing to create or to fsync but the segments), and
        no failed commit to recover from (claiming the disk reserve back writes it: a
        thread's job). None when it cannot."""
        if (changes or len(stores) > KERNEL_SYNC_CAPACITY
                or (self._disk is not None and self._disk.write_error is not None)):
            return None
        in_kernel = []
        for store in stores:
            kernel_store = store.kernel_sync_store
            if kernel_store is None or not kernel_store.appends_in_place:
                return None
            in_kernel.append(kernel_store)
        return in_kernel

    async def _commit_on_loop(self, kernel: KernelSync, stores: list[KernelSyncStore],
                              writes: int) -> None:
        """A commit without a worker thread: the batches are written here, into the
        page cache, and the kernel fdatasyncs them while the loop serves connections.
        The release follows when the eventfd says they are done; the next commit starts
        two turns after it, as after a thread's commit, so that the connections it woke
        have read their next publishes."""
        error, written = await self._sync_in_kernel(kernel, stores)
        if error is not None:
            # The disk reserve is handed back (a file deleted): in a thread.
            await trio.to_thread.run_sync(self._report_to_disk, error, 0)
        else:
            self._report_to_disk(None, written)
        self._commit_done([], stores, writes, error)
        await trio.lowlevel.checkpoint()
        if error is None:
            await self._collect_garbage(stores)

    async def _sync_in_kernel(self, kernel: KernelSync, stores: list[KernelSyncStore]
                              ) -> tuple[Exception | None, int]:
        """Write each store's batch and have the kernel fdatasync them all; a failed
        write or sync buffers every batch again (none is reported durable). Returns the
        error, and the bytes written."""
        unsynced: list[tuple[KernelSyncStore, UnsyncedBatch]] = []
        error: Exception | None = None
        before = sum(store.written_bytes for store in stores)
        try:
            for store in stores:
                if not store.dropped:
                    batch = store.write_for_sync()
                    if batch is not None:
                        unsynced.append((store, batch))
            # A batch of acks of records never written as persistent wrote nothing.
            written = [batch.fd for _store, batch in unsynced if batch.fd is not None]
            if written:
                await self._fdatasync(kernel, written)
        except OSError as failure:
            error = failure
        except Exception as failure:    # a fault of Warren's, with syncs maybe in flight
            error = failure
            self._abandon_kernel_sync(failure)
        for store, batch in unsynced:
            try:
                store.finish_sync(batch, error)
            except Exception as failure:
                error = error or failure
        return error, sum(store.written_bytes for store in stores) - before

    def _abandon_kernel_sync(self, fault: Exception) -> None:
        """Commit through the worker thread from now on: after an unexpected error the
        kernel may still hold syncs of ours, and nothing says when they end."""
        self._kernel_sync = None
        log.error("event=kernel_sync_abandoned error=%r hint=%r", fault,
                  "commits use the worker thread from now on (slower confirms); this is "
                  "a fault in Warren: report it with the traceback below",
                  exc_info=fault)

    @staticmethod
    async def _fdatasync(kernel: KernelSync, descriptors: list[int]) -> None:
        """fdatasync every descriptor through the kernel's AIO, waiting on its eventfd;
        raises OSError for the first that failed."""
        kernel.submit(descriptors)
        ended = dict(kernel.completed())
        while len(ended) < len(descriptors):
            await trio.lowlevel.wait_readable(kernel.fileno())
            ended.update(kernel.completed())
        for number in range(len(descriptors)):
            if ended[number] < 0:
                raise OSError(-ended[number], os.strerror(-ended[number]))

    async def _collect_garbage(self, stores: list[KernelSyncStore]) -> None:
        """Delete the segments a commit on the loop left deletable (in a worker
        thread, as `sync` does in the thread's commits)."""
        due = [store for store in stores if not store.dropped and store.garbage_due]
        if due:
            try:
                await trio.to_thread.run_sync(_collect_garbage, due)
            except Exception as error:
                log.error("event=segment_collection_failed error=%r", error)

    def _start_thread(self, changes: list[JournalEntry], stores: list[CommitStore],
                      writes: int) -> None:
        """Hand the commit to a worker thread now. The thread's wake-up of the event
        loop runs `_commit_done` directly, not a task: confirms wait for it."""
        token = trio.lowlevel.current_trio_token()

        def deliver(result: "outcome.Outcome[None]") -> None:
            error = None
            try:
                result.unwrap()
            except Exception as failure:
                error = failure
            try:
                token.run_sync_soon(self._commit_done, changes, stores, writes, error)
            except trio.RunFinishedError:
                pass            # the broker stopped; the commit's outcome is moot

        trio.lowlevel.start_thread_soon(lambda: self._write(changes, stores), deliver)

    def _commit_done(self, changes: list[JournalEntry], stores: Sequence[CommitStore],
                     writes: int, error: Exception | None) -> None:
        """On the event loop, from the worker thread's wake-up (or in the committer task,
        for a commit on the loop): release what waited for the commit at once (confirms
        are sent here, not by a task on a later turn).
        The next commit is the committer task's (see `_commit_asked`). Nothing raised
        here may escape (it would stop the event loop)."""
        finished = self._finished
        self._committing = False
        if error is not None:
            # Nothing taken by this commit is reported durable; it is tried again.
            self._settle(lambda: self._commit_failed(changes, stores, writes, error))
            finished.set(succeeded=False)
            return
        if self._failing:
            self._failing = False
            log.warning("event=commit_recovered writes=%d", writes)
        self._synced_since_maintenance.update(dict.fromkeys(stores))
        self._settle(lambda: self.persistence.committed(stores, writes))
        self._settle(self._disk_checked)
        finished.set(succeeded=True)

    @staticmethod
    def _settle(step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as error:
            log.error("event=commit_release_failed", exc_info=error)

    def _commit_failed(self, changes: list[JournalEntry], stores: Sequence[CommitStore],
                       writes: int, error: Exception) -> None:
        reason = failure_reason(error)
        if not self._failing:
            self._failing = True
            log.error("event=commit_failed writes=%d error=%r hint=%r", writes, error,
                      "confirms of this commit are nacked and durable replies refused; "
                      + _failure_hint(error),
                      exc_info=None if _is_storage_failure(error) else error)
        else:
            log.debug("event=commit_failed_again writes=%d error=%r", writes, error)
        self.persistence.failed(changes, stores, writes, reason)
        self._disk_checked()

    def _write(self, changes: list[JournalEntry], stores: list[CommitStore]) -> None:
        """The blocking part of a commit. `apply_changes` removes from `changes` what
        it applied, so a failure leaves there what is still to do."""
        try:
            self._apply_changes(changes)
            written = self._sync_stores(stores)
        except Exception as error:
            self._report_to_disk(error, 0)
            raise
        self._report_to_disk(None, written)

    def _report_to_disk(self, error: Exception | None, written: int) -> None:
        disk = self._disk
        if disk is not None:
            if error is not None:
                disk.write_failed(failure_reason(error))
            else:
                disk.wrote(written)


def _collect_garbage(stores: list[KernelSyncStore]) -> None:
    for store in stores:
        store.collect_garbage()


class _CommitDone:
    """Set when a commit ends; says whether it succeeded."""

    __slots__ = ("_event", "succeeded")

    def __init__(self) -> None:
        self._event = trio.Event()
        self.succeeded = False

    def set(self, succeeded: bool) -> None:
        self.succeeded = succeeded
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()


def _is_storage_failure(error: Exception) -> bool:
    """Whether the disk or the database refused the write (an OSError, or a
    SQLAlchemy error wrapping the driver's), rather than a fault in Warren itself."""
    return isinstance(error, OSError) or getattr(error, "orig", None) is not None


def _failure_hint(error: Exception) -> str:
    if _is_storage_failure(error):
        return "free disk space in the data directory"
    return ("this is a fault in Warren, not the disk: the commit is retried; "
            "report it with the traceback below")


def failure_reason(error: Exception) -> str:
    """What went wrong, short enough for a reply text: "No space left on device", or
    the database's own message ("database or disk is full") without SQLAlchemy's SQL."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(getattr(error, "orig", None) or error) or repr(error)
