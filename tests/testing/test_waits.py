"""The wait helpers of the `warren` fixture return once the broker saw what they wait
for, and otherwise fail with what it saw instead."""

import threading

import pika
import pytest

from broker.testing import WaitTimeout


@pytest.fixture
def vhost_channel(warren):
    connection = pika.BlockingConnection(warren.connection_parameters())
    yield connection.channel()
    connection.close()


def publish(vhost_channel, routing_key: str, message_id: str, exchange: str = "") -> None:
    vhost_channel.basic_publish(exchange, routing_key, b"body",
                          pika.BasicProperties(message_id=message_id))


class AckingConsumer:
    """A consumer on its own connection and thread that acks whatever it receives."""

    def __init__(self, warren, queue: str):
        self.connection = pika.BlockingConnection(warren.connection_parameters())
        self.channel = self.connection.channel()
        self.queue = queue
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        self.channel.basic_consume(self.queue, self._ack)
        while not self.stopped.is_set():
            self.connection.process_data_events(time_limit=0.05)
        self.connection.close()

    def _ack(self, vhost_channel, method, _properties, _body) -> None:
        vhost_channel.basic_ack(method.delivery_tag)

    def __enter__(self) -> "AckingConsumer":
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stopped.set()
        self.thread.join()


def test_wait_for_consumer_and_acks_of_a_consumer_on_another_thread(warren, vhost_channel):
    vhost_channel.queue_declare("jobs")
    with AckingConsumer(warren, "jobs"):
        warren.wait_for_consumer("jobs")
        for number in range(3):
            publish(vhost_channel, "jobs", f"job-{number}")
        warren.wait_until_acked("jobs", count=3, message_id="job-2")
        warren.wait_until_empty("jobs")
        assert warren.queue("jobs").consumers == 1


def test_wait_for_consumer_times_out_saying_how_many_there_are(warren, vhost_channel):
    vhost_channel.queue_declare("jobs")
    publish(vhost_channel, "jobs", "j")
    with pytest.raises(WaitTimeout) as timeout:
        warren.wait_for_consumer("jobs", timeout=0.3)
    assert str(timeout.value) == ("wait_for_consumer('jobs', count=1): in 0.3 s, queue "
                                  "'jobs' has 1 ready, 0 unacked, 0 consumers")


def test_wait_for_binding(warren, vhost_channel):
    vhost_channel.exchange_declare("events", "direct")
    vhost_channel.queue_declare("audit")
    vhost_channel.queue_bind("audit", "events", "created")
    warren.wait_for_binding("events", "audit")
    warren.wait_for_binding("events", "audit", routing_key="created")
    with pytest.raises(WaitTimeout) as timeout:
        warren.wait_for_binding("events", "audit", routing_key="deleted", timeout=0.3)
    assert str(timeout.value) == (
        "wait_for_binding('events', 'audit', routing_key='deleted'): in 0.3 s, exchange "
        "'events' binds queue 'audit' with routing keys ['created']")


def test_wait_for_binding_to_a_missing_exchange(warren):
    with pytest.raises(WaitTimeout) as timeout:
        warren.wait_for_binding("events", "audit", timeout=0.3)
    assert str(timeout.value) == ("wait_for_binding('events', 'audit'): in 0.3 s, vhost "
                                  f"'{warren.vhost}' has no exchange 'events'")


def test_wait_until_published(warren, vhost_channel):
    vhost_channel.exchange_declare("events", "topic")
    publish(vhost_channel, "order.created", "1", exchange="events")
    publish(vhost_channel, "order.paid", "2", exchange="events")
    warren.wait_until_published("events", count=2)
    warren.wait_until_published("events", routing_key="order.paid")
    with pytest.raises(WaitTimeout) as timeout:
        warren.wait_until_published("events", routing_key="order.paid", count=2,
                                    timeout=0.3)
    assert str(timeout.value) == (
        "wait_until_published('events', routing_key='order.paid', count=2): 1 publish in "
        "0.3 s (to 'events' by routing key: {'order.created': 1, 'order.paid': 1}; other "
        "exchanges published to: [])")


def test_wait_until_acked_times_out_with_the_acks_and_the_queue(warren, vhost_channel):
    vhost_channel.queue_declare("orders")
    for message_id in "abc":
        publish(vhost_channel, "orders", message_id)
    method, _properties, _body = vhost_channel.basic_get("orders")
    vhost_channel.basic_ack(method.delivery_tag)
    with pytest.raises(WaitTimeout) as timeout:
        warren.wait_until_acked("orders", count=3, timeout=0.5)
    assert str(timeout.value) == (
        "wait_until_acked('orders', count=3): 1 ack in 0.5 s (message ids: ['a']); queue "
        "'orders' has 2 ready, 0 unacked, 0 consumers")


def test_nacks_and_rejects_are_told_apart(warren, vhost_channel):
    vhost_channel.queue_declare("orders")
    publish(vhost_channel, "orders", "n")
    publish(vhost_channel, "orders", "r")
    nacked, _, _ = vhost_channel.basic_get("orders")
    rejected, _, _ = vhost_channel.basic_get("orders")
    vhost_channel.basic_nack(nacked.delivery_tag, requeue=False)
    vhost_channel.basic_reject(rejected.delivery_tag, requeue=False)
    warren.wait_until_nacked("orders", message_id="n")
    warren.wait_until_rejected("orders", message_id="r")
    with pytest.raises(WaitTimeout) as timeout:
        warren.wait_until_nacked("orders", message_id="r", timeout=0.3)
    assert str(timeout.value) == (
        "wait_until_nacked('orders', message_id='r'): 1 nack in 0.3 s (message ids: "
        "['n']; also {'reject': 1}); queue 'orders' has 0 ready, 0 unacked, 0 consumers")


def test_wait_until_empty_times_out_with_what_is_left(warren, vhost_channel):
    vhost_channel.queue_declare("orders")
    publish(vhost_channel, "orders", "a")
    publish(vhost_channel, "orders", "b")
    vhost_channel.basic_get("orders")
    with pytest.raises(WaitTimeout) as timeout:
        warren.wait_until_empty("orders", timeout=0.3)
    assert str(timeout.value) == ("wait_until_empty('orders'): in 0.3 s, queue 'orders' "
                                  "has 1 ready, 1 unacked, 0 consumers")


def test_wait_until_dead_lettered_while_another_thread_waits(warren, vhost_channel):
    vhost_channel.exchange_declare("dlx", "fanout")
    vhost_channel.queue_declare("orders", arguments={"x-dead-letter-exchange": "dlx"})
    publish(vhost_channel, "orders", "late")
    outcome = []
    waiting = threading.Thread(target=lambda: outcome.append(
        _raised(warren.wait_until_dead_lettered, "orders", message_id="late")))
    waiting.start()
    method, _properties, _body = vhost_channel.basic_get("orders")
    vhost_channel.basic_reject(method.delivery_tag, requeue=False)
    waiting.join()
    assert outcome == [None]
    with pytest.raises(WaitTimeout) as timeout:
        warren.wait_until_dead_lettered("orders", count=2, timeout=0.3)
    assert str(timeout.value) == (
        "wait_until_dead_lettered(queue='orders', count=2): 1 dead-lettered in 0.3 s "
        "(message ids: ['late']; by source queue: {'orders': 1})")


def _raised(function, *arguments, **options) -> BaseException | None:
    try:
        function(*arguments, **options)
    except BaseException as error:   # reported to the test's thread
        return error
    return None
