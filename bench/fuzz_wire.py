"""Wire-level mutation fuzzer: hostile sessions against a running broker.

    python3 bench/fuzz_wire.py --mode both --sessions 100000 --frames 10000000 --seed 1
    python3 bench/fuzz_wire.py --mode frames --frames 1000000 --seed 1     # frames only
    python3 bench/fuzz_wire.py --broker 127.0.0.1:5672 --sessions 1000     # an external broker
    python3 bench/fuzz_wire.py --seed 1 --only 4242          # one session again (reproducer)
    python3 bench/fuzz_wire.py --replay fuzz-wire-failures/exit-seed1-4242.bin
    python3 bench/fuzz_wire.py --record                      # re-record the seed sessions

Sessions are recorded pika, Java-client and raw-frame sessions (tests/fuzz_seed_sessions/)
or grammar sessions, mutated frame-aware and byte-level (tests/support/amqp_mutation.py), sent
in batches over workers x connections concurrent sockets (tests/support/wire_fuzz.py).
After each batch the broker must be running and a pika client must publish and consume.
When the broker exits, it is restarted and the batch's sessions are replayed one at a
time on it to find the ones that stop it. Every ERROR the broker logs is a bug too (its
safety net logs the exception behind each 541 it sends): the first session of each
kind is found by the client port the error names. Each broker exit, hang and logged
error (with an external broker: each 541 close) is saved in --out as the session's
bytes (.bin) and a report (.txt) with a one-line reproducer. The run goes on until both
--sessions and --frames (mutated frames) are reached. Exit status 1 if the broker
exited, hung a connection, logged an error or failed a client check.

--mode frames streams long runs of mutated frames on logged-in connections instead
(tests/support/frame_fuzz.py), --frame-batch mutated frames between two checks;
--mode both alternates a batch of sessions and a batch of frames until both targets
are reached. Mutated frames the broker is known to have read, less those on a
channel it was closing, count toward --frames.
A frame connection that ended with a 541, a hang or no Connection.Close is saved as
the bytes it sent (--replay sends them again).
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
sys.path.insert(0, str(ROOT))

from tests.support.broker_process import BrokerProcess  # noqa: E402
from tests.support.bystander import assert_broker_serves  # noqa: E402
from tests.support.frame_fuzz import FrameRunner, FrameTotals  # noqa: E402
from tests.support.fuzz_seeds import SEED_DIR, load_seed_sessions  # noqa: E402
from tests.support.wire_fuzz import (BrokerLog, FuzzTotals, SessionRunner, broker_accepts,  # noqa: E402
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
    command = f"python3 bench/fuzz_wire.py --seed {seed} --only {index}"
    return save_bytes(out, f"{kind}-seed{seed}-session{index}",
                      session_bytes(seed, index, seeds), report, command)


def save_bytes(out: Path, name: str, data: bytes, report: str, command: str = "") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.bin"
    path.write_bytes(data)
    replay = f"python3 bench/fuzz_wire.py --replay {path}"
    path.with_suffix(".txt").write_text(f"reproduce: {command or replay}\n"
                                        f"(or: {replay})\n\n{report}\n")
    print(f"{name.split('-')[0].upper()}: -> {path}\n  reproduce: {command or replay}",
          flush=True)
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


class Run:
    """A fuzz run's state: the target, the runners, the totals, what was saved."""

    def __init__(self, args):
        self.args = args
        self.seeds = load_seed_sessions()
        self.out = Path(args.out)
        self.target = Target(args.broker)
        self.sessions = SessionRunner(args.workers, args.connections, args.hang_deadline) \
            if args.mode != "frames" else None
        self.frames = FrameRunner(args.workers, args.connections, args.hang_deadline) \
            if args.mode != "sessions" else None
        self.totals = FuzzTotals()
        self.frame_totals = FrameTotals()
        self.signatures: dict[str, int] = {}
        self.failed_checks = 0
        self.next_index, self.retry, self.frame_batches = 0, [], 0

    def mutated(self) -> int:
        return self.totals.mutated + self.frame_totals.mutated_processed

    def done(self) -> bool:
        sessions_left = self.sessions is not None and \
            self.totals.sessions < self.args.sessions
        return not sessions_left and self.mutated() >= self.args.frames

    def session_batch(self) -> None:
        args, target = self.args, self.target
        batch = self.retry + list(range(self.next_index,
                                        self.next_index + args.batch - len(self.retry)))
        self.next_index += args.batch - len(self.retry)
        results = self.sessions.run_batch(target.host, target.port, args.seed, batch)
        alive = target.alive()
        self.retry = [r.index for r in results if r.outcome == "refused" and not alive]
        for result in results:
            if result.index in self.retry:
                continue
            self.totals.add(result)
            if result.outcome == "hang" or (result.internal_errors and target.external):
                kind = "hang" if result.outcome == "hang" else "541"
                save(self.out, kind, args.seed, result.index, self.seeds,
                     f"{result}\nbroker log:\n{target.log_tail()}")
        by_port = {result.local_port: result for result in results}
        self.save_logged_errors(lambda port, report: by_port.get(port) and save(
            self.out, "error", args.seed, by_port[port].index, self.seeds, report))
        if not alive:
            self.broker_exited(f"the batch of sessions {batch[0]}..{batch[-1]}")
            suspects = [r.index for r in results if r.index not in self.retry]
            isolate(target, args.seed, suspects, self.seeds, self.out, args.hang_deadline)
            return
        self.check_client(f"sessions {batch[0]}..{batch[-1]}")

    def frame_batch(self) -> None:
        args, target = self.args, self.target
        batch = self.frame_batches
        self.frame_batches += 1
        results = self.frames.run_batch(target.host, target.port, args.seed, batch,
                                        args.frame_batch)
        alive = target.alive()
        name = f"seed{args.seed}-frames{batch}"
        for result in results:
            self.frame_totals.add(result)
            self.totals.hangs += result.outcome == "hang"
            if result.sent and (result.outcome == "hang" or target.external):
                save_bytes(self.out, f"{result.outcome}-{name}-port{result.local_port}",
                           result.sent, f"{result}\nbroker log:\n{target.log_tail()}")
        by_port = {result.local_port: result for result in results if result.sent}
        self.save_logged_errors(lambda port, report: port in by_port and save_bytes(
            self.out, f"error-{name}-port{port}", by_port[port].sent, report))
        if not alive:
            self.broker_exited(f"frame batch {batch}")
            suspects = [result.sent for result in results if result.sent]
            isolate_streams(target, suspects, self.out, name, args.hang_deadline)
            return
        self.check_client(f"frame batch {batch}")

    def save_logged_errors(self, save_for_port) -> None:
        """Every ERROR our broker logged (the safety net's 541s among them) is a bug:
        save the first input of each kind, found by the client port the error names."""
        target = self.target
        if target.external:
            return
        log = target.process.log_lines
        self.totals.errors_logged += log.error_count - target.errors_seen
        target.errors_seen = log.error_count
        for error in log.take_errors():
            signature = error_signature(error)
            self.signatures[signature] = self.signatures.get(signature, 0) + 1
            if self.signatures[signature] > 1:
                continue
            if not save_for_port(error_peer_port(error),
                                 f"{signature}\nthe broker logged:\n{error}"):
                self.out.mkdir(parents=True, exist_ok=True)
                path = self.out / f"error-seed{self.args.seed}-{len(self.signatures)}.txt"
                path.write_text(f"{signature}\n(no input kept for it: a timer, another "
                                f"task, or more than the kept connections)\n{error}")
                print(f"ERROR LOGGED: {signature} -> {path}", flush=True)

    def broker_exited(self, where: str) -> None:
        self.totals.broker_exits += 1
        print(f"BROKER EXIT in {where}:\n{self.target.log_tail()}", flush=True)
        if self.target.external:
            raise SystemExit(1)
        self.target.restart()

    def check_client(self, after: str) -> None:
        try:
            assert_broker_serves(self.target)
            self.totals.client_checks += 1
        except Exception as error:
            self.failed_checks += 1
            print(f"CLIENT CHECK FAILED after {after}: {error!r}", flush=True)
        print(self.summary(), flush=True)

    def summary(self) -> str:
        line = self.totals.summary()
        if self.frames is not None:
            elapsed = time.monotonic() - self.totals.started
            line += "\n  frame mode: " + self.frame_totals.summary(elapsed)
        return line

    def close(self) -> None:
        for runner in (self.sessions, self.frames):
            if runner is not None:
                runner.close()
        self.target.stop()


def fuzz(args) -> int:
    run = Run(args)
    try:
        while not run.done():
            frames_left = run.mutated() < args.frames
            if run.sessions is not None and (run.totals.sessions < args.sessions
                                             or (frames_left and run.frames is None)):
                run.session_batch()
            if run.frames is not None and run.mutated() < args.frames:
                run.frame_batch()
    finally:
        run.close()
    print("done: " + run.summary())
    for signature, count in sorted(run.signatures.items(), key=lambda item: -item[1]):
        print(f"  {count:6d} logged  {signature}")
    totals = run.totals
    failed = totals.broker_exits or totals.hangs or totals.errors_logged or run.failed_checks
    return 1 if failed else 0


def isolate_streams(target: Target, streams: list, out: Path, name: str,
                    hang_deadline: float) -> int:
    """Send the kept frame streams of a batch that stopped the broker one at a time to a
    fresh broker; save and count the ones that stop it again."""
    culprits = 0
    for number, data in enumerate(streams):
        result = asyncio.run(run_session(target.host, target.port, 0, 0, [], hang_deadline,
                                         ([data], [(0, 0)])))
        if target.alive():
            continue
        culprits += 1
        save_bytes(out, f"exit-{name}-{number}", data, f"broker exited; its log:\n"
                   f"{target.log_tail()}\nsession result: {result}")
        target.restart()
    return culprits


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
    from tests.support import seed_recording   # pika, Java and raw-frame sessions

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
    parser.add_argument("--mode", choices=("sessions", "frames", "both"), default="sessions",
                        help="mutated sessions, long runs of mutated frames on logged-in "
                             "connections, or both in turn")
    parser.add_argument("--frame-batch", type=int, default=500_000,
                        help="frame mode: mutated frames between two checks of the broker")
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
