"""Crash stress: N cycles of publish-with-confirms, SIGKILL, restart, verify.

    python3 bench/crash_stress.py --cycles 200 [--publishers 4] [--seed 1]

Each cycle starts Warren on the same data directory, publishes persistent messages with
confirms from several connections, kills the broker with SIGKILL once they received a
random number of confirms together, restarts it and drains the durable queue. It stops
at the first confirmed message that did not come back and exits 1; otherwise it prints
the totals and exits 0.
"""

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))   # tests.support

from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.crash_workload import (declare, drain, lost_messages, out_of_order,  # noqa: E402
                                          run_cycle)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="warren-crash-") as data_dir:
        broker = BrokerProcess(data_dir=data_dir).start()
        declare(broker.port)
        confirmed_total = recovered_total = 0
        for cycle in range(1, args.cycles + 1):
            logs = run_cycle(broker, args.publishers, rng, cycle)
            broker = BrokerProcess(data_dir=data_dir).start()
            recovered = drain(broker.port)
            lost = lost_messages(logs, recovered)
            disordered = out_of_order(logs, recovered)
            confirmed = sum(len(log.confirmed) for log in logs)
            confirmed_total += confirmed
            recovered_total += len(recovered)
            print(f"cycle {cycle}: confirmed {confirmed}, recovered {len(recovered)}, "
                  f"lost {len(lost)}, out of order {len(disordered)}", flush=True)
            if lost or disordered:
                print(f"FAILED: lost {lost[:10]} out of order {disordered}")
                broker.kill()
                return 1
        broker.kill()
    print(f"{args.cycles} kill -9 cycles: {confirmed_total} confirmed, "
          f"{recovered_total} recovered, 0 confirmed messages lost "
          f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
