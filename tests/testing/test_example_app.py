"""docs/testing.md's worked example: a Celery application tested against its own Warren
vhost. The worker runs on a thread of the test process; the test waits for the task's
result (over AMQP, rpc://) and then reads what the task published with pika."""

import json

import pika
import pytest
from celery.contrib.testing.worker import start_worker

from example_app.shop import CONFIRMED, ORDERS, create_app


@pytest.fixture
def shop(warren):
    """The shop's Celery app on this test's vhost, with a worker running its tasks."""
    app = create_app(warren.url)
    # The worker checks for its stop between polls of its connection, and a poll lasts
    # until the next timer: without AMQP heartbeats (a timer every 30 s) that is 1 s.
    app.conf.broker_heartbeat = 0
    with start_worker(app, pool="solo", perform_ping_check=False, loglevel="WARNING"):
        yield app


@pytest.fixture
def announcements(warren):
    """A queue bound to every "order.confirmed" message, declared before the task runs
    (a topic exchange drops messages nobody is bound for), and a pika channel on it."""
    connection = pika.BlockingConnection(warren.connection_parameters())
    channel = connection.channel()
    channel.exchange_declare(ORDERS.name, ORDERS.type, durable=True)
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(queue, ORDERS.name, CONFIRMED)
    yield channel, queue
    connection.close()


def test_confirming_an_order_announces_it_on_the_orders_exchange(shop, announcements):
    channel, queue = announcements

    result = shop.send_task("shop.confirm_order", args=[42])

    assert result.get(timeout=30) == "order 42 confirmed"
    method, properties, body = channel.basic_get(queue, auto_ack=True)
    assert method is not None, "the task returned but nothing reached the queue"
    assert (method.exchange, method.routing_key) == ("orders", "order.confirmed")
    assert properties.content_type == "application/json"
    assert properties.delivery_mode == 2
    assert json.loads(body) == {"order_id": 42, "status": "confirmed"}
    assert channel.basic_get(queue, auto_ack=True) == (None, None, None)


def test_each_test_has_its_own_vhost_so_nothing_is_left_from_the_last_one(warren):
    connection = pika.BlockingConnection(warren.connection_parameters())
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.exchange_declare(ORDERS.name, passive=True)
    assert closed.value.reply_code == 404
    connection.close()
