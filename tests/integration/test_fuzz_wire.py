"""A bounded wire-level fuzz run in the default suite (the long run is bench/fuzz_wire.py,
docs/fuzzing.md).

Mutated pika, Java-client, raw-frame and grammar sessions (fixed seed: the same bytes
every run) go to a dedicated broker over a dozen concurrent connections, in batches,
while a bystander client publishes and consumes throughout. After every batch the
broker process must still run, no connection may have been left hanging (the client
stopped sending and the broker neither answered nor closed within the deadline), and a
fresh pika client must publish and consume.
"""

from bystander import RunningBystander, assert_broker_serves
from wire_fuzz import SessionRunner, broker_accepts

SEED = 20261123
BATCHES = 4
BATCH_SIZE = 75
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
                assert_broker_serves(broker)
    finally:
        runner.close()
    assert broker.process.poll() is None
