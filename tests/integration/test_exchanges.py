"""Exchange.Declare / Exchange.Delete with pika's BlockingConnection."""

import pika
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn, names: fixtures)
    _test_deadline, chan, conn, exclusive_queue, expect_channel_error, expect_connection_error,
    get_bodies, names, unique,
)

EXCHANGE_TYPES = ["direct", "fanout", "topic", "headers"]
BUILT_IN = {
    "amq.direct": "direct",
    "amq.fanout": "fanout",
    "amq.topic": "topic",
    "amq.headers": "headers",
    "amq.match": "headers",
}


@pytest.mark.parametrize("exchange_type", EXCHANGE_TYPES)
def test_declare_each_type_then_passive_and_redeclare(conn, chan, names, exchange_type):
    exchange = names.exchange()
    reply = chan.exchange_declare(exchange, exchange_type)
    assert isinstance(reply.method, pika.spec.Exchange.DeclareOk)
    # Redeclaring with identical arguments is a no-op; passive declare finds it.
    chan.exchange_declare(exchange, exchange_type)
    passive = chan.exchange_declare(exchange, passive=True)
    assert isinstance(passive.method, pika.spec.Exchange.DeclareOk)
    assert chan.is_open


@pytest.mark.parametrize("name,exchange_type", sorted(BUILT_IN.items()))
def test_builtin_exchanges_exist(chan, name, exchange_type):
    assert isinstance(chan.exchange_declare(name, passive=True).method,
                      pika.spec.Exchange.DeclareOk)
    # They are durable: an active redeclare with the same type and durable=True succeeds.
    chan.exchange_declare(name, exchange_type, durable=True)
    assert chan.is_open


def test_redeclare_builtin_with_other_durability_is_406(conn, chan):
    error = expect_channel_error(
        conn, chan, 406, lambda: chan.exchange_declare("amq.direct", "direct", durable=False))
    assert "PRECONDITION_FAILED" in error.reply_text


def test_passive_declare_of_missing_exchange_is_404(conn, chan):
    missing = unique("no-exchange")
    error = expect_channel_error(conn, chan, 404,
                                 lambda: chan.exchange_declare(missing, passive=True))
    assert "NOT_FOUND" in error.reply_text
    assert missing in error.reply_text


def test_passive_declare_ignores_type(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "direct")
    # A passive declare only checks existence: the type it carries is not compared.
    chan.exchange_declare(exchange, "fanout", passive=True)
    assert chan.is_open


def test_redeclare_with_different_type_is_406(conn, chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "direct")
    error = expect_channel_error(conn, chan, 406,
                                 lambda: chan.exchange_declare(exchange, "fanout"))
    assert "PRECONDITION_FAILED" in error.reply_text
    # The original exchange is untouched.
    assert isinstance(conn.channel().exchange_declare(exchange, "direct").method,
                      pika.spec.Exchange.DeclareOk)


def test_redeclare_with_different_durability_is_406(conn, chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "topic", durable=False)
    expect_channel_error(conn, chan, 406,
                         lambda: chan.exchange_declare(exchange, "topic", durable=True))


def test_redeclare_with_different_auto_delete_is_406(conn, chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "topic", auto_delete=False)
    expect_channel_error(conn, chan, 406,
                         lambda: chan.exchange_declare(exchange, "topic", auto_delete=True))


def test_declaring_reserved_amq_prefix_is_403(conn, chan):
    name = "amq.foo-" + unique()
    error = expect_channel_error(conn, chan, 403,
                                 lambda: chan.exchange_declare(name, "direct"))
    assert "ACCESS_REFUSED" in error.reply_text
    # Nothing was created.
    probe = conn.channel()
    expect_channel_error(conn, probe, 404, lambda: probe.exchange_declare(name, passive=True))


def test_default_exchange_cannot_be_declared_or_deleted(conn):
    channel = conn.channel()
    expect_channel_error(conn, channel, 403, lambda: channel.exchange_declare("", "direct"))
    channel = conn.channel()
    expect_channel_error(conn, channel, 403, lambda: channel.exchange_delete(""))


def test_builtin_exchange_cannot_be_deleted(conn, chan):
    error = expect_channel_error(conn, chan, 403, lambda: chan.exchange_delete("amq.direct"))
    assert "ACCESS_REFUSED" in error.reply_text
    assert isinstance(conn.channel().exchange_declare("amq.direct", passive=True).method,
                      pika.spec.Exchange.DeclareOk)


@pytest.mark.warren_rabbitmq("3.10")   # 4.0+: a 406 closing the channel
def test_unknown_exchange_type_is_a_connection_error_503(conn, chan):
    # RabbitMQ treats an unknown type as COMMAND_INVALID, a connection-level error.
    error = expect_connection_error(
        conn, 503, lambda: chan.exchange_declare(unique("x"), "no-such-type"))
    assert "COMMAND_INVALID" in error.reply_text


def test_delete_exchange(conn, chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "fanout")
    reply = chan.exchange_delete(exchange)
    assert isinstance(reply.method, pika.spec.Exchange.DeleteOk)
    expect_channel_error(conn, chan, 404, lambda: chan.exchange_declare(exchange, passive=True))


def test_delete_missing_exchange_succeeds(chan):
    # RabbitMQ answers DeleteOk for an exchange that does not exist.
    reply = chan.exchange_delete(unique("x"))
    assert isinstance(reply.method, pika.spec.Exchange.DeleteOk)
    assert chan.is_open


def test_delete_if_unused_refuses_a_bound_exchange(conn, chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "direct")
    queue = exclusive_queue(chan)
    chan.queue_bind(queue, exchange, "key")
    error = expect_channel_error(conn, chan, 406,
                                 lambda: chan.exchange_delete(exchange, if_unused=True))
    assert "PRECONDITION_FAILED" in error.reply_text
    # Still there and still routing.
    channel = conn.channel()
    channel.basic_publish(exchange, "key", b"routed")
    assert get_bodies(channel, queue) == ["routed"]
    # Once unbound, if_unused deletes it.
    channel.queue_unbind(queue, exchange, "key")
    channel.exchange_delete(exchange, if_unused=True)
    expect_channel_error(conn, channel, 404,
                         lambda: channel.exchange_declare(exchange, passive=True))


def test_delete_exchange_removes_its_bindings(conn, chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "fanout")
    queue = exclusive_queue(chan)
    chan.queue_bind(queue, exchange)
    chan.exchange_delete(exchange)
    # A new exchange of the same name starts without the old bindings.
    chan.exchange_declare(exchange, "fanout")
    fresh = exclusive_queue(chan)
    chan.queue_bind(fresh, exchange)
    chan.basic_publish(exchange, "", b"after recreate")
    assert get_bodies(chan, fresh) == ["after recreate"]
    assert get_bodies(chan, queue) == []


def test_auto_delete_exchange_goes_when_its_last_binding_goes(conn, chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "fanout", auto_delete=True)
    # Never bound: it stays.
    chan.exchange_declare(exchange, passive=True)
    first, second = exclusive_queue(chan), exclusive_queue(chan)
    chan.queue_bind(first, exchange)
    chan.queue_bind(second, exchange)
    chan.queue_unbind(first, exchange)
    chan.exchange_declare(exchange, passive=True)
    chan.queue_unbind(second, exchange)
    expect_channel_error(conn, chan, 404, lambda: chan.exchange_declare(exchange, passive=True))


def test_exchange_to_exchange_binding(chan, names):
    source, destination = names.exchange(), names.exchange()
    chan.exchange_declare(source, "topic")
    chan.exchange_declare(destination, "fanout")
    chan.exchange_bind(destination, source, "orders.*")
    queue = exclusive_queue(chan)
    chan.queue_bind(queue, destination)
    chan.basic_publish(source, "orders.new", b"via e2e")
    chan.basic_publish(source, "refunds.new", b"not routed")
    assert get_bodies(chan, queue) == ["via e2e"]
    chan.exchange_unbind(destination, source, "orders.*")
    chan.basic_publish(source, "orders.new", b"after unbind")
    assert get_bodies(chan, queue) == []
