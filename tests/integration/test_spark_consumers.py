"""The amqp source's consumers (spark/amqp/connection.py, stream_client.py) against a real
broker, without Spark: deliveries parsed by DeliveryFrames carry what was published
(every property, bodies over several frames, in order), are acknowledged and
requeued as before, and stream ranges read exactly their offsets (with a filter, exactly
the messages of their offsets it matches)."""

import gc

import pika
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (names: fixture)
    _test_deadline, close_quietly, connect, names, wait_for_count,
)
from spark.amqp.connection import QueueConsumer
from spark.amqp.options import AmqpOptionError, StreamQueueReadOptions, StreamReadOptions
from spark.amqp.stream_client import StreamFilter, StreamRangeConsumer
from spark.amqp.stream_queue_reader import AmqpStreamQueueReader, StreamRange
from spark.amqp.stream_reader import AmqpStreamReader

WAIT = 30.0

def every_property(user_id: str) -> pika.BasicProperties:
    """Every basic property set; user_id must be the publishing user's (the broker
    checks it)."""
    return pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8",
        headers={"tenant": "acme", "attempt": 3, "urgent": True, "raw": b"\xffA",
                 "nested": {"a": [1, "b"]}},
        delivery_mode=2, priority=1, correlation_id="c-1", reply_to="replies",
        expiration="600000", message_id="m-1", timestamp=1767225600, type="order",
        user_id=user_id, app_id="shop")


def publish(warren, queue: str, messages, arguments=None) -> None:
    connection = connect(warren)
    try:
        channel = connection.channel()
        channel.queue_declare(queue, arguments=arguments, durable=arguments is not None)
        channel.confirm_delivery()
        for body, properties in messages:
            channel.basic_publish("", queue, body, properties)
    finally:
        close_quietly(connection)


def ready(warren, queue: str, count: int) -> int:
    connection = connect(warren)
    try:
        return wait_for_count(connection.channel(), queue, count, timeout=WAIT)
    finally:
        close_quietly(connection)


def consume_all(warren, queue: str, count: int) -> tuple:
    consumer = QueueConsumer(warren.url, queue, prefetch=0, purpose="test")
    assert consumer.open() == count
    consumer.consume()
    consumer.fill(count, WAIT)
    return consumer, consumer.take(count)


def test_queue_deliveries_carry_what_was_published_and_are_acknowledged(warren, names):
    queue = names.queue("spark-consumer")
    big = bytes(range(256)) * 1200  # 307,200 bytes: several body frames
    properties = every_property(warren.user)
    messages = ([(b"first", properties), (b"", pika.BasicProperties(message_id="empty")),
                 (big, properties)]
                + [(b"m%d" % n, pika.BasicProperties(message_id=str(n))) for n in range(200)])
    publish(warren, queue, messages)
    consumer, deliveries = consume_all(warren, queue, len(messages))
    try:
        assert [d.body for d in deliveries] == [body for body, _ in messages]
        tags = [d.tag for d in deliveries]
        assert tags == sorted(tags)
        first = deliveries[0]
        assert (first.exchange, first.routing_key, first.redelivered) == ("", queue, False)
        for name in ("content_type", "content_encoding", "headers", "delivery_mode",
                     "priority", "correlation_id", "reply_to", "expiration", "message_id",
                     "timestamp", "type", "user_id", "app_id"):
            assert getattr(first.properties, name) == getattr(properties, name), name
        assert [d.properties.message_id for d in deliveries[3:]] == \
            [str(n) for n in range(200)]
        consumer.ack_through(deliveries[-1].tag)
    finally:
        consumer.close()
    assert ready(warren, queue, 0) == 0


def test_unacknowledged_deliveries_come_back_redelivered(warren, names):
    queue = names.queue("spark-consumer-requeue")
    publish(warren, queue, [(b"m%d" % n, pika.BasicProperties()) for n in range(10)])
    consumer, deliveries = consume_all(warren, queue, 10)
    consumer.ack_through(deliveries[3].tag)  # the first four only
    consumer.close()
    assert ready(warren, queue, 6) == 6
    consumer, again = consume_all(warren, queue, 6)
    try:
        assert [d.body for d in again] == [b"m%d" % n for n in range(4, 10)]
        assert all(d.redelivered for d in again)
    finally:
        consumer.close()


@pytest.mark.parametrize("start, end", [(0, 30), (5, 17)])
def test_a_stream_range_reads_exactly_its_offsets(warren, names, start, end):
    stream = names.queue("spark-consumer-stream")
    publish(warren, stream, [(b"s%d" % n, pika.BasicProperties(message_id=str(n)))
                             for n in range(30)], arguments={"x-queue-type": "stream"})
    consumer = StreamRangeConsumer(warren.url, stream, start, end, prefetch=7)
    try:
        rows = [d for batch in consumer.batches(rows=4) for d in batch]
    finally:
        consumer.close()
    assert [d.offset for d in rows] == list(range(start, end))
    assert [d.body for d in rows] == [b"s%d" % n for n in range(start, end)]
    assert [d.properties.headers["x-stream-offset"] for d in rows] == list(range(start, end))


TAGS = ["red", "blue", None, "green", ""]


def tagged_stream(warren, names, count: int) -> str:
    """A stream of `count` messages s<n>, tagged (x-stream-filter-value) by TAGS in turn."""
    stream = names.queue("spark-consumer-stream")
    publish(warren, stream, [
        (b"s%d" % n, pika.BasicProperties(
            headers=None if TAGS[n % 5] is None else {"x-stream-filter-value": TAGS[n % 5]}))
        for n in range(count)], arguments={"x-queue-type": "stream"})
    return stream


@pytest.mark.parametrize("line", [
    pytest.param(line, marks=pytest.mark.warren_rabbitmq(line)) for line in ("3.10", "4.3")])
@pytest.mark.parametrize("match_unfiltered", [False, True])
def test_a_filtered_stream_range_reads_the_messages_it_matches(warren, names, line,
                                                              match_unfiltered):
    # Warren of the 4.3 line filters (the reader passes x-stream-filter, and the offsets
    # it leaves out are no data loss); under 3.10 it ignores the filter, and RabbitMQ is
    # not given it (docs/spark.md): the reader filters, and the rows are the same.
    stream = tagged_stream(warren, names, 40)
    wanted = StreamFilter(["red", "green"], match_unfiltered)
    consumer = StreamRangeConsumer(warren.url, stream, 3, 37, prefetch=4, wanted=wanted)
    try:
        rows = [d for batch in consumer.batches(rows=4) for d in batch]
    finally:
        consumer.close()
    kept = ("red", "green") + ((None, "") if match_unfiltered else ())
    expected = [n for n in range(3, 37) if TAGS[n % 5] in kept]
    assert [d.offset for d in rows] == expected
    assert [d.body for d in rows] == [b"s%d" % n for n in expected]
    assert consumer.lost == 0


def test_the_filter_options():
    options = StreamQueueReadOptions.parse({"queue": "s", "startingOffset": "first",
                                            "filter": "red, green",
                                            "matchUnfiltered": "true"})
    assert (options.filter_values, options.match_unfiltered) == (("red", "green"), True)
    plain = StreamQueueReadOptions.parse({"queue": "s", "startingOffset": "first"})
    assert (plain.filter_values, plain.match_unfiltered) == ((), False)
    with pytest.raises(AmqpOptionError, match="empty value"):
        StreamQueueReadOptions.parse({"queue": "s", "startingOffset": "0", "filter": "a,"})
    with pytest.raises(AmqpOptionError, match="applies with option filter"):
        StreamQueueReadOptions.parse({"queue": "s", "startingOffset": "0",
                                      "matchUnfiltered": "true"})
    with pytest.raises(AmqpOptionError, match="applies to readStream on stream queues"):
        StreamReadOptions.parse({"queue": "q", "filter": "red"})


def test_a_stream_tasks_rows_come_with_the_garbage_collector_on(warren, names):
    """The task's read pauses the cyclic collector only while it makes rows: Spark
    (and anything else in the worker) runs with it on, also when a read stops early."""
    stream = names.queue("spark-consumer-stream")
    publish(warren, stream, [(b"s%d" % n, pika.BasicProperties(message_id=str(n)))
                             for n in range(30)], arguments={"x-queue-type": "stream"})
    reader = AmqpStreamQueueReader(StreamQueueReadOptions.parse(
        {"url": warren.url, "queue": stream, "startingOffset": "first"}))
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


def test_an_available_now_read_takes_what_was_ready_when_it_started(warren, names):
    """The plain-queue reader's availableNow target: the messages ready when the query
    started (counted before its consumer starts), not those published later."""
    queue = names.queue("spark-consumer-available-now")
    publish(warren, queue, [(b"m%d" % n, pika.BasicProperties()) for n in range(50)])
    assert ready(warren, queue, 50) == 50
    reader = AmqpStreamReader(StreamReadOptions.parse(
        {"url": warren.url, "queue": queue, "maxMessagesPerTrigger": "20"}))
    try:
        reader.prepareForTriggerAvailableNow()
        publish(warren, queue, [(b"later%d" % n, pika.BasicProperties()) for n in range(10)])
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
    assert ready(warren, queue, 10) == 10  # the later ones, back in the queue
