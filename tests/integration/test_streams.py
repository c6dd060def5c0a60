"""Stream queues (`x-queue-type: stream`) with pika's BlockingConnection, as RabbitMQ 3.10
serves them: declaration rules, what a stream refuses, where a consumer starts
(`x-stream-offset`), the `x-stream-offset` header of every delivery, prefetch as credit,
and a million messages read back in order.

Only standard RabbitMQ behaviour is tested here; Warren's differences and extensions are
in test_stream_extensions.py, kill -9 recovery in test_stream_crash.py (both import
the helpers below).

Messages are published with confirms, one at a time, unless a test says otherwise: each
is then a chunk of its own in RabbitMQ, whose stream consumers get a whole chunk once
they have any credit. A reader knows where a stream ends, so it waits for an exact number
of deliveries; where it must also show that nothing else comes, a sentinel message is
published after the others and must be the next delivery. RabbitMQ's Declare-Ok
message_count is only an estimate for streams and is never asserted here.
"""

import datetime
import time

import pika
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn, names: fixtures)
    _test_deadline, chan, conn, expect_channel_error, expect_connection_error, names,
    wait_until,
)
from tests.support.raw_amqp import ConfirmedPublisher, connect_to
from tests.support.stream_helpers import (
    ABSENT, QUIET, Reader, STREAM, confirm_channel, declare_stream, filled_stream,
    next_delivery, nothing_more, publish_confirmed, stream_offset, texts,
)

PIKA_TEST_TIMEOUT = 300  # the million-message test: 50-90 s with RabbitMQ 3.10 here


# --- Declaration ---------------------------------------------------------------------


def test_declare_and_redeclare_a_stream(chan, names):
    queue = names.queue("stream")
    created = chan.queue_declare(queue, durable=True, arguments=STREAM).method
    assert (created.queue, created.consumer_count) == (queue, 0)
    again = chan.queue_declare(queue, durable=True, arguments=STREAM).method
    assert again.queue == queue
    assert chan.queue_declare(queue, passive=True).method.queue == queue


@pytest.mark.parametrize("flags, refused", [
    ({"durable": False}, "non-durable"),
    ({"durable": True, "exclusive": True}, "exclusive-owner"),
    ({"durable": True, "auto_delete": True}, "auto-delete"),
])
def test_a_stream_must_be_durable_shared_and_kept(warren, conn, chan, names, flags,
                                                 refused):
    queue = names.queue("stream")
    error = expect_channel_error(
        conn, chan, 406, lambda: chan.queue_declare(queue, arguments=STREAM, **flags))
    assert "PRECONDITION_FAILED" in error.reply_text
    assert (f"invalid property '{refused}' for queue '{queue}' in vhost '{warren.vhost}'"
            in error.reply_text)


@pytest.mark.parametrize("age", ["7D", "12h", "30m", "10s", "1Y", "1M"])
def test_max_age_takes_a_number_and_a_unit(chan, names, age):
    queue = declare_stream(chan, names, **{"x-max-age": age})
    assert chan.queue_declare(queue, passive=True).method.queue == queue


@pytest.mark.parametrize("age", ["7d", "10x", "7 D", "1.5h", "0s", "100"])
def test_malformed_max_age_is_406(conn, chan, names, age):
    # (RabbitMQ 3.10 answers a string not starting with a digit, e.g. 'foo', with
    # connection error 541 INTERNAL_ERROR: a crash, not behaviour worth copying.)
    queue = names.queue("stream")
    error = expect_channel_error(conn, chan, 406, lambda: chan.queue_declare(
        queue, durable=True, arguments={**STREAM, "x-max-age": age}))
    assert f"invalid arg 'x-max-age' for queue '{queue}'" in error.reply_text
    assert "invalid_max_age" in error.reply_text


def test_max_age_must_be_a_string(conn, chan, names):
    queue = names.queue("stream")
    error = expect_channel_error(conn, chan, 406, lambda: chan.queue_declare(
        queue, durable=True, arguments={**STREAM, "x-max-age": 10}))
    assert f"invalid arg 'x-max-age' for queue '{queue}'" in error.reply_text
    assert "unacceptable_type" in error.reply_text


@pytest.mark.parametrize("argument, value", [
    ("x-message-ttl", 1000),
    ("x-max-length", 10),
    ("x-dead-letter-exchange", "dlx"),
    ("x-expires", 10000),
])
def test_classic_queue_arguments_are_refused(warren, conn, chan, names, argument, value):
    queue = names.queue("stream")
    error = expect_channel_error(conn, chan, 406, lambda: chan.queue_declare(
        queue, durable=True, arguments={**STREAM, argument: value}))
    assert "PRECONDITION_FAILED" in error.reply_text
    assert (f"invalid arg '{argument}' for queue '{queue}' in vhost '{warren.vhost}' of "
            "queue type rabbit_stream_queue") in error.reply_text


def test_size_limits_are_accepted(conn, names):
    publisher = confirm_channel(conn)
    queue = declare_stream(publisher, names, **{"x-max-length-bytes": 10_000_000,
                                                "x-stream-max-segment-size-bytes": 1_000_000})
    publish_confirmed(publisher, queue, texts("m", 3))
    reader = Reader(conn, queue, "first")
    assert reader.read(3) == ["m0", "m1", "m2"]


# --- What a stream refuses -----------------------------------------------------------


@pytest.mark.parametrize("auto_ack", [False, True])
def test_basic_get_is_not_implemented(conn, chan, names, auto_ack):
    queue = declare_stream(chan, names)
    error = expect_connection_error(conn, 540, lambda: chan.basic_get(queue, auto_ack=auto_ack))
    assert "NOT_IMPLEMENTED" in error.reply_text
    assert f"basic.get not supported by stream queues queue '{queue}'" in error.reply_text


def test_purge_is_not_implemented(conn, chan, names):
    queue = declare_stream(chan, names)
    error = expect_connection_error(conn, 540, lambda: chan.queue_purge(queue))
    assert "NOT_IMPLEMENTED" in error.reply_text
    assert "queue.purge not supported by stream queues" in error.reply_text


@pytest.mark.parametrize("qos, auto_ack", [
    (None, False),                                    # no Basic.Qos at all
    ({"prefetch_count": 0}, False),                   # 0: unlimited
    pytest.param({"prefetch_count": 10, "global_qos": True}, False,   # a channel-wide
                 marks=pytest.mark.warren_rabbitmq("3.10")),        # limit (4.3: none)
    (None, True),                                     # checked before the auto-ack
])
def test_consume_needs_a_consumer_prefetch_count(conn, chan, names, qos, auto_ack):
    queue = declare_stream(chan, names)
    if qos is not None:
        chan.basic_qos(**qos)
    error = expect_channel_error(conn, chan, 406, lambda: chan.basic_consume(
        queue, lambda *args: None, auto_ack=auto_ack))
    assert error.reply_text.startswith("PRECONDITION_FAILED - consumer prefetch count is "
                                       "not set for ")   # (per line: test_stream_lines.py)
    assert f"queue '{queue}' in vhost" in error.reply_text


def test_auto_ack_consume_is_not_implemented(conn, chan, names):
    queue = declare_stream(chan, names)
    chan.basic_qos(prefetch_count=10)
    error = expect_connection_error(conn, 540, lambda: chan.basic_consume(
        queue, lambda *args: None, auto_ack=True))
    assert error.reply_text.startswith("NOT_IMPLEMENTED - automatic acknowledgement not "
                                       "supported by stream")
    assert f"queue '{queue}' in vhost" in error.reply_text


@pytest.mark.parametrize("interval", ["7d", "10x", "1.5h", "0s"])
def test_malformed_offset_interval_is_406(conn, chan, names, interval):
    # (As for x-max-age, RabbitMQ 3.10 answers a string not starting with a digit with
    # connection error 541; Warren's 406 for those is in test_stream_extensions.py.)
    queue = declare_stream(chan, names)
    chan.basic_qos(prefetch_count=10)
    error = expect_channel_error(conn, chan, 406, lambda: chan.basic_consume(
        queue, lambda *args: None, arguments={"x-stream-offset": interval}))
    assert "PRECONDITION_FAILED" in error.reply_text
    assert "invalid arg 'x-stream-offset'" in error.reply_text


# --- Publishing and reading ----------------------------------------------------------


def test_confirmed_messages_read_from_first_with_their_offsets(conn, names):
    queue, _ = filled_stream(conn, names, 100)
    reader = Reader(conn, queue, "first")
    assert reader.read(100) == texts("m", 100)
    assert reader.offsets == list(range(100))
    for number, delivery in enumerate(reader.deliveries, start=1):
        method = delivery.method
        assert method.delivery_tag == number
        assert method.consumer_tag == reader.tag
        assert method.redelivered is False
        assert (method.exchange, method.routing_key) == ("", queue)
        assert isinstance(delivery.offset, int)


def test_deliveries_keep_the_exchange_routing_key_and_properties(conn, names):
    publisher = confirm_channel(conn)
    queue = declare_stream(publisher, names)
    exchange = names.exchange()
    publisher.exchange_declare(exchange, "direct")
    publisher.queue_bind(queue, exchange, "key.one")
    publisher.queue_bind(queue, exchange, "key.two")
    properties = pika.BasicProperties(content_type="text/plain", message_id="id-1",
                                      correlation_id="corr", delivery_mode=2,
                                      headers={"mine": "x", "n": 7})
    publisher.basic_publish(exchange, "key.one", b"first", properties)
    publisher.basic_publish(exchange, "key.two", b"second")
    reader = Reader(conn, queue, "first")
    assert reader.read(2) == ["first", "second"]
    first, second = reader.deliveries
    assert (first.method.exchange, first.method.routing_key) == (exchange, "key.one")
    assert (second.method.exchange, second.method.routing_key) == (exchange, "key.two")
    assert (first.properties.content_type, first.properties.message_id,
            first.properties.correlation_id, first.properties.delivery_mode) == (
        "text/plain", "id-1", "corr", 2)
    # The broker adds x-stream-offset to the publisher's headers.
    assert first.properties.headers == {"mine": "x", "n": 7, "x-stream-offset": 0}
    assert second.properties.headers == {"x-stream-offset": 1}


@pytest.mark.parametrize("offset, first", [(40, 40), (0, 0), (99, 99), (-5, 0)])
def test_numeric_offset(conn, names, offset, first):
    queue, publisher = filled_stream(conn, names, 100)
    reader = Reader(conn, queue, offset)
    publish_confirmed(publisher, queue, ["sentinel"])
    expected = texts("m", 100 - first, start=first) + ["sentinel"]
    assert reader.read(len(expected)) == expected
    assert reader.offsets == list(range(first, 101))


def test_offset_beyond_the_end_waits_for_that_offset(conn, names):
    queue, publisher = filled_stream(conn, names, 100)
    reader = Reader(conn, queue, 150)
    publish_confirmed(publisher, queue, texts("m", 60, start=100))
    assert reader.read(10) == texts("m", 10, start=150)
    assert reader.offsets == list(range(150, 160))


def test_last_starts_at_the_last_message(conn, names):
    # Published one by one with confirms, every message is a chunk of its own, so
    # RabbitMQ's "first message of the last chunk" is the last message.
    queue, publisher = filled_stream(conn, names, 100)
    reader = Reader(conn, queue, "last")
    assert reader.read(1) == ["m99"]
    publish_confirmed(publisher, queue, ["after"])
    assert reader.read(2) == ["m99", "after"]
    assert reader.offsets == [99, 100]


def test_last_on_an_empty_stream_waits_for_the_first_message(conn, chan, names):
    queue = declare_stream(chan, names)
    reader = Reader(conn, queue, "last")
    publish_confirmed(confirm_channel(conn), queue, ["one", "two"])
    assert reader.read(2) == ["one", "two"]
    assert reader.offsets == [0, 1]


@pytest.mark.parametrize("offset", [ABSENT, "next"])
def test_next_sees_only_messages_published_after_the_consume(conn, names, offset):
    queue, publisher = filled_stream(conn, names, 100)
    reader = Reader(conn, queue, offset)
    publish_confirmed(publisher, queue, texts("new", 5))
    assert reader.read(5) == texts("new", 5)
    assert reader.offsets == list(range(100, 105))


def next_whole_second(connection) -> int:
    """Process I/O until the wall clock enters the next whole second; return that second
    (epoch seconds). Every message confirmed before the call is older than it. (AMQP
    timestamps have a precision of one second.)"""
    second = int(time.time())
    while int(time.time()) == second:
        connection.process_data_events(time_limit=0.01)
    return second + 1


def test_timestamp_offset_starts_at_the_first_message_published_at_or_after_it(conn, names):
    queue, publisher = filled_stream(conn, names, 10, prefix="old")
    boundary = next_whole_second(conn)
    publish_confirmed(publisher, queue, texts("new", 10))
    moment = datetime.datetime.fromtimestamp(boundary, tz=datetime.timezone.utc)
    reader = Reader(conn, queue, moment)
    assert reader.read(10) == texts("new", 10)
    assert reader.offsets == list(range(10, 20))


def test_timestamp_in_the_future_waits_for_new_messages(conn, names):
    queue, publisher = filled_stream(conn, names, 10)
    moment = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    reader = Reader(conn, queue, moment)
    # Later than every message: the consumer starts at the end of the stream, as with
    # 'next', and gets what is published from then on (though older than the moment).
    publish_confirmed(publisher, queue, ["sentinel"])
    assert reader.read(1) == ["sentinel"]
    assert reader.offsets == [10]


@pytest.mark.parametrize("interval", ["5m", "1h", "7D"])
def test_interval_offset_covers_messages_published_within_it(conn, names, interval):
    queue, _ = filled_stream(conn, names, 50)
    reader = Reader(conn, queue, interval)
    assert reader.read(50) == texts("m", 50)
    assert reader.offsets == list(range(50))


def test_consuming_removes_nothing(conn, names):
    queue, _ = filled_stream(conn, names, 30)
    first = Reader(conn, queue, "first")
    assert first.read(30) == texts("m", 30)
    first.cancel()
    second = Reader(conn, queue, "first")
    assert second.read(30) == texts("m", 30)
    assert second.offsets == list(range(30))


def test_two_consumers_at_different_offsets_read_independently(conn, names):
    queue, publisher = filled_stream(conn, names, 100)
    whole = Reader(conn, queue, "first", prefetch=10)
    tail = Reader(conn, queue, 60, prefetch=7)
    assert whole.read(100) == texts("m", 100)
    assert tail.read(40) == texts("m", 40, start=60)
    publish_confirmed(publisher, queue, texts("m", 5, start=100))
    assert whole.read(105) == texts("m", 105)
    assert tail.read(45) == texts("m", 45, start=60)
    assert whole.offsets == list(range(105))
    assert tail.offsets == list(range(60, 105))


@pytest.mark.parametrize("prefetch", [1, 3])
def test_prefetch_is_credit_that_acks_return(conn, chan, names, prefetch):
    queue, _ = filled_stream(conn, names, 20)
    chan.basic_qos(prefetch_count=prefetch)
    messages = chan.consume(queue, arguments={"x-stream-offset": "first"},
                            inactivity_timeout=QUIET)
    held = [next_delivery(messages) for _ in range(prefetch)]
    assert nothing_more(messages)
    assert [stream_offset(properties) for _, properties, _ in held] == list(range(prefetch))
    # One ack, one more delivery.
    chan.basic_ack(held[0][0].delivery_tag)
    method, properties, body = next_delivery(messages)
    assert (stream_offset(properties), body) == (prefetch, b"m%d" % prefetch)
    assert nothing_more(messages)
    # A multiple ack returns the credit of everything it covers.
    chan.basic_ack(method.delivery_tag, multiple=True)
    more = [next_delivery(messages) for _ in range(prefetch)]
    assert nothing_more(messages)
    assert [stream_offset(properties) for _, properties, _ in more] == list(
        range(prefetch + 1, 2 * prefetch + 1))
    assert [method.redelivered for method, _, _ in held + more] == [False] * (2 * prefetch)


# --- Volume --------------------------------------------------------------------------

MILLION = 1_000_000
READ_PREFETCH = 2_000
ACK_EVERY = 1_000


@pytest.mark.slow
def test_a_million_small_messages_read_back_in_order(warren, conn, names):
    """Published with frames encoded by hand (raw_amqp.ConfirmedPublisher: through
    pika, the publishing alone took half of the test's CPU), every message confirmed,
    then read back through pika."""
    queue = declare_stream(conn.channel(), names)
    with connect_to(warren) as client:
        ConfirmedPublisher(client).publish_all(
            "", queue, (b"%d" % sequence for sequence in range(MILLION)))

    channel = conn.channel()
    channel.basic_qos(prefetch_count=READ_PREFETCH)
    progress = {"next": 0, "wrong": None}

    def on_message(ch, method, properties, body):
        expected = progress["next"]
        if progress["wrong"] is None and (int(body) != expected
                                          or stream_offset(properties) != expected):
            progress["wrong"] = (expected, body, properties.headers)
        progress["next"] = expected + 1
        if progress["next"] % ACK_EVERY == 0:
            ch.basic_ack(method.delivery_tag, multiple=True)

    channel.basic_consume(queue, on_message, arguments={"x-stream-offset": "first"})
    assert wait_until(conn, lambda: progress["next"] >= MILLION, timeout=240), progress
    assert progress["wrong"] is None, progress["wrong"]
    assert progress["next"] == MILLION
