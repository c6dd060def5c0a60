"""What a test suite pays for its broker: Warren's test broker against pytest-rabbitmq's
approach (a `rabbitmq-server` node from Debian), side by side in one run.

    python bench/test_broker_startup.py [--rounds 5] [--vhost-rounds 50]

Measured, each over several rounds (median, min and max):
- start to the first accepted AMQP connection (pika's BlockingConnection returns):
  Warren's TestBroker in thread mode and in subprocess mode, each round in a fresh Python
  process and a fresh data directory (so the server's imports are counted), and a
  throw-away RabbitMQ node (tests/support/rabbitmq_node.py, fresh data directory);
- what a test costs in set-up and clean-up, around a test body that declares an exchange
  and a queue (the body itself is not timed):
  - Warren: `new_vhost()` + `remove()` (a vhost and a user per test);
  - pytest-rabbitmq 5.0's `clear_rabbitmq` teardown, as its source does it:
    `rabbitmqctl list_exchanges name` and `rabbitmqctl list_queues name`, then
    exchange.delete / queue.delete of every name not starting with "amq." over the
    test's connection; everything stays in vhost "/" (no isolation while a test runs);
  - a vhost per test on RabbitMQ through rabbitmqctl (add_vhost, set_permissions for
    guest, delete_vhost) and through the management HTTP API (PUT vhost, PUT user, PUT
    permissions, DELETE vhost, DELETE user: what Warren's fixture does).

The figures go to bench/results/test_broker_startup-<date>.json and a table on stdout.
"""

import argparse
import base64
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pika  # noqa: E402

from tests.support.rabbitmq_node import HOST, RabbitInstance  # noqa: E402

RESULTS = REPO / "bench" / "results"
RABBITMQCTL = "rabbitmqctl"


def summary(seconds: list[float]) -> dict:
    return {"median_ms": statistics.median(seconds) * 1000, "min_ms": min(seconds) * 1000,
            "max_ms": max(seconds) * 1000, "rounds": len(seconds),
            "runs_ms": [round(s * 1000, 2) for s in seconds]}


def connect_guest(port: int, vhost: str = "/") -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        HOST, port, vhost, pika.PlainCredentials("guest", "guest"), heartbeat=0))


def declare_test_objects(connection: pika.BlockingConnection) -> None:
    """The test body: what a typical test leaves behind."""
    channel = connection.channel()
    channel.exchange_declare("orders", "topic")
    channel.queue_declare("orders.confirmed")
    channel.queue_bind("orders.confirmed", "orders", "order.confirmed")
    channel.close()


# -- start-up -------------------------------------------------------------------------

def measure_warren_start(mode: str) -> float:
    """In this (fresh) process: TestBroker.start() to the first pika connection.
    broker.testing is imported first, as the pytest plugin has it loaded already."""
    from broker.testing import TestBroker

    started = time.perf_counter()
    broker = TestBroker(mode=mode).start()
    connect_guest(broker.port).close()
    elapsed = time.perf_counter() - started
    broker.stop()
    return elapsed


def warren_start_rounds(mode: str, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        output = subprocess.run([sys.executable, __file__, "--measure-start", mode],
                                capture_output=True, text=True, check=True).stdout
        times.append(json.loads(output.splitlines()[-1])["start_s"])
    return times


def rabbitmq_start_rounds(rounds: int) -> tuple[list[float], str]:
    times, version = [], "?"
    for _ in range(rounds):
        node = RabbitInstance(start_timeout=120, node_prefix="startup-bench", line="3.10")
        try:
            node.start()
            times.append(node.startup_s)
            version = node.server.get("version", "?")
        finally:
            node.stop()
    return times, version


# -- per test -------------------------------------------------------------------------

def per_test_rounds(rounds: int, set_up: Callable[[], object],
                    body: Callable[[object], None],
                    tear_down: Callable[[object], None]) -> list[float]:
    """Seconds of set_up + tear_down per round; the body runs in between, untimed."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        context = set_up()
        set_up_s = time.perf_counter() - started
        body(context)
        started = time.perf_counter()
        tear_down(context)
        times.append(set_up_s + time.perf_counter() - started)
    return times


def warren_vhost_rounds(rounds: int) -> list[float]:
    from broker.testing import TestBroker

    with TestBroker() as broker:
        def body(vhost) -> None:
            connection = pika.BlockingConnection(vhost.connection_parameters(heartbeat=0))
            declare_test_objects(connection)
            connection.close()

        return per_test_rounds(rounds, broker.new_vhost, body, lambda vhost: vhost.remove())


class Rabbitmqctl:
    """rabbitmqctl against the throw-away node (its node name and private cookie)."""

    def __init__(self, node: RabbitInstance):
        self.prefix = [RABBITMQCTL, "-n", node.node, "--erlang-cookie", node.cookie]

    def __call__(self, *args: str) -> str:
        return subprocess.run([*self.prefix, *args], capture_output=True, text=True,
                              check=True).stdout

    def names(self, what: str) -> list[str]:
        """`rabbitmqctl list_<what> name`, without its "Listing ..." and "Timeout"
        lines (pytest-rabbitmq filters them the same way)."""
        lines = self(f"list_{what}", "name").splitlines()
        return [line for line in lines if line and not line.startswith(
            ("Listing ", "Timeout:", "name", "...done"))]


def pytest_rabbitmq_rounds(node: RabbitInstance, rounds: int) -> list[float]:
    """pytest-rabbitmq's `rabbitmq` fixture teardown (clear_rabbitmq)."""
    ctl = Rabbitmqctl(node)

    def clear(connection: pika.BlockingConnection) -> None:
        channel = connection.channel()
        for exchange in ctl.names("exchanges"):
            if not exchange.startswith("amq."):
                channel.exchange_delete(exchange)
        for queue in ctl.names("queues"):
            if not queue.startswith("amq."):
                channel.queue_delete(queue)
        connection.close()

    connections: list[pika.BlockingConnection] = []

    def set_up() -> None:   # the fixture opens a connection: not timed, see body
        return None

    def body(_context) -> None:
        connections.append(connect_guest(node.port))
        declare_test_objects(connections[-1])

    times = per_test_rounds(rounds, set_up, body, lambda _context: clear(connections[-1]))
    left = set(ctl.names("exchanges") + ctl.names("queues")) & {"orders", "orders.confirmed"}
    if left:
        raise RuntimeError(f"clear_rabbitmq as reproduced here left {sorted(left)} behind")
    return times


def rabbitmqctl_vhost_rounds(node: RabbitInstance, rounds: int) -> list[float]:
    ctl = Rabbitmqctl(node)

    def set_up() -> str:
        vhost = f"test-{uuid.uuid4().hex[:12]}"
        ctl("add_vhost", vhost)
        ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        return vhost

    def body(vhost: str) -> None:
        connection = connect_guest(node.port, vhost)
        declare_test_objects(connection)
        connection.close()

    return per_test_rounds(rounds, set_up, body, lambda vhost: ctl("delete_vhost", vhost))


class ManagementApi:
    def __init__(self, url: str):
        self.url = url
        self.authorization = "Basic " + base64.b64encode(b"guest:guest").decode()

    def __call__(self, method: str, path: str, body: dict | None = None) -> None:
        request = urllib.request.Request(
            self.url + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": self.authorization,
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()


def management_vhost_rounds(node: RabbitInstance, rounds: int) -> list[float]:
    api = ManagementApi(node.management_url)

    def set_up() -> tuple[str, str]:
        suffix = uuid.uuid4().hex[:12]
        vhost, user = f"test-{suffix}", f"test-user-{suffix}"
        api("PUT", f"/api/vhosts/{vhost}")
        api("PUT", f"/api/users/{user}", {"password": "secret", "tags": "management"})
        api("PUT", f"/api/permissions/{vhost}/{user}",
            {"configure": ".*", "write": ".*", "read": ".*"})
        return vhost, user

    def body(names: tuple[str, str]) -> None:
        vhost, user = names
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            HOST, node.port, vhost, pika.PlainCredentials(user, "secret"), heartbeat=0))
        declare_test_objects(connection)
        connection.close()

    def tear_down(names: tuple[str, str]) -> None:
        vhost, user = names
        api("DELETE", f"/api/vhosts/{vhost}")
        api("DELETE", f"/api/users/{user}")

    return per_test_rounds(rounds, set_up, body, tear_down)


# -- report ---------------------------------------------------------------------------

def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown")
    return {"nproc": os.cpu_count(), "cpu": cpu, "python": sys.version.split()[0],
            "load_average": os.getloadavg()}


def table(results: dict) -> str:
    lines = [f"{'measurement':58} {'median ms':>10} {'min ms':>9} {'max ms':>9} {'n':>4}"]
    for name, figures in results.items():
        lines.append(f"{name:58} {figures['median_ms']:10.1f} {figures['min_ms']:9.1f} "
                     f"{figures['max_ms']:9.1f} {figures['rounds']:4d}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5,
                        help="broker starts per kind, and rabbitmqctl rounds (default 5)")
    parser.add_argument("--vhost-rounds", type=int, default=50,
                        help="per-test rounds on Warren and the management API "
                             "(default 50)")
    parser.add_argument("--measure-start", choices=("thread", "subprocess"),
                        help=argparse.SUPPRESS)   # one round, in a fresh process
    args = parser.parse_args(argv)
    if args.measure_start:
        print(json.dumps({"start_s": measure_warren_start(args.measure_start)}))
        return 0

    started = datetime.datetime.now()
    load_start = os.getloadavg()
    results = {
        "Warren start, thread mode": summary(warren_start_rounds("thread", args.rounds)),
        "Warren start, subprocess mode":
            summary(warren_start_rounds("subprocess", args.rounds)),
    }
    rabbit_times, version = rabbitmq_start_rounds(args.rounds)
    results[f"RabbitMQ {version} node start"] = summary(rabbit_times)
    results["Warren per test: new_vhost() + remove()"] = summary(
        warren_vhost_rounds(args.vhost_rounds))
    node = RabbitInstance(start_timeout=120, node_prefix="startup-bench", management=True,
                          line="3.10")
    try:
        node.start()
        results["RabbitMQ per test: pytest-rabbitmq clear_rabbitmq"] = summary(
            pytest_rabbitmq_rounds(node, args.rounds))
        results["RabbitMQ per test: rabbitmqctl add/delete_vhost"] = summary(
            rabbitmqctl_vhost_rounds(node, args.rounds))
        results["RabbitMQ per test: management API vhost + user"] = summary(
            management_vhost_rounds(node, args.vhost_rounds))
    finally:
        node.stop()

    report = {"started": started.isoformat(timespec="seconds"), "machine": machine(),
              "load_start": load_start, "load_end": os.getloadavg(),
              "command": " ".join(["python", "bench/test_broker_startup.py", *sys.argv[1:]]),
              "results": results}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"test_broker_startup-{started:%Y-%m-%d}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(table(results))
    print(f"machine: {report['machine']}; load {load_start} -> {report['load_end']}")
    print(f"written to {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
