"""The broker's per-message cost without sockets: decode Basic.Publish frames, route,
deliver to a consumer and encode Basic.Deliver, in one process, on batches of messages.

    python3 bench/core_hot_path.py [--size 16] [--batch 100] [--batches 3000] [--manual-ack]
                                   [--distinct-ids] [--backlog] [--confirm]

Prints the best of five rounds in microseconds per message. This is the Python work a
message costs Warren before any system call; docs/benchmarks.md quotes it.

With --backlog, no consumer is subscribed while a round's messages are published: they
all wait in the queue (a backlog of batch * batches), then a consumer subscribes, takes
them all and cancels. That is what a message costs when its consumer fell behind.

With --confirm, the path of PerfTest's confirm scenarios: persistent messages to a durable
queue whose store is a real queue file (in a temporary directory), publisher confirms, the
consumer acking each batch; after each batch a commit writes the queue file (`pwrite`,
without the fdatasync) and releases the confirms, as the group committer does.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pamqp import body as pamqp_body, commands, frame, header  # noqa: E402

from amqp_codec import PROTOCOL_HEADER, InboundMethod  # noqa: E402
from broker.core.broker import Broker  # noqa: E402
from broker.core.connection import Connection  # noqa: E402
from broker.core.handshake import ConnectionState  # noqa: E402
from broker.server.durability import DurableStorage  # noqa: E402


class DiscardingTransport:
    """A transport that drops what the broker writes (no socket)."""

    writable = True

    def write(self, data) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def input_resumed(self) -> None:
        pass

    def tuned(self, heartbeat: int) -> None:
        pass

    def login_refused(self) -> None:
        pass

    def opened(self) -> None:
        pass

    def close_sent(self) -> None:
        pass

    def closed_by_client(self) -> None:
        pass


def open_connection(broker: Broker) -> Connection:
    connection = Connection(broker, DiscardingTransport(), "bench", "127.0.0.1")
    connection.receive_data(PROTOCOL_HEADER)   # answered with Connection.Start
    for method in (commands.Connection.StartOk(client_properties={}, mechanism="PLAIN",
                                               response="\0guest\0guest"),
                   commands.Connection.TuneOk(channel_max=100, frame_max=131072),
                   commands.Connection.Open(virtual_host="/")):
        connection.handle(InboundMethod(0, method))
    if connection.state is not ConnectionState.OPEN:   # a refused login measures nothing
        raise SystemExit("the bench connection was not opened (state "
                         f"{connection.state.value})")
    connection.handle(InboundMethod(1, commands.Channel.Open()))
    return connection


def publish_frames(queue: str, size: int, count: int, distinct_ids: bool,
                   persistent: bool = False) -> bytes:
    """`count` publishes; alike, or each with a message id of its own (as publishers that
    set message_id send them: the decoder then cannot reuse the last one's frames)."""
    publishes = []
    for number in range(1 if not distinct_ids else count):
        properties = commands.Basic.Properties(
            content_type="application/octet-stream",
            message_id=f"{number:08d}" if distinct_ids else None,
            delivery_mode=2 if persistent else None)
        publishes.append(
            frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1)
            + frame.marshal(header.ContentHeader(0, size, properties), 1)
            + frame.marshal(pamqp_body.ContentBody(b"x" * size), 1))
    return b"".join(publishes) if distinct_ids else publishes[0] * count


def drain(consumer: Connection, subscribe: InboundMethod, cancel: InboundMethod) -> None:
    """Subscribe, which delivers the whole backlog (no prefetch limit), and cancel."""
    consumer.handle(subscribe)
    consumer.end_of_batch()
    consumer.handle(cancel)


class Commits:
    """The group committer's work without its thread or fsync: each commit applies the
    metadata changes, writes every store's batch (into the page cache) and releases
    what waited for it (the confirms)."""

    def __init__(self, storage: DurableStorage):
        self.storage = storage

    def commit(self) -> None:
        persistence = self.storage.persistence
        if not persistence.has_pending():
            return
        changes, stores, writes = persistence.take_pending()
        self.storage.apply_changes(changes)
        for store in stores:
            batch = store.write_for_sync()
            if batch is not None:
                store.finish_sync(batch)
        persistence.committed(stores, writes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--batch", type=int, default=100, help="messages per socket read")
    parser.add_argument("--batches", type=int, default=3000, help="reads per round")
    parser.add_argument("--queue", default="perftest-6eec00bb-729c-4c8f-aa29-9deb6fccf806",
                        help="queue name = routing key (default: like PerfTest's)")
    parser.add_argument("--manual-ack", action="store_true",
                        help="the consumer acks each delivery (prefetch 0)")
    parser.add_argument("--distinct-ids", action="store_true",
                        help="each message of a batch has its own message_id")
    parser.add_argument("--backlog", action="store_true",
                        help="publish a round with no consumer, then drain the queue")
    parser.add_argument("--confirm", action="store_true",
                        help="persistent messages, a durable queue file, publisher confirms, "
                             "manual acks, a commit (without fsync) after each batch")
    args = parser.parse_args()
    if args.confirm:
        if args.backlog:
            parser.error("--confirm measures a consumer that keeps up: not with --backlog")
        args.manual_ack = True
        with tempfile.TemporaryDirectory(prefix="warren-bench-") as data_dir:
            storage = DurableStorage(data_dir)
            broker = Broker(persistence=storage.persistence)
            try:
                return measure(args, broker, Commits(storage))
            finally:
                storage.close(broker)
    return measure(args, Broker(), None)


def measure(args, broker: Broker, commits: Commits | None) -> int:
    publisher = open_connection(broker)
    consumer = open_connection(broker)
    publisher.handle(InboundMethod(1, commands.Queue.Declare(queue=args.queue,
                                                             durable=commits is not None)))
    if commits is not None:
        publisher.handle(InboundMethod(1, commands.Confirm.Select()))
        commits.commit()
    subscribe = InboundMethod(1, commands.Basic.Consume(
        queue=args.queue, consumer_tag="bench", no_ack=not args.manual_ack))
    cancel = InboundMethod(1, commands.Basic.Cancel(consumer_tag="bench"))
    if not args.backlog:
        consumer.handle(subscribe)
    data = publish_frames(args.queue, args.size, args.batch, args.distinct_ids,
                          persistent=commits is not None)
    best = float("inf")
    tag = 0
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(args.batches):
            publisher.receive_data(data)     # as the server hands it each read
            if commits is not None:
                commits.commit()    # the acks come after it: the messages are written
            if args.manual_ack and not args.backlog:
                tag += args.batch
                consumer.handle(InboundMethod(1, commands.Basic.Ack(tag, multiple=True)))
        if args.backlog:
            drain(consumer, subscribe, cancel)
            if args.manual_ack:
                tag += args.batches * args.batch
                consumer.handle(InboundMethod(1, commands.Basic.Ack(tag, multiple=True)))
        elapsed = time.perf_counter() - started
        best = min(best, elapsed / (args.batches * args.batch))
    mode = ("persistent, confirms, durable queue file, " if commits else "") + (
        "manual ack" if args.manual_ack else "auto-ack") + (
        ", distinct message ids" if args.distinct_ids else "") + (
        ", through a backlog" if args.backlog else "")
    print(f"{best * 1e6:.2f} us per message ({args.size} B, {mode}, batches of "
          f"{args.batch}: decode, route, deliver, encode)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
