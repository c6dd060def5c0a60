"""The stream store's read port: it answers from chunks its reads brought into memory,
reads them off the event loop (here when the test runs the pending reads), reads the
next chunk ahead, and tells the queue when records arrived."""

import logging

from broker.core.persistence import Persistence
from broker.server import stream_store as stream_store_module
from broker.server.stream_store import READ_COUNT, DurableStreamStore
from core_harness import ManualReads
from storage.stream_log import StreamLog


class CountingQueue:
    def __init__(self):
        self.dispatched = 0

    def dispatch(self) -> None:
        self.dispatched += 1


def stream_store(tmp_path, messages: int):
    reads = ManualReads()
    store = DurableStreamStore(StreamLog(tmp_path / "s"), Persistence(), "s", reads)
    store.queue = queue = CountingQueue()
    for index in range(messages):
        store.log.append("", "s", b"", b"m%d" % index)
    store.log.sync()
    return store, reads, queue


def test_records_come_after_the_read_and_the_queue_is_told(tmp_path):
    store, reads, queue = stream_store(tmp_path, 10)
    assert store.read(3, 5) == []
    assert queue.dispatched == 0 and len(reads.pending) == 1
    reads.run()
    assert queue.dispatched == 1
    assert [(r.offset, r.body) for r in store.read(3, 5)] == \
        [(offset, b"m%d" % offset) for offset in range(3, 8)]


def test_the_next_chunk_is_read_once_while_the_first_is_used(tmp_path):
    store, reads, queue = stream_store(tmp_path, READ_COUNT * 3)
    store.read(0, 10)
    reads.run()
    for offset in range(0, 200, 10):
        assert len(store.read(offset, 10)) == 10
    assert len(reads.pending) == 1      # the chunk after the first, asked for once
    reads.run()
    assert [r.offset for r in store.read(READ_COUNT, 2)] == [READ_COUNT, READ_COUNT + 1]
    assert len(reads.pending) == 1      # and, while that one is used, the third


def test_nothing_past_the_durable_offset_is_read(tmp_path):
    store, reads, queue = stream_store(tmp_path, 4)
    store.log.append("", "s", b"", b"not yet durable")
    store.read(0, 10)
    reads.run()
    assert [r.offset for r in store.read(0, 10)] == [0, 1, 2, 3]
    assert store.read(4, 10) == [] and not reads.pending


def test_a_result_after_the_stream_was_deleted_is_dropped(tmp_path):
    store, reads, queue = stream_store(tmp_path, 4)
    store.read(0, 4)
    store.drop()
    reads.run()
    assert queue.dispatched == 0
    assert store.read(0, 4) == []


def test_a_failed_read_is_logged_and_tried_again_on_the_next_ask(tmp_path, caplog):
    store, reads, queue = stream_store(tmp_path, 4)
    store.read(0, 4)
    (read, done), = reads.pending
    reads.pending.clear()
    with caplog.at_level(logging.ERROR, "warren.storage"):
        done(OSError(5, "Input/output error"))
    assert "event=stream_read_failed" in caplog.text and queue.dispatched == 0
    assert store.read(0, 4) == []
    reads.run()
    assert [r.offset for r in store.read(0, 4)] == [0, 1, 2, 3]


class Published:
    exchange = ""
    routing_key = "s"
    properties = b""

    def __init__(self, body: bytes):
        self.body = body


def commit(store) -> None:
    store.sync()
    store.synced()


def test_consumers_at_the_tail_read_the_latest_messages_from_memory(tmp_path,
                                                                     monkeypatch):
    monkeypatch.setattr(stream_store_module, "TAIL_RECORDS", 2)
    store, reads, queue = stream_store(tmp_path, 0)
    for index in range(3):
        store.append(Published(b"old%d" % index))
    commit(store)           # over TAIL_RECORDS, but the latest commit stays whole
    for index in range(2):
        store.append(Published(b"new%d" % index))
    assert [r.body for r in store.read(0, 10)] == [b"old0", b"old1", b"old2"]
    commit(store)
    assert [(r.offset, r.body) for r in store.read(3, 10)] == [(3, b"new0"), (4, b"new1")]
    assert not reads.pending
    assert store.read(0, 10) == [] and len(reads.pending) == 1   # older: read from disk
    reads.run()
    assert [r.body for r in store.read(0, 3)] == [b"old0", b"old1", b"old2"]
