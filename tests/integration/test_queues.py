"""Queue.Declare / Bind / Unbind / Purge / Delete with pika's BlockingConnection."""

import pika
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn, names: fixtures)
    _test_deadline, chan, close_quietly, conn, connect, consumer_count, exclusive_queue,
    expect_channel_error, get_bodies, names, publish_bodies, ready_count, unique, wait_for_count,
    wait_for_bodies, wait_until, wait_until_queue_gone,
)


def test_server_named_queue(chan):
    first = chan.queue_declare("", exclusive=True).method
    second = chan.queue_declare("", exclusive=True).method
    assert first.queue.startswith("amq.gen-")
    assert second.queue.startswith("amq.gen-")
    assert first.queue != second.queue
    assert len(first.queue) > len("amq.gen-")
    assert (first.message_count, first.consumer_count) == (0, 0)
    chan.basic_publish("", first.queue, b"by generated name")
    assert get_bodies(chan, first.queue) == ["by generated name"]


def test_declare_ok_reports_messages_and_consumers(conn, chan, names):
    queue = names.queue()
    created = chan.queue_declare(queue).method
    assert (created.queue, created.message_count, created.consumer_count) == (queue, 0, 0)
    publish_bodies(chan, "", queue, ["1", "2", "3"])
    assert wait_for_count(chan, queue, 3) == 3
    # An active redeclare with the same properties answers the current counts as well.
    again = chan.queue_declare(queue).method
    assert (again.queue, again.message_count, again.consumer_count) == (queue, 3, 0)
    other = conn.channel()
    other.basic_consume(queue, lambda *args: None, auto_ack=False)
    # The consumer has no prefetch limit, so all three messages go out unacked and
    # message_count (ready messages only) drops to 0.
    assert wait_for_count(chan, queue, 0) == 0
    passive = chan.queue_declare(queue, passive=True).method
    assert (passive.queue, passive.message_count, passive.consumer_count) == (queue, 0, 1)


def test_message_count_counts_ready_messages_not_unacked(chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, ["1", "2", "3", "4"])
    chan.basic_get(queue, auto_ack=False)
    chan.basic_get(queue, auto_ack=False)
    assert ready_count(chan, queue) == 2


def test_passive_declare_of_missing_queue_is_404(conn, chan):
    missing = unique("no-queue")
    error = expect_channel_error(conn, chan, 404, lambda: chan.queue_declare(missing, passive=True))
    assert "NOT_FOUND" in error.reply_text
    assert missing in error.reply_text


def test_passive_declare_ignores_properties(chan, names):
    queue = names.queue()
    chan.queue_declare(queue, durable=False)
    reply = chan.queue_declare(queue, passive=True, durable=True, auto_delete=True)
    assert reply.method.queue == queue
    assert chan.is_open


@pytest.mark.parametrize("change", [
    {"durable": True},
    {"auto_delete": True},
    {"arguments": {"x-max-length": 10}},
])
def test_redeclare_with_different_properties_is_406(conn, chan, names, change):
    queue = names.queue()
    chan.queue_declare(queue, durable=False, auto_delete=False)
    error = expect_channel_error(conn, chan, 406, lambda: chan.queue_declare(queue, **change))
    assert "PRECONDITION_FAILED" in error.reply_text
    assert "inequivalent arg" in error.reply_text


def test_redeclare_with_different_argument_value_is_406(conn, chan, names):
    queue = names.queue()
    chan.queue_declare(queue, arguments={"x-max-length": 10})
    chan.queue_declare(queue, arguments={"x-max-length": 10})
    expect_channel_error(conn, chan, 406,
                         lambda: chan.queue_declare(queue, arguments={"x-max-length": 20}))


def test_redeclare_non_exclusive_queue_as_exclusive_is_405(conn, chan, names):
    queue = names.queue()
    chan.queue_declare(queue)
    error = expect_channel_error(conn, chan, 405,
                                 lambda: chan.queue_declare(queue, exclusive=True))
    assert "RESOURCE_LOCKED" in error.reply_text


def test_reserved_amq_prefix_is_403(conn, chan):
    name = "amq." + unique("q")
    error = expect_channel_error(conn, chan, 403, lambda: chan.queue_declare(name))
    assert "ACCESS_REFUSED" in error.reply_text


@pytest.mark.parametrize("operation", [
    "declare", "passive_declare", "consume", "get", "purge", "delete", "bind",
])
def test_exclusive_queue_is_locked_to_its_connection(warren, chan, operation):
    queue = unique("excl")
    chan.queue_declare(queue, exclusive=True)
    other = connect(warren)
    try:
        channel = other.channel()
        actions = {
            "declare": lambda: channel.queue_declare(queue, exclusive=True),
            "passive_declare": lambda: channel.queue_declare(queue, passive=True),
            "consume": lambda: channel.basic_consume(queue, lambda *args: None),
            "get": lambda: channel.basic_get(queue),
            "purge": lambda: channel.queue_purge(queue),
            "delete": lambda: channel.queue_delete(queue),
            "bind": lambda: channel.queue_bind(queue, "amq.fanout"),
        }
        error = expect_channel_error(other, channel, 405, actions[operation])
        assert "RESOURCE_LOCKED" in error.reply_text
    finally:
        close_quietly(other)
    # The owner still has its queue.
    assert chan.queue_declare(queue, passive=True).method.queue == queue


def test_other_connections_may_publish_to_an_exclusive_queue(warren, chan):
    queue = exclusive_queue(chan)
    other = connect(warren)
    try:
        other.channel().basic_publish("", queue, b"from outside")
    finally:
        other.close()
    assert wait_for_bodies(chan, queue, 1) == ["from outside"]


def test_exclusive_queue_is_deleted_with_its_connection(warren, chan, conn):
    owner = connect(warren)
    queue = owner.channel().queue_declare("", exclusive=True).method.queue
    expect_channel_error(conn, chan, 405, lambda: chan.queue_declare(queue, passive=True))
    owner.close()
    assert wait_until_queue_gone(conn, queue)


def test_auto_delete_queue_goes_when_last_consumer_cancels(conn, chan, names):
    queue = names.queue("autodel")
    chan.queue_declare(queue, auto_delete=True)
    first = chan.basic_consume(queue, lambda *args: None)
    second = chan.basic_consume(queue, lambda *args: None)
    chan.basic_cancel(first)
    assert consumer_count(chan, queue) == 1
    chan.basic_cancel(second)
    expect_channel_error(conn, chan, 404, lambda: chan.queue_declare(queue, passive=True))


def test_auto_delete_queue_without_consumers_stays(chan, names):
    queue = names.queue("autodel")
    chan.queue_declare(queue, auto_delete=True)
    chan.basic_publish("", queue, b"kept")
    assert wait_for_count(chan, queue, 1) == 1


def test_auto_delete_queue_goes_when_consumer_channel_closes(conn, chan, names):
    queue = names.queue("autodel")
    chan.queue_declare(queue, auto_delete=True)
    consumer = conn.channel()
    consumer.basic_consume(queue, lambda *args: None)
    assert consumer_count(chan, queue) == 1
    consumer.close()
    assert wait_until_queue_gone(conn, queue)


def test_bind_and_unbind(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "direct")
    queue = exclusive_queue(chan)
    assert isinstance(chan.queue_bind(queue, exchange, "k1").method, pika.spec.Queue.BindOk)
    chan.queue_bind(queue, exchange, "k2")
    chan.queue_bind(queue, exchange, "k2")  # binding twice is idempotent
    publish_bodies(chan, exchange, "k1", ["one"])
    publish_bodies(chan, exchange, "k2", ["two"])
    publish_bodies(chan, exchange, "k3", ["three"])
    assert get_bodies(chan, queue) == ["one", "two"]
    assert isinstance(chan.queue_unbind(queue, exchange, "k1").method, pika.spec.Queue.UnbindOk)
    publish_bodies(chan, exchange, "k1", ["one again"])
    publish_bodies(chan, exchange, "k2", ["two again"])
    assert get_bodies(chan, queue) == ["two again"]


def test_unbind_of_missing_binding_succeeds(chan, names):
    queue = exclusive_queue(chan)
    assert isinstance(chan.queue_unbind(queue, "amq.direct", unique("key")).method,
                      pika.spec.Queue.UnbindOk)
    # Even the exchange may be missing.
    assert isinstance(chan.queue_unbind(queue, unique("x"), "key").method,
                      pika.spec.Queue.UnbindOk)


def test_bind_missing_queue_or_exchange_is_404(conn, chan):
    queue = exclusive_queue(chan)
    expect_channel_error(conn, chan, 404, lambda: chan.queue_bind(unique("q"), "amq.direct"))
    channel = conn.channel()
    expect_channel_error(conn, channel, 404, lambda: channel.queue_bind(queue, unique("x")))


def test_bind_to_default_exchange_is_403(conn, chan):
    queue = exclusive_queue(chan)
    expect_channel_error(conn, chan, 403, lambda: chan.queue_bind(queue, "", "key"))


def test_purge_returns_the_number_of_ready_messages(chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, [str(n) for n in range(7)])
    reply = chan.queue_purge(queue)
    assert isinstance(reply.method, pika.spec.Queue.PurgeOk)
    assert reply.method.message_count == 7
    assert ready_count(chan, queue) == 0
    assert chan.queue_purge(queue).method.message_count == 0


def test_purge_leaves_unacked_messages_alone(chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, ["first", "second", "third"])
    method, _, body = chan.basic_get(queue, auto_ack=False)
    assert body == b"first"
    assert chan.queue_purge(queue).method.message_count == 2
    chan.basic_nack(method.delivery_tag, requeue=True)
    assert get_bodies(chan, queue) == ["first"]


def test_purge_missing_queue_is_404(conn, chan):
    expect_channel_error(conn, chan, 404, lambda: chan.queue_purge(unique("q")))


def test_delete_returns_message_count(conn, chan, names):
    queue = names.queue()
    chan.queue_declare(queue)
    publish_bodies(chan, "", queue, ["a", "b", "c"])
    reply = chan.queue_delete(queue)
    assert isinstance(reply.method, pika.spec.Queue.DeleteOk)
    assert reply.method.message_count == 3
    expect_channel_error(conn, chan, 404, lambda: chan.queue_declare(queue, passive=True))


def test_delete_missing_queue_succeeds_with_zero(chan):
    reply = chan.queue_delete(unique("q"))
    assert reply.method.message_count == 0
    assert chan.is_open


def test_delete_if_unused_refuses_a_queue_with_consumers(conn, chan, names):
    queue = names.queue()
    chan.queue_declare(queue)
    consumer = conn.channel()
    tag = consumer.basic_consume(queue, lambda *args: None)
    error = expect_channel_error(conn, chan, 406, lambda: chan.queue_delete(queue, if_unused=True))
    assert "PRECONDITION_FAILED" in error.reply_text
    consumer.basic_cancel(tag)
    channel = conn.channel()
    assert channel.queue_delete(queue, if_unused=True).method.message_count == 0


def test_delete_if_empty_refuses_a_queue_with_messages(conn, chan, names):
    queue = names.queue()
    chan.queue_declare(queue)
    publish_bodies(chan, "", queue, ["x", "y"])
    error = expect_channel_error(conn, chan, 406, lambda: chan.queue_delete(queue, if_empty=True))
    assert "PRECONDITION_FAILED" in error.reply_text
    channel = conn.channel()
    assert wait_for_count(channel, queue, 2) == 2
    channel.queue_purge(queue)
    assert channel.queue_delete(queue, if_empty=True).method.message_count == 0


def test_deleting_a_consumed_queue_cancels_its_consumers(warren, conn, chan, names):
    queue = names.queue()
    chan.queue_declare(queue)
    cancelled = []
    chan.add_on_cancel_callback(lambda frame: cancelled.append(frame.method))
    tag = chan.basic_consume(queue, lambda *args: None)
    other = connect(warren)
    try:
        other.channel().queue_delete(queue)
    finally:
        other.close()
    # consumer_cancel_notify: the broker tells the consumer with Basic.Cancel.
    assert wait_until(conn, lambda: cancelled)
    assert cancelled[0].consumer_tag == tag
    assert tag not in chan.consumer_tags
    assert chan.is_open
