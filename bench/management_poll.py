"""Publishing throughput with and without a management client polling /api/queues once
a second while --queues queues exist (default 10,000): does answering the API stall
the AMQP hot path?

Starts a fresh Warren (its management API on a free port), declares the queues, then
runs bench/loadgen.py (1 producer, 1 consumer, --duration seconds) --rounds times
without and with the poller, alternating, and prints the median publish rate of each,
the difference, and the poll's response times.

    python3 bench/management_poll.py                      # 10,000 queues, 3 rounds
    python3 bench/management_poll.py --queues 1000 --duration 5 --rounds 1
    python3 bench/management_poll.py --queues 100 --connections 1000 \
        --poll-path /api/connections                       # 1,000 idle connections
"""

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import pika

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LISTENING = re.compile(r"event=(listening|management_listening) .*port=(\d+)")


def start_warren(data_dir: str) -> tuple[subprocess.Popen, int, int]:
    """A Warren on free ports: (process, AMQP port, management port)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "broker", "serve", "--port", "0", "--data-dir", data_dir,
         "--management-port", "auto", "--log-level", "info"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": REPO})
    ports = {}
    while len(ports) < 2:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError("Warren exited before listening")
        found = LISTENING.search(line)
        if found:
            ports[found.group(1)] = int(found.group(2))
    threading.Thread(target=process.stdout.read, daemon=True).start()   # drain the log
    return process, ports["listening"], ports["management_listening"]


def declare_queues(port: int, count: int) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    for index in range(count):
        channel.queue_declare(f"poll-bench-{index}")
    connection.close()


def publish_rate(port: int, duration: float) -> float:
    output = subprocess.run(
        [sys.executable, os.path.join(REPO, "bench", "loadgen.py"), "--port", str(port),
         "--duration", str(duration), "--json"],
        capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])["results"]["published_msgs_per_s"]


def open_idle_connections(port: int, count: int) -> list:
    """`count` open AMQP connections that do nothing (no heartbeats, so they need no
    servicing), for the API to list."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 256)), hard))
    parameters = pika.ConnectionParameters("127.0.0.1", port, heartbeat=0)
    return [pika.BlockingConnection(parameters) for _ in range(count)]


class Poller:
    """GET `path` once a second, recording each answer's time."""

    def __init__(self, url: str, path: str):
        self.path = path
        self.client = httpx.Client(base_url=url, auth=("guest", "guest"), timeout=60)
        self.times: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            response = self.client.get(self.path)
            response.raise_for_status()
            self.times.append(time.monotonic() - started)
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=0,
                        help="idle AMQP connections open throughout (default 0)")
    parser.add_argument("--poll-path", default="/api/queues",
                        help="the API path polled once a second (default /api/queues)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        process, port, management_port = start_warren(data_dir)
        try:
            declare_queues(port, args.queues)
            idle = open_idle_connections(port, args.connections)
            quiet, polled, poll_times = [], [], []
            for _ in range(args.rounds):
                quiet.append(publish_rate(port, args.duration))
                with Poller(f"http://127.0.0.1:{management_port}",
                            args.poll_path) as poller:
                    polled.append(publish_rate(port, args.duration))
                poll_times += poller.times
            for connection in idle:
                connection.close()
        finally:
            process.terminate()
            process.wait(30)
    without, with_poll = statistics.median(quiet), statistics.median(polled)
    print(f"queues: {args.queues}, idle connections: {args.connections}, rounds: "
          f"{args.rounds} x {args.duration:g} s")
    print(f"publish rate without polling: {without:,.0f} msg/s  (runs: "
          f"{', '.join(f'{rate:,.0f}' for rate in quiet)})")
    print(f"publish rate with 1 req/s of {args.poll_path}: {with_poll:,.0f} msg/s  (runs: "
          f"{', '.join(f'{rate:,.0f}' for rate in polled)})")
    print(f"difference: {100 * (with_poll - without) / without:+.1f} %")
    print(f"{args.poll_path} answer time: median {statistics.median(poll_times):.3f} s, "
          f"max {max(poll_times):.3f} s over {len(poll_times)} requests")


if __name__ == "__main__":
    main()
