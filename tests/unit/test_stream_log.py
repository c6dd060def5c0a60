"""StreamLog: offsets, reads from memory and disk, retention, timestamps, consumer offsets,
recovery (torn tails, damage, index files), threads, and a 1M-message round trip."""

import logging
import os
import shutil
import tempfile
import threading
import time

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage.record import (SEGMENT_HEADER_SIZE, STREAM_SEGMENT_MAGIC,
                            encode_segment_header)
from storage.segment_file import StorageError, segment_numbers
from storage.stream_files import decode_index, index_name
from storage.stream_log import StreamLog, StreamRecord

# Exercises no module of the compiled build: scripts/test.sh runs it on the pure-Python
# build only (docs/testing.md, "The CI arrangement").
pytestmark = pytest.mark.build_independent


bodies = st.binary(max_size=64)


class Clock:
    """An injectable clock: seconds since the epoch, moved by hand."""

    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float = 1.0) -> None:
        self.now += seconds


def publish(stream, body=b"", exchange="amq.direct", routing_key="key"):
    return stream.append(exchange, routing_key, b"\x10\x00\x02", body)


def offsets(records):
    return [record.offset for record in records]


def read_all(stream, start=0, batch=1000, **options):
    out = []
    while True:
        records = stream.read(start, batch, **options)
        if not records:
            return out
        out += records
        start = records[-1].offset + 1


def seg(directory, number, suffix=".seg"):
    return os.path.join(str(directory), f"{number:08d}{suffix}")


# -- offsets and reads ------------------------------------------------------------------

def test_offsets_start_at_zero_and_increase(tmp_path):
    stream = StreamLog(tmp_path / "s")
    assert (stream.first_offset, stream.next_offset, stream.durable_offset) == (0, 0, -1)
    assert stream.sync() == -1
    assert [publish(stream, b"%d" % i) for i in range(5)] == [0, 1, 2, 3, 4]
    assert stream.next_offset == 5 and stream.durable_offset == -1
    assert stream.sync() == 4
    assert stream.durable_offset == 4
    assert publish(stream) == 5
    assert stream.sync() == 5
    assert stream.sync() == 5          # nothing new: same answer, no write


def test_nothing_touches_the_disk_before_a_sync(tmp_path):
    stream = StreamLog(tmp_path / "s")
    publish(stream, b"x")
    stream.store_consumer_offset("c", 0)
    assert not os.path.exists(tmp_path / "s")
    stream.sync()
    assert sorted(os.listdir(tmp_path / "s")) == ["00000001.seg", "offsets"]


def test_offsets_survive_recovery_and_continue(tmp_path):
    clock = Clock()
    stream = StreamLog(tmp_path / "s", max_segment_bytes=300, clock=clock)
    for i in range(20):
        publish(stream, b"body-%d" % i)
        clock.tick()
    stream.close()
    recovered, problems = StreamLog.recover(tmp_path / "s", max_segment_bytes=300,
                                            clock=clock)
    assert problems == []
    assert (recovered.first_offset, recovered.next_offset) == (0, 20)
    records = read_all(recovered)
    assert offsets(records) == list(range(20))
    assert [r.body for r in records] == [b"body-%d" % i for i in range(20)]
    assert records[3] == StreamRecord(3, 1_700_000_003.0, "amq.direct", "key",
                                      b"\x10\x00\x02", b"body-3")
    assert publish(recovered, b"more") == 20
    recovered.close()
    again, problems = StreamLog.recover(tmp_path / "s")
    assert problems == [] and again.next_offset == 21
    assert again.read(20, 5)[0].body == b"more"


def test_recovering_a_missing_directory_gives_an_empty_log(tmp_path):
    stream, problems = StreamLog.recover(tmp_path / "none")
    assert problems == [] and (stream.first_offset, stream.next_offset) == (0, 0)
    assert stream.read(0, 10) == []
    assert publish(stream, b"a") == 0
    stream.close()
    assert offsets(read_all(StreamLog.recover(tmp_path / "none")[0])) == [0]


def test_a_new_log_refuses_a_directory_with_segments(tmp_path):
    stream = StreamLog(tmp_path / "s")
    publish(stream)
    stream.close()
    with pytest.raises(FileExistsError):
        StreamLog(tmp_path / "s")


def test_reads_come_from_memory_disk_and_both(tmp_path):
    stream = StreamLog(tmp_path / "s", max_segment_bytes=256)
    for i in range(30):
        publish(stream, b"%d" % i)
    assert offsets(stream.read(5, 10)) == list(range(5, 15))        # memory only
    stream.sync()
    for i in range(30, 40):
        publish(stream, b"%d" % i)
    assert len(stream.stats()["segments"]) > 3
    assert offsets(stream.read(0, 30)) == list(range(30))           # disk, many segments
    both = stream.read(25, 10)                                       # disk then memory
    assert offsets(both) == list(range(25, 35))
    assert [r.body for r in both] == [b"%d" % i for i in range(25, 35)]
    assert offsets(stream.read(38, 100)) == [38, 39]
    assert stream.read(40, 10) == [] and stream.read(1000, 10) == []
    assert stream.read(0, 0) == []
    assert offsets(stream.read(25, 10, durable_only=True)) == list(range(25, 30))


def test_names_and_bodies_keep_their_types_and_bytes(tmp_path):
    stream = StreamLog(tmp_path / "s")
    publish(stream, memoryview(b"view"), exchange=b"ex", routing_key="k\u00e9y")
    publish(stream, bytearray(b"array"), exchange="", routing_key="")
    for records in (stream.read(0, 5), (stream.sync(), stream.read(0, 5))[1]):
        assert [(r.exchange, r.routing_key, r.body) for r in records] == \
            [("ex", "k\u00e9y", b"view"), ("", "", b"array")]
        assert all(type(r.body) is bytes and type(r.properties) is bytes for r in records)
    with pytest.raises(ValueError):
        publish(stream, exchange="x" * 256)


@settings(max_examples=40,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.lists(bodies, max_size=8), st.booleans()), max_size=8),
       st.integers(60, 400), st.data())
def test_any_range_reads_like_a_list(tmp_path, batches, segment_bytes, data):
    """Whatever mix of synced and unsynced batches, read(offset, n) is a list slice."""
    directory = tempfile.mkdtemp(dir=tmp_path)
    stream = StreamLog(os.path.join(directory, "s"), max_segment_bytes=segment_bytes)
    model = []
    for batch, synced in batches:
        for body in batch:
            assert publish(stream, body) == len(model)
            model.append(body)
        if synced:
            stream.sync()
    for _ in range(10):
        start = data.draw(st.integers(0, len(model) + 2))
        count = data.draw(st.integers(0, len(model) + 2))
        assert [(r.offset, r.body) for r in stream.read(start, count)] == \
            list(enumerate(model))[start:start + count]
    assert [r.body for r in read_all(stream, batch=3)] == model


def test_a_record_larger_than_the_read_window_and_the_segment(tmp_path):
    stream = StreamLog(tmp_path / "s", max_segment_bytes=1024)
    big = os.urandom(3 * 1024 * 1024)
    publish(stream, b"small")
    publish(stream, big)
    publish(stream, b"after")
    stream.close()
    recovered, problems = StreamLog.recover(tmp_path / "s", max_segment_bytes=1024)
    assert problems == []
    assert [r.body for r in recovered.read(0, 10)] == [b"small", big, b"after"]
    assert [r.body for r in recovered.read(1, 1)] == [big]


# -- retention --------------------------------------------------------------------------

def test_retention_by_bytes_drops_whole_old_segments(tmp_path):
    stream = StreamLog(tmp_path / "s", max_segment_bytes=500, max_bytes=1500)
    for i in range(100):
        publish(stream, b"x" * 20)
        if i % 10 == 9:
            stream.sync()
    before = stream.stats()
    assert before["total_bytes"] > 1500
    dropped = stream.apply_retention()
    after = stream.stats()
    assert dropped == len(before["segments"]) - len(after["segments"]) > 0
    assert after["total_bytes"] <= 1500
    assert after["segments"] == before["segments"][dropped:]     # whole, from the oldest
    assert stream.first_offset == after["segments"][0][1] > 0
    assert sorted(segment_numbers(tmp_path / "s")) == [s[0] for s in after["segments"]]
    assert not any(os.path.exists(seg(tmp_path / "s", s[0], ".idx"))
                   for s in before["segments"][:dropped])
    assert offsets(read_all(stream)) == list(range(stream.first_offset, 100))
    assert stream.apply_retention() == 0


def test_retention_never_deletes_the_newest_segment(tmp_path):
    stream = StreamLog(tmp_path / "s", max_segment_bytes=10_000, max_bytes=10,
                       max_age_seconds=0, clock=Clock())
    publish(stream, b"x" * 100)
    stream.sync()
    stream.apply_retention()
    assert stream.first_offset == 0 and offsets(stream.read(0, 5)) == [0]


def test_retention_by_age_uses_each_segments_newest_message(tmp_path):
    clock = Clock()
    t0 = clock.now
    stream = StreamLog(tmp_path / "s", max_segment_bytes=200, max_age_seconds=60,
                       clock=clock)
    for i in range(30):             # message i is published at t0 + 10 i
        publish(stream, b"m%d" % i)
        stream.sync()
        clock.tick(10)
    segments = stream.stats()["segments"]   # (number, base, next, size, count, samples)
    assert len(segments) >= 5
    clock.now = t0 + 150.5 + 60             # the cut-off is t0 + 150.5
    dropped = stream.apply_retention()
    kept = stream.stats()["segments"]
    assert dropped > 0 and kept == segments[dropped:]
    newest_of = lambda segment: segment[2] - 1      # noqa: E731
    assert all(newest_of(s) * 10 < 150.5 for s in segments[:dropped])
    assert newest_of(kept[0]) * 10 >= 150.5         # its older messages stay with it
    assert stream.first_offset == kept[0][1] and stream.read(0, 1)[0].offset == kept[0][1]
    assert stream.apply_retention() == 0
    clock.tick(3600)                        # everything is old: only the newest stays
    stream.apply_retention()
    assert stream.stats()["segments"] == segments[-1:]
    assert offsets(read_all(stream)) == list(range(segments[-1][1], 30))


def test_reads_below_the_first_offset_start_at_it(tmp_path):
    stream = StreamLog(tmp_path / "s", max_segment_bytes=200, max_bytes=400)
    for i in range(40):
        publish(stream, b"%d" % i)
    stream.sync()
    stream.apply_retention()
    first = stream.first_offset
    assert first > 0
    for start in (0, first - 1, first):
        assert stream.read(start, 3)[0].offset == first
    assert stream.offset_for_timestamp(0) == first


def test_offsets_continue_after_retention_and_recovery(tmp_path):
    clock = Clock()
    stream = StreamLog(tmp_path / "s", max_segment_bytes=200, max_age_seconds=1,
                       clock=clock)
    for i in range(20):
        publish(stream, b"%d" % i)
    stream.sync()
    clock.tick(100)
    stream.apply_retention()
    first = stream.first_offset
    stream.close()
    recovered, problems = StreamLog.recover(tmp_path / "s", clock=clock)
    assert problems == [] and (recovered.first_offset, recovered.next_offset) == (first, 20)
    assert publish(recovered) == 20


def test_an_empty_newest_segment_keeps_the_next_offset(tmp_path):
    directory = tmp_path / "s"
    os.makedirs(directory)
    with open(seg(directory, 7), "wb") as file:
        file.write(encode_segment_header(1234, STREAM_SEGMENT_MAGIC))
    stream, problems = StreamLog.recover(directory, max_bytes=10**9)
    assert problems == []
    assert (stream.first_offset, stream.next_offset) == (1234, 1234)
    assert stream.read(0, 10) == []
    assert publish(stream, b"x") == 1234
    stream.sync()
    assert segment_numbers(directory) == [7, 8]     # numbers are never reused
    assert stream.apply_retention() == 1            # the empty old segment goes
    assert segment_numbers(directory) == [8] and stream.first_offset == 1234


# -- timestamps -------------------------------------------------------------------------

def test_offset_for_timestamp_is_exact_on_disk_and_in_memory(tmp_path):
    clock = Clock(1000.0)
    stream = StreamLog(tmp_path / "s", max_segment_bytes=2000, clock=clock)
    stamps = []
    for i in range(3000):
        stamps.append(clock.now)
        publish(stream, b"%05d" % i)
        if i % 7 == 0:
            clock.tick(1.5)
        if i == 2500:
            stream.sync()
    assert len(stream.stats()["segments"]) > 20
    assert stream.stats()["index_entries"] < 3000 // 10
    for target in (0, 999.9, 1000, 1000.001, 1001.5, 1234.5, 1300, 1300.0001,
                   stamps[2500], stamps[2501] + 0.25, stamps[-1], stamps[-1] + 0.001, 1e12):
        expected = next((i for i, s in enumerate(stamps) if s >= target), 3000)
        assert stream.offset_for_timestamp(target) == expected, target
    assert stream.read(stream.offset_for_timestamp(1100), 1)[0].timestamp >= 1100
    stream.close()
    recovered, _ = StreamLog.recover(tmp_path / "s")
    assert recovered.offset_for_timestamp(1234.5) == \
        next(i for i, s in enumerate(stamps) if s >= 1234.5)


def test_timestamps_never_go_back(tmp_path):
    clock = Clock(5000.0)
    stream = StreamLog(tmp_path / "s", clock=clock)
    publish(stream)
    clock.now = 4000.0      # the wall clock stepped back
    publish(stream)
    clock.now = 6000.0
    publish(stream)
    assert [r.timestamp for r in stream.read(0, 3)] == [5000.0, 5000.0, 6000.0]
    assert stream.offset_for_timestamp(4500) == 0
    assert stream.offset_for_timestamp(5500) == 2
    stream.close()
    clock.now = 1.0         # and after a restart too
    recovered, _ = StreamLog.recover(tmp_path / "s", clock=clock)
    publish(recovered)
    assert recovered.read(3, 1)[0].timestamp == 6000.0


# -- consumer offsets -------------------------------------------------------------------

def test_consumer_offsets_survive_recovery(tmp_path):
    stream = StreamLog(tmp_path / "s")
    for _ in range(10):
        publish(stream)
    stream.store_consumer_offset("reader-1", 4)
    stream.store_consumer_offset("r\u00e9ader-2", 9)
    assert stream.consumer_offset("reader-1") == 4
    assert stream.consumer_offset("nobody") is None
    stream.sync()
    stream.store_consumer_offset("reader-1", 7)
    assert stream.sync() == 9           # offsets only: still a durable write
    stream.store_consumer_offset("reader-1", 8)    # never synced: lost in the crash
    stream.close(flush=False)
    recovered, problems = StreamLog.recover(tmp_path / "s")
    assert problems == []
    assert recovered.consumer_offsets() == {"reader-1": 7, "r\u00e9ader-2": 9}


def test_consumer_offsets_must_name_a_message(tmp_path):
    stream = StreamLog(tmp_path / "s")
    publish(stream)
    with pytest.raises(ValueError):
        stream.store_consumer_offset("c", 1)
    with pytest.raises(ValueError):
        stream.store_consumer_offset("c", -1)
    with pytest.raises(ValueError):
        stream.store_consumer_offset("", 0)
    with pytest.raises(ValueError):
        stream.store_consumer_offset("x" * 256, 0)


def test_a_damaged_consumer_offset_file_is_reported(tmp_path):
    stream = StreamLog(tmp_path / "s")
    publish(stream)
    stream.store_consumer_offset("c", 0)
    stream.close()
    path = tmp_path / "s" / "offsets"
    data = bytearray(path.read_bytes())
    data[14] ^= 0xFF
    path.write_bytes(bytes(data))
    recovered, problems = StreamLog.recover(tmp_path / "s")
    assert len(problems) == 1 and "consumer-offset file damaged" in problems[0]
    assert recovered.consumer_offsets() == {} and offsets(recovered.read(0, 5)) == [0]


def test_an_unfinished_offsets_rewrite_leaves_the_old_file(tmp_path):
    stream = StreamLog(tmp_path / "s")
    publish(stream)
    stream.store_consumer_offset("c", 0)
    stream.close()
    (tmp_path / "s" / "offsets.tmp").write_bytes(b"half a file")
    recovered, problems = StreamLog.recover(tmp_path / "s")
    assert problems == [] and recovered.consumer_offsets() == {"c": 0}
    assert not (tmp_path / "s" / "offsets.tmp").exists()


# -- recovery: torn tails, damage, index files ------------------------------------------

@settings(max_examples=20)
@given(st.lists(bodies, min_size=1, max_size=5), bodies)
def test_a_torn_last_record_is_dropped_at_every_cut(first, last):
    """Cut the newest segment at every byte of its last record: the earlier records all
    survive, the cut one is dropped without a problem, and its offset is handed out again
    (it was never confirmed)."""
    with tempfile.TemporaryDirectory() as scratch:
        directory = os.path.join(scratch, "s")
        stream = StreamLog(directory)
        for body in first:
            publish(stream, body)
        stream.sync()
        start = os.path.getsize(seg(directory, 1))
        publish(stream, last)
        stream.sync()
        stream.close(flush=False)
        end = os.path.getsize(seg(directory, 1))
        with open(seg(directory, 1), "rb") as file:
            data = file.read()
        for cut in range(start, end):
            copy = os.path.join(scratch, "cut")
            shutil.rmtree(copy, ignore_errors=True)
            os.mkdir(copy)
            with open(seg(copy, 1), "wb") as file:
                file.write(data[:cut])
            recovered, problems = StreamLog.recover(copy)
            assert problems == []
            assert [r.body for r in read_all(recovered)] == first
            assert recovered.next_offset == len(first)
            assert os.path.getsize(seg(copy, 1)) == start      # the tail is cut off
            assert publish(recovered, b"new") == len(first)
            recovered.close()
            assert [r.body for r in read_all(StreamLog.recover(copy)[0])] == first + [b"new"]


def test_a_torn_new_segment_is_removed_quietly(tmp_path):
    stream = StreamLog(tmp_path / "s")
    publish(stream, b"a")
    stream.close()
    with open(seg(tmp_path / "s", 2), "wb") as file:
        file.write(encode_segment_header(1, STREAM_SEGMENT_MAGIC)[:10])
    recovered, problems = StreamLog.recover(tmp_path / "s")
    assert problems == [] and recovered.next_offset == 1
    assert segment_numbers(tmp_path / "s") == [1]
    publish(recovered, b"b")
    recovered.close()
    assert segment_numbers(tmp_path / "s") == [1, 3]


def _damaged_stream(directory, count=200, segment_bytes=2000):
    stream = StreamLog(directory, max_segment_bytes=segment_bytes)
    for i in range(count):
        publish(stream, b"message-%04d" % i)
    stream.close()
    return stream


def _flip(path, position):
    with open(path, "r+b") as file:
        file.seek(position)
        byte = file.read(1)
        file.seek(position)
        file.write(bytes([byte[0] ^ 0x55]))


def _record_size(stream, number):
    """The size of the records of segment `number` (all records of _damaged_stream have
    the same size)."""
    entry = next(s for s in stream.stats()["segments"] if s[0] == number)
    assert (entry[3] - SEGMENT_HEADER_SIZE) % entry[4] == 0
    return (entry[3] - SEGMENT_HEADER_SIZE) // entry[4]


@pytest.mark.parametrize("where", ["body", "routing key", "length", "magic"])
def test_a_flipped_byte_is_reported_by_a_verifying_recovery(tmp_path, where):
    directory = tmp_path / "s"
    size = _record_size(_damaged_stream(directory), 2)
    within = {"body": size - 3, "routing key": 40, "length": 10, "magic": 0}[where]
    _flip(seg(directory, 2), SEGMENT_HEADER_SIZE + 7 * size + within)    # 8th record
    recovered, problems = StreamLog.recover(directory, verify=True)
    assert len(problems) == 1 and "damaged bytes skipped" in problems[0], problems
    assert "00000002.seg" in problems[0]
    got = offsets(read_all(recovered))
    lost = sorted(set(range(200)) - set(got))
    assert got == sorted(got) and len(lost) == 1, lost
    assert lost[0] == recovered.stats()["segments"][1][1] + 7


@settings(max_examples=100,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_any_flipped_byte_loses_only_its_own_record(tmp_path, data):
    """Flip any byte of a sealed segment: a verifying recovery reports it, and exactly the
    record holding it is lost (none if it is in the segment header); a trusting recovery
    reads the same records and logs the damage once."""
    directory = tempfile.mkdtemp(dir=tmp_path)
    stream = _damaged_stream(directory)
    size = _record_size(stream, 2)
    segment = next(s for s in stream.stats()["segments"] if s[0] == 2)
    position = data.draw(st.integers(0, segment[3] - 1))
    mask = data.draw(st.integers(1, 255))
    with open(seg(directory, 2), "r+b") as file:
        file.seek(position)
        byte = file.read(1)[0]
        file.seek(position)
        file.write(bytes([byte ^ mask]))
    if position < SEGMENT_HEADER_SIZE:
        lost = []
    else:
        lost = [segment[1] + (position - SEGMENT_HEADER_SIZE) // size]
    expected = [i for i in range(200) if i not in lost]
    trusting, problems = StreamLog.recover(directory)      # uses the index as written
    assert len(problems) == (1 if position < SEGMENT_HEADER_SIZE else 0)
    records = read_all(trusting, batch=7)
    assert offsets(records) == expected
    assert all(r.body == b"message-%04d" % r.offset for r in records)
    if lost:
        assert offsets(trusting.read(lost[0], 1)) == [lost[0] + 1]
    verified, problems = StreamLog.recover(directory, verify=True)
    assert len(problems) == 1
    assert offsets(read_all(verified)) == expected
    shutil.rmtree(directory)


def test_damage_in_a_sealed_segment_is_reported_when_read(tmp_path, caplog):
    directory = tmp_path / "s"
    size = _record_size(_damaged_stream(directory), 3)
    _flip(seg(directory, 3), SEGMENT_HEADER_SIZE + 5 * size + size - 3)
    recovered, problems = StreamLog.recover(directory)     # trusts the index files
    assert problems == []
    caplog.set_level(logging.WARNING, logger="warren.storage")
    got = offsets(read_all(recovered))
    assert len(got) == 199 and got == sorted(got)
    warnings = [r for r in caplog.records if "stream_damage" in r.getMessage()]
    assert len(warnings) == 1 and "00000003.seg" in warnings[0].getMessage()
    caplog.clear()
    read_all(recovered)
    assert not caplog.records           # reported once
    missing = (set(range(200)) - set(got)).pop()
    assert offsets(recovered.read(missing, 2)) == [missing + 1, missing + 2]


def test_a_damaged_segment_header_is_reported_and_its_records_read(tmp_path):
    directory = tmp_path / "s"
    _damaged_stream(directory)
    _flip(seg(directory, 2), 3)
    recovered, problems = StreamLog.recover(directory)
    assert len(problems) == 1 and "header damaged" in problems[0]
    assert offsets(read_all(recovered)) == list(range(200))


def test_a_truncated_sealed_segment_is_reported(tmp_path):
    directory = tmp_path / "s"
    _damaged_stream(directory)
    size = os.path.getsize(seg(directory, 2))
    os.truncate(seg(directory, 2), size - 20)
    recovered, problems = StreamLog.recover(directory)
    assert any("shorter than" in p for p in problems)
    assert any("trailing bytes hold no record" in p for p in problems)
    got = offsets(read_all(recovered))
    assert len(got) == 199 and recovered.next_offset == 200


def test_missing_damaged_or_stale_index_files_are_rebuilt(tmp_path):
    directory = tmp_path / "s"
    _damaged_stream(directory)
    expected = StreamLog.recover(directory)[0].stats()["segments"]
    os.unlink(seg(directory, 1, ".idx"))
    _flip(seg(directory, 2, ".idx"), 20)
    with open(seg(directory, 3, ".idx"), "wb") as file:
        file.write(b"")
    (directory / "00000099.idx").write_bytes(b"orphan")
    recovered, problems = StreamLog.recover(directory)
    assert problems == [] and recovered.stats()["segments"] == expected
    assert offsets(read_all(recovered)) == list(range(200))
    assert os.path.exists(seg(directory, 1, ".idx"))
    assert not os.path.exists(directory / "00000099.idx")


def test_the_unindexed_part_of_a_segment_is_scanned(tmp_path):
    """An index file written before the segment grew (a checkpoint) covers a prefix: the
    rest is scanned, and a torn tail after it is still cut off."""
    directory = tmp_path / "s"
    stream = StreamLog(directory)
    for i in range(50):
        publish(stream, b"%d" % i)
    stream.sync()
    stream._write_index(stream._active)         # what a checkpoint does
    for i in range(50, 80):
        publish(stream, b"%d" % i)
    stream.sync()
    stream.close(flush=False)                   # a crash: no final index
    with open(seg(directory, 1), "ab") as file:
        file.write(b"\xfbW torn")
    recovered, problems = StreamLog.recover(directory)
    assert problems == [] and recovered.next_offset == 80
    assert [r.body for r in read_all(recovered)] == [b"%d" % i for i in range(80)]
    assert recovered.offset_for_timestamp(0) == 0


def test_index_checkpoints_keep_recovery_of_a_big_active_segment_short(tmp_path,
                                                                      monkeypatch):
    monkeypatch.setattr("storage.stream_log.INDEX_CHECKPOINT", 64 * 1024)
    directory = tmp_path / "s"
    stream = StreamLog(directory)
    for i in range(2000):
        publish(stream, b"x" * 100)
        if i % 100 == 99:
            stream.sync()
    stream.close(flush=False)
    index = decode_index((directory / index_name(1)).read_bytes())
    assert index is not None and index.size > 150_000      # a recent checkpoint
    recovered, problems = StreamLog.recover(directory)
    assert problems == [] and recovered.next_offset == 2000
    assert offsets(recovered.read(1990, 20)) == list(range(1990, 2000))


def test_verify_recovery_of_a_clean_log_finds_nothing(tmp_path):
    directory = tmp_path / "s"
    _damaged_stream(directory)
    recovered, problems = StreamLog.recover(directory, verify=True)
    assert problems == [] and offsets(read_all(recovered)) == list(range(200))


def test_a_segment_of_nothing_but_garbage_is_removed_and_reported(tmp_path):
    directory = tmp_path / "s"
    _damaged_stream(directory)
    with open(seg(directory, 2), "r+b") as file:
        size = len(file.read())
        file.seek(0)
        file.write(b"\x00" * size)
    recovered, problems = StreamLog.recover(directory)
    assert len(problems) == 1 and "no valid header and no records; removed" in problems[0]
    assert 2 not in segment_numbers(directory)
    got = offsets(read_all(recovered))
    assert got == sorted(got) and len(got) == 200 - (size - SEGMENT_HEADER_SIZE) // 62
    assert recovered.next_offset == 200


def test_offsets_past_lost_data_are_not_handed_out_again(tmp_path):
    """A consumer offset names a message whose record was lost (the disk dropped synced
    data): appends continue above it, and reads of the gap find nothing."""
    directory = tmp_path / "s"
    stream = StreamLog(directory)
    for i in range(10):
        publish(stream, b"%d" % i)
    stream.store_consumer_offset("c", 9)
    stream.close()
    size = os.path.getsize(seg(directory, 1))
    os.truncate(seg(directory, 1), size - 2 * ((size - SEGMENT_HEADER_SIZE) // 10))
    os.unlink(seg(directory, 1, ".idx"))
    recovered, problems = StreamLog.recover(directory)
    assert problems == [] and recovered.next_offset == 10
    assert offsets(recovered.read(0, 100)) == list(range(8))
    assert recovered.read(8, 10) == []
    assert publish(recovered, b"new") == 10
    assert offsets(recovered.read(5, 100)) == [5, 6, 7, 10]
    recovered.sync()
    assert offsets(recovered.read(5, 100)) == [5, 6, 7, 10]


def _retention_strikes_before_the_next_open(monkeypatch, stream):
    """Make retention delete segments between a read's planning and its open."""
    import storage.stream_log as module
    original = module.SegmentReader
    fired = []

    class Racing(original):
        def __init__(self, path, end):
            if not fired:
                fired.append(path)
                stream.apply_retention()
            super().__init__(path, end)

    monkeypatch.setattr(module, "SegmentReader", Racing)
    return fired


def test_reads_and_lookups_racing_retention_start_again_at_the_new_first(tmp_path,
                                                                        monkeypatch):
    clock = Clock()
    stream = StreamLog(tmp_path / "s", max_segment_bytes=200, max_age_seconds=10,
                       clock=clock)
    for i in range(40):
        publish(stream, b"%d" % i)
        clock.tick(1)
    stream.sync()
    clock.tick(20)                  # everything is expired now, but nothing deleted yet
    assert stream.first_offset == 0
    fired = _retention_strikes_before_the_next_open(monkeypatch, stream)
    records = stream.read(0, 5)
    assert fired and stream.first_offset > 0
    assert offsets(records) == list(range(stream.first_offset, 40))[:5]

    start = clock.now
    stream2 = StreamLog(tmp_path / "t", max_segment_bytes=200, max_age_seconds=10,
                        clock=clock)
    for i in range(40):             # message i is published at start + i
        publish(stream2, b"%d" % i)
        clock.tick(1)
    stream2.sync()
    clock.tick(20)
    fired = _retention_strikes_before_the_next_open(monkeypatch, stream2)
    # Inside the first segment: the lookup walks it, but retention deletes it first.
    assert stream2.offset_for_timestamp(start + 1.5) == stream2.first_offset > 2
    assert fired
    assert stream2.offset_for_timestamp(start + 37.5) == 38


# -- failures, close, drop --------------------------------------------------------------

def test_a_failed_sync_is_cut_back_and_written_again(tmp_path, monkeypatch):
    stream = StreamLog(tmp_path / "s")
    publish(stream, b"a")
    stream.sync()
    publish(stream, b"b")

    def failing(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("storage.segment_file.fdatasync", failing)
    with pytest.raises(OSError):
        stream.sync()
    monkeypatch.undo()
    assert stream.durable_offset == 0
    assert [r.body for r in stream.read(0, 5)] == [b"a", b"b"]
    publish(stream, b"c")
    assert stream.sync() == 2
    recovered, problems = StreamLog.recover(tmp_path / "s")
    assert problems == []
    assert [r.body for r in recovered.read(0, 5)] == [b"a", b"b", b"c"]


def test_a_failed_sync_that_cannot_be_cut_back_makes_the_log_unusable(tmp_path,
                                                                       monkeypatch):
    stream = StreamLog(tmp_path / "s")
    publish(stream, b"a")
    stream.sync()
    publish(stream, b"b")

    def failing(*args):
        raise OSError(5, "I/O error")

    monkeypatch.setattr("storage.segment_file.fdatasync", failing)
    monkeypatch.setattr(os, "ftruncate", failing)
    with pytest.raises(OSError):
        stream.sync()
    monkeypatch.undo()
    with pytest.raises(StorageError):
        stream.sync()
    assert stream.durable_offset == 0
    assert [r.body for r in stream.read(0, 5)] == [b"a", b"b"]
    recovered, _ = StreamLog.recover(tmp_path / "s")
    assert recovered.read(0, 1)[0].body == b"a"


def test_close_and_drop(tmp_path):
    stream = StreamLog(tmp_path / "s")
    publish(stream, b"a")
    stream.close()
    with pytest.raises(StorageError):
        publish(stream)
    assert stream.read(0, 5)[0].body == b"a"      # reads keep working after close
    recovered, _ = StreamLog.recover(tmp_path / "s")
    recovered.drop()
    assert not os.path.exists(tmp_path / "s")
    assert publish(recovered) == -1 and recovered.read(0, 5) == []
    assert recovered.sync() == 0


# -- threads ----------------------------------------------------------------------------

def test_appends_syncs_and_reads_on_three_threads(tmp_path):
    """The loop appends, a flusher syncs and applies retention, a reader follows the
    stream: the reader sees every offset once, in order, with the right body."""
    stream = StreamLog(tmp_path / "s", max_segment_bytes=4096, max_bytes=64 * 1024)
    total = 20_000
    done = threading.Event()
    errors = []
    seen = []

    def flusher():
        try:
            while not done.is_set():
                stream.sync()
                stream.apply_retention()
            stream.sync()
        except BaseException as exc:    # pragma: no cover - reported below
            errors.append(exc)

    def reader():
        try:
            cursor = 0
            while cursor < total:
                for record in stream.read(cursor, 500):
                    assert record.offset >= cursor
                    assert record.body == b"%d" % record.offset
                    seen.append(record.offset)
                    cursor = record.offset + 1
        except BaseException as exc:    # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=flusher), threading.Thread(target=reader)]
    for thread in threads:
        thread.start()
    for i in range(total):
        assert publish(stream, b"%d" % i) == i
    done.set()
    for thread in threads:
        thread.join()
    assert errors == []
    assert seen == sorted(set(seen)) and seen[-1] == total - 1
    assert stream.durable_offset == total - 1


# -- scale ------------------------------------------------------------------------------

@pytest.mark.slow    # about 30 s: out of the quick loop (scripts/test.sh --quick)
def test_a_million_messages_round_trip_in_order_with_a_small_index(tmp_path):
    count = 1_000_000
    stream = StreamLog(tmp_path / "s", max_segment_bytes=8 * 1024 * 1024)
    started = time.perf_counter()
    append = stream.append
    for i in range(count):
        append("amq.direct", "key", b"\x10\x00\x02", b"message %07d" % i)
    assert stream.sync() == count - 1
    stats = stream.stats()
    assert len(stats["segments"]) >= 5
    assert stats["index_entries"] < count // 500         # ~1 per 64 KiB, not per message
    cursor = 0
    while cursor < count:
        records = stream.read(cursor, 10_000)
        assert records[0].offset == cursor
        assert records[-1].offset == cursor + len(records) - 1
        assert records[-1].body == b"message %07d" % records[-1].offset
        cursor += len(records)
    assert cursor == count
    stream.close()
    recovered, problems = StreamLog.recover(tmp_path / "s")
    assert problems == [] and recovered.next_offset == count
    assert recovered.read(777_777, 1)[0].body == b"message 0777777"
    elapsed = time.perf_counter() - started
    print(f"1M messages: appended, synced, read back, recovered in {elapsed:.1f} s")


# -- a model of the whole thing ---------------------------------------------------------

class StreamModel(RuleBasedStateMachine):
    """Random appends, syncs, reads, timestamp lookups, consumer offsets, retention and
    crashes (the unsynced tail is lost) against a list."""

    def __init__(self):
        super().__init__()
        self.scratch = tempfile.mkdtemp()
        self.directory = os.path.join(self.scratch, "s")
        self.clock = Clock(100.0)
        self.options = dict(max_segment_bytes=150, max_bytes=600, max_age_seconds=30,
                            clock=self.clock)
        self.stream = StreamLog(self.directory, **self.options)
        self.model: list[tuple[float, bytes]] = []     # offset -> (timestamp, body)
        self.first = 0
        self.durable = 0
        self.consumers: dict[str, int] = {}
        self.durable_consumers: dict[str, int] = {}

    def teardown(self):
        shutil.rmtree(self.scratch, ignore_errors=True)

    @rule(messages=st.lists(st.tuples(bodies, st.sampled_from([0, 0.25, 1, 20])),
                            min_size=1, max_size=8))
    def append(self, messages):
        for body, seconds in messages:
            self.clock.tick(seconds)
            assert publish(self.stream, body) == len(self.model)
            self.model.append((self.clock.now, body))

    @rule()
    def sync(self):
        assert self.stream.sync() == len(self.model) - 1
        self.durable = len(self.model)
        self.durable_consumers = dict(self.consumers)

    @rule()
    def retention(self):
        before = self.stream.stats()["total_bytes"]
        event(f"retention dropped {min(self.stream.apply_retention(), 2)}+ segments")
        stats = self.stream.stats()
        assert stats["total_bytes"] <= 600 or len(stats["segments"]) == 1
        first = self.stream.first_offset
        assert self.first <= first <= max(self.durable, self.first)
        if before <= 600:       # only age retention ran: every dropped message is too old
            assert all(t < self.clock.now - 30 for t, _ in self.model[self.first:first])
        self.first = first

    @rule(data=st.data())
    def read(self, data):
        start = data.draw(st.integers(0, len(self.model) + 1))
        count = data.draw(st.integers(0, 30))
        durable_only = data.draw(st.booleans())
        end = self.durable if durable_only else len(self.model)
        begin = max(start, self.first)
        expected = [(o, self.model[o][1]) for o in range(begin, min(end, begin + count))]
        records = self.stream.read(start, count, durable_only=durable_only)
        event(f"read spanning {min(len(set(self._segment_of(r.offset) for r in records)), 3)}"
              f"+ segments")
        assert [(r.offset, r.body) for r in records] == expected

    def _segment_of(self, offset):
        return max((s[0] for s in self.stream.stats()["segments"] if s[1] <= offset),
                   default=None)

    @rule(data=st.data())
    def lookup(self, data):
        if not self.model:
            return
        target = data.draw(st.sampled_from([t for t, _ in self.model])) \
            + data.draw(st.sampled_from([0, -0.0005, 0.0005]))
        expected = next((o for o in range(self.first, len(self.model))
                         if self.model[o][0] >= target - 1e-9), len(self.model))
        assert self.stream.offset_for_timestamp(target) == expected

    @precondition(lambda self: len(self.model) > self.first)
    @rule(name=st.sampled_from(["a", "b"]), data=st.data())
    def store(self, name, data):
        offset = data.draw(st.integers(self.first, len(self.model) - 1))
        self.stream.store_consumer_offset(name, offset)
        self.consumers[name] = offset

    @rule(verify=st.booleans())
    def crash(self, verify):
        event(f"crash lost {min(len(self.model) - self.durable, 2)}+ messages")
        self.stream.close(flush=False)
        self.stream, problems = StreamLog.recover(self.directory, verify=verify,
                                                  **self.options)
        assert problems == []
        del self.model[self.durable:]
        self.consumers = dict(self.durable_consumers)
        assert self.stream.consumer_offsets() == self.consumers

    @invariant()
    def offsets_agree(self):
        assert self.stream.next_offset == len(self.model)
        assert self.stream.first_offset == self.first


TestStreamModel = StreamModel.TestCase
TestStreamModel.settings = settings(max_examples=60, stateful_step_count=40)
