"""Memory a queued message costs the broker, measured in process with tracemalloc.

    python3 bench/queued_memory.py [--messages 100000] [--small 5000] [--size 16]

Publishes N messages (each with a distinct body object, made before tracing starts, so
not counted) to a queue with no consumer and prints the bytes allocated per message that
are still held:
- transient messages in a classic queue, all with the same properties;
- the same with a distinct message id each (each keeps its own property block);
- a small queue (--small messages, all within the page window);
- persistent ones in a durable queue whose page window is 10 (nearly all paged out to
  its queue file).
"""

import argparse
import gc
import sys
import tempfile
import tracemalloc
from pathlib import Path

from pamqp import commands

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))

from core_harness import Client, paging_client  # noqa: E402


def per_message(client, queue_name: str, count: int, size: int, mode: int,
                distinct: bool = False, settle=lambda: None) -> float:
    alike = commands.Basic.Properties(delivery_mode=mode)
    properties = [commands.Basic.Properties(delivery_mode=mode, message_id=f"{index:08d}")
                  if distinct else alike for index in range(count)]
    bodies = [b"%0*d" % (size, index) for index in range(count)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for body, props in zip(bodies, properties):
        client.publish(1, "", queue_name, body, properties=props)
    del bodies, properties
    settle()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / count


def transient(count: int, size: int, distinct: bool = False) -> float:
    client = Client()
    client.open_channel()
    client.declare_queue(1, "transient")
    return per_message(client, "transient", count, size, mode=1, distinct=distinct)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=5_000)
    parser.add_argument("--size", type=int, default=16)
    args = parser.parse_args()
    print(f"transient, in memory: {transient(args.messages, args.size):.0f} B per message "
          "beyond its body")
    print(f"transient, distinct message ids: "
          f"{transient(args.messages, args.size, distinct=True):.0f} B per message "
          "beyond its body (its 8-byte message id included)")
    print(f"transient, {args.small} in a queue: {transient(args.small, args.size):.0f} B "
          "per message beyond its body")
    with tempfile.TemporaryDirectory() as directory:
        client, queue = paging_client(Path(directory), window=10)
        paged = per_message(client, "long", args.messages, args.size, mode=2,
                            settle=queue.store.sync)    # the file's write buffer
        print(f"persistent, paged out: {paged:.0f} B per message (its body freed)")


if __name__ == "__main__":
    main()
