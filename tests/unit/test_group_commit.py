"""The group committer: one commit covers every write made before it; a failed commit
is never reported durable."""

import threading

import pytest
import trio

from broker.core.persistence import Persistence
from broker.server.committer import GroupCommitter, StorageFailure


class CountingStore:
    def __init__(self, fail: bool = False):
        self.syncs = 0
        self.fail = fail

    def sync(self) -> int:
        if self.fail:
            raise OSError("disk on fire")
        self.syncs += 1
        return 0

    def synced(self) -> None:
        self.synced_calls = getattr(self, "synced_calls", 0) + 1


def committer_for(persistence: Persistence) -> GroupCommitter:
    return GroupCommitter(persistence, apply_changes=lambda changes: None,
                          sync_stores=lambda stores: [store.sync() for store in stores],
                          maintain_stores=lambda stores: [])


def test_many_waiters_share_one_commit():
    persistence = Persistence()
    store = CountingStore()
    committer = committer_for(persistence)

    async def main():
        for _ in range(10):
            persistence.store_written(store)
        target = persistence.writes
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(committer.wait_for, target)
        assert committer.durable_writes == target

    trio.run(main)
    assert store.syncs == 1


def test_after_a_failed_commit_nothing_is_reported_durable():
    persistence = Persistence()
    committer = committer_for(persistence)

    async def main():
        persistence.store_written(CountingStore(fail=True))
        with pytest.raises(OSError):
            await committer.wait_for(persistence.writes)
        persistence.store_written(CountingStore())
        with pytest.raises(StorageFailure):
            await committer.wait_for(persistence.writes)
        assert committer.durable_writes == 0

    trio.run(main)


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
        await committer.wait_for(persistence.writes)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(committer.flush_periodically, 0.01)
            assert await trio.to_thread.run_sync(third_pass.wait, 30)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert passes[:3] == [[store], [store], [store]]
