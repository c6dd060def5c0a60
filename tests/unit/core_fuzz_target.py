"""The in-process fuzz target: one client session through the codec and the core.

`run_session` feeds a session's bytes, cut at the given points, to a `Connection`'s
`Framer` and the decoded items to the `Connection` (on a fresh `Broker`), as
`Connection.receive_data` does, but apart, to tell the decoder's exceptions from the
core's (protocol errors close the connection with their reply
code; commands decoded before the bad frame still count), then ends the input, fires
every timer (TTL, expiry, dead-lettering) on a virtual clock, drops the socket, and lets
a well-behaved client publish, get and ack on the same broker. It returns a `Failure`
for anything the broker must never do:

- `Framer.feed` (the decoder) raising anything but ProtocolError / ProtocolHeaderMismatch;
- the core (`handle`, `end_of_batch`, `input_ended`, timers, `lost`) raising at all;
- an ERROR logged by the broker while it ran the session: the safety net that closes a
  failing connection with 541 INTERNAL_ERROR logs the exception it caught, and that
  exception is still a bug (a 541 the broker sends on purpose, as RabbitMQ does for a
  property block it cannot read, logs no error);
- output that is not well-formed frames;
- the well-behaved client not getting its message back afterwards.
"""

import itertools
import logging
import os
import struct
import tempfile
import traceback
from dataclasses import dataclass

from pamqp import commands

from amqp_codec import ProtocolError, ProtocolHeaderMismatch
from broker.core.broker import Broker
from broker.core.connection import Connection
from broker.core.persistence import Persistence
from broker.server.durable_store import DurableQueueStore
from broker.server.stream_store import DurableStreamStore
from core_harness import Client, ManualReads, RecordingTransport
from storage.queue_file import QueueFile
from storage.stream_log import StreamLog

_TIMER_ADVANCE = 10.0 ** 9     # seconds: past any TTL or expiry a session can set


@dataclass
class Failure:
    """Something the broker must never do, with where it happened."""

    component: str      # "decoder", "core", "timers", "logged", "output", "bystander"
    summary: str        # exception type and message, or what was wrong
    detail: str         # traceback or evidence

    @property
    def signature(self) -> str:
        """What makes two failures the same bug: the component, the exception type and
        the innermost line of Warren's own code in the last traceback (libraries and
        the fuzz target left out), or the summary."""
        last = self.detail.split("During handling of the above exception")[-1]
        frames = [line.strip() for line in last.splitlines()
                  if line.strip().startswith("File ") and "site-packages" not in line
                  and "core_fuzz_target" not in line]
        where = frames[-1].split("/")[-1] if frames else self.summary
        return f"{self.component}: {self.summary.split(':')[0]} at {where}"


@dataclass
class FuzzBroker:
    """A broker for sessions, with the stand-in for the server's read pool that its
    durable queues and streams hand their reads to (run after every read of a session)."""

    broker: Broker
    reads: ManualReads


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def new_broker(data_dir: str) -> FuzzBroker:
    """A broker on a virtual clock whose durable queues and streams keep their files in
    `data_dir` (queue files, stream logs: what persistent messages go through), for one
    session or several in a row."""
    persistence = Persistence()
    files = itertools.count()
    reads = ManualReads()

    def queue_store(vhost: str, queue: str) -> DurableQueueStore:
        number = next(files)
        return DurableQueueStore(QueueFile(os.path.join(data_dir, f"q{number}")),
                                 persistence, f"q{number}", reads)

    def stream_store(vhost: str, queue: str, retention) -> DurableStreamStore:
        number = next(files)
        return DurableStreamStore(StreamLog(os.path.join(data_dir, f"s{number}")),
                                  persistence, f"s{number}", reads)

    persistence.store_factory = queue_store
    persistence.stream_factory = stream_store
    return FuzzBroker(Broker(clock=_Clock(), persistence=persistence), reads)


def run_session(stream: bytes, cuts: list, broker: FuzzBroker | None = None) -> Failure | None:
    """Feed `stream` in reads cut at the offsets `cuts` to a connection on `broker`
    (sessions in a row on one broker meet each other's queues, exchanges and messages),
    or on a new broker with its files in a temporary directory; the first Failure, or
    None."""
    if broker is None:
        with tempfile.TemporaryDirectory(prefix="warren-fuzz-") as data_dir:
            return run_session(stream, cuts, new_broker(data_dir))
    errors = _ErrorLog()
    logging.getLogger("warren").addHandler(errors)
    try:
        failure = _run(stream, cuts, broker)
    finally:
        logging.getLogger("warren").removeHandler(errors)
    return errors.failure() or failure


def _run(stream: bytes, cuts: list, target: FuzzBroker) -> Failure | None:
    broker, reads = target.broker, target.reads
    clock = broker.scheduler.clock
    transport = RecordingTransport()
    connection = Connection(broker, transport, "fuzz", "127.0.0.1")
    failure = _feed(stream, cuts, connection, transport, reads)
    if failure is None:
        failure = _guarded("core", connection.input_ended)
    if failure is None:
        clock.now += _TIMER_ADVANCE
        failure = _guarded("timers", broker.scheduler.run_due)
    if failure is None:
        failure = _guarded("core", reads.run)
    if failure is None:
        failure = _guarded("core", connection.lost)
    return (failure or _check_output(bytes(transport.output))
            or _guarded("bystander", _bystander_round_trip, broker))


class _ErrorLog(logging.Handler):
    """Keeps the first ERROR the broker logs (with the traceback it logged)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.first: logging.LogRecord | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.first is None:
            self.first = record

    def failure(self) -> Failure | None:
        record = self.first
        if record is None:
            return None
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            summary = f"{type(error).__name__}: {str(error)[:200]}"
            detail = "".join(traceback.format_exception(error))
        else:
            summary = detail = record.getMessage()
        return Failure("logged", summary, f"{record.getMessage()}\n{detail}")


def _feed(stream, cuts, connection, transport, reads: ManualReads) -> Failure | None:
    framer = connection.framer
    started = False
    previous = 0
    for cut in sorted(set(cuts)) + [len(stream)]:
        chunk = stream[previous:cut]
        previous = max(previous, cut)
        if not chunk:
            continue
        try:
            items = framer.feed(chunk)
        except ProtocolHeaderMismatch:
            return None
        except ProtocolError as error:
            return _guarded("core", _protocol_error, connection, error)
        except Exception as error:  # the decoder's contract allows nothing else
            return _failure("decoder", error)
        if not started and framer.header_received:
            started = True
            connection.handshake.start()
        failure = _guarded("core", _handle_batch, connection, items, reads)
        if failure is not None or transport.closed:
            return failure
    return None


def _handle_batch(connection: Connection, items: list, reads: ManualReads) -> None:
    for item in items:
        connection.handle(item)
    connection.end_of_batch()
    persistence = connection.broker.persistence
    persistence.committed([], persistence.writes)
    reads.run()     # the reads of paged-out bodies and stream records the batch started


def _protocol_error(connection: Connection, error: ProtocolError) -> None:
    """What Connection.receive_data does with a ProtocolError."""
    for item in error.decoded:
        connection.handle(item)
    connection.close(error.reply_code, error.reply_text, error.class_id, error.method_id)


def _guarded(component: str, function, *args) -> Failure | None:
    try:
        function(*args)
    except Exception as error:
        return _failure(component, error)
    return None


def _failure(component: str, error: BaseException) -> Failure:
    return Failure(component, f"{type(error).__name__}: {str(error)[:200]}",
                   "".join(traceback.format_exception(error)))


def _check_output(output: bytes) -> Failure | None:
    """The broker's output must be whole frames."""
    position = 0
    while position < len(output):
        if output.startswith(b"AMQP", position):
            position += 8
            continue
        if len(output) - position < 8:
            return Failure("output", "truncated frame in the output", repr(output[position:]))
        size = struct.unpack_from(">I", output, position + 3)[0]
        end = position + 7 + size
        if end >= len(output) or output[end] != 0xCE:
            return Failure("output", "malformed frame in the output",
                           repr(output[position:position + 64]))
        position = end + 1
    return None


def _bystander_round_trip(broker: Broker) -> None:
    """A well-behaved client on the same broker: declare, publish, get, ack."""
    client = Client(broker)
    client.open_channel()
    queue = client.declare_queue(1, "", exclusive=True)
    client.publish(1, "", queue, b"bystander")
    replies = client.method(1, commands.Basic.Get(queue=queue))
    got = [frame for _, frame in replies if isinstance(frame, commands.Basic.GetOk)]
    assert got, f"the bystander's Basic.Get returned {replies!r}"
    client.method(1, commands.Basic.Ack(delivery_tag=got[0].delivery_tag))
    client.method(0, commands.Connection.Close())
