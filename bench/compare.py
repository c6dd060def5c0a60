#!/usr/bin/env python3
"""Side-by-side benchmark of Warren and RabbitMQ with one command.

    python3 bench/compare.py                      # full matrix, 10 s runs, 3 repetitions
    python3 bench/compare.py --quick              # short runs, 1 repetition (a smoke test)
    python3 bench/compare.py --only latency-1000 --only startup --repeat 5

It compiles bench/java/PerfTest.java (RabbitMQ Java client) into a temporary directory,
starts a fresh Warren (tests/support/broker_process.py) and a fresh RabbitMQ node (own node name,
ports and data directory, loopback only), runs each scenario against both brokers in
alternation, and reports medians and the Warren/RabbitMQ ratio. Unless --no-docs is given it
rewrites the marked results section of docs/benchmarks.md and docs/benchmarks.png. Both
brokers are stopped at the end, whatever happens. See bench/README.md.
"""

import argparse
import datetime
import json
import os
import platform
import queue
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))   # tests.support

from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.rabbitmq_node import (HOST, RABBITMQ_SERVER, NodeError, RabbitInstance,  # noqa: E402
                                         free_port, wait_for_handshake)

PERFTEST_SOURCE = REPO / "bench" / "java" / "PerfTest.java"
JAVA_DIR = Path("/usr/share/java")
JARS = ("amqp-client.jar", "slf4j-api.jar", "slf4j-nop.jar")
DOCS_MD = REPO / "docs" / "benchmarks.md"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")   # units of /proc/PID/stat's CPU times
DOCS_PNG = REPO / "docs" / "benchmarks.png"
BEGIN_MARK = "<!-- bench/compare.py results: begin (generated, do not edit by hand) -->"
END_MARK = "<!-- bench/compare.py results: end -->"
BROKERS = ("warren", "rabbitmq")


class BenchError(NodeError):
    """A failure that ends the whole comparison (a broker did not start, a tool is missing)."""


# ---------------------------------------------------------------------------- scenarios

@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    kind: str                  # "perftest", "idle" (idle connections) or "startup"
    metric: str                # the headline figure (a key of a run's summary)
    unit: str
    higher_is_better: bool
    args: tuple = ()           # PerfTest arguments (kind "perftest")


SCENARIOS = (
    Scenario("1p1c-16b", "1 producer / 1 consumer, 16 B, transient, auto-ack",
             "perftest", "consumed_per_s", "msg/s", True,
             ("--producers", "1", "--consumers", "1", "--size", "16", "--autoack")),
    Scenario("1p1c-1kib", "1 producer / 1 consumer, 1 KiB, transient, auto-ack",
             "perftest", "consumed_per_s", "msg/s", True,
             ("--producers", "1", "--consumers", "1", "--size", "1024", "--autoack")),
    Scenario("1p1c-64kib", "1 producer / 1 consumer, 64 KiB, transient, auto-ack",
             "perftest", "consumed_per_s", "msg/s", True,
             ("--producers", "1", "--consumers", "1", "--size", "65536", "--autoack")),
    Scenario("confirm-1p", "persistent 1 KiB, durable queue, confirms (window 100), "
             "manual ack (prefetch 100), 1 publisher / 1 consumer",
             "perftest", "confirmed_per_s", "msg/s", True,
             ("--producers", "1", "--consumers", "1", "--size", "1024", "--persistent",
              "--confirm", "100", "--prefetch", "100")),
    Scenario("confirm-4p", "persistent 1 KiB, durable queue, confirms (window 100), "
             "manual ack (prefetch 100), 4 publishers / 1 consumer",
             "perftest", "confirmed_per_s", "msg/s", True,
             ("--producers", "4", "--consumers", "1", "--size", "1024", "--persistent",
              "--confirm", "100", "--prefetch", "100")),
    Scenario("4p4c-16b", "4 producers / 4 consumers, 16 B, transient, auto-ack",
             "perftest", "consumed_per_s", "msg/s", True,
             ("--producers", "4", "--consumers", "4", "--size", "16", "--autoack")),
    Scenario("get-loop", "basic.get + basic.ack loop, 1 consumer, 16 B, pre-filled queue",
             "perftest", "consumed_per_s", "msg/s", True,
             ("--producers", "0", "--consumers", "1", "--size", "16", "--get")),
    Scenario("latency-1000", "1 producer / 1 consumer, 16 B, auto-ack, fixed 1,000 msg/s: "
             "end-to-end latency", "perftest", "p99_ms", "ms (p99)", False,
             ("--producers", "1", "--consumers", "1", "--size", "16", "--autoack",
              "--rate", "1000")),
    Scenario("idle-1000", "1,000 idle connections: broker RSS per connection",
             "idle", "kib_per_connection", "KiB/connection", False),
    Scenario("startup", "start-up (fresh data directory) to the first AMQP handshake",
             "startup", "startup_s", "s", False),
)
SCENARIO_KEYS = tuple(s.key for s in SCENARIOS)
GET_PREFILL_PER_SECOND = 30_000   # get-loop: messages pre-filled per second of run (never run dry)


# ---------------------------------------------------------------------------- helpers

def log(message: str) -> None:
    print(f"[compare {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process (all its threads) used so far, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS   # utime, stime


def children_cpu_seconds() -> float:
    """User + system CPU of this process's finished children (PerfTest runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise BenchError(f"no VmRSS for pid {pid}")


# ---------------------------------------------------------------------------- brokers

class WarrenInstance:
    name = "Warren"

    def __init__(self, start_timeout: float):
        self.start_timeout = start_timeout
        self.data_dir = None
        self.process: BrokerProcess | None = None
        self.port = None
        self.startup_s = None
        self.server = {}

    def start(self) -> "WarrenInstance":
        self.data_dir = tempfile.mkdtemp(prefix="warren-compare-")
        self.process = BrokerProcess(data_dir=self.data_dir, port=free_port())
        started = time.perf_counter()
        try:
            self.process.start(timeout=self.start_timeout)
        except RuntimeError as error:
            raise BenchError(f"Warren did not start: {error}") from None
        self.port = self.process.port
        self.server = wait_for_handshake(self.port, self.alive, self.start_timeout, "Warren")
        self.startup_s = time.perf_counter() - started
        return self

    @property
    def pid(self):
        return self.process.process.pid if self.process and self.process.process else None

    def alive(self) -> bool:
        return bool(self.process and self.process.process and self.process.process.poll() is None)

    def log_tail(self, lines: int = 30) -> str:
        return "".join(self.process.log_lines[-lines:]) if self.process else ""

    def stop(self) -> None:
        try:
            if self.process is not None:
                try:
                    self.process.stop(timeout=30)
                except subprocess.TimeoutExpired:
                    log("Warren did not stop within 30 s after SIGTERM: killing it")
                    self.process.kill()
        finally:
            if self.data_dir:
                shutil.rmtree(self.data_dir, ignore_errors=True)
                self.data_dir = None




def new_instance(broker: str, args):
    if broker == "warren":
        return WarrenInstance(args.start_timeout)
    return RabbitInstance(args.start_timeout, args.rabbitmq_server, line="3.10")


# ---------------------------------------------------------------------------- PerfTest

class PerfTest:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        for tool in ("java", "javac"):
            if shutil.which(tool) is None:
                raise BenchError(f"{tool} not found: install a JDK (openjdk-17-jdk-headless)")
        missing = [jar for jar in JARS if not (JAVA_DIR / jar).exists()]
        if missing:
            raise BenchError(f"missing {', '.join(missing)} in {JAVA_DIR}: install Debian's "
                             "librabbitmq-client-java and libslf4j-java")
        self.classpath = ":".join([str(workdir)] + [str(JAVA_DIR / jar) for jar in JARS])
        result = subprocess.run(
            ["javac", "-nowarn", "-cp", self.classpath, "-d", str(workdir), str(PERFTEST_SOURCE)],
            capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise BenchError("javac failed:\n" + result.stdout + result.stderr)

    def command(self, *args) -> list:
        return ["java", "-Xmx2g", "-cp", self.classpath, "PerfTest", *map(str, args)]

    def run(self, port: int, args: tuple, timeout: float) -> tuple[dict | None, str]:
        """Runs one PerfTest; returns (final JSON or None, error text)."""
        try:
            result = subprocess.run(self.command("--host", HOST, "--port", port, *args),
                                    capture_output=True, text=True, timeout=timeout,
                                    stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None, f"PerfTest did not finish within {timeout:.0f} s"
        data = last_json(result.stdout)
        problems = []
        if data is None:
            problems.append(f"no JSON result (exit {result.returncode})")
        elif "error" in data:
            problems.append(data["error"])
            data = None
        else:
            problems += data.get("errors") or []
        if problems:
            tail = "\n".join(result.stderr.strip().splitlines()[-5:])
            return data, "; ".join(map(str, problems)) + (f"\n{tail}" if tail else "")
        return data, ""


def last_json(text: str):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def summarize_perftest(data: dict) -> dict:
    latency = data.get("latency_ms") or {}
    return {
        "published_per_s": data.get("published_per_s"),
        "consumed_per_s": data.get("consumed_per_s"),
        "confirmed_per_s": data.get("confirmed_per_s"),
        "p50_ms": latency.get("p50"),
        "p95_ms": latency.get("p95"),
        "p99_ms": latency.get("p99"),
        "backlog_at_end": data.get("backlog_at_end"),
        "empty_gets": data.get("empty_gets"),
        "blocked_events": data.get("blocked_events"),
        "nacked_total": data.get("nacked_total"),
    }


def measure_idle(perftest: PerfTest, instance, connections: int, settle: float) -> dict:
    """Broker RSS before and while `connections` idle connections (one JVM) are open."""
    time.sleep(settle)
    before = rss_kib(instance.pid)
    proc = subprocess.Popen(perftest.command("--host", HOST, "--port", instance.port,
                                             "--idle-connections", connections, "--hold", 300),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()

    def read(stream, sink):
        for line in stream:
            sink.put(line)
        sink.put(None)

    threading.Thread(target=read, args=(proc.stdout, lines), daemon=True).start()
    stderr_lines: list = []
    threading.Thread(target=lambda: stderr_lines.extend(proc.stderr), daemon=True).start()
    try:
        ready = None
        deadline = time.monotonic() + 120 + connections * 0.1
        while ready is None:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise BenchError("idle connections: not ready within the time limit") from None
            if line is None:
                raise BenchError("idle connections: PerfTest ended early: "
                                 + "".join(stderr_lines[-5:]).strip())
            data = last_json(line)
            if data and "error" in data:
                raise BenchError(f"idle connections: {data['error']}")
            if data and data.get("event") == "ready":
                ready = data
        time.sleep(settle)
        during = rss_kib(instance.pid)
        proc.stdin.write("release\n")
        proc.stdin.flush()
        proc.stdin.close()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return {"rss_before_mib": before / 1024, "rss_with_connections_mib": during / 1024,
            "kib_per_connection": (during - before) / connections,
            "open_seconds": ready.get("open_seconds")}


# ---------------------------------------------------------------------------- the run

@dataclass
class Results:
    runs: dict = field(default_factory=dict)      # (scenario, broker) -> [summary, ...]
    errors: list = field(default_factory=list)
    servers: dict = field(default_factory=dict)   # broker -> {"product", "version", ...}

    def add(self, scenario: str, broker: str, summary: dict) -> None:
        self.runs.setdefault((scenario, broker), []).append(summary)


def broker_order(index: int) -> tuple:
    return BROKERS if index % 2 == 0 else BROKERS[::-1]


def run_fresh_phase(args, perftest, selected, results: Results, live: list) -> None:
    """Start-up time and idle-connection RSS, each repetition on freshly started brokers."""
    want_startup = "startup" in selected
    want_idle = "idle-1000" in selected
    if not (want_startup or want_idle):
        return
    for rep in range(args.repeat):
        for broker in broker_order(rep):
            log(f"fresh {broker} (repetition {rep + 1}/{args.repeat})")
            instance = new_instance(broker, args)
            live.append(instance)
            try:
                instance.start()
                results.servers.setdefault(broker, instance.server)
                if want_startup:
                    results.add("startup", broker, {"startup_s": instance.startup_s,
                                                    "load_1m": os.getloadavg()[0]})
                    log(f"  startup {instance.startup_s:.3f} s")
                if want_idle:
                    load = os.getloadavg()[0]
                    try:
                        idle = measure_idle(perftest, instance, args.connections, args.settle)
                    except NodeError as error:
                        results.errors.append(f"idle-1000 {broker} run {rep + 1}: {error}")
                        log(f"  idle connections failed: {error}")
                    else:
                        idle["load_1m"] = load
                        results.add("idle-1000", broker, idle)
                        log(f"  idle: {idle['kib_per_connection']:.1f} KiB/connection "
                            f"(RSS {idle['rss_before_mib']:.1f} -> "
                            f"{idle['rss_with_connections_mib']:.1f} MiB)")
            finally:
                instance.stop()
                live.remove(instance)


def run_perftest_phase(args, perftest, selected, results: Results, live: list) -> None:
    scenarios = [s for s in SCENARIOS if s.kind == "perftest" and s.key in selected]
    if not scenarios:
        return
    instances = {}
    for broker in BROKERS:
        log(f"starting {broker} for the throughput scenarios")
        instance = new_instance(broker, args)
        live.append(instance)
        instance.start()
        instances[broker] = instance
        results.servers.setdefault(broker, instance.server)
        log(f"  {broker} on port {instance.port} (pid {instance.pid}, "
            f"start-up {instance.startup_s:.2f} s)")
    timeout = args.duration + 150
    step = 0
    for rep in range(args.repeat):
        for scenario in scenarios:
            for broker in broker_order(step):
                instance = instances[broker]
                if not instance.alive():
                    raise BenchError(f"{broker} is no longer running:\n{instance.log_tail()}")
                extra = ["--duration", args.duration, "--warmup", args.warmup]
                if scenario.key == "get-loop":
                    extra += ["--prefill", int(GET_PREFILL_PER_SECOND * args.duration)]
                load = os.getloadavg()[0]
                rss_before = rss_kib(instance.pid)
                cpu_before = (cpu_seconds(instance.pid), children_cpu_seconds(),
                              time.perf_counter())
                data, error = perftest.run(instance.port, scenario.args + tuple(extra), timeout)
                cpu_used = (cpu_seconds(instance.pid), children_cpu_seconds(),
                            time.perf_counter())
                label = f"{scenario.key} {broker} run {rep + 1}/{args.repeat}"
                if data is None:
                    results.errors.append(f"{label}: {error}")
                    log(f"{label}: FAILED: {error}")
                else:
                    summary = summarize_perftest(data)
                    summary["load_1m"] = load
                    summary["rss_before_mib"] = rss_before / 1024
                    summary.update(cpu_shares(cpu_before, cpu_used))
                    if error:
                        summary["error"] = error
                        results.errors.append(f"{label}: {error}")
                    results.add(scenario.key, broker, summary)
                    value = summary.get(scenario.metric)
                    log(f"{label}: {scenario.metric} = {fmt_value(value)} "
                        f"(published {fmt_value(summary['published_per_s'])}/s, "
                        f"consumed {fmt_value(summary['consumed_per_s'])}/s, "
                        f"p99 {fmt_value(summary['p99_ms'])} ms, "
                        f"backlog {summary['backlog_at_end']}, "
                        f"CPU broker {summary['broker_cores']:.2f} / client "
                        f"{summary['client_cores']:.2f} cores, load {load:.1f})"
                        + (f" ERRORS: {error}" if error else ""))
                time.sleep(args.pause)
            step += 1


def cpu_shares(before: tuple, after: tuple) -> dict:
    """CPU of the broker and of the client (the PerfTest JVM) over one run, in cores
    (1.0 = one CPU busy the whole time): which side a scenario's rate is bound by. The
    client's includes its JVM start-up and warm-up, the broker's its share of them."""
    wall = after[2] - before[2]
    return {"broker_cores": (after[0] - before[0]) / wall,
            "client_cores": (after[1] - before[1]) / wall}


# ---------------------------------------------------------------------------- reporting

def fmt_value(value, digits=None) -> str:
    if value is None:
        return "–"
    if isinstance(value, int) and digits is None:
        return f"{value:,}"
    value = float(value)
    if digits is not None:
        return f"{value:,.{digits}f}"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def median_of(runs: list, key: str):
    values = [run[key] for run in runs if run.get(key) is not None]
    return statistics.median(values) if values else None


def spread_of(runs: list, key: str):
    values = [run[key] for run in runs if run.get(key) is not None]
    return (min(values), max(values)) if values else None


def cell(runs: list, key: str) -> str:
    median = median_of(runs, key)
    if median is None:
        return "–"
    low, high = spread_of(runs, key)
    if len(runs) > 1 and low != high:
        return f"{fmt_value(median)} ({fmt_value(low)}–{fmt_value(high)})"
    return fmt_value(median)


def ratio_text(scenario: Scenario, warren, rabbit) -> str:
    if warren is None or rabbit is None or rabbit == 0:
        return "–"
    ratio = warren / rabbit
    better = ratio > 1 if scenario.higher_is_better else ratio < 1
    if abs(ratio - 1) < 0.05:
        verdict = "about even"
    else:
        verdict = "Warren better" if better else "RabbitMQ better"
    return f"{ratio:.2f} ({verdict})"


def machine_info() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    java_line = java.splitlines()[0] if java else "java ?"
    os_name = platform.platform()
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "mem_gib": mem_gib, "os": os_name,
            "kernel": platform.release(), "python": platform.python_version(),
            "java": java_line, "client": client_version(), "warren_build": warren_build()}


def warren_build() -> str:
    """Which build of Warren the brokers run ("compiled (mypyc)", "pure Python"): asked
    of the interpreter, path and directory the brokers start with (`python -m broker`)."""
    result = subprocess.run(
        [sys.executable, "-c", "from broker.build import build_kind; print(build_kind())"],
        capture_output=True, text=True)
    return result.stdout.strip() or "unknown build"


def client_version() -> str:
    """The RabbitMQ Java client's version, from its jar's manifest."""
    try:
        with zipfile.ZipFile(JAVA_DIR / "amqp-client.jar") as jar:
            manifest = jar.read("META-INF/MANIFEST.MF").decode(errors="replace")
        match = re.search(r"^(?:Bundle-Version|Implementation-Version): *(\S+)", manifest,
                          flags=re.MULTILINE)
        return f"RabbitMQ Java client {match.group(1)}" if match else "RabbitMQ Java client"
    except (OSError, KeyError, zipfile.BadZipFile):
        return "RabbitMQ Java client"


def server_label(results: Results, broker: str) -> str:
    server = results.servers.get(broker) or {}
    product = "Warren" if broker == "warren" else "RabbitMQ"
    version = server.get("version")
    return f"{product} {version}" if version else product


def render_markdown(args, results: Results, selected, machine: dict, load_start, load_end,
                    started: datetime.datetime, elapsed: float, chart_name: str | None) -> str:
    warren, rabbit = server_label(results, "warren"), server_label(results, "rabbitmq")
    lines = [BEGIN_MARK, "", f"## Side-by-side results ({started:%Y-%m-%d}, bench/compare.py)", ""]
    lines.append(
        f"`python3 bench/compare.py{args.command_suffix}`: {warren} and {rabbit}, each started "
        f"fresh on loopback by the script, driven by bench/java/PerfTest.java "
        f"({machine['client']}, one connection per producer and per consumer thread, all in "
        f"one JVM). Runs alternate between the brokers; "
        + (f"each cell is the median of {args.repeat} runs (min–max in parentheses)"
           if args.repeat > 1 else "one run per cell")
        + f" of {args.duration:g} s with the first {args.warmup:g} s excluded. "
        f"Generated in {elapsed / 60:.1f} min.")
    lines.append("")
    mem = f", {machine['mem_gib']:.0f} GiB RAM" if machine["mem_gib"] else ""
    lines.append(
        f"Machine: {machine['nproc']} CPUs ({machine['cpu'] or 'unknown model'}){mem}, "
        f"{machine['os']} (Linux {machine['kernel']}), Python {machine['python']}, "
        f"{machine['java']}; Warren's build: {machine.get('warren_build', 'unknown')} "
        f"(docs/install.md). Load average (1/5/15 min) at the start "
        f"{'/'.join(f'{x:.2f}' for x in load_start)}, at the end "
        f"{'/'.join(f'{x:.2f}' for x in load_end)}. The clients run on the same CPUs as "
        f"the broker under test.")
    lines.append("")
    lines.append(f"| scenario | figure | {warren} | {rabbit} | Warren / RabbitMQ |")
    lines.append("|---|---|---|---|---|")
    for scenario in SCENARIOS:
        if scenario.key not in selected:
            continue
        w_runs = results.runs.get((scenario.key, "warren"), [])
        r_runs = results.runs.get((scenario.key, "rabbitmq"), [])
        direction = "higher is better" if scenario.higher_is_better else "lower is better"
        ratio = ratio_text(scenario, median_of(w_runs, scenario.metric),
                           median_of(r_runs, scenario.metric))
        lines.append(
            f"| `{scenario.key}`: {scenario.title} | {scenario_figure(scenario)}, {direction} | "
            f"{cell(w_runs, scenario.metric)} | {cell(r_runs, scenario.metric)} | {ratio} |")
    lines.append("")
    detail = [s for s in SCENARIOS if s.kind == "perftest" and s.key in selected]
    if detail:
        lines.append("Details of the PerfTest scenarios (medians; latency is end-to-end, "
                     "publish to delivery; the backlog is what was left in the queue at the end):")
        lines.append("")
        lines.append("| scenario | broker | published msg/s | consumed msg/s | confirmed msg/s "
                     "| p50 ms | p95 ms | p99 ms | backlog at end | CPU broker / client (cores) "
                     "| runs (1-min load) |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for scenario in detail:
            for broker in BROKERS:
                runs = results.runs.get((scenario.key, broker), [])
                loads = ", ".join(f"{run['load_1m']:.1f}" for run in runs)
                lines.append(
                    f"| `{scenario.key}` | {server_label(results, broker)} | "
                    f"{fmt_cell(runs, 'published_per_s')} | {fmt_cell(runs, 'consumed_per_s')} | "
                    f"{fmt_cell(runs, 'confirmed_per_s')} | {fmt_cell(runs, 'p50_ms')} | "
                    f"{fmt_cell(runs, 'p95_ms')} | {fmt_cell(runs, 'p99_ms')} | "
                    f"{fmt_cell(runs, 'backlog_at_end')} | "
                    f"{fmt_value(median_of(runs, 'broker_cores'), 2)} / "
                    f"{fmt_value(median_of(runs, 'client_cores'), 2)} | {len(runs)} ({loads}) |")
        lines.append("")
    idle = [(b, results.runs.get(("idle-1000", b), [])) for b in BROKERS]
    if "idle-1000" in selected and any(runs for _, runs in idle):
        parts = []
        for broker, runs in idle:
            if runs:
                parts.append(f"{server_label(results, broker)} "
                             f"{fmt_value(median_of(runs, 'rss_before_mib'))} → "
                             f"{fmt_value(median_of(runs, 'rss_with_connections_mib'))} MiB")
        lines.append(f"Idle connections: {args.connections:,} AMQP connections (no channels, "
                     f"no heartbeats) opened from one JVM against a freshly started broker; "
                     f"broker RSS (VmRSS, RabbitMQ: beam.smp) before → with them: "
                     + "; ".join(parts) + ".")
        lines.append("")
    if "startup" in selected:
        lines.append("Start-up: from spawning the broker (fresh, empty data directory) to the "
                     "first completed AMQP handshake (pika, connection.open-ok), polled every "
                     "10 ms. RabbitMQ's first boot includes creating its Mnesia schema.")
        lines.append("")
    if any(s.key == "get-loop" for s in detail):
        lines.append(f"`get-loop`: the queue is pre-filled with {GET_PREFILL_PER_SECOND:,} "
                     f"messages per second of run before the start, then one consumer loops "
                     f"basic.get + basic.ack; its latency columns measure time spent in the "
                     f"queue, not the broker's speed.")
        lines.append("")
    lines.append("Unpaced rows measure capacity: when producers outrun consumers the queue grows "
                 "and latency is queueing delay, so compare consumed (or confirmed) msg/s there "
                 "and take latency from `latency-1000`.")
    lines.append("")
    if results.errors:
        lines.append("Errors during the run:")
        lines.append("")
        for error in results.errors:
            lines.append(f"- {error.splitlines()[0]}")
        lines.append("")
    if chart_name:
        lines.append(f"![Warren and RabbitMQ side by side]({chart_name})")
        lines.append("")
    lines.append(END_MARK)
    return "\n".join(lines) + "\n"


def fmt_cell(runs, key):
    return fmt_value(median_of(runs, key))


def scenario_figure(scenario: Scenario) -> str:
    return {"consumed_per_s": "consumed msg/s", "confirmed_per_s": "confirmed msg/s",
            "p99_ms": "p99 latency ms", "kib_per_connection": "RSS KiB per connection",
            "startup_s": "seconds"}[scenario.metric]


def update_docs(path: Path, section: str, begin_mark: str = BEGIN_MARK,
                end_mark: str = END_MARK) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    if begin_mark in text and end_mark in text:
        head, rest = text.split(begin_mark, 1)
        tail = rest.split(end_mark, 1)[1]
        text = head + section.rstrip("\n") + tail
    else:
        # First run: the section goes before the first level-2 heading (after the intro).
        match = re.search(r"^## ", text, flags=re.MULTILINE)
        if match:
            text = text[:match.start()] + section + "\n" + text[match.start():]
        else:
            text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def draw_chart(path: Path, results: Results, selected, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [s for s in SCENARIOS if s.key in selected
             and any(results.runs.get((s.key, b)) for b in BROKERS)]
    if not shown:
        return
    columns = 4 if len(shown) > 6 else min(3, len(shown))
    rows = (len(shown) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    colors = {"warren": "#2b7bba", "rabbitmq": "#f28e2b"}
    for ax in axes.flat[len(shown):]:
        ax.axis("off")
    for ax, scenario in zip(axes.flat, shown):
        medians, errors, labels = [], [[], []], []
        for broker in BROKERS:
            runs = results.runs.get((scenario.key, broker), [])
            median = median_of(runs, scenario.metric)
            spread = spread_of(runs, scenario.metric)
            medians.append(median or 0)
            errors[0].append((median - spread[0]) if median is not None else 0)
            errors[1].append((spread[1] - median) if median is not None else 0)
            labels.append(server_label(results, broker))
        bars = ax.bar(labels, medians, yerr=errors, capsize=4,
                      color=[colors[b] for b in BROKERS])
        for bar, value, above in zip(bars, medians, errors[1]):
            ax.annotate(fmt_value(value), (bar.get_x() + bar.get_width() / 2, value + above),
                        ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points")
        arrow = "↑ better" if scenario.higher_is_better else "↓ better"
        ratio = (f" (Warren/RabbitMQ {medians[0] / medians[1]:.2f})"
                 if medians[0] and medians[1] else "")
        ax.set_title(scenario.key + ratio, fontsize=10)
        ax.set_ylabel(f"{scenario.unit} ({arrow})", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.margins(y=0.15)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def print_summary(results: Results, selected) -> None:
    print()
    print(f"{'scenario':<14} {'figure':<24} {'Warren':>14} {'RabbitMQ':>14}  Warren/RabbitMQ")
    for scenario in SCENARIOS:
        if scenario.key not in selected:
            continue
        w = median_of(results.runs.get((scenario.key, "warren"), []), scenario.metric)
        r = median_of(results.runs.get((scenario.key, "rabbitmq"), []), scenario.metric)
        print(f"{scenario.key:<14} {scenario_figure(scenario):<24} {fmt_value(w):>14} "
              f"{fmt_value(r):>14}  {ratio_text(scenario, w, r)}")
    for error in results.errors:
        print(f"error: {error}")


# ---------------------------------------------------------------------------- main

def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Warren vs RabbitMQ side by side (bench/java/PerfTest.java).",
        epilog="scenarios: " + ", ".join(SCENARIO_KEYS))
    parser.add_argument("--duration", type=float, help="seconds per run (default 10; --quick: 3)")
    parser.add_argument("--warmup", type=float,
                        help="seconds excluded at the start of each run "
                             "(default 10%% of --duration)")
    parser.add_argument("--repeat", type=int,
                        help="runs per scenario and broker (default 3; --quick: 1)")
    parser.add_argument("--only", action="append", metavar="SCENARIO",
                        help="run only this scenario (repeatable, or comma-separated)")
    parser.add_argument("--quick", action="store_true", help="short runs, one repetition")
    parser.add_argument("--connections", type=int, default=1000,
                        help="idle connections for idle-1000 (default 1000)")
    parser.add_argument("--no-docs", action="store_true",
                        help="do not write docs/benchmarks.md and docs/benchmarks.png")
    parser.add_argument("--docs", type=Path, default=DOCS_MD, help="markdown file to update")
    parser.add_argument("--chart", type=Path, default=DOCS_PNG, help="PNG chart to write")
    parser.add_argument("--json", type=Path,
                        help="also write every run's figures to this JSON file")
    parser.add_argument("--rabbitmq-server", default=RABBITMQ_SERVER,
                        help=f"RabbitMQ start script (default {RABBITMQ_SERVER})")
    parser.add_argument("--start-timeout", type=float, default=90.0,
                        help="seconds allowed for a broker to accept its first connection")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between runs")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds to wait before reading RSS in idle-1000")
    args = parser.parse_args(argv)
    args.duration = args.duration if args.duration is not None else (3.0 if args.quick else 10.0)
    args.repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)
    args.warmup = args.warmup if args.warmup is not None else round(args.duration * 0.1, 3)
    if args.duration <= 0 or not 0 <= args.warmup < args.duration:
        parser.error("need --duration > 0 and 0 <= --warmup < --duration")
    if args.repeat < 1 or args.connections < 1:
        parser.error("--repeat and --connections must be >= 1")
    selected = []
    for item in args.only or SCENARIO_KEYS:
        for key in filter(None, (part.strip() for part in item.split(","))):
            if key not in SCENARIO_KEYS:
                parser.error(f"unknown scenario {key!r}; choose from {', '.join(SCENARIO_KEYS)}")
            if key not in selected:
                selected.append(key)
    args.selected = selected
    suffix = [a for a in (argv if argv is not None else sys.argv[1:])]
    args.command_suffix = (" " + " ".join(suffix)) if suffix else ""
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    os.chdir(REPO)            # BrokerProcess runs `python -m broker` from the work tree
    selected = args.selected
    if not args.no_docs:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("compare.py: matplotlib is needed for the chart (pip install matplotlib), "
                  "or pass --no-docs", file=sys.stderr)
            return 2
    try:
        import pika  # noqa: F401
    except ImportError:
        print("compare.py: pika is needed for the start-up probe (pip install pika)",
              file=sys.stderr)
        return 2

    if not os.access(args.rabbitmq_server, os.X_OK):
        print(f"compare.py: {args.rabbitmq_server} not found: install Debian's rabbitmq-server "
              "(or pass --rabbitmq-server)", file=sys.stderr)
        return 2

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    started = datetime.datetime.now()
    clock = time.monotonic()
    load_start = os.getloadavg()
    results = Results()
    live: list = []
    workdir = Path(tempfile.mkdtemp(prefix="perftest-classes-"))
    status = 0
    try:
        log("compiling PerfTest.java")
        perftest = PerfTest(workdir)
        run_fresh_phase(args, perftest, selected, results, live)
        run_perftest_phase(args, perftest, selected, results, live)
    except NodeError as error:
        print(f"compare.py: {error}", file=sys.stderr)
        results.errors.append(str(error))
        status = 1
    except KeyboardInterrupt:
        print("compare.py: interrupted", file=sys.stderr)
        status = 130
    finally:
        for instance in list(live):
            log(f"stopping {instance.name}")
            try:
                instance.stop()
            except Exception as error:   # keep stopping the others
                print(f"compare.py: stopping {instance.name} failed: {error!r}", file=sys.stderr)
        shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - clock
    load_end = os.getloadavg()
    print_summary(results, selected)
    if args.json:
        args.json.write_text(json.dumps({
            "started": started.isoformat(timespec="seconds"), "machine": machine_info(),
            "load_start": load_start, "load_end": load_end, "servers": results.servers,
            "duration": args.duration, "warmup": args.warmup, "repeat": args.repeat,
            "runs": {f"{s}/{b}": runs for (s, b), runs in results.runs.items()},
            "errors": results.errors}, indent=1))
    if status == 0 and not args.no_docs:
        machine = machine_info()
        chart_name = None
        try:
            draw_chart(args.chart, results, selected,
                       f"Warren vs RabbitMQ, {started:%Y-%m-%d}, {machine['nproc']} CPUs "
                       f"(median of {args.repeat}, bars: min–max)")
            chart_name = os.path.relpath(args.chart, args.docs.parent)
        except Exception as error:
            print(f"compare.py: chart not written: {error!r}", file=sys.stderr)
        section = render_markdown(args, results, selected, machine, load_start, load_end,
                                  started, elapsed, chart_name)
        update_docs(args.docs, section)
        log(f"wrote {args.docs}" + (f" and {args.chart}" if chart_name else ""))
    elif status != 0:
        log("docs not written: the run did not complete")
    if results.errors and status == 0:
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
