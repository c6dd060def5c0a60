"""Wire-level mutation fuzzing of a running broker: the engine behind bench/fuzz_wire.py
and tests/integration/test_fuzz_wire.py.

Session `i` of a run with seed `s` is always the same bytes: a recorded seed session
(tests/fuzz_seed_sessions/) or a grammar session, mutated (tests/support/amqp_mutation.py), and
cut into writes, all decided by `random.Random(f"{s}:{i}")`. Sessions are sent in
batches over many concurrent connections (worker processes, each with an asyncio loop
of `connections` sockets). Each connection sends its session (stopping when the broker
closes it), then shuts down its sending side and waits for the broker to close the
socket. Per session it reports:

- frames and mutated frames written before the broker's Connection.Close arrived;
- the reply codes of every Connection.Close / Channel.Close received (541 is a bug);
- a hang: the broker neither closed the socket within `hang_deadline` seconds after the
  client stopped sending (or stopped reading for that long while the client sent).

After each batch the caller checks the broker process is alive and a pika client can
publish and consume (tests/support/bystander.py `assert_broker_serves`).
"""

import asyncio
import collections
import multiprocessing
import re
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field

from tests.support.amqp_grammar import RandomChoices
from tests.support.amqp_mutation import fuzz_session
from tests.support.fuzz_seeds import load_seed_sessions

INTERNAL_ERROR = 541
CONNECT_TIMEOUT = 10.0
HANG_DEADLINE = 20.0
EXIT_WAIT = 10.0
MAX_KEPT_ERRORS = 1000
_CLOSE_INDEXES = {0x000A0032: "connection", 0x00140028: "channel"}
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\S+ level=")
_PEER = re.compile(r"peer=[^\s:]+:(\d+)")
_SEEDS: list = []


@dataclass
class SessionResult:
    index: int
    outcome: str            # "closed", "hang", "refused", "reset", "error: ..."
    frames: int = 0         # frames written before the broker's Connection.Close
    mutated: int = 0        # of those, frames the mutations changed
    close_codes: list = field(default_factory=list)    # ("connection"|"channel", code)
    local_port: int = 0     # the client's port: the broker's log names it as peer=...

    @property
    def internal_errors(self) -> int:
        return sum(1 for _, code in self.close_codes if code == INTERNAL_ERROR)


def session_writes(seed: int, index: int, seeds: list) -> tuple:
    """Session `index` of run `seed`: (writes, counts): each write a byte string sent
    at once, each count (frames, mutated frames) that the write completes."""
    choices = RandomChoices.seeded(f"{seed}:{index}")
    frames, mutated = fuzz_session(choices, seeds)
    return _cut_into_writes(choices, frames, mutated)


def _cut_into_writes(choices, frames: list, mutated: list) -> tuple:
    """Group frames into writes of 1-8 frames; now and then split a write mid-frame
    (its frames count with the second part)."""
    writes, frame_counts = [], []
    position = 0
    while position < len(frames):
        count = choices.integer(1, 8)
        data = b"".join(frames[position:position + count])
        counts = (len(frames[position:position + count]),
                  sum(mutated[position:position + count]))
        position += count
        if len(data) > 1 and choices.chance(10):
            cut = choices.integer(1, len(data) - 1)
            writes += [data[:cut], data[cut:]]
            frame_counts += [(0, 0), counts]
        else:
            writes.append(data)
            frame_counts.append(counts)
    return writes, frame_counts


def session_bytes(seed: int, index: int, seeds: list) -> bytes:
    return b"".join(session_writes(seed, index, seeds)[0])


class _Reader:
    """Reads the broker's output, noting close codes and whether it closed the
    connection (Connection.Close received, or end of stream)."""

    def __init__(self, reader: asyncio.StreamReader):
        self.reader = reader
        self.close_codes: list = []
        self.closing = asyncio.Event()     # Connection.Close seen, or EOF
        self.eof = asyncio.Event()
        self._buffer = bytearray()

    async def run(self) -> None:
        try:
            while True:
                chunk = await self.reader.read(65536)
                if not chunk:
                    break
                self._buffer += chunk
                self._parse()
        except (ConnectionError, OSError):
            pass
        finally:
            self.closing.set()
            self.eof.set()

    def _parse(self) -> None:
        buffer = self._buffer
        position = 0
        while len(buffer) - position >= 7:
            if buffer.startswith(b"AMQP", position):
                position += 8
                continue
            frame_type, _channel, size = struct.unpack_from(">BHI", buffer, position)
            if len(buffer) - position < size + 8:
                break
            if frame_type == 1 and size >= 6:
                index, code = struct.unpack_from(">IH", buffer, position + 7)
                kind = _CLOSE_INDEXES.get(index)
                if kind is not None:
                    self.close_codes.append((kind, code))
                    if kind == "connection":
                        self.closing.set()
            position += size + 8
        del buffer[:position]


async def run_session(host: str, port: int, seed: int, index: int, seeds: list,
                      hang_deadline: float = HANG_DEADLINE,
                      writes: tuple | None = None) -> SessionResult:
    """Send one mutated session on its own connection and watch what the broker does
    (`writes`: send these (writes, counts) instead of generating session `index`)."""
    data, counts = writes or session_writes(seed, index, seeds)
    result = SessionResult(index, "closed")
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                CONNECT_TIMEOUT)
    except (ConnectionRefusedError, asyncio.TimeoutError, OSError) as error:
        result.outcome = "refused" if isinstance(error, ConnectionRefusedError) else \
            f"error: connect: {error!r}"
        return result
    result.local_port = writer.get_extra_info("sockname")[1]
    watcher = _Reader(reader)
    reading = asyncio.ensure_future(watcher.run())
    try:
        for chunk, (frames, mutated) in zip(data, counts):
            if watcher.closing.is_set():
                break
            writer.write(chunk)
            result.frames += frames
            result.mutated += mutated
            await asyncio.wait_for(writer.drain(), hang_deadline)   # it must keep reading
        if writer.can_write_eof():
            writer.write_eof()
        await asyncio.wait_for(watcher.eof.wait(), hang_deadline)
    except asyncio.TimeoutError:
        result.outcome = "hang"
    except OSError:      # reset, broken pipe, not connected: the broker dropped us
        result.outcome = "reset"
    finally:
        writer.close()
        reading.cancel()
    result.close_codes = watcher.close_codes
    return result


async def _run_many(host, port, seed, indexes, connections, hang_deadline) -> list:
    seeds = _seeds()
    pending = list(indexes)
    results = []

    async def worker():
        while pending:
            index = pending.pop()
            results.append(await run_session(host, port, seed, index, seeds,
                                             hang_deadline))

    await asyncio.gather(*(worker() for _ in range(connections)))
    return results


def broker_accepts(host: str, port: int, process=None, exit_wait: float = EXIT_WAIT) -> bool:
    """Whether the broker runs and accepts connections. A broker subprocess (`process`,
    a Popen) that stopped accepting is given `exit_wait` seconds to exit (a stopping
    broker closes its listener first, and its log is complete once it exited)."""
    if process is not None and process.poll() is not None:
        return False
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
        return True
    except OSError:
        if process is not None:
            try:
                process.wait(exit_wait)
            except subprocess.TimeoutExpired:
                pass
        return False


def _seeds() -> list:
    if not _SEEDS:
        _SEEDS.extend(load_seed_sessions())
    return _SEEDS


def run_chunk(arguments: tuple) -> list:
    """One worker process's share of a batch (picklable for multiprocessing)."""
    host, port, seed, indexes, connections, hang_deadline = arguments
    return asyncio.run(_run_many(host, port, seed, indexes, connections, hang_deadline))


class SessionRunner:
    """Runs batches of sessions on `workers` processes x `connections` sockets each."""

    def __init__(self, workers: int, connections: int, hang_deadline: float = HANG_DEADLINE):
        self.workers = workers
        self.connections = connections
        self.hang_deadline = hang_deadline
        self._pool = None
        if workers > 1:
            self._pool = multiprocessing.get_context("spawn").Pool(workers)

    def run_batch(self, host: str, port: int, seed: int, indexes: list) -> list:
        shares = [indexes[worker::self.workers] for worker in range(self.workers)]
        jobs = [(host, port, seed, share, self.connections, self.hang_deadline)
                for share in shares if share]
        if self._pool is None:
            return [result for job in jobs for result in run_chunk(job)]
        return [result for chunk in self._pool.map(run_chunk, jobs) for result in chunk]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()


class BrokerLog(collections.deque):
    """A broker subprocess's stderr lines (the last `maxlen`), plus every ERROR it
    logged with the traceback lines that follow it, kept until `take_errors`."""

    def __init__(self, maxlen: int = 300):
        super().__init__(maxlen=maxlen)
        self.errors: list[str] = []
        self.error_count = 0
        self._in_error = False

    def append(self, line: str) -> None:
        super().append(line)
        if _LOG_LINE.match(line):
            self._in_error = " level=ERROR " in line or " level=CRITICAL " in line
            if self._in_error:
                self.error_count += 1
                if len(self.errors) < MAX_KEPT_ERRORS:
                    self.errors.append(line)
        elif self._in_error and self.errors:
            self.errors[-1] += line

    def take_errors(self) -> list[str]:
        taken, self.errors = self.errors, []
        return taken


def error_signature(error: str) -> str:
    """What makes two logged errors the same bug: the exception (last line of the
    traceback) and the innermost line of Warren's code it went through."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    frames = [line for line in lines if line.startswith("File ")
              and "site-packages" not in line and "/lib/python" not in line]
    exception = lines[-1].split(":")[0] if len(lines) > 1 else lines[0][:120]
    where = frames[-1].split("/")[-1] if frames else "?"
    return f"{exception} at {where}"


def error_peer_port(error: str) -> int | None:
    """The client port in an error's `peer=host:port`, if it names one."""
    match = _PEER.search(error)
    return int(match.group(1)) if match else None


@dataclass
class FuzzTotals:
    sessions: int = 0
    frames: int = 0
    mutated: int = 0
    broker_exits: int = 0
    hangs: int = 0
    internal_errors: int = 0
    errors_logged: int = 0
    client_checks: int = 0
    started: float = field(default_factory=time.monotonic)

    def add(self, result: SessionResult) -> None:
        self.sessions += 1
        self.frames += result.frames
        self.mutated += result.mutated
        self.hangs += result.outcome == "hang"
        self.internal_errors += result.internal_errors

    def summary(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return (f"{self.sessions} sessions, {self.frames} frames ({self.mutated} mutated) "
                f"in {elapsed:.0f} s: {self.sessions / elapsed:.1f} sessions/s, "
                f"{self.frames / elapsed:.0f} frames/s, {self.mutated / elapsed:.0f} "
                f"mutated frames/s; broker exits {self.broker_exits}, hangs {self.hangs}, "
                f"errors logged {self.errors_logged}, 541 closes {self.internal_errors}, "
                f"client checks passed {self.client_checks}")
