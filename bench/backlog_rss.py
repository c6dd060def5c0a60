"""Memory of a broker holding a backlog of queued persistent messages.

    python3 bench/backlog_rss.py --messages 1000000 [--size 16] [--port 5672] [--restart]

Without --port it starts Warren itself (fresh data directory); with --port it uses a
running broker and needs --pid to read its RSS. Publishes the messages to a durable queue
(the last one with a confirm, so everything is stored), then prints the broker's RSS
before and after, per message, and the queue's message count. With --restart (a broker
it started), it then kills the broker (SIGKILL) and prints how long a new one on the same
data directory takes to recover the backlog and listen, its message count and its RSS.
"""

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

import pika

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))   # tests.support

from tests.support.broker_process import BrokerProcess  # noqa: E402

QUEUE = "backlog-rss"


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def publish(port: int, count: int, size: int) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    properties = pika.BasicProperties(delivery_mode=2)
    body = b"x" * size
    for _ in range(count):
        channel.basic_publish("", QUEUE, body, properties)
    connection.close()


def fill(port: int, total: int, size: int, publishers: int) -> float:
    started = time.monotonic()
    share = total // publishers
    workers = [multiprocessing.Process(target=publish, args=(port, share, size))
               for _ in range(publishers)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.basic_publish("", QUEUE, b"x" * size, pika.BasicProperties(delivery_mode=2))
    connection.close()
    return time.monotonic() - started


def queue_count(port: int) -> int:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    count = connection.channel().queue_declare(QUEUE, durable=True, passive=True) \
        .method.message_count
    connection.close()
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--port", type=int)
    parser.add_argument("--pid", type=int)
    parser.add_argument("--restart", action="store_true",
                        help="then time a restart after kill -9 (with a broker it started)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="warren-rss-") as data_dir:
        broker = None
        port, pid = args.port, args.pid
        if port is None:
            broker = BrokerProcess(data_dir=data_dir).start()
            port, pid = broker.port, broker.process.pid
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        connection.channel().queue_declare(QUEUE, durable=True)
        connection.close()
        before = rss_kib(pid)
        seconds = fill(port, args.messages, args.size, args.publishers)
        count = queue_count(port)
        after = rss_kib(pid)
        print(f"messages queued: {count:,} of {args.size} B in {seconds:.0f} s "
              f"({count / seconds:,.0f} msg/s)")
        print(f"RSS before: {before / 1024:,.0f} MiB, after: {after / 1024:,.0f} MiB, "
              f"per message: {(after - before) * 1024 / max(count, 1):,.0f} B")
        if broker is not None:
            broker.kill()
            if args.restart:
                restart(data_dir)
    return 0


def restart(data_dir: str) -> None:
    started = time.monotonic()
    broker = BrokerProcess(data_dir=data_dir).start(timeout=3600)
    seconds = time.monotonic() - started
    count = queue_count(broker.port)
    print(f"restart after kill -9: listening in {seconds:.1f} s, {count:,} messages "
          f"recovered, RSS {rss_kib(broker.process.pid) / 1024:,.0f} MiB")
    broker.kill()


if __name__ == "__main__":
    sys.exit(main())
