"""Stream queues in the core, over a real StreamLog in a temporary directory: offsets,
credit, durability before delivery, offset tracking and end offsets."""

import datetime

import pytest
from pamqp import commands, header

from broker.core.broker import Broker
from broker.core.persistence import Persistence
from broker.core.ports import DeleteQueue, DropStoreFiles
from broker.server.stream_store import DurableStreamStore
from core_harness import Client, ManualReads, close_code, deliveries, kinds
from storage.stream_log import StreamLog

STREAM = {"x-queue-type": "stream"}


class StreamBroker:
    """A broker whose streams live in tmp_path, and a `commit` that does what the
    server's group committer does."""

    def __init__(self, tmp_path, clock=None, profile=None):
        self.persistence = Persistence()
        self.persistence.stream_factory = self._new_store
        self.commit_requests = 0
        self.persistence.on_commit_request = self._requested
        self.broker = Broker(persistence=self.persistence, profile=profile)
        self.tmp_path = tmp_path
        self.clock = clock
        self.stores = []
        self.reads = ManualReads()

    def _requested(self):
        self.commit_requests += 1

    def _new_store(self, vhost, queue, retention):
        extra = {} if self.clock is None else {"clock": self.clock}
        log = StreamLog(self.tmp_path / f"s{len(self.stores)}", **extra)
        store = DurableStreamStore(log, self.persistence, f"s{len(self.stores)}",
                                   self.reads, **extra)
        self.stores.append(store)
        return store

    def client(self) -> Client:
        client = Client(self.broker, reads=self.reads)
        client.open_channel()
        return client

    def commit(self):
        """Commit, then do the reads it started (consumers get what became durable)."""
        _, stores, writes = self.persistence.take_pending()
        for store in stores:
            store.sync()
        self.persistence.committed(stores, writes)
        self.reads.run()


@pytest.fixture
def streams(tmp_path):
    return StreamBroker(tmp_path)


def declare_stream(client, name="s", **arguments):
    return client.method(1, commands.Queue.Declare(queue=name, durable=True,
                                                   arguments={**STREAM, **arguments}))


def publish(client, count, start=0, name="s"):
    for index in range(start, start + count):
        client.publish(1, "", name, b"m%d" % index)


def consume(client, prefetch=10, tag="c", name="s", **arguments):
    client.method(1, commands.Basic.Qos(prefetch_count=prefetch))
    return client.method(1, commands.Basic.Consume(queue=name, consumer_tag=tag,
                                                   arguments=arguments))


def offsets_and_bodies(frames):
    """(x-stream-offset header, body) per delivery in the frames."""
    headers = [frame.properties.headers["x-stream-offset"] for _, frame in frames
               if isinstance(frame, header.ContentHeader)]
    return list(zip(headers, [body for _, body in deliveries(frames)]))


def test_consumers_see_only_committed_messages_with_their_offsets(streams):
    client = streams.client()
    declare_stream(client)
    consume(client, **{"x-stream-offset": "first"})
    publish(client, 3)
    assert deliveries(client.transport.frames()) == []
    assert streams.commit_requests >= 1        # a consumer waits: commit soon
    streams.commit()
    assert offsets_and_bodies(client.transport.frames()) == [
        (0, b"m0"), (1, b"m1"), (2, b"m2")]


def test_acks_return_credit_and_messages_stay(streams):
    client = streams.client()
    declare_stream(client)
    publish(client, 5)
    streams.commit()
    frames = consume(client, prefetch=2, **{"x-stream-offset": "first"})
    delivered = [deliver for deliver, _ in deliveries(frames)]
    assert [d.redelivered for d in delivered] == [False, False]
    frames = client.method(1, commands.Basic.Ack(delivery_tag=2, multiple=True))
    assert [body for _, body in deliveries(frames)] == [b"m2", b"m3"]
    other = streams.client()
    frames = consume(other, prefetch=10, **{"x-stream-offset": "first"})
    assert len(deliveries(frames)) == 5
    assert streams.broker.vhosts["/"].queues["s"].message_count == 5


@pytest.mark.parametrize("spec, expected", [
    ("first", [0, 1, 2, 3]), ("last", [3]), ("next", []), (2, [2, 3]), (-5, [0, 1, 2, 3]),
    (9, []), ("1h", [0, 1, 2, 3])])
def test_start_offsets(streams, spec, expected):
    client = streams.client()
    declare_stream(client)
    publish(client, 4)
    streams.commit()
    frames = consume(client, **{"x-stream-offset": spec})
    assert [offset for offset, _ in offsets_and_bodies(frames)] == expected


def test_timestamp_start_finds_the_first_message_at_or_after_it(tmp_path):
    now = [1_700_000_000.0]
    streams = StreamBroker(tmp_path, clock=lambda: now[0])
    client = streams.client()
    declare_stream(client)
    publish(client, 2)
    now[0] += 10
    publish(client, 2, start=2)
    streams.commit()
    moment = datetime.datetime.fromtimestamp(now[0] - 5, tz=datetime.timezone.utc)
    frames = consume(client, **{"x-stream-offset": moment})
    assert [offset for offset, _ in offsets_and_bodies(frames)] == [2, 3]
    frames = consume(client, tag="d", **{"x-stream-offset": "7s"})
    assert [offset for offset, _ in offsets_and_bodies(frames)] == [2, 3]


def test_stream_refusals_match_rabbitmq(streams):
    client = streams.client()
    replies = client.method(1, commands.Queue.Declare(queue="t", durable=False,
                                                      arguments=STREAM))
    assert close_code(replies) == 406
    client = streams.client()
    declare_stream(client)
    replies = client.method(1, commands.Basic.Consume(queue="s", consumer_tag="c"))
    assert close_code(replies) == 406          # no prefetch
    client = streams.client()
    client.method(1, commands.Basic.Qos(prefetch_count=5))
    replies = client.method(1, commands.Basic.Consume(queue="s", no_ack=True))
    assert close_code(replies) == 540          # automatic acks: connection error
    client = streams.client()
    assert close_code(client.method(1, commands.Basic.Get(queue="s"))) == 540
    client = streams.client()
    assert close_code(client.method(1, commands.Queue.Purge(queue="s"))) == 540


def test_reject_and_nack_only_return_credit(streams):
    client = streams.client()
    declare_stream(client)
    publish(client, 3)
    streams.commit()
    consume(client, prefetch=1, **{"x-stream-offset": "first"})
    frames = client.method(1, commands.Basic.Reject(delivery_tag=1, requeue=True))
    assert offsets_and_bodies(frames) == [(1, b"m1")]
    frames = client.method(1, commands.Basic.Nack(delivery_tag=2, requeue=False))
    assert offsets_and_bodies(frames) == [(2, b"m2")]


def test_tracking_consumer_resumes_after_its_last_acked_offset(streams):
    client = streams.client()
    declare_stream(client)
    publish(client, 6)
    streams.commit()
    tracking = {"x-stream-automatic-offset-tracking": True, "x-stream-offset": "first"}
    consume(client, prefetch=10, tag="reader", **tracking)
    client.method(1, commands.Basic.Ack(delivery_tag=1))
    client.method(1, commands.Basic.Ack(delivery_tag=3))     # 2 is still unacked
    client.method(1, commands.Basic.Cancel(consumer_tag="reader"))
    other = streams.client()
    frames = consume(other, prefetch=10, tag="reader", **tracking)
    assert [offset for offset, _ in offsets_and_bodies(frames)] == [1, 2, 3, 4, 5]


def test_tracked_offsets_survive_a_restart(tmp_path, streams):
    client = streams.client()
    declare_stream(client)
    publish(client, 4)
    streams.commit()
    consume(client, prefetch=10, tag="reader", **{"x-stream-offset": None})
    client.method(1, commands.Basic.Ack(delivery_tag=2, multiple=True))
    streams.commit()
    store = streams.stores[0]
    store.close()
    log, problems = StreamLog.recover(store.log.directory)
    assert problems == []
    assert log.consumer_offset("reader") == 1
    assert log.next_offset == 4


def test_end_offset_cancels_the_consumer_once_reached(streams):
    client = streams.client()
    declare_stream(client)
    publish(client, 2)
    streams.commit()
    frames = consume(client, prefetch=10, **{"x-stream-offset": "first",
                                            "x-stream-end-offset": 4})
    assert [offset for offset, _ in offsets_and_bodies(frames)] == [0, 1]
    assert commands.Basic.Cancel not in [type(frame) for _, frame in frames]
    publish(client, 3, start=2)
    streams.commit()
    frames = client.transport.frames()
    assert [offset for offset, _ in offsets_and_bodies(frames)] == [2, 3]
    assert kinds(frames)[-1] == (1, commands.Basic.Cancel)


def test_end_offset_at_or_before_the_start_cancels_at_once(streams):
    client = streams.client()
    declare_stream(client)
    publish(client, 3)
    streams.commit()
    frames = consume(client, **{"x-stream-offset": 2, "x-stream-end-offset": 2})
    assert [kind for _, kind in kinds(frames)] == [commands.Basic.ConsumeOk,
                                                   commands.Basic.Cancel]


def test_malformed_consumer_arguments_are_406(streams):
    declare_stream(streams.client())
    for arguments in ({"x-stream-offset": "soon"}, {"x-stream-offset": True},
                      {"x-stream-end-offset": -1},
                      {"x-stream-automatic-offset-tracking": "yes"}):
        assert close_code(consume(streams.client(), **arguments)) == 406


def test_deleting_a_stream_drops_its_log(streams):
    client = streams.client()
    declare_stream(client)
    publish(client, 2)
    streams.commit()
    (_, ok), = client.method(1, commands.Queue.Delete(queue="s"))
    assert ok.message_count == 0                # as RabbitMQ reports for streams
    changes, _, _ = streams.persistence.take_pending()
    assert [type(change) for change in changes] == [DeleteQueue, DropStoreFiles]


def test_a_streams_published_count_is_every_message_appended(streams):
    client = streams.client()
    declare_stream(client)
    publish(client, 3)
    streams.commit()
    assert client.broker.vhosts["/"].queues["s"].published == 3
