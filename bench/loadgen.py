#!/usr/bin/env python3
"""Broker-agnostic AMQP 0-9-1 load generator.

Producers and consumers each run in their own OS process, each with its own pika
BlockingConnection, so one Python interpreter's GIL does not cap the measured rate.
Every message carries its send time (``time.time_ns()``, big-endian uint64) in the
first 8 bytes of its body; consumers subtract it from their receive time to get the
end-to-end latency.

Timeline, in wall-clock time shared by every process::

    start ---- warm-up (10%) ---- measure ------------------------- end
                                  |<-- counted for rates and latency -->|

A message is counted as published when its send time falls in the measurement
window, and as consumed (with its latency) when its receive time does. Everything
stops by itself at ``end``; the queue is deleted afterwards.

See bench/README.md for usage.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from array import array
from dataclasses import asdict, dataclass, field
from typing import Any

import pika
import pika.exceptions

TIMESTAMP = struct.Struct(">Q")
NS_PER_S = 1_000_000_000
WARMUP_FRACTION = 0.10
SETUP_TIMEOUT_S = 30.0  # connecting and attaching every worker
START_DELAY_S = 0.25  # between "everyone is ready" and the common start time
RESULT_GRACE_S = 15.0  # after the end, for workers to report and exit
POLL_INTERVAL_S = 0.05  # how long a consumer blocks in process_data_events at most
PERSISTENT_DELIVERY_MODE = 2
PRODUCER = "producer"
CONSUMER = "consumer"


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class Config:
    host: str
    port: int
    producers: int
    consumers: int
    size: int
    duration: float
    manual_ack: bool
    multiple_ack_every: int
    prefetch: int
    persistent: bool
    confirm: bool
    rate: float
    queue: str
    json: bool
    user: str
    password: str
    vhost: str

    @property
    def rate_per_producer(self) -> float:
        return self.rate / self.producers if self.rate else 0.0

    @property
    def ack_mode(self) -> str:
        if not self.manual_ack:
            return "auto-ack"
        if self.multiple_ack_every > 1:
            return f"manual ack (multiple every {self.multiple_ack_every})"
        return "manual ack"


def parse_args(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        description="AMQP 0-9-1 load generator (producers/consumers in separate processes)."
    )
    parser.add_argument("--host", default="127.0.0.1", help="broker host (loopback only)")
    parser.add_argument("--port", type=int, default=5672)
    parser.add_argument("--producers", type=int, default=1, help="producer processes")
    parser.add_argument("--consumers", type=int, default=1, help="consumer processes")
    parser.add_argument("--size", type=int, default=16, help="message body bytes (>= 8)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds, warm-up included")
    parser.add_argument("--manual-ack", action="store_true", help="consumers ack explicitly")
    parser.add_argument(
        "--multiple-ack-every",
        type=int,
        default=0,
        metavar="K",
        help="ack with multiple=true every K messages (implies --manual-ack)",
    )
    parser.add_argument(
        "--prefetch", type=int, default=0, help="basic.qos prefetch count (0: no basic.qos)"
    )
    parser.add_argument(
        "--persistent", action="store_true", help="durable queue, delivery_mode=2"
    )
    parser.add_argument(
        "--confirm", action="store_true", help="publisher confirms (pika waits for each one)"
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        metavar="MSGS_PER_SEC",
        help="total publish rate, split evenly among producers (0: as fast as possible)",
    )
    parser.add_argument("--queue", default="", help="queue name (default: a fresh uuid name)")
    parser.add_argument("--json", action="store_true", help="print a final line of JSON")
    parser.add_argument("--user", default="guest")
    parser.add_argument("--password", default="guest")
    parser.add_argument("--vhost", default="/")
    args = parser.parse_args(argv)

    errors = validation_errors(args)
    if errors:
        parser.error("; ".join(errors))
    return Config(
        host=args.host,
        port=args.port,
        producers=args.producers,
        consumers=args.consumers,
        size=args.size,
        duration=args.duration,
        manual_ack=args.manual_ack or args.multiple_ack_every > 0,
        multiple_ack_every=args.multiple_ack_every,
        prefetch=args.prefetch,
        persistent=args.persistent,
        confirm=args.confirm,
        rate=args.rate,
        queue=args.queue or f"loadgen-{uuid.uuid4().hex}",
        json=args.json,
        user=args.user,
        password=args.password,
        vhost=args.vhost,
    )


def validation_errors(args: argparse.Namespace) -> list[str]:
    errors = []
    if args.producers < 1:
        errors.append("--producers must be >= 1")
    if args.consumers < 0:
        errors.append("--consumers must be >= 0")
    if args.size < TIMESTAMP.size:
        errors.append(f"--size must be >= {TIMESTAMP.size} (the timestamp)")
    if args.duration <= 0:
        errors.append("--duration must be > 0")
    if args.prefetch < 0 or args.multiple_ack_every < 0 or args.rate < 0:
        errors.append("--prefetch, --multiple-ack-every and --rate must be >= 0")
    if args.prefetch > 65535:
        errors.append("--prefetch must be <= 65535 (a 16-bit field)")
    if 0 < args.prefetch < args.multiple_ack_every:
        errors.append("--multiple-ack-every must not exceed --prefetch (it would stall)")
    if not 0 < args.port < 65536:
        errors.append("--port out of range")
    elif not is_loopback(args.host, args.port):
        errors.append(f"--host {args.host!r} does not resolve to loopback addresses only")
    return errors


def is_loopback(host: str, port: int) -> bool:
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except socket.gaierror:
        return False
    return bool(infos) and all(
        ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos
    )


def connection_parameters(cfg: Config) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        host=cfg.host,
        port=cfg.port,
        virtual_host=cfg.vhost,
        credentials=pika.PlainCredentials(cfg.user, cfg.password),
        connection_attempts=1,
        socket_timeout=5,
        # A broker that blocks publishers (flow control) must not hang a run forever.
        blocked_connection_timeout=cfg.duration + RESULT_GRACE_S / 2,
    )


# --------------------------------------------------------------------------- shared state


@dataclass(frozen=True)
class Window:
    """The run's timeline in time.time_ns() units, identical in every process."""

    start_ns: int
    measure_ns: int
    end_ns: int

    @classmethod
    def starting_at(cls, start_ns: int, duration: float) -> Window:
        duration_ns = int(duration * NS_PER_S)
        return cls(start_ns, start_ns + int(duration_ns * WARMUP_FRACTION), start_ns + duration_ns)

    def measures(self, t_ns: int) -> bool:
        return self.measure_ns <= t_ns < self.end_ns

    @property
    def measured_seconds(self) -> float:
        return (self.end_ns - self.measure_ns) / NS_PER_S


NOT_STARTED = Window(0, 0, 0)


@dataclass
class Sync:
    """Start coordination: every worker and the parent meet at `ready`, then the parent
    publishes the common start time and sets `go`."""

    ready: Any  # multiprocessing Barrier
    go: Any  # multiprocessing Event
    start_ns: Any  # multiprocessing Value('q')

    def wait_for_window(self, duration: float) -> Window:
        self.ready.wait(timeout=SETUP_TIMEOUT_S)
        if not self.go.wait(timeout=SETUP_TIMEOUT_S):
            raise TimeoutError("no start signal from the parent process")
        return Window.starting_at(self.start_ns.value, duration)


@dataclass
class WorkerResult:
    role: str
    index: int
    measured: int = 0  # messages whose send (producer) / receive (consumer) time is measured
    total: int = 0  # over the whole run, warm-up included
    rejected: int = 0  # producer: nacked or returned under --confirm
    latencies_ns: array = field(default_factory=lambda: array("q"))
    error: str | None = None


# --------------------------------------------------------------------------- producer


class Pacer:
    """Open-loop schedule: message i is due at start + i / rate, whatever happened to
    the previous ones, so a stalled broker shows up as latency, not as a lower rate."""

    def __init__(self, rate: float, start_ns: int, phase: float) -> None:
        self.interval_ns = NS_PER_S / rate
        self.next_ns = start_ns + phase * self.interval_ns

    def wait(self, connection: pika.BlockingConnection) -> None:
        sleep_until(connection, int(self.next_ns))
        self.next_ns += self.interval_ns


class Producer:
    def __init__(
        self, cfg: Config, index: int, connection: pika.BlockingConnection, result: WorkerResult
    ) -> None:
        self.cfg = cfg
        self.index = index
        self.connection = connection
        self.result = result
        self.channel = connection.channel()
        if cfg.confirm:
            self.channel.confirm_delivery()
        self.properties = (
            pika.BasicProperties(delivery_mode=PERSISTENT_DELIVERY_MODE) if cfg.persistent else None
        )
        self.padding = bytes(cfg.size - TIMESTAMP.size)

    def run(self, window: Window) -> None:
        sleep_until(self.connection, window.start_ns)
        pacer = self.pacer(window)
        while True:
            if pacer:
                pacer.wait(self.connection)
            now = time.time_ns()
            if now >= window.end_ns:
                return
            if self.publish(now):
                self.result.total += 1
                self.result.measured += window.measures(now)
            else:
                self.result.rejected += 1

    def pacer(self, window: Window) -> Pacer | None:
        if not self.cfg.rate:
            return None
        # Stagger the producers so N paced producers do not publish in lock-step bursts.
        return Pacer(self.cfg.rate_per_producer, window.start_ns, self.index / self.cfg.producers)

    def publish(self, now_ns: int) -> bool:
        body = TIMESTAMP.pack(now_ns) + self.padding
        try:
            self.channel.basic_publish("", self.cfg.queue, body, self.properties)
        except (pika.exceptions.NackError, pika.exceptions.UnroutableError):
            return False
        return True


# --------------------------------------------------------------------------- consumer


class Consumer:
    def __init__(
        self, cfg: Config, connection: pika.BlockingConnection, result: WorkerResult
    ) -> None:
        self.cfg = cfg
        self.connection = connection
        self.result = result
        self.channel = connection.channel()
        self.window = NOT_STARTED  # nothing is measured before run() sets the real one
        self.unacked = 0
        if cfg.prefetch:
            self.channel.basic_qos(prefetch_count=cfg.prefetch)
        # Attach before the start so no consumer misses the first messages.
        self.channel.basic_consume(cfg.queue, self.on_message, auto_ack=not cfg.manual_ack)

    def run(self, window: Window) -> None:
        self.window = window
        while (remaining_ns := window.end_ns - time.time_ns()) > 0:
            time_limit = min(POLL_INTERVAL_S, remaining_ns / NS_PER_S)
            self.connection.process_data_events(time_limit=time_limit)

    def on_message(self, channel, method, _properties, body: bytes) -> None:
        now = time.time_ns()
        self.result.total += 1
        if self.window.measures(now):
            self.result.measured += 1
            self.result.latencies_ns.append(now - TIMESTAMP.unpack_from(body)[0])
        if self.cfg.manual_ack:
            self.ack(channel, method.delivery_tag)

    def ack(self, channel, delivery_tag: int) -> None:
        if self.cfg.multiple_ack_every <= 1:
            channel.basic_ack(delivery_tag)
            return
        self.unacked += 1
        if self.unacked >= self.cfg.multiple_ack_every:
            channel.basic_ack(delivery_tag, multiple=True)
            self.unacked = 0


# --------------------------------------------------------------------------- worker process


def worker_main(role: str, index: int, cfg: Config, sync: Sync, results: Any) -> None:
    """Entry point of every child process: connect, attach, wait for the common start,
    run until the end of the window, report, disconnect."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    result = WorkerResult(role, index)
    connection = None
    try:
        connection = pika.BlockingConnection(connection_parameters(cfg))
        worker = (
            Producer(cfg, index, connection, result)
            if role == PRODUCER
            else Consumer(cfg, connection, result)
        )
        worker.run(sync.wait_for_window(cfg.duration))
    except Exception as exc:  # reported to the parent, which decides what to do
        result.error = f"{type(exc).__name__}: {exc}"
        sync.ready.abort()  # fail fast if the others are still waiting to start
    results.put(result)  # before closing: a slow close must not lose the figures
    close_quietly(connection)


def sleep_until(connection: pika.BlockingConnection, t_ns: int) -> None:
    """Sleep while servicing the connection; loop because pika may wake up early."""
    while (delay_ns := t_ns - time.time_ns()) > 0:
        connection.sleep(delay_ns / NS_PER_S)


def close_quietly(connection: pika.BlockingConnection | None) -> None:
    if connection is None or not connection.is_open:
        return
    try:
        connection.close()
    except Exception:
        pass


# --------------------------------------------------------------------------- queue admin


def admin_channel(cfg: Config):
    connection = pika.BlockingConnection(connection_parameters(cfg))
    return connection, connection.channel()


def declare_queue(cfg: Config) -> None:
    connection, channel = admin_channel(cfg)
    try:
        channel.queue_declare(cfg.queue, durable=cfg.persistent)
        channel.queue_purge(cfg.queue)  # a reused --queue must not feed stale messages
    finally:
        close_quietly(connection)


def delete_queue(cfg: Config) -> int | None:
    """Delete the queue; return how many messages were still in it (the backlog)."""
    connection = None
    try:
        connection, channel = admin_channel(cfg)
        return channel.queue_delete(cfg.queue).method.message_count
    except Exception as exc:
        print(f"warning: could not delete queue {cfg.queue}: {exc!r}", file=sys.stderr)
        return None
    finally:
        close_quietly(connection)


# --------------------------------------------------------------------------- orchestration


def run_workers(cfg: Config) -> tuple[Window | None, list[WorkerResult], list[str]]:
    ctx = mp.get_context("spawn")
    sync = Sync(
        ready=ctx.Barrier(cfg.producers + cfg.consumers + 1),
        go=ctx.Event(),
        start_ns=ctx.Value("q", 0),
    )
    results = ctx.Queue()
    processes = [
        ctx.Process(
            target=worker_main, args=(role, i, cfg, sync, results), name=worker_name(role, i)
        )
        for role, count in ((CONSUMER, cfg.consumers), (PRODUCER, cfg.producers))
        for i in range(count)
    ]
    for process in processes:
        process.start()
    try:
        window = start_window(cfg, sync)
        deadline = (window.end_ns if window else time.time_ns()) / NS_PER_S + RESULT_GRACE_S
        collected = collect_results(results, len(processes), deadline)
    except BaseException:  # Ctrl-C: stop everything now
        reap(processes, deadline=time.time())
        raise
    reap(processes, deadline=time.time() + 5)  # a worker may hang closing; results are in
    reported = {worker_name(r.role, r.index) for r in collected}
    problems = [f"{worker_name(r.role, r.index)}: {r.error}" for r in collected if r.error]
    problems += [f"{p.name} did not report in time" for p in processes if p.name not in reported]
    return window, collected, problems


def worker_name(role: str, index: int) -> str:
    return f"{role}-{index}"


def start_window(cfg: Config, sync: Sync) -> Window | None:
    """Wait until every worker is connected and attached, then set the common start."""
    try:
        sync.ready.wait(timeout=SETUP_TIMEOUT_S)
    except threading.BrokenBarrierError:
        return None
    start_ns = time.time_ns() + int(START_DELAY_S * NS_PER_S)
    sync.start_ns.value = start_ns
    sync.go.set()
    return Window.starting_at(start_ns, cfg.duration)


def collect_results(results: Any, expected: int, deadline_s: float) -> list[WorkerResult]:
    collected: list[WorkerResult] = []
    while len(collected) < expected and (remaining := deadline_s - time.time()) > 0:
        try:
            collected.append(results.get(timeout=remaining))
        except queue_mod.Empty:
            break
    return collected


def reap(processes: list[mp.Process], deadline: float) -> None:
    """Join every worker; terminate (by process object) those still alive at the deadline."""
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.time()))
        if process.is_alive():
            process.terminate()
            process.join(timeout=2)


# --------------------------------------------------------------------------- report


def percentile(sorted_values: list[int], p: float) -> int | None:
    """Nearest-rank percentile."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def per_second(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0


def ns_to_ms(value: float | None) -> float | None:
    return None if value is None else round(value / 1e6, 3)


def summarize(
    window: Window | None, results: list[WorkerResult], backlog: int | None, load: float
) -> dict[str, Any]:
    producers = [r for r in results if r.role == PRODUCER]
    consumers = [r for r in results if r.role == CONSUMER]
    seconds = window.measured_seconds if window else 0.0
    latencies = sorted(v for r in consumers for v in r.latencies_ns)
    return {
        "measured_seconds": round(seconds, 3),
        "published_msgs_per_s": per_second(sum(r.measured for r in producers), seconds),
        "consumed_msgs_per_s": per_second(sum(r.measured for r in consumers), seconds),
        "published_total": sum(r.total for r in producers),
        "consumed_total": sum(r.total for r in consumers),
        "rejected_total": sum(r.rejected for r in producers),
        "backlog_at_end": backlog,
        "host_load_1m_at_start": round(load, 2),  # other work on the host skews the figures
        "host_cpus": os.cpu_count(),
        "latency_samples": len(latencies),
        "latency_ms": {
            "p50": ns_to_ms(percentile(latencies, 50)),
            "p95": ns_to_ms(percentile(latencies, 95)),
            "p99": ns_to_ms(percentile(latencies, 99)),
            "max": ns_to_ms(latencies[-1] if latencies else None),
            "mean": ns_to_ms(sum(latencies) / len(latencies) if latencies else None),
        },
    }


def describe(cfg: Config) -> str:
    pace = f"{cfg.rate:g} msg/s total" if cfg.rate else "unpaced"
    extras = [
        cfg.ack_mode,
        f"prefetch {cfg.prefetch}" if cfg.prefetch else "no prefetch limit",
        "persistent" if cfg.persistent else "transient",
        "confirms" if cfg.confirm else "no confirms",
        pace,
    ]
    return (
        f"{cfg.host}:{cfg.port} queue {cfg.queue}: {cfg.producers} producer(s), "
        f"{cfg.consumers} consumer(s), {cfg.size} B, {cfg.duration:g} s "
        f"(warm-up {cfg.duration * WARMUP_FRACTION:g} s); " + ", ".join(extras)
    )


def print_report(cfg: Config, summary: dict[str, Any], problems: list[str]) -> None:
    lat = summary["latency_ms"]
    print(describe(cfg))
    print(
        f"published: {summary['published_msgs_per_s']:>10.1f} msg/s"
        f"   (run total {summary['published_total']}, rejected {summary['rejected_total']})"
    )
    print(
        f"consumed:  {summary['consumed_msgs_per_s']:>10.1f} msg/s"
        f"   (run total {summary['consumed_total']}, left in queue {summary['backlog_at_end']})"
    )
    if summary["latency_samples"]:
        print(
            f"latency:   p50 {lat['p50']} ms  p95 {lat['p95']} ms  p99 {lat['p99']} ms"
            f"  (max {lat['max']} ms, {summary['latency_samples']} samples)"
        )
    else:
        print("latency:   no messages consumed in the measurement window")
    print(
        f"host:      1-min load {summary['host_load_1m_at_start']} at start,"
        f" {summary['host_cpus']} CPUs"
    )
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if cfg.json:
        config = {k: v for k, v in asdict(cfg).items() if k not in ("password", "json")}
        print(json.dumps({"config": config, "results": summary, "errors": problems}))


def exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds like Ctrl-C: workers stopped, queue deleted


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    cfg = parse_args(argv)
    load_at_start = os.getloadavg()[0]
    try:
        declare_queue(cfg)
    except Exception as exc:
        print(f"error: cannot declare queue on {cfg.host}:{cfg.port}: {exc!r}", file=sys.stderr)
        return 2
    try:
        window, results, problems = run_workers(cfg)
    except KeyboardInterrupt:
        print("interrupted; workers stopped", file=sys.stderr)
        return 130
    finally:
        backlog = delete_queue(cfg)
    if window is None:
        problems.insert(0, "workers did not all get ready; nothing was measured")
    print_report(cfg, summarize(window, results, backlog, load_at_start), problems)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
