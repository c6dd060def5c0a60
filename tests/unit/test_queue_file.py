"""QueueFile: the write path, acks, delivered marks, segment lifecycle, paging, threads."""

import os
import threading

import pytest

from storage.queue_file import QueueFile
from storage.record import RECORD_HEADER_SIZE, SEGMENT_HEADER_SIZE, scan_segment
from storage.segment_file import StorageError, segment_numbers

# Exercises no module of the compiled build: scripts/test.sh runs it on the pure-Python
# build only (docs/testing.md, "The CI arrangement").
pytestmark = pytest.mark.build_independent


def publish(queue_file, seq, body=None, exchange="amq.direct", routing_key="key",
            properties=b"\x10\x00\x02", **flags):
    queue_file.append(seq, exchange, routing_key, properties,
                      body if body is not None else b"body-%d" % seq, **flags)


def recover(directory, **options):
    queue_file, messages, problems = QueueFile.recover(directory, **options)
    assert problems == []
    return queue_file, messages


def seqs(messages):
    return [message.seq for message in messages]


def records_on_disk(directory):
    """(kind, seq) of every valid record in every segment, in file order."""
    found = []
    for number in segment_numbers(directory):
        with open(os.path.join(directory, f"{number:08d}.seg"), "rb") as file:
            found += [(record.kind, record.seq) for record in scan_segment(file.read()).records]
    return found


# -- round trips -------------------------------------------------------------------------

def test_round_trip_keeps_every_field(tmp_path):
    queue_file = QueueFile(tmp_path / "q")
    big = os.urandom(300_000)
    queue_file.append(1, "amq.topic", "a.b.c", b"\x90\x00\x0atext/plain\x02", b"hello")
    queue_file.append(2, "", "", b"", b"")
    queue_file.append(3, "échange-ü", "clé" * 20, b"\x00\x00", big)
    queue_file.append(4, "x" * 255, "y" * 255, bytes(range(256)), memoryview(b"view"))
    queue_file.close()

    _, messages = recover(tmp_path / "q")
    assert [(m.seq, m.exchange, m.routing_key, m.properties, m.body, m.redelivered)
            for m in messages] == [
        (1, "amq.topic", "a.b.c", b"\x90\x00\x0atext/plain\x02", b"hello", False),
        (2, "", "", b"", b"", False),
        (3, "échange-ü", "clé" * 20, b"\x00\x00", big, False),
        (4, "x" * 255, "y" * 255, bytes(range(256)), b"view", False),
    ]


def test_recover_without_bodies_then_read_them(tmp_path):
    queue_file = QueueFile(tmp_path)
    for seq in range(1, 6):
        publish(queue_file, seq)
    queue_file.close()
    queue_file, messages = recover(tmp_path, load_bodies=False)
    assert [m.body for m in messages] == [None] * 5
    assert [queue_file.read(m.seq) for m in messages] == [b"body-%d" % s for s in range(1, 6)]


def test_new_queue_file_refuses_a_directory_with_segments(tmp_path):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1)
    queue_file.close()
    with pytest.raises(FileExistsError):
        QueueFile(tmp_path)


def test_construction_does_no_io_until_first_sync(tmp_path):
    queue_file = QueueFile(tmp_path / "q")
    publish(queue_file, 1)
    assert not (tmp_path / "q").exists()
    queue_file.sync()
    assert segment_numbers(str(tmp_path / "q")) == [1]


# -- sync and the durable seq ------------------------------------------------------------

def test_sync_returns_the_highest_seq_appended_before_it(tmp_path):
    queue_file = QueueFile(tmp_path)
    assert queue_file.sync() == 0
    publish(queue_file, 3)
    publish(queue_file, 7)
    assert queue_file.durable_seq == 0
    assert queue_file.sync() == 7
    assert queue_file.durable_seq == 7
    assert queue_file.sync() == 7       # nothing new: no write, same answer


def test_seq_must_increase(tmp_path):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 5)
    with pytest.raises(ValueError):
        publish(queue_file, 5)
    with pytest.raises(ValueError):
        publish(queue_file, 4)


def test_names_longer_than_a_shortstr_are_refused(tmp_path):
    queue_file = QueueFile(tmp_path)
    with pytest.raises(ValueError):
        publish(queue_file, 1, exchange="é" * 128)       # 256 bytes in UTF-8
    with pytest.raises(ValueError):
        publish(queue_file, 1, routing_key=b"k" * 256)


def test_nothing_is_written_before_sync(tmp_path):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1)
    queue_file.sync()
    size = os.path.getsize(tmp_path / "00000001.seg")
    for seq in range(2, 100):
        publish(queue_file, seq)
        queue_file.ack(seq - 1)
        queue_file.mark_delivered(seq)
    assert os.path.getsize(tmp_path / "00000001.seg") == size


# -- acks --------------------------------------------------------------------------------

def test_acked_messages_do_not_come_back(tmp_path):
    queue_file = QueueFile(tmp_path)
    for seq in range(1, 11):
        publish(queue_file, seq)
    queue_file.sync()
    for seq in (2, 3, 9):
        queue_file.ack(seq)
    queue_file.sync()
    queue_file.close(flush=False)
    _, messages = recover(tmp_path)
    assert seqs(messages) == [1, 4, 5, 6, 7, 8, 10]


def test_published_and_acked_before_sync_is_never_written(tmp_path):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1)
    publish(queue_file, 2)
    queue_file.mark_delivered(1)
    queue_file.ack(1)
    assert queue_file.sync() == 2
    assert records_on_disk(str(tmp_path)) == [(1, 2)]       # only message 2, no tombstone
    for seq in range(3, 50):
        publish(queue_file, seq)
        queue_file.mark_delivered(seq)
        queue_file.ack(seq)
    assert queue_file.sync() == 49
    assert records_on_disk(str(tmp_path)) == [(1, 2)]


def test_ack_while_the_batch_is_being_written_writes_a_tombstone(tmp_path):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1)
    publish(queue_file, 2)

    def during_write(step):
        if step == "written":
            queue_file._checkpoint = None
            queue_file.ack(1)          # the loop acks while the flusher is mid-sync
            assert queue_file.read(1) == b"body-1"
    queue_file._checkpoint = during_write
    assert queue_file.sync() == 2
    queue_file.sync()
    assert records_on_disk(str(tmp_path)) == [(1, 1), (1, 2), (2, 1)]
    queue_file.close()
    _, messages = recover(tmp_path)
    assert seqs(messages) == [2]


def test_unknown_and_repeated_acks_are_ignored(tmp_path):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1)
    publish(queue_file, 2)
    queue_file.sync()
    queue_file.ack(1)
    queue_file.ack(1)
    queue_file.ack(42)
    queue_file.sync()
    queue_file.ack(1)
    queue_file.sync()
    assert records_on_disk(str(tmp_path)) == [(1, 1), (1, 2), (2, 1)]
    queue_file.close()
    _, messages = recover(tmp_path)
    assert seqs(messages) == [2]


# -- delivered marks ---------------------------------------------------------------------

def test_delivered_messages_come_back_redelivered(tmp_path):
    queue_file = QueueFile(tmp_path)
    for seq in range(1, 6):
        publish(queue_file, seq, redelivered=(seq == 5))
    queue_file.mark_delivered(1)            # still buffered: the record carries the flag
    queue_file.sync()
    queue_file.mark_delivered(2)            # already written: a delivered record
    queue_file.mark_delivered(2)
    queue_file.sync()
    queue_file.mark_delivered(3)            # never synced: not known after a crash
    queue_file.close(flush=False)
    _, messages = recover(tmp_path)
    assert [(m.seq, m.redelivered) for m in messages] == [
        (1, True), (2, True), (3, False), (4, False), (5, True)]
    assert [kind for kind, seq in records_on_disk(str(tmp_path))].count(3) == 1


def test_a_delivered_mark_survives_a_second_restart(tmp_path):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1)
    queue_file.sync()
    queue_file.mark_delivered(1)
    queue_file.close()
    queue_file, _ = recover(tmp_path)
    publish(queue_file, 2)
    queue_file.mark_delivered(1)            # delivered again after restart: no new record
    queue_file.close()
    _, messages = recover(tmp_path)
    assert [(m.seq, m.redelivered) for m in messages] == [(1, True), (2, False)]
    assert [kind for kind, _ in records_on_disk(str(tmp_path))].count(3) == 1


def test_the_dead_lettered_flag_survives_restarts_and_delivered_marks(tmp_path):
    """The broker's mark (FLAG_DEAD_LETTERED) comes back with its message; records
    written without it (as by a Warren before the flag) come back without."""
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1, dead_lettered=True)
    publish(queue_file, 2)
    queue_file.mark_delivered(1)
    queue_file.close()
    queue_file, messages = recover(tmp_path)
    assert [(m.seq, m.dead_lettered, m.redelivered) for m in messages] == [
        (1, True, True), (2, False, False)]
    queue_file.close()


# -- transient (paged) records -----------------------------------------------------------

def test_transient_records_can_be_read_but_are_not_recovered(tmp_path):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1, persistent=False)
    publish(queue_file, 2)
    queue_file.sync()
    assert queue_file.read(1) == b"body-1"
    queue_file.ack(1)
    queue_file.sync()
    assert records_on_disk(str(tmp_path)) == [(1, 1), (1, 2)]     # no tombstone needed
    publish(queue_file, 3, persistent=False)
    queue_file.close()
    _, messages = recover(tmp_path)
    assert seqs(messages) == [2]


# -- paging reads ------------------------------------------------------------------------

def test_read_finds_bodies_buffered_and_on_disk(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=512)
    bodies = {seq: os.urandom(seq * 7) for seq in range(1, 40)}
    for seq, body in bodies.items():
        publish(queue_file, seq, body)
        if seq % 5 == 0:
            queue_file.sync()
    assert all(queue_file.read(seq) == body for seq, body in bodies.items())
    queue_file.ack(3)
    queue_file.sync()
    with pytest.raises(KeyError):
        queue_file.read(3)
    with pytest.raises(KeyError):
        queue_file.read(1000)


def test_read_many_gives_what_read_gives_seq_by_seq(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=2048)
    bodies = {seq: os.urandom(seq * 7) for seq in range(1, 60)}
    for seq, body in bodies.items():
        publish(queue_file, seq, body)
        if seq % 5 == 0:
            queue_file.sync()
    acked = {seq for seq in range(1, 50) if seq % 4}
    for seq in acked:
        queue_file.ack(seq)
    queue_file.sync()
    assert queue_file.compact() > 0     # some live records moved to another segment
    bodies[60] = b"buffered"
    publish(queue_file, 60, bodies[60])
    asked = [60, 1000, *range(1, 60)]
    found = queue_file.read_many(asked, run_bytes=200)
    for seq, body in zip(asked, found):
        if seq in bodies and seq not in acked:
            assert body == bodies[seq] == queue_file.read(seq)
        else:
            assert isinstance(body, KeyError)


def test_read_many_reports_a_damaged_record_and_reads_its_neighbours(tmp_path):
    queue_file = QueueFile(tmp_path)
    for seq in (1, 2, 3):
        publish(queue_file, seq, bytes([seq]) * 100)
    queue_file.sync()
    path = tmp_path / "00000001.seg"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF        # inside the second record
    path.write_bytes(bytes(data))
    first, second, third = queue_file.read_many([1, 2, 3])
    assert (first, third) == (b"\x01" * 100, b"\x03" * 100)
    assert isinstance(second, StorageError)


def test_read_reports_a_damaged_record(tmp_path):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1, b"A" * 100)
    queue_file.sync()
    path = tmp_path / "00000001.seg"
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(StorageError):
        queue_file.read(1)


# -- segment lifecycle -------------------------------------------------------------------

def fill_segments(queue_file, groups):
    """One segment per group: each sync rolls over because segment_size is tiny."""
    seq = queue_file.last_seq
    for count in groups:
        for _ in range(count):
            seq += 1
            publish(queue_file, seq)
        queue_file.sync()
    return seq


def test_segments_roll_over_at_the_segment_size(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=1)
    fill_segments(queue_file, [2, 2, 2])
    assert segment_numbers(str(tmp_path)) == [1, 2, 3]
    queue_file = QueueFile(tmp_path / "big", segment_size=10_000)
    fill_segments(queue_file, [2, 2, 2])
    assert segment_numbers(str(tmp_path / "big")) == [1]


def test_a_fully_acked_segment_is_deleted(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=1)
    fill_segments(queue_file, [3, 3, 3])           # segments 1: 1-3, 2: 4-6, 3: 7-9
    for seq in (4, 5, 6):
        queue_file.ack(seq)
    queue_file.sync()                             # tombstones go to segment 4
    assert segment_numbers(str(tmp_path)) == [1, 3, 4]
    for seq in (1, 2, 3, 7, 8, 9):
        queue_file.ack(seq)
    queue_file.sync()                             # segment 5; 4 only acked dead ones
    assert segment_numbers(str(tmp_path)) == [5]  # the newest is always kept
    queue_file.close()
    queue_file, messages = recover(tmp_path)
    assert messages == []
    assert queue_file.last_seq == 9


def test_acks_are_kept_while_the_messages_they_kill_are_on_disk(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=1)
    fill_segments(queue_file, [2, 2])              # 1: 1-2, 2: 3-4
    for seq in (1, 3, 4):
        queue_file.ack(seq)
    queue_file.sync()                             # 3: ack 1 (refers to 1), ack 3, 4
    fill_segments(queue_file, [1])                # 4: message 5
    # Segment 2 is dead and goes; segment 3 holds only dead acks but its ack of message
    # 1 must outlive segment 1, which still holds live message 2.
    assert segment_numbers(str(tmp_path)) == [1, 3, 4]
    queue_file.close()
    queue_file, messages = recover(tmp_path, segment_size=1)
    assert seqs(messages) == [2, 5]
    queue_file.ack(2)
    queue_file.sync()
    assert segment_numbers(str(tmp_path)) == [4, 5]
    queue_file.close()
    _, messages = recover(tmp_path)
    assert seqs(messages) == [5]


def test_delivered_marks_are_kept_while_their_message_is_on_disk(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=1)
    fill_segments(queue_file, [2])                # 1: messages 1, 2
    queue_file.mark_delivered(1)
    fill_segments(queue_file, [1])                # 2: delivered 1, message 3
    queue_file.ack(3)
    queue_file.sync()                             # 3: ack 3
    fill_segments(queue_file, [1])                # 4: message 4
    # 2 holds no live message but its delivered mark of 1 must live as long as 1 does
    # (and 3's ack of message 3 as long as 2 does).
    assert segment_numbers(str(tmp_path)) == [1, 2, 3, 4]
    queue_file.close()
    _, messages = recover(tmp_path)
    assert [(m.seq, m.redelivered) for m in messages] == [(1, True), (2, False), (4, False)]


def test_compaction_keeps_live_messages_in_order(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=2000, compact_ratio=0.5)
    last = 0
    for _ in range(6):
        last = fill_segments(queue_file, [40])
    live = set(range(1, last + 1, 7))
    for seq in range(1, last + 1):
        if seq not in live:
            queue_file.ack(seq)
        elif seq % 2:
            queue_file.mark_delivered(seq)
    queue_file.sync()
    before = segment_numbers(str(tmp_path))
    assert queue_file.needs_compaction()
    compacted = queue_file.compact()
    assert compacted >= 1
    assert not queue_file.needs_compaction()
    after = segment_numbers(str(tmp_path))
    assert len(after) < len(before)
    assert all(queue_file.read(seq) == b"body-%d" % seq for seq in live)
    queue_file.close()
    _, messages = recover(tmp_path)
    assert seqs(messages) == sorted(live)
    assert [m.redelivered for m in messages] == [bool(s % 2) for s in sorted(live)]
    assert all(m.body == b"body-%d" % m.seq for m in messages)


def test_compaction_forwards_acks_that_are_still_needed(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=1, compact_ratio=0.3)
    fill_segments(queue_file, [4])                # 1: 1-4
    queue_file.ack(1)
    fill_segments(queue_file, [20])               # 2: ack 1, messages 5-24
    for seq in range(5, 25):
        queue_file.ack(seq)
    queue_file.sync()                             # 3: acks of 5-24
    fill_segments(queue_file, [1])                # 4: message 25
    # Segment 1 is 75% live; segment 2 is dead but its ack of 1 is needed.
    assert segment_numbers(str(tmp_path)) == [1, 2, 3, 4]
    assert queue_file.compact() == 1
    # 2 was compacted into a new segment 5 (4 was full), then 3 was collected.
    assert segment_numbers(str(tmp_path)) == [1, 4, 5]
    assert (2, 1) in records_on_disk(str(tmp_path))     # the ack of 1 lives on in 5
    queue_file.close()
    _, messages = recover(tmp_path)
    assert seqs(messages) == [2, 3, 4, 25]


def test_damaged_segments_are_not_compacted(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=1, compact_ratio=0.5)
    fill_segments(queue_file, [10, 1])
    for seq in range(2, 11):
        queue_file.ack(seq)
    queue_file.sync()
    path = tmp_path / "00000001.seg"
    data = bytearray(path.read_bytes())
    data[SEGMENT_HEADER_SIZE + RECORD_HEADER_SIZE + 40] ^= 1   # inside message 2 (dead)
    path.write_bytes(bytes(data))
    assert queue_file.compact() == 0
    assert 1 in segment_numbers(str(tmp_path))
    assert queue_file.read(1) == b"body-1"


# -- failures, close, drop ---------------------------------------------------------------

def fail_after_writing(queue_file):
    """Make the next sync fail with ENOSPC once its bytes are in the file, unsynced."""
    def disk_full(step):
        if step == "written":
            queue_file._checkpoint = None
            raise OSError(28, "No space left on device")
    queue_file._checkpoint = disk_full


def test_a_failed_write_is_buffered_again_and_the_next_sync_writes_it(tmp_path):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1)
    queue_file.sync()
    publish(queue_file, 2)
    publish(queue_file, 3)
    fail_after_writing(queue_file)
    with pytest.raises(OSError):
        queue_file.sync()
    assert queue_file.durable_seq == 1
    assert queue_file.read(2) == b"body-2"      # still readable from the buffer
    queue_file.mark_delivered(2)                 # given while the batch was failing
    queue_file.ack(3)
    publish(queue_file, 4)
    assert queue_file.sync() == 4
    queue_file.close()
    _, messages = recover(tmp_path)
    assert [(m.seq, m.redelivered) for m in messages] == [(1, False), (2, True), (4, False)]


def test_a_failed_write_leaves_no_records_behind_a_shorter_retry(tmp_path):
    """Bytes of the failed write must not survive past the end of the next one: messages
    acked before they were ever written have no tombstone and would come back."""
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1)
    queue_file.sync()
    publish(queue_file, 2, body=b"x" * 4000)
    publish(queue_file, 3, body=b"y" * 4000)
    fail_after_writing(queue_file)
    with pytest.raises(OSError):
        queue_file.sync()
    queue_file.ack(2)
    queue_file.ack(3)
    publish(queue_file, 4)
    queue_file.sync()
    _, messages = recover(tmp_path)     # as after a crash: no close
    assert seqs(messages) == [1, 4]
    assert records_on_disk(str(tmp_path)) == [(1, 1), (1, 4)]


def test_a_write_that_cannot_be_cut_back_makes_the_queue_file_unusable(tmp_path,
                                                                         monkeypatch):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1)
    queue_file.sync()
    publish(queue_file, 2)
    fail_after_writing(queue_file)

    def truncate_fails(fd, size):
        raise OSError(5, "I/O error")
    monkeypatch.setattr(os, "ftruncate", truncate_fails)
    with pytest.raises(OSError):
        queue_file.sync()
    monkeypatch.undo()
    with pytest.raises(StorageError):
        queue_file.sync()
    with pytest.raises(StorageError):
        queue_file.compact()
    assert queue_file.durable_seq == 1
    queue_file.close()
    _, messages, _ = QueueFile.recover(tmp_path)
    assert seqs(messages)[0] == 1


def test_a_drained_queue_gives_its_segment_back(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=64 * 1024)
    for seq in range(1, 11):
        publish(queue_file, seq, body=bytes(1000))
    queue_file.sync()
    assert not queue_file.release_drained_segment()     # messages are live
    for seq in range(1, 11):
        queue_file.ack(seq)
    queue_file.sync()
    assert segment_numbers(str(tmp_path)) == [1]        # the newest is always kept
    assert queue_file.release_drained_segment()
    assert segment_numbers(str(tmp_path)) == [2]
    assert os.path.getsize(tmp_path / "00000002.seg") == SEGMENT_HEADER_SIZE
    assert not queue_file.release_drained_segment()     # nothing left to give back
    queue_file.close()
    recovered, messages = recover(tmp_path)
    assert messages == [] and recovered.last_seq == 10


def test_a_closed_queue_file_refuses_appends(tmp_path):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1)
    queue_file.close()
    with pytest.raises(StorageError):
        publish(queue_file, 2)
    assert queue_file.sync() == 1


def test_drop_removes_the_directory_and_ignores_later_calls(tmp_path):
    directory = tmp_path / "queues" / "q1"
    queue_file = QueueFile(directory, segment_size=1)
    fill_segments(queue_file, [3, 3])
    publish(queue_file, 7)
    queue_file.drop()
    assert not directory.exists()
    publish(queue_file, 8)
    queue_file.ack(1)
    queue_file.mark_delivered(2)
    queue_file.sync()
    assert queue_file.compact() == 0
    assert not directory.exists()
    _, messages = recover(directory)
    assert messages == []


# -- threads -----------------------------------------------------------------------------

def test_a_flusher_thread_syncs_while_the_loop_appends_and_acks(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=4096, compact_ratio=0.5)
    stop = threading.Event()
    durable = []
    errors = []

    def flusher():
        try:
            while not stop.is_set():
                durable.append(queue_file.sync())
                queue_file.compact(limit=1)
        except BaseException as exc:       # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=flusher)
    thread.start()
    expected = set()
    try:
        for seq in range(1, 20_001):
            publish(queue_file, seq, b"%d" % seq)
            expected.add(seq)
            if seq % 3:
                queue_file.ack(seq - 1 if seq > 1 else seq)
                expected.discard(seq - 1 if seq > 1 else seq)
            if seq % 7 == 0:
                queue_file.mark_delivered(seq)
            if seq % 1000 == 0:
                sample = max(expected)
                assert queue_file.read(sample) == b"%d" % sample
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert durable == sorted(durable)
    queue_file.close()
    _, messages = recover(tmp_path)
    assert seqs(messages) == sorted(expected)
    assert all(m.body == b"%d" % m.seq for m in messages)

