"""Group commit: one worker-thread pass makes every pending durable write safe
(metadata changes through SQL, queue files through fsync), shared by all connections."""

import logging

import trio

from broker.core.persistence import Persistence

log = logging.getLogger("warren.storage")


class StorageFailure(Exception):
    """A commit failed: durability can no longer be promised."""


class GroupCommitter:
    """Commits pending writes when the core asks (`Persistence.wait_durable`,
    `request_commit`) and every interval; `Persistence.committed` then releases what
    connections held for them.

    Commits run one after another: while one runs, new writes accumulate and the next
    takes them all at once, so many publishers, channels and reads share one fsync.
    """

    def __init__(self, persistence: Persistence, apply_changes, sync_stores,
                 maintain_stores):
        self.persistence = persistence
        self._apply_changes = apply_changes   # blocking: list[MetadataChange] -> None
        self._sync_stores = sync_stores       # blocking: list[store] -> None
        self._maintain_stores = maintain_stores  # blocking: list[store] -> unfinished
        self._synced_since_maintenance: dict = {}
        self._commit_requested = trio.Event()
        persistence.on_commit_request = self._commit_requested.set
        self._committing = False
        self._finished = trio.Event()
        self._storage_lock = trio.Lock()    # one blocking storage job at a time
        self._failure: BaseException | None = None

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
            self._commit_requested = trio.Event()
            self.persistence.on_commit_request = self._commit_requested.set
            if self._committing:
                await self._finished.wait()
            if self.persistence.has_pending() and not self._committing:
                await self._commit()
            if trio.current_time() >= maintenance_due:
                maintenance_due = trio.current_time() + interval
                await self._maintain()

    async def _maintain(self) -> None:
        if self._synced_since_maintenance:
            stores = list(self._synced_since_maintenance)
            self._synced_since_maintenance.clear()
            unfinished = await self._in_worker_thread(self._maintain_stores, stores)
            self._synced_since_maintenance.update(dict.fromkeys(unfinished))

    async def flush(self) -> None:
        """Commit everything pending now (used at shutdown)."""
        while self.persistence.has_pending() or self._committing:
            if self._committing:
                await self._finished.wait()
            else:
                await self._commit()

    async def _commit(self) -> None:
        if self._failure is not None:
            raise StorageFailure("an earlier commit failed") from self._failure
        self._committing = True
        finished = self._finished
        try:
            changes, stores, writes = self.persistence.take_pending()
            await self._in_worker_thread(self._write, changes, stores)
            self._synced_since_maintenance.update(dict.fromkeys(stores))
        except Exception as error:
            # Nothing taken by this commit may ever be reported durable: the broker
            # stops (the error propagates), as RabbitMQ does on a failed disk write.
            self._failure = error
            log.critical("event=commit_failed error=%r", error)
            raise
        finally:
            self._committing = False
            self._finished = trio.Event()
            finished.set()
        self.persistence.committed(stores, writes)

    async def _in_worker_thread(self, blocking, *args):
        """Run blocking storage work in a worker thread, one job at a time. Unlike
        trio.to_thread.run_sync, the job starts at once, without waiting for a turn of
        the scheduler first: confirms wait for this, so every round trip counts. A
        running job is never abandoned, even when the caller is cancelled."""
        try:
            self._storage_lock.acquire_nowait()
        except trio.WouldBlock:
            await self._storage_lock.acquire()
        try:
            task = trio.lowlevel.current_task()
            token = trio.lowlevel.current_trio_token()

            def deliver(result) -> None:
                token.run_sync_soon(trio.lowlevel.reschedule, task, result)

            trio.lowlevel.start_thread_soon(lambda: blocking(*args), deliver)
            return await trio.lowlevel.wait_task_rescheduled(
                lambda _raise_cancel: trio.lowlevel.Abort.FAILED)
        finally:
            self._storage_lock.release()

    def _write(self, changes, stores) -> None:
        self._apply_changes(changes)
        self._sync_stores(stores)
