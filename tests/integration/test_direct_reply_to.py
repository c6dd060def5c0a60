"""Direct reply-to (amq.rabbitmq.reply-to): RPC replies without a reply queue."""

import pika

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn: fixtures)
    _test_deadline, chan, conn, exclusive_queue, expect_channel_error, wait_until,
)

REPLY_TO = "amq.rabbitmq.reply-to"


def test_a_reply_reaches_the_requesting_channel(conn, chan):
    server = conn.channel()
    requests = exclusive_queue(server)
    replies = []
    chan.basic_consume(REPLY_TO, lambda ch, method, props, body: replies.append(body),
                       auto_ack=True)
    seen_reply_to = []

    def serve(channel, method, properties, body):
        seen_reply_to.append(properties.reply_to)
        channel.basic_publish("", properties.reply_to, body.upper(),
                              pika.BasicProperties(correlation_id=properties.correlation_id))
        channel.basic_ack(method.delivery_tag)

    server.basic_consume(requests, serve)
    chan.basic_publish("", requests, b"ping",
                       pika.BasicProperties(reply_to=REPLY_TO, correlation_id="1"))
    assert wait_until(conn, lambda: replies)
    assert replies == [b"PING"]
    assert seen_reply_to[0].startswith(REPLY_TO + ".")


def test_requests_need_the_reply_consumer_first(conn, chan):
    error = expect_channel_error(conn, chan, 406, lambda: chan.basic_publish(
        "", "anywhere", b"x", pika.BasicProperties(reply_to=REPLY_TO)))
    assert "fast reply consumer does not exist" in error.reply_text


def test_the_reply_consumer_must_not_ack(conn, chan):
    error = expect_channel_error(conn, chan, 406, lambda: chan.basic_consume(
        REPLY_TO, lambda *args: None, auto_ack=False))
    assert "reply consumer cannot acknowledge" in error.reply_text



def test_a_reply_address_can_be_declared_while_its_requester_consumes(warren, conn, chan):
    """RPC servers may check a reply_to before answering: RabbitMQ answers a declare of
    amq.rabbitmq.reply-to and of a live reply address as of a queue with one consumer
    (no permission needed), and a 404 for an address nobody consumes any more."""
    assert chan.queue_declare(REPLY_TO, passive=True).method.consumer_count == 1
    server = conn.channel()
    requests = exclusive_queue(server)
    reply_to = []
    server.basic_consume(requests, lambda ch, method, props, body: reply_to.append(
        props.reply_to), auto_ack=True)
    tag = chan.basic_consume(REPLY_TO, lambda *args: None, auto_ack=True)
    chan.basic_publish("", requests, b"ping", pika.BasicProperties(reply_to=REPLY_TO))
    assert wait_until(conn, lambda: reply_to)
    declared = server.queue_declare(reply_to[0], passive=True).method
    assert (declared.queue, declared.message_count, declared.consumer_count) == (
        reply_to[0], 0, 1)
    chan.basic_cancel(tag)
    checker = conn.channel()
    error = expect_channel_error(conn, checker, 404,
                                 lambda: checker.queue_declare(reply_to[0], passive=True))
    assert error.reply_text == (
        f"NOT_FOUND - no queue '{reply_to[0]}' in vhost '{warren.vhost}'")
