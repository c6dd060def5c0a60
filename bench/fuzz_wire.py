"""Wire-level mutation fuzzer: hostile sessions against a running broker.

    python3 bench/fuzz_wire.py --sessions 100000 --frames 10000000 --seed 1 --workers 2
    python3 bench/fuzz_wire.py --broker 127.0.0.1:5672 --sessions 1000     # an external broker
    python3 bench/fuzz_wire.py --seed 1 --only 4242          # one session again (reproducer)
    python3 bench/fuzz_wire.py --replay fuzz-wire-failures/exit-seed1-4242.bin
    python3 bench/fuzz_wire.py --record                      # re-record the seed sessions

Sessions are recorded pika, Java-client and raw-frame sessions (tests/fuzz_seed_sessions/)
or grammar sessions, mutated frame-aware and byte-level (tests/amqp_mutation.py), sent
in batches over workers x connections concurrent sockets (tests/integration/wire_fuzz.py).
After each batch the broker must be running and a pika client must publish and consume.
When the broker exits, it is restarted and the batch's sessions are replayed one at a
time on it to find the ones that stop it. Every ERROR the broker logs is a bug too (its
safety net logs the exception behind each 541 it sends): the first session of each
kind is found by the client port the error names. Each broker exit, hang and logged
error (with an external broker: each 541 close) is saved in --out as the session's
bytes (.bin) and a report (.txt) with a one-line reproducer. The run goes on until both
--sessions and --frames (mutated frames) are reached. Exit status 1 if the broker
exited, hung a connection, logged an error or failed a client check.
"""

import argparse
import asyncio
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
sys.path[:0] = [str(ROOT), str(TESTS), str(TESTS / "integration")]

from broker_process import BrokerProcess  # noqa: E402
from bystander import assert_broker_serves  # noqa: E402
from fuzz_seeds import SEED_DIR, load_seed_sessions  # noqa: E402
from wire_fuzz import (BrokerLog, FuzzTotals, SessionRunner, broker_accepts,  # noqa: E402
                       error_peer_port, error_signature, run_session, session_bytes,
                       session_writes)


class Target:
    """The broker under test: our own subprocess (restartable) or an external one."""

    def __init__(self, address: str | None):
        self.external = address is not None
        self.process: BrokerProcess | None = None
        self._data_dir = None
        if address:
            host, port = address.rsplit(":", 1)
            self.host, self.port = host, int(port)
        else:
            self.start()

    def start(self) -> None:
        self._data_dir = tempfile.TemporaryDirectory(prefix="warren-fuzz-")
        self.errors_seen = 0
        self.process = BrokerProcess(data_dir=self._data_dir.name,
                                     log_lines=BrokerLog()).start()
        self.host, self.port = self.process.host, self.process.port

    def alive(self) -> bool:
        process = self.process.process if self.process is not None else None
        return broker_accepts(self.host, self.port, process)

    def log_tail(self) -> str:
        """The last lines the broker wrote (after an exit: once its stderr is read)."""
        if self.process is None:
            return ""
        deadline = time.monotonic() + 5
        while self.process.process.poll() is not None and time.monotonic() < deadline:
            count = len(self.process.log_lines)
            time.sleep(0.2)      # the log reader thread drains stderr after the exit
            if len(self.process.log_lines) == count:
                break
        return "".join(list(self.process.log_lines)[-60:])

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self._data_dir.cleanup()


def save(out: Path, kind: str, seed: int, index: int, seeds: list, report: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{kind}-seed{seed}-session{index}.bin"
    path.write_bytes(session_bytes(seed, index, seeds))
    command = f"python3 bench/fuzz_wire.py --seed {seed} --only {index}"
    path.with_suffix(".txt").write_text(f"reproduce: {command}\n(or: python3 bench/fuzz_wire."
                                        f"py --replay {path})\n\n{report}\n")
    print(f"{kind.upper()}: session {index} -> {path}\n  reproduce: {command}", flush=True)
    return path


def isolate(target: Target, seed: int, indexes: list, seeds: list, out: Path,
            hang_deadline: float) -> int:
    """Replay the sessions of a batch that stopped the broker one at a time on a fresh
    broker; save and count the ones that stop it again."""
    culprits = 0
    for index in sorted(indexes):
        result = asyncio.run(run_session(target.host, target.port, seed, index, seeds,
                                         hang_deadline))
        if target.alive():
            continue
        culprits += 1
        save(out, "exit", seed, index, seeds, f"broker exited; its log:\n{target.log_tail()}"
             f"\nsession result: {result}")
        target.restart()
    return culprits


def save_logged_errors(target: Target, results: list, seed: int, seeds: list, out: Path,
                       totals: FuzzTotals, signatures: dict) -> None:
    """Every ERROR our broker logged (the safety net's 541s among them) is a bug: save
    the first session of each kind, found by the client port the error names."""
    if target.external:
        return
    log = target.process.log_lines
    totals.errors_logged += log.error_count - target.errors_seen
    target.errors_seen = log.error_count
    by_port = {result.local_port: result for result in results}
    for error in log.take_errors():
        signature = error_signature(error)
        signatures[signature] = signatures.get(signature, 0) + 1
        if signatures[signature] > 1:
            continue
        result = by_port.get(error_peer_port(error))
        if result is None:
            out.mkdir(parents=True, exist_ok=True)
            path = out / f"error-seed{seed}-{len(signatures)}.txt"
            path.write_text(f"{signature}\n(no session named: a timer or another task)\n"
                            f"{error}")
            print(f"ERROR LOGGED: {signature} -> {path}", flush=True)
        else:
            save(out, "error", seed, result.index, seeds,
                 f"{signature}\nthe broker logged:\n{error}\nsession result: {result}")


def fuzz(args) -> int:
    seeds = load_seed_sessions()
    out = Path(args.out)
    target = Target(args.broker)
    runner = SessionRunner(args.workers, args.connections, args.hang_deadline)
    totals = FuzzTotals()
    next_index, retry, failed_checks = 0, [], 0
    signatures: dict[str, int] = {}
    try:
        while totals.sessions < args.sessions or totals.mutated < args.frames:
            batch = retry + list(range(next_index, next_index + args.batch - len(retry)))
            next_index += args.batch - len(retry)
            results = runner.run_batch(target.host, target.port, args.seed, batch)
            alive = target.alive()
            retry = [r.index for r in results if r.outcome == "refused" and not alive]
            for result in results:
                if result.index in retry:
                    continue
                totals.add(result)
                if result.outcome == "hang" or (result.internal_errors and target.external):
                    kind = "hang" if result.outcome == "hang" else "541"
                    save(out, kind, args.seed, result.index, seeds,
                         f"{result}\nbroker log:\n{target.log_tail()}")
            save_logged_errors(target, results, args.seed, seeds, out, totals, signatures)
            if not alive:
                totals.broker_exits += 1
                print(f"BROKER EXIT in the batch of sessions {batch[0]}..{batch[-1]}:\n"
                      f"{target.log_tail()}", flush=True)
                if target.external:
                    return 1
                target.restart()
                suspects = [r.index for r in results if r.index not in retry]
                isolate(target, args.seed, suspects, seeds, out, args.hang_deadline)
                continue
            try:
                assert_broker_serves(target)
                totals.client_checks += 1
            except Exception as error:
                failed_checks += 1
                print(f"CLIENT CHECK FAILED after sessions {batch[0]}..{batch[-1]}: "
                      f"{error!r}", flush=True)
            print(totals.summary(), flush=True)
    finally:
        runner.close()
        target.stop()
    print("done: " + totals.summary())
    for signature, count in sorted(signatures.items(), key=lambda item: -item[1]):
        print(f"  {count:6d} logged  {signature}")
    failed = totals.broker_exits or totals.hangs or totals.errors_logged or failed_checks
    return 1 if failed else 0


def replay_one(args, writes=None) -> int:
    target = Target(args.broker)
    try:
        result = asyncio.run(run_session(target.host, target.port, args.seed, args.only or 0,
                                         load_seed_sessions(), args.hang_deadline, writes))
        alive = target.alive()
        print(f"{result}\nbroker {'running' if alive else 'EXITED'}")
        errors = target.process.log_lines.error_count if target.process else 0
        if not alive or result.outcome == "hang" or result.internal_errors or errors:
            print(target.log_tail())
            return 1
        return 0
    finally:
        target.stop()


# -- recording the seed sessions ----------------------------------------------------------

class RecordingProxy:
    """A TCP proxy that keeps what each client sent, connection by connection."""

    def __init__(self, upstream: tuple):
        self.upstream = upstream
        self.sessions: list[bytearray] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            recorded = bytearray()
            self.sessions.append(recorded)
            threading.Thread(target=_pump, args=(client, server, recorded), daemon=True).start()
            threading.Thread(target=_pump, args=(server, client, None), daemon=True).start()

    def take(self) -> list:
        """The sessions recorded since the last call (after their clients closed)."""
        taken, self.sessions = self.sessions, []
        return [bytes(session) for session in taken]


def _pump(source: socket.socket, sink: socket.socket, recorded) -> None:
    try:
        while data := source.recv(65536):
            if recorded is not None:
                recorded += data
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def record(args) -> int:
    import seed_recording   # tests/integration: pika, Java and raw-frame sessions

    target = Target(args.broker)
    proxy = RecordingProxy((target.host, target.port))
    try:
        written = seed_recording.record_all(proxy, SEED_DIR)
    finally:
        target.stop()
    for path in written:
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size} bytes")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000,
                        help="run at least this many mutated sessions")
    parser.add_argument("--frames", type=int, default=0,
                        help="and at least this many mutated frames")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2, help="client processes")
    parser.add_argument("--connections", type=int, default=8,
                        help="concurrent connections per worker")
    parser.add_argument("--batch", type=int, default=200,
                        help="sessions between two checks of the broker")
    parser.add_argument("--broker", help="host:port of a running broker (default: start one)")
    parser.add_argument("--out", default="fuzz-wire-failures")
    parser.add_argument("--hang-deadline", type=float, default=20.0,
                        help="seconds the broker has to close a connection the client "
                             "stopped sending on")
    parser.add_argument("--only", type=int, help="run only session ONLY of --seed")
    parser.add_argument("--replay", type=Path, help="send this file as one session")
    parser.add_argument("--record", action="store_true",
                        help="record the seed sessions again into tests/fuzz_seed_sessions")
    args = parser.parse_args()
    if args.record:
        return record(args)
    if args.replay:
        return replay_one(args, ([args.replay.read_bytes()], [(0, 0)]))
    if args.only is not None:
        return replay_one(args, session_writes(args.seed, args.only, load_seed_sessions()))
    return fuzz(args)


if __name__ == "__main__":
    sys.exit(main())
