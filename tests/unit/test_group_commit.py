"""The group committer: one commit covers every write made before it; a failed commit
is never reported durable, and the broker carries on: what it took is committed again."""

import threading

import trio
import trio.testing

from broker.core.persistence import Persistence
from broker.core.ports import DeleteExchange, DeleteQueue
from broker.server.committer import GroupCommitter


class CountingStore:
    def __init__(self, failures: int = 0):
        self.syncs = 0
        self.failures = failures        # how many syncs fail before one succeeds

    def sync(self) -> int:
        if self.failures:
            self.failures -= 1
            raise OSError(28, "No space left on device")
        self.syncs += 1
        return 0

    def synced(self) -> None:
        self.synced_calls = getattr(self, "synced_calls", 0) + 1


def committer_for(persistence: Persistence) -> GroupCommitter:
    return GroupCommitter(persistence, apply_changes=lambda changes: None,
                          sync_stores=lambda stores: sum(0 * store.sync()
                                                         for store in stores),
                          maintain_stores=lambda stores: [])


class WaitingConnection:
    """Stands in for a connection holding output until `target` writes are durable;
    records (target, durable writes) in `released` and sets `done` when released."""

    def __init__(self, target: int, released: list):
        self.target = target
        self.released = released
        self.done = trio.Event()

    def writes_durable(self, writes: int) -> bool:
        if writes < self.target:
            return True
        self.released.append((self.target, writes))
        self.done.set()
        return False

    def writes_failed(self, writes: int, reason: str) -> bool:
        if writes < self.target:
            return True
        self.released.append((self.target, "failed", reason))
        self.done.set()
        return False


async def run_committer_until(committer: GroupCommitter, done) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(committer.flush_periodically, 3600)
        await done()
        nursery.cancel_scope.cancel()


def test_connections_waiting_together_share_one_commit():
    persistence = Persistence()
    store = CountingStore()
    committer = committer_for(persistence)
    released = []

    async def main():
        for _ in range(10):
            persistence.store_written(store)
        connections = [WaitingConnection(persistence.writes, released) for _ in range(5)]
        for connection in connections:
            persistence.wait_durable(connection)

        async def all_released():
            for connection in connections:
                await connection.done.wait()

        await run_committer_until(committer, all_released)

    trio.run(main)
    assert store.syncs == 1
    assert released == [(10, 10)] * 5


def test_connections_asking_in_one_turn_share_one_commit():
    """Several connections end their reads in one turn of the scheduler, each asking
    for a commit of what it wrote: the first to ask does not start a commit of its own
    writes alone; one commit covers them all."""
    persistence = Persistence()
    store = CountingStore()
    committer = committer_for(persistence)
    released = []

    async def main():
        connections = []
        for _ in range(4):                  # no checkpoint between them: one turn
            persistence.store_written(store)
            connection = WaitingConnection(persistence.writes, released)
            persistence.wait_durable(connection)
            connections.append(connection)

        async def all_released():
            for connection in connections:
                await connection.done.wait()

        await run_committer_until(committer, all_released)

    trio.run(main)
    assert store.syncs == 1
    assert released == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_connections_woken_by_a_commit_share_the_next_one():
    """A commit ends while more was asked for: the connections woken by its release
    (their confirms sent, their next publishes read) get their turn before the next
    commit starts, so their writes join it instead of waiting for a third commit."""
    persistence = Persistence()
    first_sync_started = threading.Event()
    finish_first_sync = threading.Event()

    class SlowFirstStore(CountingStore):
        def sync(self) -> int:
            if self.syncs == 0:
                first_sync_started.set()
                finish_first_sync.wait(30)
            return super().sync()

    store = SlowFirstStore()
    committer = committer_for(persistence)
    released = []

    async def main():
        persistence.store_written(store)
        first = WaitingConnection(persistence.writes, released)
        persistence.wait_durable(first)

        async def scenario():
            assert await trio.to_thread.run_sync(first_sync_started.wait, 30)
            persistence.store_written(store)          # while the first commit runs
            second = WaitingConnection(persistence.writes, released)
            persistence.wait_durable(second)
            finish_first_sync.set()
            await first.done.wait()                   # woken by the first's release
            persistence.store_written(store)
            third = WaitingConnection(persistence.writes, released)
            persistence.wait_durable(third)
            await second.done.wait()
            await third.done.wait()

        await run_committer_until(committer, scenario)

    trio.run(main)
    assert store.syncs == 2
    assert released == [(1, 1), (2, 3), (3, 3)]


class BlockingMaintenance:
    """A committer whose maintenance blocks until `finish` is set; `jobs` records the
    storage jobs in the order they ran."""

    def __init__(self):
        self.persistence = Persistence()
        self.started = threading.Event()
        self.finish = threading.Event()
        self.jobs = []
        self.store = CountingStore()
        self.committer = GroupCommitter(self.persistence, apply_changes=lambda changes: None,
                                        sync_stores=self._sync, maintain_stores=self._maintain)

    def _sync(self, stores) -> int:
        for store in stores:
            self.jobs.append("sync")
            store.sync()
        return 0

    def _maintain(self, stores) -> list:
        self.jobs.append("maintain start")
        self.started.set()
        self.finish.wait(30)
        self.jobs.append("maintain end")
        return []

    async def commit_then_wait_for_maintenance(self) -> None:
        """A first commit (which makes maintenance due for its store), then until the
        maintenance has started."""
        released = []
        first = WaitingConnection(self.write(), released)
        self.persistence.wait_durable(first)
        await first.done.wait()
        assert await trio.to_thread.run_sync(self.started.wait, 30)

    def write(self) -> int:
        self.persistence.store_written(self.store)
        return self.persistence.writes


def test_a_flush_waits_for_running_maintenance():
    """An operator's change (the control socket) flushes while maintenance runs: its
    commit starts after the maintenance, never beside it."""
    maintenance = BlockingMaintenance()

    async def scenario():
        await maintenance.commit_then_wait_for_maintenance()
        maintenance.write()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(maintenance.committer.flush)
            await trio.testing.wait_all_tasks_blocked()   # flush waits
            assert maintenance.persistence.has_pending()  # not taken beside maintenance
            maintenance.finish.set()

    trio.run(run_committer_until_maintained, maintenance.committer, scenario)
    assert maintenance.jobs[:4] == ["sync", "maintain start", "maintain end", "sync"]
    assert not maintenance.persistence.has_pending()


def test_a_commit_asked_for_during_maintenance_starts_after_it():
    """Maintenance (compaction, retention) never runs beside a commit: a commit asked
    for meanwhile waits for it to end."""
    maintenance = BlockingMaintenance()
    released = []

    async def scenario():
        await maintenance.commit_then_wait_for_maintenance()
        second = WaitingConnection(maintenance.write(), released)
        maintenance.persistence.wait_durable(second)
        assert maintenance.persistence.has_pending()          # not taken yet
        maintenance.finish.set()
        await second.done.wait()

    trio.run(run_committer_until_maintained, maintenance.committer, scenario)
    assert maintenance.jobs[:4] == ["sync", "maintain start", "maintain end", "sync"]
    assert released == [(2, 2)]


async def run_committer_until_maintained(committer: GroupCommitter, done) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(committer.flush_periodically, 0)   # maintenance always due
        await done()
        nursery.cancel_scope.cancel()


def test_writes_made_during_a_commit_go_into_the_next_one():
    """A connection is not blocked by a running commit: what it writes meanwhile is
    committed next, and each waiter is released by the commit that covers it."""
    persistence = Persistence()
    first_sync_started = threading.Event()
    finish_first_sync = threading.Event()

    class SlowFirstStore(CountingStore):
        def sync(self) -> int:
            if self.syncs == 0:
                first_sync_started.set()
                finish_first_sync.wait(30)
            return super().sync()

    store = SlowFirstStore()
    committer = committer_for(persistence)
    released = []

    async def main():
        persistence.store_written(store)
        first = WaitingConnection(persistence.writes, released)
        persistence.wait_durable(first)

        async def scenario():
            assert await trio.to_thread.run_sync(first_sync_started.wait, 30)
            persistence.store_written(store)          # while the first commit runs
            second = WaitingConnection(persistence.writes, released)
            persistence.wait_durable(second)
            finish_first_sync.set()
            await first.done.wait()
            assert released[0] == (1, 1)              # the second write is not in it
            await second.done.wait()

        await run_committer_until(committer, scenario)

    trio.run(main)
    assert store.syncs == 2
    assert released == [(1, 1), (2, 2)]


def test_a_failed_commit_releases_its_waiters_refused_and_the_next_one_retries():
    persistence = Persistence()
    committer = committer_for(persistence)
    store = CountingStore(failures=1)
    released = []

    async def main():
        persistence.store_written(store)
        first = WaitingConnection(persistence.writes, released)
        persistence.wait_durable(first)
        await committer.flush()         # fails: returns with the write still pending
        assert released == [(1, "failed", "No space left on device")]
        assert persistence.durable == 0 and persistence.has_pending()
        persistence.store_written(store)
        second = WaitingConnection(persistence.writes, released)
        persistence.wait_durable(second)
        await committer.flush()

    trio.run(main)
    assert store.syncs == 1             # one sync wrote both writes
    assert released[1:] == [(2, 2)]
    assert persistence.durable == 2


class FaultyStore(CountingStore):
    """A store whose first sync hits a fault in the broker's own code."""

    def sync(self) -> int:
        if self.syncs == 0 and not getattr(self, "faulted", False):
            self.faulted = True
            raise TypeError("'NoneType' object cannot be interpreted as an integer")
        return super().sync()


def test_a_commit_failed_by_a_fault_not_the_disk_is_logged_with_its_traceback(caplog):
    """Only a full or failing disk is blamed on disk space; any other error is a bug,
    logged with where it happened, and the next commit still retries the writes."""
    persistence = Persistence()
    committer = committer_for(persistence)
    store = FaultyStore()
    released = []

    async def main():
        persistence.store_written(store)
        persistence.wait_durable(WaitingConnection(persistence.writes, released))
        await committer.flush()
        await committer.flush()

    with caplog.at_level("ERROR", logger="warren.storage"):
        trio.run(main)
    [record] = [r for r in caplog.records if "event=commit_failed" in r.getMessage()]
    assert "free disk space" not in record.getMessage()
    assert "fault in Warren" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is TypeError
    assert store.syncs == 1 and persistence.durable == 1


def test_a_commit_failed_by_a_full_disk_is_logged_without_a_traceback(caplog):
    persistence = Persistence()
    committer = committer_for(persistence)
    store = CountingStore(failures=1)

    async def main():
        persistence.store_written(store)
        await committer.flush()

    with caplog.at_level("ERROR", logger="warren.storage"):
        trio.run(main)
    [record] = [r for r in caplog.records if "event=commit_failed" in r.getMessage()]
    assert "free disk space in the data directory" in record.getMessage()
    assert record.exc_info is None


def test_metadata_changes_a_failed_commit_did_not_apply_are_applied_next_in_order():
    persistence = Persistence()
    applied = []
    full = [True]

    def apply_changes(changes):         # as DurableStorage: removes what it applied
        while changes:
            if isinstance(changes[0], DeleteQueue) and full[0]:
                full[0] = False
                raise OSError(28, "database or disk is full")
            applied.append(changes.pop(0).name)

    committer = GroupCommitter(persistence, apply_changes, lambda stores: 0,
                               lambda stores: [])

    async def main():
        persistence.record(DeleteExchange("/", "x"))
        persistence.record(DeleteQueue("/", "q"))
        persistence.record(DeleteExchange("/", "b"))
        await committer.flush()
        assert applied == ["x"]
        persistence.record(DeleteExchange("/", "y"))
        await committer.flush()

    trio.run(main)
    assert applied == ["x", "q", "b", "y"]
    assert not persistence.has_pending()


def test_stores_with_maintenance_left_are_visited_again_without_new_writes():
    persistence = Persistence()
    store = CountingStore()
    passes = []
    third_pass = threading.Event()

    def maintain(stores):       # runs in the committer's worker thread
        passes.append(list(stores))
        if len(passes) == 3:
            third_pass.set()
            return []           # done
        return stores           # more to do

    committer = GroupCommitter(persistence, apply_changes=lambda changes: None,
                               sync_stores=lambda stores: None,
                               maintain_stores=maintain)

    async def main():
        persistence.store_written(store)
        await committer.flush()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(committer.flush_periodically, 0.01)
            assert await trio.to_thread.run_sync(third_pass.wait, 30)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert passes[:3] == [[store], [store], [store]]


def test_commits_asked_for_back_to_back_release_in_order_and_never_overlap_maintenance():
    """Each commit asked for while one runs starts when that one ends; compaction and
    retention (maintenance) wait for a gap between commits, never running beside one."""
    persistence = Persistence()
    released = []
    storage_jobs = []           # ("sync"|"maintain", "start"|"end") in the order run
    waiters = []

    class WritingStore(CountingStore):
        """Each of the first three syncs makes one more write that waits (as a
        publisher whose confirm is pending) while it runs."""

        def sync(self) -> int:
            storage_jobs.append(("sync", "start"))
            if self.syncs < 3:
                trio.from_thread.run_sync(write_and_wait, trio_token=token)
            storage_jobs.append(("sync", "end"))
            return super().sync()

    def write_and_wait():
        persistence.store_written(store)
        waiter = WaitingConnection(persistence.writes, released)
        waiters.append(waiter)
        persistence.wait_durable(waiter)

    def maintain(stores):
        storage_jobs.append(("maintain", "start"))
        storage_jobs.append(("maintain", "end"))
        return []

    store = WritingStore()
    committer = GroupCommitter(persistence, apply_changes=lambda changes: None,
                               sync_stores=lambda stores: sum(0 * s.sync() for s in stores),
                               maintain_stores=maintain)

    async def main():
        nonlocal token
        token = trio.lowlevel.current_trio_token()
        write_and_wait()

        async def all_released():
            while len(waiters) < 4:
                await waiters[-1].done.wait()
            await waiters[-1].done.wait()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(committer.flush_periodically, 0)   # maintenance always due
            await all_released()
            nursery.cancel_scope.cancel()

    token = None
    trio.run(main)
    assert released == [(1, 1), (2, 2), (3, 3), (4, 4)]
    assert store.syncs == 4
    pairs = list(zip(storage_jobs[::2], storage_jobs[1::2]))
    assert all(start[0] == end[0] and (start[1], end[1]) == ("start", "end")
               for start, end in pairs)     # no job started inside another
