"""Publisher flow control in the core: a publisher is throttled when it feeds a queue
whose backlog is long and whose consumers all wait for their sockets to drain."""

from pamqp import commands

from broker.core.backlog import FLOW_BACKLOG
from broker.core.broker import Broker
from core_harness import Client


def publisher_and_consumer(prefetch: int = 0):
    broker = Broker()
    publisher, consumer = Client(broker), Client(broker)
    publisher.open_channel()
    consumer.open_channel()
    publisher.declare_queue(1, "q")
    if prefetch:
        consumer.method(1, commands.Basic.Qos(prefetch_count=prefetch))
    consumer.method(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    return publisher, consumer


def publish(client, count: int) -> None:
    for _ in range(count):
        client.publish(1, "", "q", b"m")


def test_a_publisher_feeding_a_stalled_consumer_is_throttled():
    publisher, consumer = publisher_and_consumer()
    consumer.transport.writable = False          # its socket does not drain
    publish(publisher, FLOW_BACKLOG)
    assert not publisher.connection.read_pauses.throttled  # up to the limit is fine
    publish(publisher, 1)
    assert publisher.connection.read_pauses.throttled
    consumer.transport.writable = True           # drained: the queue is worked off
    consumer.connection.drained()
    assert not publisher.connection.read_pauses.throttled


def test_throttling_lasts_until_the_backlog_is_halved():
    publisher, consumer = publisher_and_consumer(prefetch=FLOW_BACKLOG)
    consumer.transport.writable = False
    publish(publisher, FLOW_BACKLOG * 2)
    assert publisher.connection.read_pauses.throttled
    consumer.transport.writable = True
    consumer.connection.drained()                # delivers FLOW_BACKLOG (the prefetch)
    assert publisher.connection.read_pauses.throttled   # FLOW_BACKLOG still ready
    consumer.method(1, commands.Basic.Ack(delivery_tag=0, multiple=True))
    assert not publisher.connection.read_pauses.throttled


def test_a_backlog_behind_prefetch_limits_does_not_throttle():
    """Consumers that ack slowly but whose sockets drain: the queue just grows, as in
    RabbitMQ (only a consumer that cannot be written to slows publishers down)."""
    publisher, consumer = publisher_and_consumer(prefetch=1)
    publish(publisher, FLOW_BACKLOG + 10)
    assert not publisher.connection.read_pauses.throttled


def test_a_queue_without_consumers_never_throttles():
    broker = Broker()
    publisher = Client(broker)
    publisher.open_channel()
    publisher.declare_queue(1, "q")
    publish(publisher, FLOW_BACKLOG + 10)
    assert not publisher.connection.read_pauses.throttled
