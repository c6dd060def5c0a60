"""Commits of queue files synced by the kernel (io_uring or native AIO fdatasync) on the
event loop: a confirm is released only once the kernel says the batch is on disk, and a
failed write or sync is never reported durable: the batch is written again by the next
commit. Every test runs on both kernel interfaces."""

import errno
import os
import select

import pytest
import trio

from broker.core.persistence import Persistence
from broker.server.committer import GroupCommitter
from broker.server.durable_store import DurableQueueStore
from storage.kernel_sync import (CAPACITY as KERNEL_SYNC_CAPACITY, KINDS, KernelSync,
                                 open_kernel_sync)
from storage.queue_file import QueueFile


class Waiter:
    """Stands in for a connection holding a confirm until `target` writes are durable."""

    def __init__(self, target: int):
        self.target = target
        self.outcome = None

    def writes_durable(self, writes: int) -> bool:
        if writes < self.target:
            return True
        self.outcome = "durable"
        return False

    def writes_failed(self, writes: int, reason: str) -> bool:
        if writes < self.target:
            return True
        self.outcome = f"failed: {reason}"
        return False


class ThreadSyncs:
    """The committer's thread path for stores, counting the commits that took it."""

    def __init__(self):
        self.commits = 0

    def __call__(self, stores: list) -> int:
        self.commits += 1
        for store in stores:
            store.sync()
        return 0


class FailingKernelSync:
    """A KernelSync whose syncs end with EIO while `failing`, as a failing disk's would."""

    def __init__(self, kernel: KernelSync):
        self.kernel = kernel
        self.failing = True

    def submit(self, requests):
        self.kernel.submit(requests)

    def fileno(self):
        return self.kernel.fileno()

    def completed(self):
        return [(number, -errno.EIO if self.failing else result)
                for number, result in self.kernel.completed()]


@pytest.fixture(params=KINDS)
def kernel(request, tmp_path):
    kernel_sync = open_kernel_sync(str(tmp_path), kinds=(request.param,))
    assert kernel_sync is not None, f"{request.param} fdatasync is expected on this machine"
    assert kernel_sync.kind == request.param
    yield kernel_sync
    kernel_sync.close()


def wait_for_syncs(kernel: KernelSync, count: int) -> dict:
    ended: dict = {}
    while len(ended) < count:
        select.select([kernel.fileno()], [], [], 10.0)
        ended.update(kernel.completed())
    return ended


def test_a_sync_submitted_to_the_kernel_ends_and_says_so_on_its_eventfd(kernel, tmp_path):
    paths = [tmp_path / "a", tmp_path / "b"]
    fds = [os.open(path, os.O_RDWR | os.O_CREAT) for path in paths]
    try:
        for fd in fds:
            os.write(fd, b"records")
        kernel.submit(fds)
        assert wait_for_syncs(kernel, 2) == {0: 0, 1: 0}
    finally:
        for fd in fds:
            os.close(fd)


def test_a_descriptor_that_cannot_be_synced_ends_with_an_error(kernel):
    """AIO refuses a pipe when it is submitted; io_uring takes it and ends its sync
    with EINVAL. The committer fails the commit either way."""
    reader, writer = os.pipe()
    try:
        if kernel.kind == "aio":
            with pytest.raises(OSError):
                kernel.submit([reader])
        else:
            kernel.submit([reader])
            assert wait_for_syncs(kernel, 1) == {0: -errno.EINVAL}
    finally:
        os.close(reader)
        os.close(writer)


def test_there_is_no_kernel_sync_without_a_directory_to_probe(tmp_path):
    assert open_kernel_sync(str(tmp_path / "missing")) is None


def test_aio_is_taken_where_io_uring_is_refused(tmp_path, monkeypatch):
    """As under a seccomp profile that refuses io_uring's system calls."""
    monkeypatch.setattr("storage.uring_sync.UringSync.start",
                        classmethod(lambda cls, capacity: None))
    kernel_sync = open_kernel_sync(str(tmp_path))
    assert kernel_sync is not None and kernel_sync.kind == "aio"
    kernel_sync.close()


def test_io_uring_is_taken_first_where_both_work(tmp_path):
    kernel_sync = open_kernel_sync(str(tmp_path))
    assert kernel_sync is not None and kernel_sync.kind == "io_uring"
    kernel_sync.close()


def commit_one(committer: GroupCommitter, persistence: Persistence, store, body: bytes):
    """Append one message, wait for its commit, and say how it ended."""
    seq = store.last_seq + 1
    store.queue_file.append(seq, "", "q", b"", body)
    persistence.store_written(store)
    waiter = Waiter(persistence.writes)
    persistence.wait_durable(waiter)
    trio.run(committer.flush)
    return waiter.outcome


def stored_bodies(directory) -> list:
    queue_file, messages, problems = QueueFile.recover(directory)
    queue_file.close(flush=False)
    assert problems == []
    return [message.body for message in messages]


def make_store(tmp_path, persistence):
    return DurableQueueStore(QueueFile(tmp_path / "q"), persistence, "q", reads=None)


def test_a_commit_of_an_open_segment_is_synced_by_the_kernel_not_a_thread(kernel, tmp_path):
    persistence = Persistence()
    thread_syncs = ThreadSyncs()
    committer = GroupCommitter(persistence, lambda changes: None, thread_syncs,
                               lambda stores: [], kernel)
    store = make_store(tmp_path, persistence)
    assert commit_one(committer, persistence, store, b"first") == "durable"
    assert thread_syncs.commits == 1        # the segment had to be created: a thread
    assert commit_one(committer, persistence, store, b"second") == "durable"
    assert commit_one(committer, persistence, store, b"third") == "durable"
    assert thread_syncs.commits == 1        # written in place: the kernel synced them
    assert store.queue_file.durable_seq == 3
    store.queue_file.close()
    assert stored_bodies(tmp_path / "q") == [b"first", b"second", b"third"]


def test_a_sync_the_kernel_failed_is_refused_and_written_again_by_the_next_commit(
        kernel, tmp_path):
    persistence = Persistence()
    disk = FailingKernelSync(kernel)
    committer = GroupCommitter(persistence, lambda changes: None, ThreadSyncs(),
                               lambda stores: [], disk)
    store = make_store(tmp_path, persistence)
    assert commit_one(committer, persistence, store, b"first") == "durable"
    size_before = os.path.getsize(tmp_path / "q" / "00000001.seg")
    assert commit_one(committer, persistence, store, b"lost?") \
        == "failed: Input/output error"
    assert store.queue_file.durable_seq == 1
    assert os.path.getsize(tmp_path / "q" / "00000001.seg") == size_before   # cut back
    disk.failing = False
    assert commit_one(committer, persistence, store, b"third") == "durable"
    store.queue_file.close()
    assert stored_bodies(tmp_path / "q") == [b"first", b"lost?", b"third"]


class FaultyKernelSync(FailingKernelSync):
    """A KernelSync whose completion check hits a fault in Warren's own code."""

    def completed(self):
        raise TypeError("a fault in the completion check")


def test_after_a_fault_in_the_kernel_path_commits_go_through_the_thread(kernel, tmp_path,
                                                                        caplog):
    """The syncs it submitted may still be in flight, so the kernel path is not used
    again; the failed commit's message is written by the next commit, in the thread."""
    persistence = Persistence()
    thread_syncs = ThreadSyncs()
    committer = GroupCommitter(persistence, lambda changes: None, thread_syncs,
                               lambda stores: [], FaultyKernelSync(kernel))
    store = make_store(tmp_path, persistence)
    assert commit_one(committer, persistence, store, b"first") == "durable"
    with caplog.at_level("ERROR", logger="warren.storage"):
        outcome = commit_one(committer, persistence, store, b"second")
    assert outcome == "failed: a fault in the completion check"
    assert any("event=kernel_sync_abandoned" in record.getMessage()
               for record in caplog.records)
    assert commit_one(committer, persistence, store, b"third") == "durable"
    assert commit_one(committer, persistence, store, b"fourth") == "durable"
    assert thread_syncs.commits == 3        # the first, then every one after the fault
    store.queue_file.close()
    assert stored_bodies(tmp_path / "q") == [b"first", b"second", b"third", b"fourth"]


def test_a_write_that_fails_on_the_loop_is_refused_and_written_again(kernel, tmp_path):
    persistence = Persistence()
    committer = GroupCommitter(persistence, lambda changes: None, ThreadSyncs(),
                               lambda stores: [], kernel)
    store = make_store(tmp_path, persistence)
    assert commit_one(committer, persistence, store, b"first") == "durable"

    def disk_full(step: str) -> None:
        if step == "written":
            raise OSError(errno.ENOSPC, "No space left on device")

    store.queue_file._checkpoint = disk_full
    assert commit_one(committer, persistence, store, b"second") \
        == "failed: No space left on device"
    store.queue_file._checkpoint = None
    assert commit_one(committer, persistence, store, b"third") == "durable"
    store.queue_file.close()
    assert stored_bodies(tmp_path / "q") == [b"first", b"second", b"third"]


def test_a_commit_of_more_queue_files_than_the_kernel_takes_at_once_uses_a_thread(
        kernel, tmp_path):
    persistence = Persistence()
    thread_syncs = ThreadSyncs()
    committer = GroupCommitter(persistence, lambda changes: None, thread_syncs,
                               lambda stores: [], kernel)
    stores = [DurableQueueStore(QueueFile(tmp_path / f"q{number}"), persistence,
                                f"q{number}", reads=None)
              for number in range(KERNEL_SYNC_CAPACITY + 1)]
    for round_number in (1, 2):
        for store in stores:
            store.queue_file.append(round_number, "", "q", b"", b"body")
            persistence.store_written(store)
        waiter = Waiter(persistence.writes)
        persistence.wait_durable(waiter)
        trio.run(committer.flush)
        assert waiter.outcome == "durable"
    assert thread_syncs.commits == 2
    assert all(store.queue_file.durable_seq == 2 for store in stores)
    for store in stores:
        store.queue_file.close()


def test_a_commit_with_nothing_to_write_for_a_queue_file_succeeds_without_a_sync(
        kernel, tmp_path):
    """An ack of a message the queue file never wrote as persistent (a transient one
    paged out, or one acked before it was written) leaves the file nothing to write:
    the commit succeeds, and another queue file in it is still synced."""
    persistence = Persistence()
    thread_syncs = ThreadSyncs()
    committer = GroupCommitter(persistence, lambda changes: None, thread_syncs,
                               lambda stores: [], kernel)
    quiet = make_store(tmp_path, persistence)
    busy = DurableQueueStore(QueueFile(tmp_path / "busy"), persistence, "busy", reads=None)
    quiet.queue_file.append(1, "", "q", b"", b"paged", persistent=False)
    persistence.store_written(quiet)
    assert commit_one(committer, persistence, busy, b"first") == "durable"
    quiet.queue_file.ack(1)
    persistence.store_touched(quiet)
    assert commit_one(committer, persistence, busy, b"second") == "durable"
    assert thread_syncs.commits == 1        # the second commit was the kernel's
    for store in (quiet, busy):
        store.queue_file.close()
    assert stored_bodies(tmp_path / "busy") == [b"first", b"second"]
    assert stored_bodies(tmp_path / "q") == []
