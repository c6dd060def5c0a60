"""A bounded wire-level fuzz run in the default suite (the long run is bench/fuzz_wire.py,
docs/fuzzing.md).

Mutated pika, Java-client, raw-frame and grammar sessions (fixed seed: the same bytes
every run) go to a dedicated broker over a dozen concurrent connections, in batches,
while a bystander client publishes and consumes throughout. After every batch the
broker process must still run, no connection may have been left hanging (the client
stopped sending and the broker neither answered nor closed within the deadline), the
broker must have logged no error (its 541 safety net logs every exception it catches),
and a fresh pika client must publish and consume.
"""

import multiprocessing

from bystander import RunningBystander, assert_broker_serves
from fuzz_seeds import load_seed_sessions
from wire_fuzz import SessionRunner, broker_accepts, session_bytes

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
