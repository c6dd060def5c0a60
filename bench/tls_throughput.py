#!/usr/bin/env python3
"""Throughput over TLS beside plain AMQP, for Warren and RabbitMQ, with one command.

    python3 bench/tls_throughput.py                 # 10 s runs, 3 repetitions
    python3 bench/tls_throughput.py --quick         # 3 s runs, 1 repetition (a smoke test)

It makes certificates with trustme (tests/support/tls_support.py), starts a fresh
Warren (plain port and --tls-port) and a fresh RabbitMQ node with a TLS listener
(bench/compare.py's RabbitInstance: own node name, ports and data directory, loopback
only), and runs bench/java/PerfTest.java (the same client, `--tls-ca` for amqps) for
each scenario on each broker, plain and TLS, alternating the order. Unless --no-docs is
given it rewrites its marked section of docs/benchmarks.md. Both brokers are stopped at
the end, whatever happens.
"""

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.append(str(REPO))   # tests.support

import compare  # noqa: E402
from compare import (HOST, BenchError, BrokerProcess, PerfTest, RabbitInstance,  # noqa: E402
                     free_port, log, machine_info, summarize_perftest, update_docs)
from tests.support.tls_support import make_pki  # noqa: E402

DOCS_MD = REPO / "docs" / "benchmarks.md"
BEGIN_MARK = "<!-- bench/tls_throughput.py results: begin (generated, do not edit by hand) -->"
END_MARK = "<!-- bench/tls_throughput.py results: end -->"
SCENARIOS = {s.key: s for s in compare.SCENARIOS
             if s.key in ("1p1c-16b", "1p1c-1kib", "1p1c-64kib")}
TRANSPORTS = ("plain", "tls")


class TlsWarren:
    """Warren with a plain and a TLS listener on free ports."""

    name = "Warren"

    def __init__(self, pki: Path, start_timeout: float):
        self.pki = pki
        self.start_timeout = start_timeout
        self.workdir = Path(tempfile.mkdtemp(prefix="warren-tls-bench-"))
        self.process: BrokerProcess | None = None

    def start(self) -> "TlsWarren":
        config = self.workdir / "warren.toml"
        config.write_text(f'[tls]\ncertfile = "{self.pki / "server.pem"}"\n'
                          f'keyfile = "{self.pki / "server.key"}"\n')
        self.process = BrokerProcess(
            data_dir=str(self.workdir / "data"), port=free_port(),
            extra_args=("--tls-port", str(free_port()), "--config", str(config)))
        try:
            self.process.start(timeout=self.start_timeout)
        except RuntimeError as error:
            raise BenchError(f"Warren did not start: {error}") from None
        return self

    def ports(self) -> dict:
        return {"plain": self.process.port, "tls": self.process.tls_port}

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=30)


class TlsRabbit(RabbitInstance):
    """A throw-away RabbitMQ node with an ssl listener on a free port as well."""

    def __init__(self, pki: Path, start_timeout: float, server_script: str):
        self.tls_port = free_port()
        super().__init__(start_timeout, server_script, extra_config=(
            f"listeners.ssl.1 = {HOST}:{self.tls_port}\n"
            f"ssl_options.certfile = {pki / 'server.pem'}\n"
            f"ssl_options.keyfile = {pki / 'server.key'}\n"
            "ssl_options.versions.1 = tlsv1.3\nssl_options.versions.2 = tlsv1.2\n"))

    def ports(self) -> dict:
        return {"plain": self.port, "tls": self.tls_port}


def run(args, perftest: PerfTest, pki: Path, brokers: dict, errors: list) -> dict:
    """consumed msg/s per (scenario, broker, transport), one list entry per run. A run
    that reported errors (e.g. a producer still blocked at the end) keeps its figures
    and adds to `errors`; one without figures adds only to `errors`."""
    results: dict = {}
    names = list(brokers)
    for repetition in range(args.repeat):
        for scenario in args.only:
            order = names if repetition % 2 == 0 else names[::-1]
            for broker in order:
                for transport in (TRANSPORTS if repetition % 2 == 0 else TRANSPORTS[::-1]):
                    port = brokers[broker].ports()[transport]
                    tls = ("--tls-ca", str(pki / "ca.pem")) if transport == "tls" else ()
                    data, error = perftest.run(
                        port, (*SCENARIOS[scenario].args, "--duration", args.duration, *tls),
                        timeout=args.duration + 120)
                    label = f"{scenario} {broker} {transport} run {repetition + 1}"
                    if error:
                        errors.append(f"{label}: {error.splitlines()[0]}")
                    if data is None:
                        log(f"{label}: FAILED: {error}")
                        continue
                    rate = summarize_perftest(data)["consumed_per_s"]
                    results.setdefault((scenario, broker, transport), []).append(rate)
                    log(f"{label}: {rate:,.0f} msg/s" + (f" ERRORS: {error}" if error else ""))
    return results


def render(args, results: dict, errors: list, started: datetime.datetime, machine: dict,
           loads: tuple) -> str:
    def median(key):
        return statistics.median(results[key]) if results.get(key) else float("nan")

    def cell(key):
        runs = results.get(key)
        if not runs:
            return "–"
        spread = f" ({min(runs):,.0f}–{max(runs):,.0f})" if len(runs) > 1 else ""
        return f"{median(key):,.0f}{spread}"

    lines = [BEGIN_MARK, "", f"## Throughput over TLS ({started:%Y-%m-%d}, "
             "bench/tls_throughput.py)", "",
             f"`python3 bench/tls_throughput.py{args.command_suffix}`: Warren and RabbitMQ "
             "3.10 each started fresh on loopback with a plain and a TLS listener "
             "(certificates from trustme, ECDSA P-256; TLS 1.3 negotiated), driven by "
             f"bench/java/PerfTest.java ({machine['client']}, `--tls-ca` for amqps). "
             f"Consumed msg/s, median of {args.repeat} run(s) of {args.duration:g} s each "
             "(min–max in parentheses), runs alternating between brokers and between "
             "plain and TLS; the ratios are of the medians. "
             f"Machine: {machine['nproc']} cores, {machine['cpu']}, {machine['os']}, "
             f"Python {machine['python']}; 1-minute load average {loads[0]:.1f} at the start, "
             f"{loads[1]:.1f} at the end (the clients share the CPUs with the broker).", "",
             "| scenario | Warren plain | Warren TLS | TLS / plain | RabbitMQ plain | "
             "RabbitMQ TLS | TLS / plain | Warren / RabbitMQ over TLS |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for scenario in args.only:
        w_plain, w_tls = median((scenario, "warren", "plain")), median((scenario, "warren", "tls"))
        r_plain, r_tls = (median((scenario, "rabbitmq", "plain")),
                          median((scenario, "rabbitmq", "tls")))
        cells = [cell((scenario, broker, transport)) for broker in ("warren", "rabbitmq")
                 for transport in TRANSPORTS]
        lines.append(f"| {SCENARIOS[scenario].title} | {cells[0]} | {cells[1]} | "
                     f"{w_tls / w_plain:.2f} | {cells[2]} | {cells[3]} | "
                     f"{r_tls / r_plain:.2f} | {w_tls / r_tls:.2f} |")
    lines += ["", "What TLS costs Warren: each publish of the Java client arrives as a TLS "
              "record of its own (the client flushes after every publish) and is decrypted "
              "on its own (about 3 µs of OpenSSL and Python per record on this machine); "
              "Warren's output is encrypted in pieces of up to 128 KiB, many messages per "
              "record. All of it runs on the event loop, on the one core Warren uses. The "
              "clients and both brokers share two cores with other work here (see the load "
              "average), so runs vary widely; at 16 B the client bounds the rate as much as "
              "the broker does."]
    if errors:
        lines += ["", "Runs that reported errors (their figures are included when they "
                  "had any):", ""] + [f"- {error}" for error in errors]
    lines += ["", END_MARK]
    return "\n".join(lines) + "\n"


def write_docs(section: str) -> None:
    """Replace this script's section of docs/benchmarks.md; the first time, put it right
    after bench/compare.py's section (never inside it)."""
    text = DOCS_MD.read_text()
    if BEGIN_MARK not in text and compare.END_MARK in text:
        head, tail = text.split(compare.END_MARK, 1)
        DOCS_MD.write_text(f"{head}{compare.END_MARK}\n\n{section}{tail}")
        return
    update_docs(DOCS_MD, section, BEGIN_MARK, END_MARK)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, help="seconds per run (default 10; --quick: 3)")
    parser.add_argument("--repeat", type=int, help="repetitions (default 3; --quick: 1)")
    parser.add_argument("--only", action="append", choices=list(SCENARIOS))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--rabbitmq-server", default=compare.RABBITMQ_SERVER)
    parser.add_argument("--start-timeout", type=float, default=90.0)
    args = parser.parse_args(argv)
    args.command_suffix = "".join(f" {a}" for a in (argv or []))
    args.duration = args.duration or (3.0 if args.quick else 10.0)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.only = args.only or list(SCENARIOS)
    return args


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    started = datetime.datetime.now()
    brokers: dict = {}
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as workdir:
        pki = make_pki(Path(workdir) / "pki")
        os.chmod(workdir, 0o755)
        try:
            perftest = PerfTest(Path(workdir))
            brokers["warren"] = TlsWarren(pki, args.start_timeout).start()
            brokers["rabbitmq"] = TlsRabbit(pki, args.start_timeout,
                                            args.rabbitmq_server).start()
            begun, load_start = time.monotonic(), os.getloadavg()[0]
            errors: list = []
            results = run(args, perftest, pki, brokers, errors)
            loads = (load_start, os.getloadavg()[0])
            log(f"done in {time.monotonic() - begun:.0f} s")
        except BenchError as error:
            log(f"failed: {error}")
            return 1
        finally:
            for broker in brokers.values():
                broker.stop()
    section = render(args, results, errors, started, machine_info(), loads)
    print(section)
    if not args.no_docs:
        write_docs(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
