"""Drive broker.core without sockets: a recording Transport and an opened connection."""

import time

from pamqp import commands, frame as pamqp_frame, header, body as pamqp_body

from amqp_codec import InboundMethod, InboundPublish, encode_properties
from broker.core.broker import Broker
from broker.core.connection import Connection
from broker.core.persistence import Persistence
from broker.server.durable_store import DurableQueueStore
from storage.queue_file import QueueFile


class RecordingTransport:
    """Collects what the core writes and decodes it back into pamqp frames."""

    def __init__(self):
        self.writable = True
        self.closed = False
        self.tuned_with = None
        self._data = bytearray()

    def write(self, data) -> None:
        self._data += b"".join(data) if type(data) is tuple else data

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def input_resumed(self) -> None:
        pass

    def tuned(self, heartbeat: int) -> None:
        self.tuned_with = heartbeat

    def login_refused(self) -> None:
        pass

    def opened(self) -> None:
        pass

    def close_sent(self) -> None:
        pass

    def closed_by_client(self) -> None:
        pass

    @property
    def output(self) -> bytearray:
        """The bytes written since the last `frames` or `methods`."""
        return self._data

    def frames(self) -> list:
        """(channel, frame) pairs written since the last call."""
        data, self._data = bytes(self._data), bytearray()
        out = []
        while data:
            consumed, channel, frame = pamqp_frame.unmarshal(data)
            out.append((channel, frame))
            data = data[consumed:]
        return out

    def methods(self) -> list:
        """Only the method frames written since the last call."""
        return [(channel, frame) for channel, frame in self.frames()
                if not isinstance(frame, (header.ContentHeader, pamqp_body.ContentBody))]


class ManualReads:
    """Stands in for the server's ReadPool: a read waits until `run` (as if a worker
    thread had done it), which hands results back in the order they were asked for."""

    def __init__(self):
        self.pending: list = []

    def submit(self, read, done) -> None:
        self.pending.append((read, done))

    def run(self) -> int:
        """Do every pending read, and those their results start; how many."""
        done = 0
        while self.pending:
            read, deliver = self.pending.pop(0)
            deliver(read())
            done += 1
        return done


class Client:
    """A fake client connection on a real Broker, already through Connection.Open."""

    def __init__(self, broker: Broker | None = None, capabilities: dict | None = None,
                 reads: ManualReads | None = None):
        self.broker = broker or Broker()
        self.reads = reads      # when given, the reads each batch started run after it
        self.transport = RecordingTransport()
        self.connection = Connection(self.broker, self.transport, "test", "127.0.0.1")
        self.connection.handshake.start()
        caps = {"consumer_cancel_notify": True} if capabilities is None else capabilities
        self.method(0, commands.Connection.StartOk(
            client_properties={"capabilities": caps}, mechanism="PLAIN",
            response="\0guest\0guest"))
        self.method(0, commands.Connection.TuneOk(channel_max=100, frame_max=131072,
                                                  heartbeat=0))
        self.method(0, commands.Connection.Open(virtual_host="/"))
        self.transport.frames()

    def method(self, channel: int, method) -> list:
        self.connection.handle(InboundMethod(channel, method))
        self.end_batch()
        return self.transport.frames()

    def end_batch(self) -> None:
        """End a read, and let held durable replies go as if the commit were done
        (tests of holding call `connection.end_of_batch` and commit themselves)."""
        self.connection.end_of_batch()
        persistence = self.broker.persistence
        persistence.committed([], persistence.writes)
        if self.reads is not None:
            self.reads.run()

    def open_channel(self, channel: int = 1) -> None:
        (number, reply), = self.method(channel, commands.Channel.Open())
        assert (number, type(reply)) == (channel, commands.Channel.OpenOk)

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes,
                mandatory: bool = False, properties=None) -> list:
        raw = encode_properties(properties or commands.Basic.Properties())
        self.connection.handle(InboundPublish(channel, exchange, routing_key, mandatory,
                                              False, raw, body))
        self.end_batch()
        return self.transport.frames()

    def declare_queue(self, channel: int, name: str, **kwargs) -> str:
        replies = self.method(channel, commands.Queue.Declare(queue=name, **kwargs))
        (_, ok), = replies
        return ok.queue


def paging_client(tmp_path, window: int, reads: ManualReads | None = None, clock=None,
                  arguments: dict | None = None):
    """A Client whose broker keeps durable queues in queue files under tmp_path, and its
    durable queue "long" (with `arguments`) that keeps only `window` ready bodies in
    memory. Paged-out bodies are read by `reads`, pending until `reads.run()`; without
    it, the client runs the reads each batch started after it."""
    persistence = Persistence()
    client_reads = None if reads else ManualReads()
    reads = reads or client_reads
    persistence.store_factory = lambda vhost, queue: DurableQueueStore(
        QueueFile(str(tmp_path / queue)), persistence, queue, reads)
    client = Client(Broker(persistence=persistence, clock=clock or time.monotonic),
                    reads=client_reads)
    client.open_channel()
    client.declare_queue(1, "long", durable=True, arguments=arguments or {})
    queue = client.broker.vhosts["/"].queues["long"]
    queue.page_window = window
    return client, queue


def kinds(replies: list) -> list:
    """(channel, method class) pairs: pamqp methods do not compare by value."""
    return [(channel, type(frame)) for channel, frame in replies]


def close_code(replies: list) -> int | None:
    """The reply code of the first Channel.Close or Connection.Close in replies."""
    for _, frame in replies:
        if isinstance(frame, (commands.Channel.Close, commands.Connection.Close)):
            return frame.reply_code
    return None


def deliveries(frames: list) -> list:
    """(Basic.Deliver, body) pairs from written frames."""
    out = []
    current = None
    for _, frame in frames:
        if isinstance(frame, commands.Basic.Deliver):
            current = [frame, b""]
            out.append(current)
        elif isinstance(frame, pamqp_body.ContentBody) and current is not None:
            current[1] += frame.value
    return [tuple(item) for item in out]
