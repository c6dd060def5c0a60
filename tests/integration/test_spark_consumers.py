"""The amqp source's consumers (spark/amqp/connection.py, stream_client.py) against a real
broker, without Spark: deliveries parsed by DeliveryFrames carry what was published
(every property, bodies over several frames, in order), are acknowledged and
requeued as before, and stream ranges read exactly their offsets."""

import gc

import pika
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (names: fixture)
    _test_deadline, close_quietly, connect, names, wait_for_count,
)
from spark.amqp.connection import QueueConsumer
from spark.amqp.options import StreamQueueReadOptions, StreamReadOptions
from spark.amqp.stream_client import StreamRangeConsumer
from spark.amqp.stream_queue_reader import AmqpStreamQueueReader, StreamRange
from spark.amqp.stream_reader import AmqpStreamReader

WAIT = 30.0

PROPERTIES = pika.BasicProperties(
    content_type="application/json", content_encoding="utf-8",
    headers={"tenant": "acme", "attempt": 3, "urgent": True, "raw": b"\xffA",
             "nested": {"a": [1, "b"]}},
    delivery_mode=2, priority=1, correlation_id="c-1", reply_to="replies",
    expiration="600000", message_id="m-1", timestamp=1767225600, type="order",
    user_id="guest", app_id="shop")


def url_of(broker) -> str:
    return f"amqp://guest:guest@{broker.host}:{broker.port}/%2F"


def publish(broker, queue: str, messages, arguments=None) -> None:
    connection = connect(broker)
    try:
        channel = connection.channel()
        channel.queue_declare(queue, arguments=arguments, durable=arguments is not None)
        channel.confirm_delivery()
        for body, properties in messages:
            channel.basic_publish("", queue, body, properties)
    finally:
        close_quietly(connection)


def ready(broker, queue: str, count: int) -> int:
    connection = connect(broker)
    try:
        return wait_for_count(connection.channel(), queue, count, timeout=WAIT)
    finally:
        close_quietly(connection)


def consume_all(broker, queue: str, count: int) -> tuple:
    consumer = QueueConsumer(url_of(broker), queue, prefetch=0, purpose="test")
    assert consumer.open() == count
    consumer.consume()
    consumer.fill(count, WAIT)
    return consumer, consumer.take(count)


def test_queue_deliveries_carry_what_was_published_and_are_acknowledged(broker, names):
    queue = names.queue("spark-consumer")
    big = bytes(range(256)) * 1200  # 307,200 bytes: several body frames
    messages = ([(b"first", PROPERTIES), (b"", pika.BasicProperties(message_id="empty")),
                 (big, PROPERTIES)]
                + [(b"m%d" % n, pika.BasicProperties(message_id=str(n))) for n in range(200)])
    publish(broker, queue, messages)
    consumer, deliveries = consume_all(broker, queue, len(messages))
    try:
        assert [d.body for d in deliveries] == [body for body, _ in messages]
        tags = [d.tag for d in deliveries]
        assert tags == sorted(tags)
        first = deliveries[0]
        assert (first.exchange, first.routing_key, first.redelivered) == ("", queue, False)
        for name in ("content_type", "content_encoding", "headers", "delivery_mode",
                     "priority", "correlation_id", "reply_to", "expiration", "message_id",
                     "timestamp", "type", "user_id", "app_id"):
            assert getattr(first.properties, name) == getattr(PROPERTIES, name), name
        assert [d.properties.message_id for d in deliveries[3:]] == \
            [str(n) for n in range(200)]
        consumer.ack_through(deliveries[-1].tag)
    finally:
        consumer.close()
    assert ready(broker, queue, 0) == 0


def test_unacknowledged_deliveries_come_back_redelivered(broker, names):
    queue = names.queue("spark-consumer-requeue")
    publish(broker, queue, [(b"m%d" % n, pika.BasicProperties()) for n in range(10)])
    consumer, deliveries = consume_all(broker, queue, 10)
    consumer.ack_through(deliveries[3].tag)  # the first four only
    consumer.close()
    assert ready(broker, queue, 6) == 6
    consumer, again = consume_all(broker, queue, 6)
    try:
        assert [d.body for d in again] == [b"m%d" % n for n in range(4, 10)]
        assert all(d.redelivered for d in again)
    finally:
        consumer.close()


@pytest.mark.parametrize("start, end", [(0, 30), (5, 17)])
def test_a_stream_range_reads_exactly_its_offsets(broker, names, start, end):
    stream = names.queue("spark-consumer-stream")
    publish(broker, stream, [(b"s%d" % n, pika.BasicProperties(message_id=str(n)))
                             for n in range(30)], arguments={"x-queue-type": "stream"})
    consumer = StreamRangeConsumer(url_of(broker), stream, start, end, prefetch=7)
    try:
        rows = [d for batch in consumer.batches(rows=4) for d in batch]
    finally:
        consumer.close()
    assert [d.offset for d in rows] == list(range(start, end))
    assert [d.body for d in rows] == [b"s%d" % n for n in range(start, end)]
    assert [d.properties.headers["x-stream-offset"] for d in rows] == list(range(start, end))


def test_a_stream_tasks_rows_come_with_the_garbage_collector_on(broker, names):
    """The task's read pauses the cyclic collector only while it makes rows: Spark
    (and anything else in the worker) runs with it on, also when a read stops early."""
    stream = names.queue("spark-consumer-stream")
    publish(broker, stream, [(b"s%d" % n, pika.BasicProperties(message_id=str(n)))
                             for n in range(30)], arguments={"x-queue-type": "stream"})
    reader = AmqpStreamQueueReader(StreamQueueReadOptions.parse(
        {"url": url_of(broker), "queue": stream, "startingOffset": "first"}))
    assert gc.isenabled()
    batches = reader.read(StreamRange(stream, 3, 25))
    first = next(batches)
    assert gc.isenabled()
    rows = first.to_pylist() + [row for batch in batches for row in batch.to_pylist()]
    assert gc.isenabled()
    assert [row["offset"] for row in rows] == list(range(3, 25))
    assert [row["body"] for row in rows] == [b"s%d" % n for n in range(3, 25)]
    assert [row["message_id"] for row in rows] == [str(n) for n in range(3, 25)]
    assert [dict(row["headers"]) for row in rows] == [
        {"x-stream-offset": str(n)} for n in range(3, 25)]
    stopped_early = reader.read(StreamRange(stream, 0, 30))
    next(stopped_early)
    stopped_early.close()
    assert gc.isenabled()


def test_an_available_now_read_takes_what_was_ready_when_it_started(broker, names):
    """The plain-queue reader's availableNow target: the messages ready when the query
    started (counted before its consumer starts), not those published later."""
    queue = names.queue("spark-consumer-available-now")
    publish(broker, queue, [(b"m%d" % n, pika.BasicProperties()) for n in range(50)])
    assert ready(broker, queue, 50) == 50
    reader = AmqpStreamReader(StreamReadOptions.parse(
        {"url": url_of(broker), "queue": queue, "maxMessagesPerTrigger": "20"}))
    try:
        reader.prepareForTriggerAvailableNow()
        publish(broker, queue, [(b"later%d" % n, pika.BasicProperties()) for n in range(10)])
        start, bodies = reader.initialOffset(), []
        while True:
            batches, end = reader.read(start)
            if end == start:
                break
            bodies += [row["body"] for batch in batches for row in batch.to_pylist()]
            reader.commit(end)
            start = end
    finally:
        reader.stop()
    assert bodies == [b"m%d" % n for n in range(50)]
    assert ready(broker, queue, 10) == 10  # the later ones, back in the queue
