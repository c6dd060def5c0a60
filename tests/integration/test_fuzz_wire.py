"""Bounded wire-level fuzz runs in the default suite, in session mode and in frame mode
(the long run is bench/fuzz_wire.py, docs/fuzzing.md).

Mutated pika, Java-client, raw-frame and grammar sessions (fixed seed: the same bytes
every run) go to a dedicated broker over a dozen concurrent connections, in batches,
while a bystander client publishes and consumes throughout. After every batch the
broker process must still run, no connection may have been left hanging (the client
stopped sending and the broker neither answered nor closed within the deadline), the
broker must have logged no error (its 541 safety net logs every exception it catches),
and a fresh pika client must publish and consume.
"""

import multiprocessing
import random
import struct

import pytest

from tests.support.bystander import RunningBystander, assert_broker_serves
from tests.support.frame_fuzz import FramePool, FrameRunner, FrameTotals
from tests.support.fuzz_seeds import load_seed_sessions
from tests.support.wire_fuzz import SessionRunner, broker_accepts, session_bytes

pytestmark = pytest.mark.warren_only(
    "fuzzes a Warren broker of its own (broker_factory) and reads its log")

SEED = 20261123
BATCHES = 8
BATCH_SIZE = 250
WORKERS = 2
CONNECTIONS_PER_WORKER = 6


def _reproduce(first: int, last: int) -> str:
    return (f"reproduce with: python3 bench/fuzz_wire.py --seed {SEED} --sessions "
            f"{last + 1} --batch {BATCH_SIZE} (isolates and saves the sessions that stop "
            f"the broker), or one session: python3 bench/fuzz_wire.py --seed {SEED} "
            f"--only N for N in {first}..{last}")


def test_mutated_sessions_over_many_connections_never_stop_the_broker(broker_factory):
    broker = broker_factory()
    runner = SessionRunner(WORKERS, CONNECTIONS_PER_WORKER)
    try:
        with RunningBystander(broker):
            for batch in range(BATCHES):
                first, last = batch * BATCH_SIZE, (batch + 1) * BATCH_SIZE - 1
                results = runner.run_batch(broker.host, broker.port, SEED,
                                           list(range(first, last + 1)))
                running = broker_accepts(broker.host, broker.port, broker.process)
                log = "".join(broker.log_lines[-40:])
                assert running, (
                    f"the broker exited during sessions {first}..{last}; "
                    f"{_reproduce(first, last)}\n{log}")
                hangs = sorted(result.index for result in results
                               if result.outcome == "hang")
                assert not hangs, (f"the broker left sessions {hangs} hanging; "
                                   f"{_reproduce(first, last)}")
                errors = [line for line in broker.log_lines if " level=ERROR " in line]
                assert not errors, (f"the broker logged errors (a 541 safety net caught "
                                    f"an exception?) during sessions {first}..{last}; "
                                    f"{_reproduce(first, last)}\n{log}")
                assert_broker_serves(broker)
    finally:
        runner.close()
    assert broker.process.poll() is None


def _session_digest(index: int) -> bytes:
    return session_bytes(SEED, index, load_seed_sessions())


def test_a_session_is_the_same_bytes_in_another_process():
    """What makes `--seed S --only N` a reproducer: generation depends on nothing but
    the seed, the session number and the seed files (not on hash randomization)."""
    indexes = list(range(20))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        there = pool.map(_session_digest, indexes)
    assert there == [_session_digest(index) for index in indexes]
    assert len(set(there)) == len(there)


FRAME_BATCHES = 3
FRAME_BATCH_BUDGET = 40_000          # mutated frames per batch, over both workers
FRAME_CONNECTIONS_PER_WORKER = 4


def test_streams_of_mutated_frames_never_stop_the_broker(broker_factory):
    """Frame mode: logged-in connections stream mutated frames, reconnecting whenever
    the broker closes them; the broker must read them, close connections that break
    the protocol, and keep serving."""
    broker = broker_factory()
    runner = FrameRunner(WORKERS, FRAME_CONNECTIONS_PER_WORKER)
    totals = FrameTotals()
    try:
        with RunningBystander(broker):
            for batch in range(FRAME_BATCHES):
                results = runner.run_batch(broker.host, broker.port, SEED, batch,
                                           FRAME_BATCH_BUDGET)
                for result in results:
                    totals.add(result)
                reproduce = (f"reproduce with: python3 bench/fuzz_wire.py --mode frames "
                             f"--seed {SEED} --frame-batch {FRAME_BATCH_BUDGET} --frames "
                             f"{FRAME_BATCH_BUDGET * FRAME_BATCHES} --connections "
                             f"{FRAME_CONNECTIONS_PER_WORKER} (saves what it finds)")
                log = "".join(broker.log_lines[-40:])
                assert broker_accepts(broker.host, broker.port, broker.process), (
                    f"the broker exited during frame batch {batch}; {reproduce}\n{log}")
                assert totals.hangs == 0, f"a connection hung in batch {batch}; {reproduce}"
                errors = [line for line in broker.log_lines if " level=ERROR " in line]
                assert not errors, (f"the broker logged errors during frame batch {batch};"
                                    f" {reproduce}\n{log}")
                assert_broker_serves(broker)
    finally:
        runner.close()
    assert broker.process.poll() is None
    assert totals.mutated >= FRAME_BATCHES * FRAME_BATCH_BUDGET
    assert totals.mutated_read > totals.mutated // 2, totals.summary(1)
    assert totals.closed_by_broker > 0, "no mutation broke a connection"
    assert totals.connections > totals.closed_by_broker, "no connection outlived its breaks"


def test_assembled_publishes_are_well_framed_with_matching_body_size():
    """What keeps frame mode's connections open: a publish assembled from picked pieces
    is a method, a header whose body_size is the sum of the bodies that follow, and
    body frames, each with its size and end octet right."""
    pool = FramePool(random.Random(SEED), load_seed_sessions())
    for _ in range(2000):
        frames, mutated = pool.publish(b"\0\3")
        for data in frames:
            assert len(data) == struct.unpack_from(">I", data, 3)[0] + 8
            assert data[1:3] == b"\0\3" and data[-1] == 0xCE
        assert [data[0] for data in frames[:2]] == [1, 2]
        assert all(data[0] == 3 for data in frames[2:])
        assert struct.unpack_from(">Q", frames[1], 11)[0] == \
            sum(len(data) - 8 for data in frames[2:])
        assert 0 <= mutated <= len(frames)
