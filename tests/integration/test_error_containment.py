"""Channel and connection errors are contained: what survives an error and what does not."""

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn, names: fixtures)
    _test_deadline, chan, close_quietly, conn, connect, consumer_count, exclusive_queue,
    expect_channel_error, expect_connection_error, get_bodies, names, publish_bodies, unique,
    wait_for_count, wait_until, wait_until_queue_gone,
)


def test_connection_stays_usable_after_a_channel_error(conn, chan):
    queue = exclusive_queue(chan)
    expect_channel_error(conn, chan, 404,
                         lambda: chan.queue_declare(unique("missing"), passive=True))
    channel = conn.channel()
    channel.basic_publish("", queue, b"after the error")
    assert get_bodies(channel, queue) == ["after the error"]
    # The exclusive queue belongs to the connection, so it survived the channel error.
    assert channel.queue_declare(queue, passive=True).method.queue == queue


def test_many_channel_errors_in_a_row(conn):
    for code, action in [
        (404, lambda ch: ch.queue_declare(unique("missing"), passive=True)),
        (404, lambda ch: ch.exchange_declare(unique("missing"), passive=True)),
        (403, lambda ch: ch.queue_declare("amq." + unique("q"))),
        (406, lambda ch: ch.basic_ack(7)),
        (404, lambda ch: ch.basic_publish(unique("missing"), "k", b"x")),
    ] * 3:
        channel = conn.channel()
        expect_channel_error(conn, channel, code, lambda: action(channel))
    channel = conn.channel()
    queue = exclusive_queue(channel)
    publish_bodies(channel, "", queue, ["still", "working"])
    assert get_bodies(channel, queue) == ["still", "working"]


def test_reopened_channel_number_starts_fresh(conn):
    channel = conn.channel(channel_number=5)
    queue = exclusive_queue(channel)
    publish_bodies(channel, "", queue, ["a", "b"])
    channel.basic_get(queue, auto_ack=False)  # delivery tag 1, left unacked
    expect_channel_error(conn, channel, 404,
                         lambda: channel.exchange_declare(unique("x"), passive=True))
    again = conn.channel(channel_number=5)
    # New channel state: delivery tags restart at 1, the old unacked message was requeued.
    assert wait_for_count(again, queue, 2) == 2
    method, _, body = again.basic_get(queue, auto_ack=False)
    assert (method.delivery_tag, body, method.redelivered) == (1, b"a", True)
    again.basic_ack(1)
    assert again.is_open


def test_channel_error_does_not_disturb_other_channels(conn, chan):
    queue = exclusive_queue(chan)
    received = []
    consumer = conn.channel()
    consumer.basic_consume(queue, lambda ch, method, props, body: received.append(body),
                           auto_ack=True)
    failing = conn.channel()
    expect_channel_error(conn, failing, 404,
                         lambda: failing.basic_publish(unique("missing"), "k", b"lost"))
    chan.basic_publish("", queue, b"delivered")
    assert wait_until(conn, lambda: received == [b"delivered"])
    assert consumer.is_open
    assert chan.is_open


def test_channel_error_removes_that_channels_consumers(conn, chan, names):
    queue = names.queue()
    chan.queue_declare(queue)
    failing = conn.channel()
    failing.basic_consume(queue, lambda *args: None)
    assert consumer_count(chan, queue) == 1
    expect_channel_error(conn, failing, 406, lambda: failing.basic_ack(12345))
    assert wait_for_count(chan, queue, 0, field="consumer_count") == 0


def test_channel_error_does_not_disturb_other_connections(warren, conn, chan):
    other = connect(warren)
    try:
        other_channel = other.channel()
        queue = exclusive_queue(other_channel)
        expect_channel_error(conn, chan, 404,
                             lambda: chan.queue_declare(unique("missing"), passive=True))
        other_channel.basic_publish("", queue, b"unaffected")
        assert get_bodies(other_channel, queue) == ["unaffected"]
    finally:
        close_quietly(other)


def test_connection_error_does_not_disturb_other_connections(warren, names):
    survivor = connect(warren)
    victim = connect(warren)
    try:
        survivor_channel = survivor.channel()
        queue = names.queue()
        survivor_channel.queue_declare(queue)
        received = []
        survivor_channel.basic_consume(
            queue, lambda ch, method, props, body: received.append(body), auto_ack=True)
        victim_channel = victim.channel()
        victim_queue = exclusive_queue(victim_channel)
        stream = names.queue()
        victim_channel.queue_declare(stream, durable=True,
                                     arguments={"x-queue-type": "stream"})
        expect_connection_error(victim, 540, lambda: victim_channel.queue_purge(stream))
        assert victim_channel.is_closed
        # The victim's exclusive queue went with it; the survivor carries on.
        survivor_channel.basic_publish("", queue, b"still here")
        assert wait_until(survivor, lambda: received == [b"still here"])
        assert wait_until_queue_gone(survivor, victim_queue)
    finally:
        close_quietly(survivor)
        close_quietly(victim)

