#!/usr/bin/env python3
"""Stream queue throughput next to a classic durable queue, on any AMQP 0-9-1 broker.

Scenarios, each run --repeat times on fresh queues (the table shows medians):

- publish: one publisher sends --count persistent messages (delivery_mode 2) of --size
  bytes with publisher confirms, keeping at most --confirm-window messages unconfirmed.
  The rate runs from the first publish to the last confirm.
- read: one consumer, basic.qos prefetch --prefetch, manual acks (multiple=true every
  --ack-every messages). The classic queue is drained; the stream is read from
  x-stream-offset 'first' until --count messages have arrived, and every delivery's
  'x-stream-offset' header must be the previous one plus 1. The rate runs from
  basic.consume to the last delivery.
- replay (stream only): the same read again; the data is still in the stream.
- two readers (stream only, --two-readers): two connections read the whole stream from
  'first' at the same time; the aggregate rate is 2 x --count over the time from the
  first basic.consume to the last delivery.

The publisher and the readers use pika's asyncio adapter (a windowed confirm loop needs an
asynchronous client: BlockingChannel waits for each confirm). Every reader runs in its own
process, so two readers are not capped by one interpreter's GIL.

    python3 bench/stream_throughput.py --port 5672                 # Warren
    python3 bench/stream_throughput.py --port 5673 --count 50000 --repeat 1   # RabbitMQ
    python3 bench/stream_throughput.py --port 5673 --two-readers --markdown

See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions
from pika.adapters.asyncio_connection import AsyncioConnection

from loadgen import is_loopback   # bench/ is on sys.path when run as a script

NS_PER_S = 1_000_000_000
PERSISTENT_DELIVERY_MODE = 2
STREAM_ARGUMENTS = {"x-queue-type": "stream"}
OFFSET_HEADER = "x-stream-offset"
SETUP_TIMEOUT_S = 30.0  # reader processes: connect, basic.qos, meet at the barrier
CLASSIC = "classic"
STREAM = "stream"
PUBLISH = "publish"
READ = "read"
REPLAY = "replay"
TWO_READERS = "two readers (aggregate)"
SCENARIO_ORDER = [PUBLISH, READ, REPLAY, TWO_READERS]


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class Config:
    host: str
    port: int
    count: int
    size: int
    confirm_window: int
    prefetch: int
    ack_every: int
    repeat: int
    two_readers: bool
    markdown: bool
    timeout: float
    user: str
    password: str
    vhost: str


def parse_args(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        description="Stream vs classic durable queue: publish (confirms) and read throughput."
    )
    parser.add_argument("--host", default="127.0.0.1", help="broker host (loopback only)")
    parser.add_argument("--port", type=int, default=5672)
    parser.add_argument("--count", type=int, default=200_000, help="messages per scenario")
    parser.add_argument("--size", type=int, default=100, help="body size in bytes")
    parser.add_argument(
        "--confirm-window", type=int, default=500, metavar="N",
        help="most unconfirmed messages the publisher keeps in flight",
    )
    parser.add_argument("--prefetch", type=int, default=1000, help="basic.qos prefetch count")
    parser.add_argument(
        "--ack-every", type=int, default=100, metavar="K",
        help="readers ack with multiple=true every K messages",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per scenario (median)")
    parser.add_argument(
        "--two-readers", action="store_true",
        help="also read the stream with two concurrent connections (aggregate rate)",
    )
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds allowed for one scenario run"
    )
    parser.add_argument("--user", default="guest")
    parser.add_argument("--password", default="guest")
    parser.add_argument("--vhost", default="/")
    args = parser.parse_args(argv)

    errors = []
    if args.count < 1 or args.repeat < 1:
        errors.append("--count and --repeat must be >= 1")
    if args.size < 0:
        errors.append("--size must be >= 0")
    if args.confirm_window < 1:
        errors.append("--confirm-window must be >= 1")
    if not 1 <= args.prefetch <= 65535:
        errors.append("--prefetch must be in 1..65535 (stream consumers need a prefetch)")
    if not 1 <= args.ack_every <= args.prefetch:
        errors.append("--ack-every must be in 1..--prefetch (a larger value would stall)")
    if args.timeout <= 0:
        errors.append("--timeout must be > 0")
    if not 0 < args.port < 65536:
        errors.append("--port out of range")
    elif not is_loopback(args.host, args.port):
        errors.append(f"--host {args.host!r} does not resolve to loopback addresses only")
    if errors:
        parser.error("; ".join(errors))
    return Config(
        host=args.host, port=args.port, count=args.count, size=args.size,
        confirm_window=args.confirm_window, prefetch=args.prefetch, ack_every=args.ack_every,
        repeat=args.repeat, two_readers=args.two_readers, markdown=args.markdown,
        timeout=args.timeout, user=args.user, password=args.password, vhost=args.vhost,
    )


def connection_parameters(cfg: Config) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        host=cfg.host,
        port=cfg.port,
        virtual_host=cfg.vhost,
        credentials=pika.PlainCredentials(cfg.user, cfg.password),
        connection_attempts=1,
        socket_timeout=5,
        blocked_connection_timeout=cfg.timeout,
    )


# --------------------------------------------------------------------------- async client


class BenchError(Exception):
    """A run that cannot be counted (broker closed the channel, wrong data, timeout)."""


class AsyncChannel:
    """One pika AsyncioConnection with one channel, driven with await.

    Every future handed out is failed when the broker closes the channel or the
    connection, so no await hangs on a dead channel."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.connection: AsyncioConnection | None = None
        self.channel: Any = None
        self.pending: set[asyncio.Future] = set()
        self.closing = False

    @classmethod
    async def open(cls, cfg: Config) -> AsyncChannel:
        self = cls()
        opened = self.future()
        self.connection = AsyncioConnection(
            connection_parameters(cfg),
            on_open_callback=lambda _c: settle(opened, None),
            on_open_error_callback=lambda _c, exc: fail(opened, BenchError(f"connect: {exc!r}")),
            on_close_callback=self.on_connection_closed,
            custom_ioloop=self.loop,
        )
        await opened
        channel_open = self.future()
        self.connection.channel(on_open_callback=lambda ch: settle(channel_open, ch))
        self.channel = await channel_open
        self.channel.add_on_close_callback(self.on_channel_closed)
        return self

    def future(self) -> asyncio.Future:
        fut = self.loop.create_future()
        self.pending.add(fut)
        fut.add_done_callback(self.pending.discard)
        return fut

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a pika channel method that takes `callback=`; return the reply frame."""
        fut = self.future()
        getattr(self.channel, method)(*args, callback=lambda frame: settle(fut, frame), **kwargs)
        return await fut

    def fail_all(self, exc: BaseException) -> None:
        for fut in list(self.pending):
            fail(fut, exc)

    def on_channel_closed(self, _channel: Any, reason: BaseException) -> None:
        if not self.closing:
            self.fail_all(BenchError(f"channel closed by the broker: {reason!r}"))

    def on_connection_closed(self, _connection: Any, reason: BaseException) -> None:
        if self.closing:  # our own close: nobody waits on what is still pending
            for fut in list(self.pending):
                fut.cancel()
        else:
            self.fail_all(BenchError(f"connection closed: {reason!r}"))

    async def close(self) -> None:
        self.closing = True
        connection = self.connection
        if connection is None or connection.is_closed:
            return
        closed = self.loop.create_future()  # not in `pending`
        connection.add_on_close_callback(lambda _c, _r: settle(closed, None))
        if not connection.is_closing:
            connection.close()
        try:
            await asyncio.wait_for(closed, timeout=5)
        except asyncio.TimeoutError:
            pass


def settle(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def fail(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


# --------------------------------------------------------------------------- publish


class ConfirmTracker:
    """Unconfirmed delivery tags, in publish order. Confirms may be single or
    multiple and may arrive out of order; both are O(1) amortized."""

    def __init__(self) -> None:
        self.in_flight: collections.deque[int] = collections.deque()
        self.confirmed_early: set[int] = set()  # single confirms not at the head yet
        self.acked = 0
        self.nacked = 0

    def published(self, tag: int) -> None:
        self.in_flight.append(tag)

    @property
    def outstanding(self) -> int:
        return len(self.in_flight) - len(self.confirmed_early)

    def confirm(self, tag: int, multiple: bool, ack: bool) -> None:
        settled = 0
        if multiple:
            while self.in_flight and self.in_flight[0] <= tag:
                head = self.in_flight.popleft()
                if head in self.confirmed_early:
                    self.confirmed_early.discard(head)
                else:
                    settled += 1
        elif self.in_flight and self.in_flight[0] == tag:
            self.in_flight.popleft()
            settled = 1
        elif tag not in self.confirmed_early:
            self.confirmed_early.add(tag)
            settled = 1
        while self.in_flight and self.in_flight[0] in self.confirmed_early:
            self.confirmed_early.discard(self.in_flight.popleft())
        if ack:
            self.acked += settled
        else:
            self.nacked += settled


async def publish_run(cfg: Config, queue: str) -> float:
    """Publish --count persistent messages with windowed confirms; return msg/s."""
    client = await AsyncChannel.open(cfg)
    try:
        done = client.future()
        tracker = ConfirmTracker()
        body = b"x" * cfg.size
        properties = pika.BasicProperties(delivery_mode=PERSISTENT_DELIVERY_MODE)
        state = {"sent": 0, "started": 0, "finished": 0}

        def fill_window() -> None:
            channel = client.channel
            while state["sent"] < cfg.count and tracker.outstanding < cfg.confirm_window:
                channel.basic_publish("", queue, body, properties)
                state["sent"] += 1
                tracker.published(state["sent"])  # delivery tags count from 1 after select

        def on_confirm(frame: Any) -> None:
            method = frame.method
            tracker.confirm(
                method.delivery_tag, method.multiple, isinstance(method, pika.spec.Basic.Ack)
            )
            if tracker.acked + tracker.nacked >= cfg.count:
                state["finished"] = time.perf_counter_ns()
                settle(done, None)
            else:
                fill_window()

        await client.call("confirm_delivery", on_confirm)
        state["started"] = time.perf_counter_ns()
        fill_window()
        await done
        if tracker.nacked:
            raise BenchError(f"{tracker.nacked} of {cfg.count} publishes were nacked")
        return cfg.count * NS_PER_S / (state["finished"] - state["started"])
    finally:
        await client.close()


# --------------------------------------------------------------------------- read


@dataclass
class ReadResult:
    started_ns: int = 0  # time.time_ns(): comparable across the reader processes
    finished_ns: int = 0
    error: str | None = None


async def read_run(cfg: Config, queue: str, stream: bool, barrier: Any) -> ReadResult:
    """Consume --count messages, manual multiple acks; stream reads start at 'first'."""
    result = ReadResult()
    client = await AsyncChannel.open(cfg)
    try:
        await client.call("basic_qos", prefetch_count=cfg.prefetch)
        if barrier is not None:  # the parent starts every reader at once
            await asyncio.get_running_loop().run_in_executor(None, barrier.wait, SETUP_TIMEOUT_S)
        done = client.future()
        state = {"received": 0, "offset": None}

        def on_message(channel: Any, method: Any, properties: Any, _body: bytes) -> None:
            if done.done():
                return  # beyond --count (prefetched): left unacked, never rejected
            state["received"] += 1
            received = state["received"]
            if stream and not check_offset(state, properties, received, done):
                return
            if received % cfg.ack_every == 0 or received == cfg.count:
                channel.basic_ack(method.delivery_tag, multiple=True)
            if received == cfg.count:
                result.finished_ns = time.time_ns()
                settle(done, None)

        arguments = {OFFSET_HEADER: "first"} if stream else None
        result.started_ns = time.time_ns()
        client.channel.basic_consume(queue, on_message, auto_ack=False, arguments=arguments)
        await done
        return result
    finally:
        await client.close()


def check_offset(state: dict, properties: Any, received: int, done: asyncio.Future) -> bool:
    """Each stream delivery must carry 'x-stream-offset' = previous + 1."""
    offset = (properties.headers or {}).get(OFFSET_HEADER)
    previous = state["offset"]
    if not isinstance(offset, int) or (previous is not None and offset != previous + 1):
        fail(done, BenchError(
            f"message {received}: {OFFSET_HEADER} header {offset!r} after {previous!r}"))
        return False
    state["offset"] = offset
    return True


def reader_main(cfg: Config, queue: str, stream: bool, barrier: Any, results: Any) -> None:
    """Entry point of a reader process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    try:
        result = asyncio.run(asyncio.wait_for(read_run(cfg, queue, stream, barrier), cfg.timeout))
    except asyncio.TimeoutError:
        result = ReadResult(error=f"timed out after {cfg.timeout:g} s")
    except threading.BrokenBarrierError:
        result = ReadResult(error="another reader failed before the start")
    except Exception as exc:
        result = ReadResult(error=f"{type(exc).__name__}: {exc}")
        if barrier is not None:
            barrier.abort()
    results.put(result)


def read_with_processes(cfg: Config, queue: str, stream: bool, readers: int) -> float:
    """Run `readers` reader processes at once; return the aggregate msg/s."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(readers)
    results = ctx.Queue()
    processes = [
        ctx.Process(target=reader_main, args=(cfg, queue, stream, barrier, results))
        for _ in range(readers)
    ]
    for process in processes:
        process.start()
    collected: list[ReadResult] = []
    deadline = time.monotonic() + SETUP_TIMEOUT_S + cfg.timeout + 10
    try:
        while len(collected) < readers and time.monotonic() < deadline:
            try:
                collected.append(results.get(timeout=0.5))
            except queue_mod.Empty:
                # A reader that died without reporting (crashed at import, killed) never
                # will; the others cannot start without it.
                if sum(p.exitcode is not None for p in processes) > len(collected):
                    time.sleep(0.5)  # its report may still be in the pipe
                    while True:
                        try:
                            collected.append(results.get_nowait())
                        except queue_mod.Empty:
                            break
                    break
    finally:
        for process in processes:
            process.join(timeout=5 if len(collected) == readers else 0)
            if process.is_alive():
                process.terminate()
                process.join(timeout=2)
    errors = [r.error for r in collected if r.error]
    if len(collected) < readers:
        errors.append(f"{readers - len(collected)} reader(s) did not report in time")
    if errors:
        raise BenchError("; ".join(errors))
    elapsed_ns = max(r.finished_ns for r in collected) - min(r.started_ns for r in collected)
    return readers * cfg.count * NS_PER_S / max(elapsed_ns, 1)


# --------------------------------------------------------------------------- queue admin


def admin(cfg: Config):
    connection = pika.BlockingConnection(connection_parameters(cfg))
    return connection, connection.channel()


def declare(cfg: Config, queue: str, queue_type: str) -> None:
    connection, channel = admin(cfg)
    try:
        arguments = STREAM_ARGUMENTS if queue_type == STREAM else None
        channel.queue_declare(queue, durable=True, arguments=arguments)
    finally:
        close_quietly(connection)


def delete(cfg: Config, queues: list[str]) -> None:
    connection = None
    try:
        connection, _ = admin(cfg)
        for queue in queues:
            try:
                connection.channel().queue_delete(queue)  # a failed delete closes its channel
            except pika.exceptions.AMQPError as exc:
                print(f"warning: could not delete queue {queue}: {exc!r}", file=sys.stderr)
    except Exception as exc:
        print(f"warning: could not delete queues {queues}: {exc!r}", file=sys.stderr)
    finally:
        close_quietly(connection)


def close_quietly(connection: pika.BlockingConnection | None) -> None:
    if connection is None or not connection.is_open:
        return
    try:
        connection.close()
    except Exception:
        pass


def server_description(cfg: Config) -> str:
    connection, _ = admin(cfg)
    try:
        props = connection._impl.server_properties or {}
    finally:
        close_quietly(connection)

    def text(key: str) -> str:
        value = props.get(key, b"?")
        return value.decode() if isinstance(value, bytes) else str(value)

    return f"{text('product')} {text('version')}"


# --------------------------------------------------------------------------- orchestration


class Results:
    def __init__(self) -> None:
        self.rates: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        self.errors: list[str] = []

    def measure(self, scenario: str, queue_type: str, run: int, fn: Any) -> bool:
        label = f"{scenario} {queue_type} (run {run})"
        try:
            rate = fn()
        except BenchError as exc:
            self.errors.append(f"{label}: {exc}")
            print(f"  {label}: error: {exc}", file=sys.stderr)
            return False
        self.rates[(scenario, queue_type)].append(rate)
        print(f"  {label}: {rate:,.0f} msg/s", file=sys.stderr)
        return True


def timed(cfg: Config, coroutine: Any) -> float:
    try:
        return asyncio.run(asyncio.wait_for(coroutine, cfg.timeout))
    except asyncio.TimeoutError:
        raise BenchError(f"timed out after {cfg.timeout:g} s") from None


def one_repetition(cfg: Config, run: int, results: Results, created: list[str]) -> None:
    """Fresh queues for each repetition, so every run starts from the same state."""
    tag = uuid.uuid4().hex[:12]
    print(f"run {run}: queues stream-bench-{{{CLASSIC},{STREAM}}}-{tag}", file=sys.stderr)
    for queue_type in (CLASSIC, STREAM):
        queue = f"stream-bench-{queue_type}-{tag}"
        declare(cfg, queue, queue_type)
        created.append(queue)
        stream = queue_type == STREAM
        if not results.measure(PUBLISH, queue_type, run,
                               lambda: timed(cfg, publish_run(cfg, queue))):
            continue  # nothing (or not everything) to read
        results.measure(READ, queue_type, run,
                        lambda: read_with_processes(cfg, queue, stream, 1))
        if not stream:
            continue
        results.measure(REPLAY, queue_type, run,
                        lambda: read_with_processes(cfg, queue, stream, 1))
        if cfg.two_readers:
            results.measure(TWO_READERS, queue_type, run,
                            lambda: read_with_processes(cfg, queue, stream, 2))


# --------------------------------------------------------------------------- report


def table_rows(results: Results) -> list[list[str]]:
    rows = []
    for scenario in SCENARIO_ORDER:
        for queue_type in (CLASSIC, STREAM):
            rates = results.rates.get((scenario, queue_type))
            if not rates:
                continue
            spread = f"{min(rates):,.0f}–{max(rates):,.0f}" if len(rates) > 1 else "–"
            rows.append([scenario, queue_type, f"{statistics.median(rates):,.0f}", spread,
                         str(len(rates))])
    return rows


HEADER = ["scenario", "queue type", "msg/s (median)", "min–max", "runs"]


def print_table(rows: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(r[i]) for r in rows + [HEADER]) for i in range(len(HEADER))]
    right = {2, 3, 4}  # numbers align right

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    print(line(HEADER))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def describe(cfg: Config, server: str, load: float) -> str:
    return (
        f"{server} at {cfg.host}:{cfg.port}: {cfg.count:,} messages of {cfg.size} B, "
        f"persistent, confirm window {cfg.confirm_window}, prefetch {cfg.prefetch}, "
        f"ack every {cfg.ack_every} (multiple), {cfg.repeat} run(s); "
        f"host 1-min load {load:.1f} at start, {os.cpu_count()} CPUs"
    )


def exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds like Ctrl-C: the queues are deleted


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    cfg = parse_args(argv)
    load_at_start = os.getloadavg()[0]
    try:
        server = server_description(cfg)
    except Exception as exc:
        print(f"error: cannot connect to {cfg.host}:{cfg.port}: {exc!r}", file=sys.stderr)
        return 2
    results = Results()
    created: list[str] = []
    try:
        for run in range(1, cfg.repeat + 1):
            one_repetition(cfg, run, results, created)
            delete(cfg, created)  # before the next repetition: free the broker's disk
            created.clear()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except pika.exceptions.AMQPError as exc:  # declare failed (e.g. no stream support)
        print(f"error: {exc!r}", file=sys.stderr)
        return 2
    finally:
        if created:
            delete(cfg, created)
    print(describe(cfg, server, load_at_start))
    rows = table_rows(results)
    if rows:
        print_table(rows, cfg.markdown)
    for error in results.errors:
        print(f"error: {error}", file=sys.stderr)
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())
