"""A queue that backs up, then drains: publish N transient 16-byte messages to a queue
with no consumer, then consume them all (no-ack), three rounds, in process through the
unit tests' fake client (whose encoding dominates the total).

    python3 bench/backlog_drain.py [--messages 5000]

Meant for callgrind: the difference between two sizes, divided by the extra messages,
is what queueing one more message costs (docs/benchmarks.md, Round 3):

    valgrind --tool=callgrind python3 bench/backlog_drain.py --messages 1000
    valgrind --tool=callgrind python3 bench/backlog_drain.py --messages 5000
    (difference of the "Collected" counts) / (3 * 4000)
"""

import argparse
import sys
from pathlib import Path

from pamqp import commands

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))

from core_harness import Client  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=5000)
    args = parser.parse_args()
    client = Client()
    client.open_channel()
    client.declare_queue(1, "backlog")
    properties = commands.Basic.Properties(delivery_mode=1)
    for round_ in range(3):
        for _ in range(args.messages):
            client.publish(1, "", "backlog", b"0123456789abcdef", properties=properties)
        tag = f"drain-{round_}"
        client.method(1, commands.Basic.Consume(queue="backlog", consumer_tag=tag,
                                                no_ack=True))
        client.transport.frames()
        client.method(1, commands.Basic.Cancel(consumer_tag=tag))
        client.transport.frames()


if __name__ == "__main__":
    main()
