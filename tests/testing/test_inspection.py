"""The inspection helpers of the `warren` fixture read what the broker holds and what
it recorded of the test's vhost."""

import pika
import pytest
from pika.exceptions import NackError, UnroutableError

from broker.testing import (Binding, BrokerRefused, ChannelConfirms, NotOnThisBroker,
                            TestVhost)


@pytest.fixture
def vhost_channel(warren):
    connection = pika.BlockingConnection(warren.connection_parameters(
        client_properties={"connection_name": "inspected"}))
    yield connection.channel()
    connection.close()


def publish(vhost_channel, routing_key: str, body: bytes, message_id: str, **properties):
    vhost_channel.basic_publish("", routing_key, body, pika.BasicProperties(
        message_id=message_id, **properties))


def test_queue_counts_ready_unacked_and_consumers(warren, vhost_channel):
    vhost_channel.queue_declare("work", durable=True, arguments={"x-max-length": 10})
    for number in range(3):
        publish(vhost_channel, "work", b"job", f"job-{number}")
    vhost_channel.basic_get("work")   # delivered, not acked
    vhost_channel.queue_declare("idle")
    vhost_channel.basic_consume("idle", lambda *_: None, consumer_tag="watcher")

    work = warren.queue("work")
    assert (work.ready, work.unacked, work.consumers) == (2, 1, 0)
    assert work.durable and work.arguments == {"x-max-length": 10}
    idle = warren.queue("idle")
    assert (idle.consumers, idle.consumer_tags) == (1, ["watcher"])
    assert [queue.name for queue in warren.queues()] == ["idle", "work"]


def test_queue_that_does_not_exist_names_those_that_do(warren, vhost_channel):
    vhost_channel.queue_declare("work")
    with pytest.raises(BrokerRefused) as refused:
        warren.queue("wrok")
    assert str(refused.value) == (f"no queue 'wrok' in vhost '{warren.vhost}'; "
                                  "its queues: ['work']")


def test_exchanges_and_bindings(warren, vhost_channel):
    vhost_channel.exchange_declare("events", "topic", durable=True)
    vhost_channel.queue_declare("audit")
    vhost_channel.queue_bind("audit", "events", "order.*")

    events = next(exchange for exchange in warren.exchanges() if exchange.name == "events")
    assert (events.type, events.durable, events.internal) == ("topic", True, False)
    assert warren.bindings() == [Binding("events", "audit", "queue", "order.*", {})]


def test_peek_shows_ready_messages_without_taking_them(warren, vhost_channel):
    vhost_channel.queue_declare("orders")
    publish(vhost_channel, "orders", b"\x00first", "a", headers={"tenant": "acme"},
            content_type="application/octet-stream")
    publish(vhost_channel, "orders", b"second", "b")

    first, = warren.peek("orders", count=1)
    assert (first.body, first.message_id, first.headers) == (b"\x00first", "a",
                                                             {"tenant": "acme"})
    assert first.properties["content_type"] == "application/octet-stream"
    assert [message.body for message in warren.peek("orders")] == [b"\x00first", b"second"]
    assert warren.queue("orders").ready == 2
    method, _properties, body = vhost_channel.basic_get("orders", auto_ack=True)
    assert body == b"\x00first"


def test_rejected_message_dead_lettered_with_its_x_death(warren, vhost_channel):
    vhost_channel.exchange_declare("dlx", "fanout")
    vhost_channel.queue_declare("dead")
    vhost_channel.queue_bind("dead", "dlx")
    vhost_channel.queue_declare("orders", arguments={"x-dead-letter-exchange": "dlx"})
    publish(vhost_channel, "orders", b"bad order", "o-1")
    method, _properties, _body = vhost_channel.basic_get("orders")
    vhost_channel.basic_reject(method.delivery_tag, requeue=False)
    warren.wait_until_dead_lettered("orders")

    dead, = warren.dead_lettered("orders")
    assert (dead.queue, dead.reason, dead.body, dead.message_id) == (
        "orders", "rejected", b"bad order", "o-1")
    death, = dead.x_death
    assert {key: death[key] for key in ("count", "queue", "reason", "exchange",
                                        "routing-keys")} == {
        "count": 1, "queue": "orders", "reason": "rejected", "exchange": "",
        "routing-keys": ["orders"]}
    assert death["time"].tzinfo is not None
    assert dead.headers["x-first-death-reason"] == "rejected"
    assert warren.dead_lettered("dead") == []
    assert warren.queue("dead").ready == 1


def test_mandatory_publish_returned(warren, vhost_channel):
    vhost_channel.confirm_delivery()
    with pytest.raises(UnroutableError):
        vhost_channel.basic_publish("", "nobody-home", b"lost", mandatory=True)

    returned, = warren.returned()
    assert (returned.exchange, returned.routing_key, returned.body) == (
        "", "nobody-home", b"lost")


def test_confirms_counted_per_channel(warren, vhost_channel):
    vhost_channel.queue_declare("tiny", arguments={"x-max-length": 1,
                                             "x-overflow": "reject-publish"})
    vhost_channel.confirm_delivery()
    publish(vhost_channel, "tiny", b"fits", "1")
    with pytest.raises(NackError):
        publish(vhost_channel, "tiny", b"overflows", "2")

    assert warren.confirms() == [ChannelConfirms("inspected", vhost_channel.channel_number,
                                                 acks=1, nacks=1)]


def test_inspection_on_another_broker_says_it_needs_warren():
    elsewhere = TestVhost("localhost", 5672, "v", "u", "p", remove=lambda: None,
                          broker_name="RabbitMQ")
    with pytest.raises(NotOnThisBroker) as refused:
        elsewhere.peek("orders")
    assert str(refused.value) == ("peek needs Warren's test hooks; the broker under "
                                  "test is RabbitMQ")
