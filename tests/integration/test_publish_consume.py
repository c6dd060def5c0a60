"""Basic.Publish, Basic.Consume, Basic.Deliver and Basic.Cancel with BlockingConnection."""

import datetime
import decimal
import os

import pika

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn, names: fixtures)
    _test_deadline, chan, close_quietly, conn, connect, exclusive_queue, expect_channel_error,
    get_all, get_bodies, names, publish_bodies, raw_cancel, ready_count, server_named_consume,
    unique, wait_for_count, wait_until,
)


def consume_into(channel, queue, sink, **kwargs):
    """basic_consume with a callback appending (method, properties, body) to `sink`."""
    return channel.basic_consume(
        queue, lambda ch, method, properties, body: sink.append((method, properties, body)),
        **kwargs)


def consumer_count_is(channel, queue, expected):
    """Whether `queue` reaches `expected` consumers (polled, with a deadline)."""
    return wait_for_count(channel, queue, expected, field="consumer_count") == expected


def test_publish_and_consume_with_manual_ack(conn, chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, ["first", "second", "third"])
    received = []
    tag = consume_into(chan, queue, received)
    assert wait_until(conn, lambda: len(received) == 3)
    assert [body for _, _, body in received] == [b"first", b"second", b"third"]
    tags = [method.delivery_tag for method, _, _ in received]
    assert tags == [1, 2, 3]  # per-channel delivery tags count from 1
    for method, _, _ in received:
        assert method.consumer_tag == tag
        assert method.exchange == ""
        assert method.routing_key == queue
        assert method.redelivered is False
        chan.basic_ack(method.delivery_tag)
    chan.basic_cancel(tag)
    assert ready_count(chan, queue) == 0
    assert get_all(chan, queue) == []


def test_consume_generator_with_inactivity_timeout(chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, ["a", "b"])
    bodies = []
    for method, _, body in chan.consume(queue, inactivity_timeout=2):
        if method is None:
            break
        bodies.append(body)
        chan.basic_ack(method.delivery_tag)
        if len(bodies) == 2:
            break
    chan.cancel()
    assert bodies == [b"a", b"b"]
    assert get_all(chan, queue) == []


def test_explicit_consumer_tag_is_used_in_deliveries(conn, chan):
    queue = exclusive_queue(chan)
    received = []
    tag = consume_into(chan, queue, received, consumer_tag="my-consumer-tag", auto_ack=True)
    assert tag == "my-consumer-tag"
    chan.basic_publish("", queue, b"tagged")
    assert wait_until(conn, lambda: received)
    assert received[0][0].consumer_tag == "my-consumer-tag"


def test_server_generated_consumer_tag(conn, chan):
    # pika always sends a client-made tag; with an empty tag the server picks one.
    # (pika's bookkeeping copes with one such raw consume per channel, hence two channels.)
    queue = exclusive_queue(chan)
    channels = [conn.channel(), conn.channel()]
    tags = [server_named_consume(conn, channel, queue) for channel in channels]
    for tag in tags:
        assert tag.startswith("amq.ctag-")
        assert len(tag) > len("amq.ctag-")
    assert tags[0] != tags[1]
    assert consumer_count_is(chan, queue, 2)
    for channel, tag in zip(channels, tags):
        assert raw_cancel(conn, channel, tag) == tag
    assert consumer_count_is(chan, queue, 0)


def test_cancel_stops_deliveries(conn, chan):
    queue = exclusive_queue(chan)
    received = []
    tag = consume_into(chan, queue, received, auto_ack=True)
    chan.basic_publish("", queue, b"before cancel")
    assert wait_until(conn, lambda: len(received) == 1)
    assert chan.basic_cancel(tag) == []  # nothing was pending in pika
    assert tag not in chan.consumer_tags
    chan.basic_publish("", queue, b"after cancel")
    assert get_bodies(chan, queue) == ["after cancel"]
    assert [body for _, _, body in received] == [b"before cancel"]


def test_cancel_keeps_unacked_messages_ackable(conn, chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, ["1", "2", "3"])
    received = []
    tag = consume_into(chan, queue, received)
    assert wait_until(conn, lambda: len(received) == 3)
    chan.basic_cancel(tag)
    # Cancelling does not requeue what was delivered: it stays unacked on the channel.
    assert ready_count(chan, queue) == 0
    chan.basic_ack(received[-1][0].delivery_tag, multiple=True)
    assert chan.queue_declare(queue, passive=True).method.message_count == 0
    assert chan.is_open


def test_cancel_of_unknown_consumer_tag_is_harmless(chan):
    assert chan.basic_cancel(unique("no-such-tag")) == []
    assert chan.is_open
    assert exclusive_queue(chan).startswith("amq.gen-")


def test_auto_ack_consumer_needs_no_acks(conn, chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, [str(n) for n in range(5)])
    worker = conn.channel()
    received = []
    consume_into(worker, queue, received, auto_ack=True)
    assert wait_until(conn, lambda: len(received) == 5)
    # Closing the consumer's channel returns nothing: the messages were settled on
    # delivery.
    worker.close()
    assert consumer_count_is(chan, queue, 0)
    assert ready_count(chan, queue) == 0
    assert get_all(chan, queue) == []


def test_consumers_share_a_queue_round_robin(conn, chan):
    queue = exclusive_queue(chan)
    first, second = conn.channel(), conn.channel()
    got_first, got_second = [], []
    consume_into(first, queue, got_first, auto_ack=True)
    consume_into(second, queue, got_second, auto_ack=True)
    publish_bodies(chan, "", queue, [str(n) for n in range(10)])
    assert wait_until(conn, lambda: len(got_first) + len(got_second) == 10)
    first_bodies = [int(body) for _, _, body in got_first]
    second_bodies = [int(body) for _, _, body in got_second]
    assert len(first_bodies) == len(second_bodies) == 5
    assert sorted(first_bodies + second_bodies) == list(range(10))
    assert first_bodies == sorted(first_bodies)
    assert second_bodies == sorted(second_bodies)


def test_exclusive_consumer_refuses_a_second_consumer(conn, chan):
    queue = exclusive_queue(chan)
    chan.basic_consume(queue, lambda *args: None, exclusive=True)
    other = conn.channel()
    error = expect_channel_error(conn, other, 403,
                                 lambda: other.basic_consume(queue, lambda *args: None))
    assert "ACCESS_REFUSED" in error.reply_text
    # The exclusive consumer is unaffected.
    assert consumer_count_is(chan, queue, 1)


def test_exclusive_consume_refused_while_other_consumers_exist(conn, chan, names):
    queue = names.queue()
    chan.queue_declare(queue)
    chan.basic_consume(queue, lambda *args: None)
    other = conn.channel()
    error = expect_channel_error(
        conn, other, 403, lambda: other.basic_consume(queue, lambda *args: None, exclusive=True))
    assert "ACCESS_REFUSED" in error.reply_text


def test_exclusive_consumer_released_by_cancel(conn, chan, names):
    queue = names.queue()
    chan.queue_declare(queue)
    tag = chan.basic_consume(queue, lambda *args: None, exclusive=True)
    chan.basic_cancel(tag)
    other = conn.channel()
    other.basic_consume(queue, lambda *args: None)
    assert consumer_count_is(chan, queue, 1)


def test_consume_from_missing_queue_is_404(conn, chan):
    error = expect_channel_error(
        conn, chan, 404, lambda: chan.basic_consume(unique("q"), lambda *args: None))
    assert "NOT_FOUND" in error.reply_text


def test_properties_arrive_intact(warren, conn, chan):
    queue = exclusive_queue(chan)
    headers = {
        "string": "text ✓",
        "int": 42,
        "negative": -7,
        "big": 2 ** 40,
        "bool": True,
        "void": None,
        "bytes": b"\x00\x01\xff",
        "decimal": decimal.Decimal("3.14"),
        "timestamp": datetime.datetime(2020, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        "list": [1, "two", [3, "four"], {"in": "list"}],
        "table": {"inner": {"deep": "x", "n": 1}, "k": 1, "empty": {}},
    }
    sent = pika.BasicProperties(
        content_type="application/json",
        content_encoding="utf-8",
        headers=headers,
        delivery_mode=2,
        priority=5,
        correlation_id="corr-1",
        reply_to="reply.queue",
        expiration="60000",
        message_id="message-1",
        timestamp=1700000000,
        type="order.created",
        user_id=warren.user,  # RabbitMQ checks user_id against the authenticated user
        app_id="warren-tests",
        cluster_id="cluster-1",
    )
    chan.basic_publish("", queue, b'{"ok": true}', sent)
    chan.basic_publish("", queue, b"consumed", sent)
    method, got, body = chan.basic_get(queue, auto_ack=True)
    assert body == b'{"ok": true}'
    received = []
    consume_into(chan, queue, received, auto_ack=True)
    assert wait_until(conn, lambda: received)
    for properties in (got, received[0][1]):
        assert properties.content_type == "application/json"
        assert properties.content_encoding == "utf-8"
        assert properties.headers == headers
        assert properties.delivery_mode == 2
        assert properties.priority == 5
        assert properties.correlation_id == "corr-1"
        assert properties.reply_to == "reply.queue"
        assert properties.expiration == "60000"
        assert properties.message_id == "message-1"
        assert properties.timestamp == 1700000000
        assert properties.type == "order.created"
        assert properties.user_id == warren.user
        assert properties.app_id == "warren-tests"
        assert properties.cluster_id == "cluster-1"


def test_absent_properties_stay_absent(chan):
    queue = exclusive_queue(chan)
    chan.basic_publish("", queue, b"bare")
    _, properties, body = chan.basic_get(queue, auto_ack=True)
    assert body == b"bare"
    for name in ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
                 "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
                 "type", "user_id", "app_id", "cluster_id"):
        assert getattr(properties, name) is None, name


def test_user_id_must_match_the_authenticated_user(conn, chan):
    queue = exclusive_queue(chan)
    error = expect_channel_error(
        conn, chan, 406,
        lambda: chan.basic_publish("", queue, b"x", pika.BasicProperties(user_id="mallory")))
    assert "PRECONDITION_FAILED" in error.reply_text
    assert get_all(conn.channel(), queue) == []


def test_empty_body(conn, chan):
    queue = exclusive_queue(chan)
    chan.basic_publish("", queue, b"", pika.BasicProperties(content_type="text/plain"))
    chan.basic_publish("", queue, b"")
    method, properties, body = chan.basic_get(queue, auto_ack=True)
    assert body == b""
    assert properties.content_type == "text/plain"
    received = []
    consume_into(chan, queue, received, auto_ack=True)
    assert wait_until(conn, lambda: received)
    assert received[0][2] == b""


def test_one_mebibyte_body(conn, chan):
    queue = exclusive_queue(chan)
    body = os.urandom(1024 * 1024)  # spans many frames (frame_max 131072)
    chan.basic_publish("", queue, body)
    chan.basic_publish("", queue, body[::-1])
    _, _, got = chan.basic_get(queue, auto_ack=True)
    assert got == body
    received = []
    consume_into(chan, queue, received, auto_ack=True)
    assert wait_until(conn, lambda: received)
    assert received[0][2] == body[::-1]


def test_body_exactly_at_frame_boundaries(chan):
    queue = exclusive_queue(chan)
    frame_body = 131072 - 8  # frame_max minus frame header and end octet
    sizes = [frame_body - 1, frame_body, frame_body + 1, 2 * frame_body, 2 * frame_body + 1]
    bodies = [bytes([n % 251]) * size for n, size in enumerate(sizes)]
    for body in bodies:
        chan.basic_publish("", queue, body)
    assert [body for _, _, body in get_all(chan, queue)] == bodies


def test_message_order_is_preserved(conn, chan):
    queue = exclusive_queue(chan)
    count = 2000
    publish_bodies(chan, "", queue, [str(n) for n in range(count)])
    received = []
    consume_into(chan, queue, received, auto_ack=True)
    assert wait_until(conn, lambda: len(received) >= count)
    assert [int(body) for _, _, body in received] == list(range(count))


def test_publishes_from_several_connections_all_arrive(warren, conn, chan):
    queue = exclusive_queue(chan)
    publishers = [connect(warren) for _ in range(3)]
    try:
        for index, publisher in enumerate(publishers):
            publish_bodies(publisher.channel(), "", queue,
                           [f"{index}:{n}" for n in range(50)])
    finally:
        for publisher in publishers:
            close_quietly(publisher)
    received = []
    consume_into(chan, queue, received, auto_ack=True)
    assert wait_until(conn, lambda: len(received) >= 150)
    bodies = [body.decode() for _, _, body in received]
    assert sorted(bodies) == sorted(f"{i}:{n}" for i in range(3) for n in range(50))
    # Each publisher's messages keep their order.
    for index in range(3):
        mine = [int(b.split(":")[1]) for b in bodies if b.startswith(f"{index}:")]
        assert mine == list(range(50))
