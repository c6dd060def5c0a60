"""QueueFile recovery: torn tails, damaged records and segments, crashes mid-compaction,
and a state machine of random appends, acks, syncs, compactions and crashes."""

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, initialize, invariant,
                                 precondition, rule)

from storage.queue_file import QueueFile
from storage.record import RECORD_HEADER_SIZE, SEGMENT_HEADER_SIZE
from storage.segment_file import segment_numbers

# Exercises no module of the compiled build: scripts/test.sh runs it on the pure-Python
# build only (docs/testing.md, "The CI arrangement").
pytestmark = pytest.mark.build_independent


bodies = st.binary(max_size=64)


class SimulatedCrash(Exception):
    pass


def publish(queue_file, seq, body=None, **flags):
    queue_file.append(seq, "amq.direct", "key", b"\x10\x00\x02",
                      body if body is not None else b"body-%d" % seq, **flags)


def segment_path(directory, number):
    return os.path.join(str(directory), f"{number:08d}.seg")


def summary(messages):
    return [(m.seq, m.body, m.redelivered) for m in messages]


def recover_copy(source, target, **options):
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    return QueueFile.recover(target, **options)


# -- missing, empty and torn -------------------------------------------------------------

def test_recovering_a_missing_directory_gives_an_empty_queue(tmp_path):
    queue_file, messages, problems = QueueFile.recover(tmp_path / "none")
    assert (messages, problems, queue_file.last_seq) == ([], [], 0)
    publish(queue_file, 1)
    queue_file.close()
    assert [m.seq for m in QueueFile.recover(tmp_path / "none")[1]] == [1]


@settings(max_examples=40)
@given(st.lists(bodies, min_size=1, max_size=5), bodies, st.booleans())
def test_a_torn_last_record_is_dropped_at_every_cut(first, last, last_is_ack):
    """Cut the file at every byte of the last record: the earlier records all survive,
    the cut record is dropped without a problem, and the tail is truncated away."""
    with tempfile.TemporaryDirectory() as scratch:
        directory = os.path.join(scratch, "q")
        queue_file = QueueFile(directory)
        for seq, body in enumerate(first, 1):
            publish(queue_file, seq, body)
        queue_file.sync()
        start = os.path.getsize(segment_path(directory, 1))
        if last_is_ack:
            queue_file.ack(1)
        else:
            publish(queue_file, len(first) + 1, last)
        queue_file.close()
        end = os.path.getsize(segment_path(directory, 1))
        expected = [(seq, body, False) for seq, body in enumerate(first, 1)]
        with open(segment_path(directory, 1), "rb") as file:
            data = file.read()
        for cut in range(start, end):
            copy = os.path.join(scratch, "cut")
            shutil.rmtree(copy, ignore_errors=True)
            os.mkdir(copy)
            with open(segment_path(copy, 1), "wb") as file:
                file.write(data[:cut])
            recovered, messages, problems = QueueFile.recover(copy)
            assert problems == []
            assert summary(messages) == expected
            assert os.path.getsize(segment_path(copy, 1)) == start
            assert recovered.last_seq == len(first)
            publish(recovered, recovered.last_seq + 1)      # appends continue
            recovered.close()


def test_a_zero_filled_tail_is_dropped(tmp_path):
    queue_file = QueueFile(tmp_path)
    publish(queue_file, 1)
    queue_file.close()
    with open(segment_path(tmp_path, 1), "ab") as file:
        file.write(bytes(4096))
    _, messages, problems = QueueFile.recover(tmp_path)
    assert ([m.seq for m in messages], problems) == ([1], [])


def test_empty_and_headerless_segment_files(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=1)
    for seq in (1, 2):
        publish(queue_file, seq)
        queue_file.sync()
    queue_file.close()
    open(segment_path(tmp_path, 3), "wb").close()          # created, crash before header
    _, messages, problems = QueueFile.recover(tmp_path)
    assert ([m.seq for m in messages], problems) == ([1, 2], [])
    assert segment_numbers(str(tmp_path)) == [1, 2]

    os.rename(segment_path(tmp_path, 2), segment_path(tmp_path, 5))
    open(segment_path(tmp_path, 2), "wb").close()          # an empty file in the middle
    with open(segment_path(tmp_path, 4), "wb") as file:    # a header torn in the middle
        file.write(b"WARREN")
    queue_file, messages, problems = QueueFile.recover(tmp_path)
    assert [m.seq for m in messages] == [1, 2]
    assert len(problems) == 2 and all("no valid header" in p for p in problems)
    assert queue_file.last_seq == 2


def test_a_damaged_segment_header_is_reported_and_its_records_read(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=1)
    for seq in (1, 2):
        publish(queue_file, seq)
        queue_file.sync()
    queue_file.close()
    with open(segment_path(tmp_path, 1), "r+b") as file:
        file.seek(3)
        file.write(b"X")
    _, messages, problems = QueueFile.recover(tmp_path)
    assert [m.seq for m in messages] == [1, 2]
    assert len(problems) == 1 and "header damaged" in problems[0]


# -- damage in the middle ----------------------------------------------------------------

@settings(max_examples=150,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(bodies, min_size=3, max_size=3), st.data())
def test_a_flipped_byte_in_a_middle_record_is_reported_and_skipped(tmp_path, three, data):
    directory = tempfile.mkdtemp(dir=tmp_path)
    queue_file = QueueFile(directory)
    offsets = []
    for seq, body in enumerate(three, 1):
        publish(queue_file, seq, body)
        queue_file.sync()
        offsets.append(os.path.getsize(segment_path(directory, 1)))
    queue_file.close()
    position = data.draw(st.integers(offsets[0], offsets[1] - 1), label="position")
    mask = data.draw(st.integers(1, 255), label="mask")
    with open(segment_path(directory, 1), "r+b") as file:
        file.seek(position)
        byte = file.read(1)[0]
        file.seek(position)
        file.write(bytes([byte ^ mask]))
    recovered, messages, problems = QueueFile.recover(directory)
    assert [(m.seq, m.body) for m in messages] == [(1, three[0]), (3, three[2])]
    assert len(problems) == 1
    assert f"offset {offsets[0]}:" in problems[0] and "damaged bytes skipped" in problems[0]
    assert recovered.last_seq == 3


def test_damage_in_several_places_loses_only_the_damaged_records(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=1)
    for seq in range(1, 31):
        publish(queue_file, seq, b"%03d" % seq * 10)
        if seq % 10 == 0:
            queue_file.sync()
    queue_file.mark_delivered(12)
    queue_file.close()
    record = RECORD_HEADER_SIZE + 6 + len("amq.direct") + len("key") + 3 + 30
    for number, index in ((1, 4), (2, 0), (2, 9)):
        with open(segment_path(tmp_path, number), "r+b") as file:
            file.seek(SEGMENT_HEADER_SIZE + index * record + 2)       # the CRC
            file.write(b"\x00\x00\x00\x00")
    _, messages, problems = QueueFile.recover(tmp_path)
    assert [m.seq for m in messages] == [s for s in range(1, 31) if s not in (5, 11, 20)]
    assert [m.redelivered for m in messages if m.seq == 12] == [True]
    assert len(problems) == 3


def test_a_truncated_middle_segment_is_reported(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=1)
    for seq in range(1, 7):
        publish(queue_file, seq)
        if seq % 3 == 0:
            queue_file.sync()
    queue_file.close()
    path = segment_path(tmp_path, 1)
    size = os.path.getsize(path)
    os.truncate(path, size - 5)
    queue_file, messages, problems = QueueFile.recover(tmp_path)
    assert [m.seq for m in messages] == [1, 2, 4, 5, 6]
    assert len(problems) == 1 and "truncated" in problems[0]
    assert os.path.getsize(path) == size - 5            # evidence left in place
    assert queue_file.last_seq == 6


# -- seqs continue -----------------------------------------------------------------------

def test_seq_continues_after_recovery_even_when_everything_was_acked(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=1)
    for seq in range(1, 21):
        publish(queue_file, seq)
        queue_file.sync()
    for seq in range(1, 21):
        queue_file.ack(seq)
    queue_file.sync()
    queue_file.compact()
    assert len(segment_numbers(str(tmp_path))) == 1
    queue_file.close()
    queue_file, messages, problems = QueueFile.recover(tmp_path, segment_size=1)
    assert (messages, problems, queue_file.last_seq) == ([], [], 20)
    publish(queue_file, 21)
    queue_file.sync()               # a new segment; the old newest is collected
    assert len(segment_numbers(str(tmp_path))) == 1
    queue_file.close()
    queue_file, messages, _ = QueueFile.recover(tmp_path)
    assert ([m.seq for m in messages], queue_file.last_seq) == ([21], 21)


# -- crashes during compaction -----------------------------------------------------------

def build_compactable(directory):
    """Segments where compaction has live messages to move, acks to forward and
    delivered marks to carry. Returns (queue file, expected summary)."""
    queue_file = QueueFile(directory, segment_size=600, compact_ratio=0.5)
    seq = 0
    for _ in range(5):
        for _ in range(12):
            seq += 1
            publish(queue_file, seq, b"m%d" % seq)
        queue_file.sync()
    live = {s for s in range(1, seq + 1) if s % 5 == 0 or s <= 3}
    for s in range(1, seq + 1):
        if s not in live:
            queue_file.ack(s)
        elif s % 2:
            queue_file.mark_delivered(s)
    queue_file.sync()
    expected = [(s, b"m%d" % s, bool(s % 2)) for s in sorted(live)]
    return queue_file, expected


def test_a_crash_at_any_compaction_step_loses_and_duplicates_nothing(tmp_path):
    source = tmp_path / "q"
    queue_file, expected = build_compactable(source)
    snapshots = []              # (step, copy of the directory, active segment, size before)
    sizes = {}

    def snapshot(step):
        target = tmp_path / f"snap{len(snapshots)}"
        shutil.copytree(source, target)
        active = queue_file._active.number
        snapshots.append((step, target, active, sizes.get(active)))

    def checkpoint(step):
        if step == "written":
            # Before the copies are fsynced any prefix of them may be on disk.
            snapshot(step)
        elif step in ("synced", "compact:unlinked"):
            snapshot(step)
    original_write = queue_file._write

    def write(segment, buffer):
        sizes[segment.number] = segment.size
        original_write(segment, buffer)
    queue_file._write = write
    queue_file._checkpoint = checkpoint
    assert queue_file.compact() >= 2
    queue_file.close()
    assert {step for step, *_ in snapshots} == {"written", "synced", "compact:unlinked"}

    final = QueueFile.recover(source)
    assert summary(final[1]) == expected and final[2] == []

    cases = []
    for step, target, active, size_before in snapshots:
        cases.append(target)
        if step == "written":
            end = os.path.getsize(segment_path(target, active))
            for cut in range(size_before, end, 7):
                torn = tmp_path / f"{target.name}-cut{cut}"
                shutil.copytree(target, torn)
                os.truncate(segment_path(torn, active), cut)
                cases.append(torn)
    for case in cases:
        recovered, messages, problems = QueueFile.recover(case, segment_size=600,
                                                          compact_ratio=0.5)
        assert problems == []
        assert summary(messages) == expected
        # The half-done compaction is finished or redone, and acks of the copies
        # made before the crash kill every copy of them.
        recovered.compact()
        for seq, *_ in expected[::2]:
            recovered.ack(seq)
        recovered.sync()
        recovered.compact()
        recovered.close()
        _, messages, problems = QueueFile.recover(case)
        assert problems == []
        assert summary(messages) == expected[1::2]


def test_acks_of_a_message_recovered_in_two_copies_outlive_both(tmp_path):
    queue_file = QueueFile(tmp_path, segment_size=1)
    for seq in range(1, 11):
        publish(queue_file, seq)
    queue_file.sync()                               # 1: messages 1-10
    for seq in range(2, 10):
        queue_file.ack(seq)
    queue_file.sync()                               # 2: acks 2-9
    publish(queue_file, 11)
    queue_file.sync()                               # 3: message 11

    def tear_after_first_copy(step):
        if step == "written":
            segment = queue_file._active
            record = os.path.getsize(segment_path(tmp_path, 1)) // 10   # roughly one
            os.truncate(segment_path(tmp_path, segment.number), segment.size + record)
            raise SimulatedCrash
    queue_file._checkpoint = tear_after_first_copy
    try:
        queue_file.compact()                        # 1 -> 4: message 1 copied, 10 torn
    except SimulatedCrash:
        pass
    queue_file.close(flush=False)

    queue_file, messages, problems = QueueFile.recover(tmp_path, segment_size=1)
    assert ([m.seq for m in messages], problems) == ([1, 10, 11], [])
    assert queue_file._dups == {1: [1]}             # message 1 is in segments 1 and 4
    queue_file.ack(1)
    queue_file.sync()                               # 5: ack 1, for both copies
    publish(queue_file, 12)
    queue_file.sync()                               # 6: segment 4 (dead) goes
    assert 4 not in segment_numbers(str(tmp_path))
    queue_file.close()
    _, messages, problems = QueueFile.recover(tmp_path)
    assert ([m.seq for m in messages], problems) == ([10, 11, 12], [])


# -- the state machine -------------------------------------------------------------------

class QueueFileMachine(RuleBasedStateMachine):
    """Random appends, acks, deliveries, syncs, compactions and crashes (clean, and torn
    mid-sync or mid-compaction) against a model of what must and may survive."""

    messages = Bundle("messages")

    def __init__(self):
        super().__init__()
        self.scratch = tempfile.mkdtemp()
        self.directory = os.path.join(self.scratch, "q")
        self.options = {"segment_size": 160, "compact_ratio": 0.5}
        self.queue_file = QueueFile(self.directory, **self.options)
        self.bodies = {}            # seq -> body: appended and not acked
        self.durable = set()        # appended and covered by a completed sync
        self.acked_unsynced = {}    # seq -> body: acked after the last completed sync
        self.delivered = set()      # marked (or appended redelivered), not acked
        self.delivered_durable = set()

    @initialize(segment_size=st.sampled_from([1, 160, 400]),
                compact_ratio=st.sampled_from([0.3, 0.5, 0.75, 0.95]))
    def configure(self, segment_size, compact_ratio):
        self.options = {"segment_size": segment_size, "compact_ratio": compact_ratio}
        self.queue_file = QueueFile(self.directory, **self.options)

    def teardown(self):
        self.queue_file.close(flush=False)
        shutil.rmtree(self.scratch, ignore_errors=True)

    @rule(target=messages, body=bodies, gap=st.integers(1, 3), redelivered=st.booleans())
    def append(self, body, gap, redelivered):
        seq = self.queue_file.last_seq + gap
        publish(self.queue_file, seq, body, redelivered=redelivered)
        self.bodies[seq] = body
        if redelivered:
            self.delivered.add(seq)
        return seq

    @rule(seq=messages)
    def ack(self, seq):
        self.queue_file.ack(seq)
        if seq in self.bodies:
            self.acked_unsynced[seq] = self.bodies.pop(seq)
            self.durable.discard(seq)
            self.delivered.discard(seq)
            self.delivered_durable.discard(seq)

    @rule(batch=st.lists(bodies, min_size=1, max_size=8), sync=st.booleans())
    def append_many(self, batch, sync):
        for body in batch:
            self.append(body, 1, False)
        if sync:
            self.sync()

    @rule(count=st.integers(1, 8), step=st.integers(1, 3))
    def ack_oldest(self, count, step):
        for seq in sorted(self.bodies)[:count * step:step]:
            self.ack(seq)

    @rule(seq=messages)
    def deliver(self, seq):
        if seq in self.bodies:
            self.queue_file.mark_delivered(seq)
            self.delivered.add(seq)

    @rule(seq=messages)
    def read(self, seq):
        if seq in self.bodies:
            assert self.queue_file.read(seq) == self.bodies[seq]

    @rule(compact=st.booleans())
    def sync(self, compact=False):
        assert self.queue_file.sync() == self.queue_file.last_seq
        self.durable = set(self.bodies)
        self.acked_unsynced = {}
        self.delivered_durable = set(self.delivered)
        if compact:
            self.compact()

    @rule()
    def compact(self):
        event(f"compacted: {self.queue_file.compact() > 0}")

    @rule()
    def crash(self):
        self.queue_file.close(flush=False)
        self.recover()

    @precondition(lambda self: self.queue_file.needs_compaction())
    @rule(fraction=st.floats(0, 1))
    def crash_mid_compaction(self, fraction):
        self.crash_mid_write(fraction, "compact")

    @precondition(lambda self: self.queue_file._pending or self.queue_file._pending_acks)
    @rule(fraction=st.floats(0, 1), during=st.sampled_from(["sync", "compact"]))
    def crash_mid_write(self, fraction, during):
        """The process dies after writing a batch (or compaction copies) but before
        fsync: only a prefix of the new bytes reaches the disk."""
        queue_file = self.queue_file

        def tear(step):
            if step == "written":
                segment = queue_file._active
                end = os.fstat(segment.fd).st_size
                os.truncate(queue_file._path(segment.number),
                            segment.size + int((end - segment.size) * fraction))
                raise SimulatedCrash
        queue_file._checkpoint = tear
        try:
            queue_file.sync() if during == "sync" else queue_file.compact()
        except SimulatedCrash:
            event(f"torn mid-{during}")
        queue_file._checkpoint = None
        queue_file.close(flush=False)
        self.recover()

    def recover(self):
        self.queue_file, messages, problems = QueueFile.recover(self.directory, **self.options)
        assert problems == []
        event(f"recovered with copies to dedupe: {bool(self.queue_file._dups)}")
        found = {m.seq: m for m in messages}
        assert [m.seq for m in messages] == sorted(found)
        for seq in self.durable:
            assert seq in found, f"synced message {seq} lost"
        for seq, message in found.items():
            assert seq in self.bodies or seq in self.acked_unsynced, f"{seq} came back"
            assert message.body == self.bodies.get(seq, self.acked_unsynced.get(seq))
            if seq in self.delivered_durable:
                assert message.redelivered
            if seq not in self.delivered and seq not in self.acked_unsynced:
                assert not message.redelivered
        self.bodies = {seq: m.body for seq, m in found.items()}
        self.durable = set(found)
        self.acked_unsynced = {}
        self.delivered = {seq for seq, m in found.items() if m.redelivered}
        self.delivered_durable = set(self.delivered)

    @invariant()
    def seqs_only_grow(self):
        assert self.queue_file.last_seq >= max(self.bodies, default=0)


QueueFileMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=50)
test_queue_file_state_machine = QueueFileMachine.TestCase


def test_recovered_messages_keep_their_own_names_and_properties(tmp_path):
    """Recovery shares the name and property objects of consecutive records alike; the
    records that differ come back with their own."""
    queue_file = QueueFile(tmp_path / "q")
    written = []
    for seq in range(1, 31):
        exchange = "" if seq % 4 else "x"
        routing_key = "a" if seq % 6 < 3 else "b"
        properties = b"\x10\x00\x02" if seq % 5 else bytes([seq])
        queue_file.append(seq, exchange, routing_key, properties, b"body")
        written.append((seq, exchange, routing_key, properties))
    queue_file.close()
    for load_bodies in (True, False):
        _, messages, problems = QueueFile.recover(tmp_path / "q", load_bodies=load_bodies)
        assert problems == []
        assert [(m.seq, m.exchange, m.routing_key, m.properties) for m in messages] \
            == written
