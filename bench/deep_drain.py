#!/usr/bin/env python3
"""Drain a deep durable queue whose message bodies are on disk only.

    python3 bench/deep_drain.py                       # 1,000,000 x 1 KiB, page cache warm
    python3 bench/deep_drain.py --cold --repeat 3     # page cache dropped (root)
    python3 bench/deep_drain.py --count 100000 --repeat 1 --get-count 5000   # quick

It starts Warren (tests/support/broker_process.py) on a free port with its own data directory,
fills a durable queue with --count persistent messages of --size bytes (publisher
confirms) and a second one with --get-count, and stops the broker cleanly. That data
directory is kept as it is. Each repetition copies it, starts a broker on the copy (the
restart recovers the queues without their bodies: a body is read back from its queue
file when it is delivered), optionally drops the page cache (--cold), then drains the
first queue with one consumer (prefetch, multiple acks) and the second with basic.get +
basic.ack. It prints each run to stderr and the medians as a Markdown table.

The broker code is the `broker` package found on PYTHONPATH (the broker runs from a
temporary directory, so the current directory does not shadow it); without PYTHONPATH,
the tree this script belongs to. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

import pika
import pika.exceptions

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))   # tests.support

from tests.support.broker_process import BrokerProcess  # noqa: E402
from stream_throughput import (  # noqa: E402  (bench/ is on sys.path when run as a script)
    BenchError, Config, ReadResult, admin, close_quietly, declare, publish_run, read_run,
    timed,
)

QUEUE = "deep-drain"
GET_QUEUE = "deep-drain-get"
DROP_CACHES = "/proc/sys/vm/drop_caches"
MIB = 1024 * 1024
NS_PER_S = 1_000_000_000
STOP_TIMEOUT_S = 120.0     # a clean stop syncs the queue files
START_TIMEOUT_S = 600.0    # a restart replays every segment of a deep queue


class SetupError(Exception):
    """The measurement cannot start (no broker code, page cache cannot be dropped, fill
    failed)."""


@dataclass
class RunResult:
    load_1m: float             # load average when the run started
    recovery_s: float          # broker start on the copied data to listening
    rss_mib: float             # broker RSS once the queues are recovered
    consume_per_s: float
    broker_cpu_share: float    # broker CPU seconds / wall seconds during the consume drain
    client_cpu_share: float    # the same for the consumer (this process)
    broker_cpu_us_per_msg: float   # broker CPU time of the consume drain per message
    disk_read_mib: float       # the broker's reads from the block device during it
    get_per_s: float | None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000,
                        help="messages in the queue drained by the consumer")
    parser.add_argument("--size", type=int, default=1024, help="body size in bytes")
    parser.add_argument("--get-count", type=int, default=20_000,
                        help="messages in the queue drained with basic.get (0: skip)")
    parser.add_argument("--repeat", type=int, default=3, help="drains (the table shows medians)")
    parser.add_argument("--cold", action="store_true",
                        help="drop the page cache after each restart (needs root)")
    parser.add_argument("--prefetch", type=int, default=1000, help="basic.qos prefetch count")
    parser.add_argument("--ack-every", type=int, default=100, metavar="K",
                        help="the consumer acks with multiple=true every K messages")
    parser.add_argument("--confirm-window", type=int, default=500, metavar="N",
                        help="most unconfirmed publishes in flight while filling")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds allowed for one fill or one drain")
    parser.add_argument("--work-dir", help="where the data directories go (default: $TMPDIR)")
    parser.add_argument("--json", metavar="FILE", help="also write every run's figures here")
    args = parser.parse_args(argv)
    errors = []
    if args.count < 1 or args.repeat < 1 or args.get_count < 0:
        errors.append("--count and --repeat must be >= 1, --get-count >= 0")
    if args.size < 0:
        errors.append("--size must be >= 0")
    if not 1 <= args.prefetch <= 65535:
        errors.append("--prefetch must be in 1..65535")
    if not 1 <= args.ack_every <= args.prefetch:
        errors.append("--ack-every must be in 1..--prefetch (a larger value would stall)")
    if args.confirm_window < 1 or args.timeout <= 0:
        errors.append("--confirm-window and --timeout must be > 0")
    if errors:
        parser.error("; ".join(errors))
    if args.json:
        args.json = os.path.abspath(args.json)     # the script changes directory
    return args


def client_config(args: argparse.Namespace, port: int, count: int) -> Config:
    """stream_throughput's client settings, which its publisher and reader take."""
    return Config(host="127.0.0.1", port=port, count=count, size=args.size,
                  confirm_window=args.confirm_window, prefetch=args.prefetch,
                  ack_every=args.ack_every, repeat=1, two_readers=False, markdown=False,
                  timeout=args.timeout, user="guest", password="guest", vhost="/")


# --------------------------------------------------------------------------- broker


def locate_broker_code() -> str:
    """The tree whose `broker` package the broker subprocess runs: PYTHONPATH's, or this
    script's tree when PYTHONPATH is not set (rather than one installed in the venv). Call
    it from a directory that holds no `broker` package."""
    if not os.environ.get("PYTHONPATH"):
        os.environ["PYTHONPATH"] = str(REPO)
    probe = [sys.executable, "-c", "import broker; print(broker.__file__)"]
    found = subprocess.run(probe, capture_output=True, text=True)
    if found.returncode != 0:
        raise SetupError(f"cannot import Warren's broker package: {found.stderr.strip()}")
    return str(Path(found.stdout.strip()).parents[1])


def start_broker(data_dir: str) -> tuple[BrokerProcess, float]:
    broker = BrokerProcess(data_dir=data_dir)
    started = time.perf_counter()
    try:
        broker.start(timeout=START_TIMEOUT_S)
    except RuntimeError as error:
        raise BenchError(str(error)) from None
    return broker, time.perf_counter() - started


def stop_broker(broker: BrokerProcess) -> None:
    """SIGTERM and wait for a clean exit (the queue files are synced and closed)."""
    try:
        code = broker.stop(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        broker.kill()
        raise BenchError(f"the broker did not stop within {STOP_TIMEOUT_S:g} s") from None
    if code != 0:
        raise BenchError(f"the broker exited with {code} on SIGTERM:\n"
                         + "".join(broker.log_lines[-20:]))


def proc_stat_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime + stime


def disk_read_bytes(pid: int) -> int:
    """Bytes the process caused to be read from storage (page-cache hits excluded)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    raise BenchError(f"no read_bytes for pid {pid}")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise BenchError(f"no VmRSS for pid {pid}")


def drop_page_cache() -> None:
    os.sync()
    try:
        with open(DROP_CACHES, "w") as control:
            control.write("3\n")
    except OSError as error:
        raise SetupError(f"--cold: cannot write {DROP_CACHES} ({error}); run as root "
                         f"on a host (not a container) that allows it") from None


# --------------------------------------------------------------------------- phases


def fill(args: argparse.Namespace, data_dir: str) -> None:
    """A fresh broker, both queues filled with confirmed persistent messages, a clean
    stop."""
    broker, _ = start_broker(data_dir)
    try:
        for queue, count in ((QUEUE, args.count), (GET_QUEUE, args.get_count)):
            cfg = client_config(args, broker.port, count)
            declare(cfg, queue, "classic")
            if count:
                started = time.perf_counter()
                rate = timed(cfg, publish_run(cfg, queue))
                log(f"filled {queue}: {count:,} x {args.size} B in "
                    f"{time.perf_counter() - started:.1f} s ({rate:,.0f} msg/s)")
    finally:
        stop_broker(broker)


def queue_depth(cfg: Config, queue: str) -> int:
    connection, channel = admin(cfg)
    try:
        return channel.queue_declare(queue, durable=True, passive=True).method.message_count
    finally:
        close_quietly(connection)


def expect_depth(cfg: Config, queue: str, expected: int, when: str) -> None:
    depth = queue_depth(cfg, queue)
    if depth != expected:
        raise BenchError(f"{queue} holds {depth:,} messages {when}, expected {expected:,}")


def consume_drain(args: argparse.Namespace, broker: BrokerProcess) -> tuple:
    """Drain the deep queue with one consumer; returns (msg/s, broker and client CPU
    shares, broker CPU µs per message, MiB the broker read from disk)."""
    cfg = client_config(args, broker.port, args.count)
    pid = broker.process.pid
    broker_cpu, client_cpu = proc_stat_cpu_s(pid), time.process_time()
    disk_read = disk_read_bytes(pid)
    started = time.perf_counter()
    result = cast(ReadResult, timed(cfg, read_run(cfg, QUEUE, False, None)))
    wall = time.perf_counter() - started
    broker_cpu = proc_stat_cpu_s(pid) - broker_cpu
    broker_share = broker_cpu / wall
    client_share = (time.process_time() - client_cpu) / wall
    disk_read_mib = (disk_read_bytes(pid) - disk_read) / MIB
    expect_depth(cfg, QUEUE, 0, "after the drain")
    rate = args.count * NS_PER_S / max(result.finished_ns - result.started_ns, 1)
    return rate, broker_share, client_share, broker_cpu * 1e6 / args.count, disk_read_mib


def get_drain(args: argparse.Namespace, broker: BrokerProcess) -> float:
    """basic.get + basic.ack until the second queue is empty; returns msg/s."""
    connection, channel = admin(client_config(args, broker.port, args.get_count))
    try:
        started = time.perf_counter()
        for got in range(args.get_count):
            method, _properties, _body = channel.basic_get(GET_QUEUE)
            if method is None:
                raise BenchError(f"{GET_QUEUE} was empty after {got:,} of "
                                 f"{args.get_count:,} basic.get")
            channel.basic_ack(method.delivery_tag)
        return args.get_count / (time.perf_counter() - started)
    finally:
        close_quietly(connection)


def one_run(args: argparse.Namespace, filled_dir: str, run_dir: str) -> RunResult:
    """A restart on a copy of the filled data directory, then both drains."""
    shutil.copytree(filled_dir, run_dir)
    try:
        os.sync()       # the copy's writeback does not overlap the drain
        load = os.getloadavg()[0]
        broker, recovery_s = start_broker(run_dir)
        try:
            return RunResult(load, recovery_s, *drain(args, broker))
        finally:
            stop_broker(broker)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def drain(args: argparse.Namespace, broker: BrokerProcess) -> tuple:
    """(RSS after recovery, the consume drain's figures, basic.get msg/s)."""
    cfg = client_config(args, broker.port, args.count)
    expect_depth(cfg, QUEUE, args.count, "after the restart")
    expect_depth(cfg, GET_QUEUE, args.get_count, "after the restart")
    rss = rss_mib(broker.process.pid)
    if args.cold:
        drop_page_cache()   # after the recovery, which reads every segment
    consume = consume_drain(args, broker)
    get_per_s = get_drain(args, broker) if args.get_count else None
    if broker.process.poll() is not None:
        raise BenchError(f"the broker exited with {broker.process.returncode}")
    return rss, *consume, get_per_s


# --------------------------------------------------------------------------- report


def log(message: str) -> None:
    print(f"[deep_drain {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def describe_run(index: int, run: RunResult, size: int) -> str:
    get = f"{run.get_per_s:,.0f} msg/s" if run.get_per_s is not None else "skipped"
    return (f"run {index}: consume {run.consume_per_s:,.0f} msg/s "
            f"({run.consume_per_s * size / MIB:,.1f} MiB/s, CPU broker "
            f"{run.broker_cpu_share:.0%} client {run.client_cpu_share:.0%}, broker "
            f"{run.broker_cpu_us_per_msg:.1f} µs/msg, disk read "
            f"{run.disk_read_mib:,.0f} MiB), basic.get {get}, recovery {run.recovery_s:.1f} s, "
            f"RSS {run.rss_mib:,.0f} MiB, load {run.load_1m:.1f}")


def median_cell(values: list[float], digits: int = 0) -> str:
    middle = f"{statistics.median(values):,.{digits}f}"
    if len(values) == 1:
        return middle
    return f"{middle} ({min(values):,.{digits}f}–{max(values):,.{digits}f})"


HEADER = ("| drain | messages | consume msg/s | consume MiB/s | CPU broker / client "
          "| broker CPU µs/msg | disk read MiB | basic.get msg/s | recovery s "
          "| RSS after recovery MiB | runs (load) |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


def markdown_row(args: argparse.Namespace, runs: list[RunResult]) -> str:
    rates = [run.consume_per_s for run in runs]
    gets = [run.get_per_s for run in runs if run.get_per_s is not None]
    cells = [
        "cold" if args.cold else "warm",
        f"{args.count:,} x {args.size} B (get: {args.get_count:,})",
        median_cell(rates),
        median_cell([rate * args.size / MIB for rate in rates], 1),
        f"{statistics.median(run.broker_cpu_share for run in runs):.0%} / "
        f"{statistics.median(run.client_cpu_share for run in runs):.0%}",
        median_cell([run.broker_cpu_us_per_msg for run in runs], 1),
        median_cell([run.disk_read_mib for run in runs]),
        median_cell(gets) if gets else "–",
        median_cell([run.recovery_s for run in runs], 1),
        median_cell([run.rss_mib for run in runs]),
        f"{len(runs)} ({','.join(f'{run.load_1m:.1f}' for run in runs)})",
    ]
    return "| " + " | ".join(cells) + " |"


def write_json(path: str, args: argparse.Namespace, broker_code: str, runs: list,
               errors: list) -> None:
    report = {"config": vars(args), "broker_code": broker_code, "cpus": os.cpu_count(),
              "runs": [asdict(run) for run in runs], "errors": errors}
    Path(path).write_text(json.dumps(report, indent=2) + "\n")


# --------------------------------------------------------------------------- main


def exit_on_sigterm(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)      # unwinds like Ctrl-C: brokers stopped, data removed


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    args = parse_args(argv)
    if args.cold and not os.access(DROP_CACHES, os.W_OK):
        print(f"error: --cold needs to write {DROP_CACHES} (root)", file=sys.stderr)
        return 2
    home = os.getcwd()
    work = tempfile.mkdtemp(prefix="warren-deep-drain-", dir=args.work_dir)
    runs: list[RunResult] = []
    errors: list[str] = []
    try:
        os.chdir(work)      # `python -m broker` must not pick up a tree in the cwd
        broker_code = locate_broker_code()
        log(f"Warren from {broker_code}; data in {work}")
        filled = os.path.join(work, "filled")
        try:
            fill(args, filled)
        except (BenchError, pika.exceptions.AMQPError) as error:
            raise SetupError(f"fill failed: {error!r}") from None
        for index in range(1, args.repeat + 1):
            try:
                runs.append(one_run(args, filled, os.path.join(work, "run")))
                log(describe_run(index, runs[-1], args.size))
            except (BenchError, pika.exceptions.AMQPError) as error:
                errors.append(f"run {index}: {error!r}")
                log(f"run {index}: error: {error}")
    except SetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        os.chdir(home)
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        write_json(args.json, args, broker_code, runs, errors)
    if runs:
        print(f"Warren ({broker_code}), {os.cpu_count()} CPUs: one consumer, prefetch "
              f"{args.prefetch}, ack every {args.ack_every} (multiple); basic.get + basic.ack")
        print(HEADER)
        print(markdown_row(args, runs))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
