"""Basic.Get / GetOk / GetEmpty with BlockingConnection."""

import pika

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn, names: fixtures)
    _test_deadline, chan, conn, exclusive_queue, expect_channel_error, get_bodies, names,
    publish_bodies, ready_count, unique, wait_for_count,
)


def test_get_empty(chan):
    queue = exclusive_queue(chan)
    assert chan.basic_get(queue) == (None, None, None)
    assert chan.basic_get(queue, auto_ack=True) == (None, None, None)
    assert chan.is_open


def test_get_ok_message_count_is_what_remains(chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, ["m0", "m1", "m2", "m3"])
    counts, bodies = [], []
    while True:
        method, _, body = chan.basic_get(queue, auto_ack=True)
        if method is None:
            break
        assert isinstance(method, pika.spec.Basic.GetOk)
        counts.append(method.message_count)
        bodies.append(body.decode())
    assert bodies == ["m0", "m1", "m2", "m3"]
    assert counts == [3, 2, 1, 0]


def test_get_ok_message_count_excludes_unacked(chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, ["a", "b", "c"])
    first, _, _ = chan.basic_get(queue, auto_ack=False)
    second, _, _ = chan.basic_get(queue, auto_ack=False)
    assert (first.message_count, second.message_count) == (2, 1)
    chan.basic_reject(first.delivery_tag, requeue=True)
    # "a" is back (at the head): two ready, so the next get leaves one behind.
    again, _, body = chan.basic_get(queue, auto_ack=True)
    assert body == b"a"
    assert again.redelivered is True
    assert again.message_count == 1


def test_get_ok_fields(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "direct")
    queue = exclusive_queue(chan)
    chan.queue_bind(queue, exchange, "the.key")
    chan.basic_publish(exchange, "the.key", b"payload",
                       pika.BasicProperties(message_id="id-1", headers={"h": "v"}))
    method, properties, body = chan.basic_get(queue, auto_ack=False)
    assert body == b"payload"
    assert method.exchange == exchange
    assert method.routing_key == "the.key"
    assert method.redelivered is False
    assert method.delivery_tag == 1
    assert properties.message_id == "id-1"
    assert properties.headers == {"h": "v"}
    chan.basic_ack(method.delivery_tag)
    assert chan.basic_get(queue) == (None, None, None)


def test_delivery_tags_increase_per_channel(conn, chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, [str(n) for n in range(6)])
    tags = [chan.basic_get(queue, auto_ack=True)[0].delivery_tag for _ in range(3)]
    assert tags == [1, 2, 3]
    other = conn.channel()
    other_tags = [other.basic_get(queue, auto_ack=False)[0].delivery_tag for _ in range(3)]
    assert other_tags == [1, 2, 3]  # each channel has its own sequence
    other.basic_ack(3, multiple=True)
    assert ready_count(chan, queue) == 0


def test_get_without_ack_is_unacked_until_acked(conn, chan):
    queue = exclusive_queue(chan)
    chan.basic_publish("", queue, b"keep me")
    assert wait_for_count(chan, queue, 1) == 1  # published on another channel
    reader = conn.channel()
    method, _, body = reader.basic_get(queue, auto_ack=False)
    assert body == b"keep me"
    assert ready_count(chan, queue) == 0
    reader.close()  # never acked: it goes back, marked redelivered
    assert wait_for_count(chan, queue, 1) == 1
    method, _, body = chan.basic_get(queue, auto_ack=True)
    assert body == b"keep me"
    assert method.redelivered is True


def test_get_with_auto_ack_is_settled_at_once(conn, chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, ["gone", "stays"])
    assert wait_for_count(chan, queue, 2) == 2  # published on another channel
    reader = conn.channel()
    _, _, body = reader.basic_get(queue, auto_ack=True)
    assert body == b"gone"
    reader.close()
    # Closing the channel requeues nothing: only "stays" is left.
    assert get_bodies(chan, queue) == ["stays"]


def test_get_from_missing_queue_is_404(conn, chan):
    error = expect_channel_error(conn, chan, 404, lambda: chan.basic_get(unique("q")))
    assert "NOT_FOUND" in error.reply_text
