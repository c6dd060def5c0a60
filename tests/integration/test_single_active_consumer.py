"""x-single-active-consumer as pika sees it, against Warren and (WARREN_TEST_BROKER)
RabbitMQ 3.10: one consumer at a time gets messages, the others wait; when the active
one goes, the next takes over with the messages it left unacked; and what RabbitMQ
refuses around it (the argument's type, a redeclaration without it, an exclusive
consumer, streams, Basic.Get on a quorum queue).

Each consumer has its own connection, so that closing one is a consumer going away.
RabbitMQ hands messages over asynchronously: deliveries are waited for with a deadline.
"""

import pika
import pika.exceptions
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, names: fixtures)
    _test_deadline, close_quietly, connect, expect_channel_error, flush, names,
    wait_until,
)

SAC = {"x-single-active-consumer": True}
PREFETCH = 2


class Consumers:
    """Consumers of one queue, each on its own connection, and what each received."""

    def __init__(self, vhost, queue: str):
        self.vhost = vhost
        self.queue = queue
        self.connections: list = []
        self.channels: list = []
        self.received: list[list] = []

    def add(self, priority: int | None = None) -> None:
        connection = connect(self.vhost)
        channel = connection.channel()
        channel.basic_qos(prefetch_count=PREFETCH)
        got: list = []

        def on_message(_channel, method, _properties, body):
            got.append((body, method.redelivered))

        channel.basic_consume(self.queue, on_message, arguments=(
            None if priority is None else {"x-priority": priority}))
        self.connections.append(connection)
        self.channels.append(channel)
        self.received.append(got)

    def wait_for(self, index: int, count: int) -> list:
        """Wait until consumer `index` has `count` messages; what the others got too."""
        def enough():
            for connection in self.connections:
                if connection.is_open:
                    flush(connection)
            return len(self.received[index]) >= count
        assert wait_until(self.connections[index], enough), self.received
        return self.received

    def close(self) -> None:
        for connection in self.connections:
            close_quietly(connection)


@pytest.fixture
def setup(warren, names):
    """A connection and channel for declaring and publishing, unique queue names
    (removed with the vhost) and a Consumers factory."""
    connection = connect(warren)
    made: list[Consumers] = []

    def consumers_of(queue: str) -> Consumers:
        made.append(Consumers(warren, queue))
        return made[-1]

    try:
        yield connection, connection.channel(), names.queue, consumers_of
    finally:
        for consumers in made:
            consumers.close()
        close_quietly(connection)


def publish(channel, queue: str, count: int) -> None:
    for number in range(count):
        channel.basic_publish("", queue, str(number).encode())


def declare(channel, queue: str, queue_type: str) -> None:
    channel.queue_declare(queue, durable=queue_type == "quorum",
                          arguments={**SAC, "x-queue-type": queue_type})


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_only_the_first_consumer_gets_messages(setup, queue_type):
    """The first consumer registered is active whatever the priorities; the others,
    with room under their prefetch, get nothing while it is there."""
    _, channel, new_queue, consumers_of = setup
    queue = new_queue("sac")
    declare(channel, queue, queue_type)
    consumers = consumers_of(queue)
    for priority in (1, 5, 3):
        consumers.add(priority)
    publish(channel, queue, 5)
    received = consumers.wait_for(0, PREFETCH)
    assert received == [[(b"0", False), (b"1", False)], [], []]


def first_of_two_served(setup):
    """A classic SAC queue with two consumers, 4 messages published and the active
    (first) consumer holding its PREFETCH of them; (channel, queue, consumers)."""
    _, channel, new_queue, consumers_of = setup
    queue = new_queue("sac")
    declare(channel, queue, "classic")
    consumers = consumers_of(queue)
    consumers.add()
    consumers.add()
    publish(channel, queue, 4)
    consumers.wait_for(0, PREFETCH)
    return channel, queue, consumers


def test_basic_get_takes_the_next_ready_message_of_a_classic_queue(setup):
    channel, queue, consumers = first_of_two_served(setup)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"2"
    assert consumers.received[1] == []


@pytest.mark.parametrize("queue_type, successor", [("classic", 2), ("quorum", 1)])
def test_when_the_active_consumer_goes_the_next_takes_over(setup, queue_type, successor):
    """Classic queues (RabbitMQ 3.10) make the waiting consumer with the highest
    x-priority active, quorum queues the next registered; it gets the messages the
    first one left unacked (RabbitMQ's quorum queues put those at the back: only the
    count is compared for them)."""
    _, channel, new_queue, consumers_of = setup
    queue = new_queue("sac")
    declare(channel, queue, queue_type)
    consumers = consumers_of(queue)
    for priority in (5, 1, 3):
        consumers.add(priority)
    publish(channel, queue, 4)
    consumers.wait_for(0, PREFETCH)
    consumers.connections[0].close()
    received = consumers.wait_for(successor, PREFETCH)
    waiting = 3 - successor
    assert received[waiting] == []
    if queue_type == "classic":
        assert received[successor] == [(b"0", True), (b"1", True)]
    else:
        assert len(received[successor]) == PREFETCH


def test_a_cancelled_active_consumer_hands_over_the_ready_messages(setup):
    """Its messages acked first (RabbitMQ 3.10 does not serve the next one while the
    cancelled one still holds unacked messages)."""
    _, _, consumers = first_of_two_served(setup)
    first = consumers.channels[0]
    first.basic_ack(0, multiple=True)
    first.basic_cancel(first.consumer_tags[0])
    received = consumers.wait_for(1, PREFETCH)
    # RabbitMQ 3.10 flags these redelivered; Warren does not (never delivered before).
    assert [body for body, _ in received[1]] == [b"2", b"3"]


def test_an_exclusive_consumer_is_refused_even_on_an_idle_queue(warren, setup):
    connection, channel, new_queue, _ = setup
    queue = new_queue("sac")
    channel.queue_declare(queue, arguments=SAC)
    error = expect_channel_error(connection, channel, 403, lambda: channel.basic_consume(
        queue, lambda *_: None, exclusive=True))
    assert error.reply_text == (
        f"ACCESS_REFUSED - queue '{queue}' in vhost '{warren.vhost}' in exclusive use")


def test_basic_get_on_a_quorum_queue_is_refused(warren, setup):
    connection, channel, new_queue, _ = setup
    queue = new_queue("sac")
    declare(channel, queue, "quorum")
    error = expect_channel_error(connection, channel, 405,
                                 lambda: channel.basic_get(queue))
    assert error.reply_text == (
        f"RESOURCE_LOCKED - cannot obtain access to locked queue '{queue}' in vhost "
        f"'{warren.vhost}'. basic.get operations are not supported by quorum queues with "
        "single active consumer")


@pytest.mark.parametrize("value, type_name", [("yes", "longstr"), (1, "signedint")])
def test_the_argument_must_be_a_boolean(warren, setup, value, type_name):
    connection, channel, new_queue, _ = setup
    queue = new_queue("sac")
    error = expect_channel_error(connection, channel, 406, lambda: channel.queue_declare(
        queue, arguments={"x-single-active-consumer": value}))
    assert error.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue "
        f"'{queue}' in vhost '{warren.vhost}': {{unacceptable_type,{type_name}}}")


def test_a_redeclaration_without_the_argument_is_refused(warren, setup):
    connection, channel, new_queue, _ = setup
    queue = new_queue("sac")
    channel.queue_declare(queue, arguments=SAC)
    error = expect_channel_error(connection, channel, 406,
                                 lambda: channel.queue_declare(queue))
    # RabbitMQ goes on "received none but current is the value 'true' of type 'bool'",
    # Warren "received none but current is True".
    assert error.reply_text.startswith(
        f"PRECONDITION_FAILED - inequivalent arg 'x-single-active-consumer' for queue "
        f"'{queue}' in vhost '{warren.vhost}': received none but current is ")


def test_streams_refuse_the_argument(warren, setup):
    connection, channel, new_queue, _ = setup
    queue = new_queue("sac")
    error = expect_channel_error(connection, channel, 406, lambda: channel.queue_declare(
        queue, durable=True, arguments={**SAC, "x-queue-type": "stream"}))
    assert error.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue "
        f"'{queue}' in vhost '{warren.vhost}' of queue type rabbit_stream_queue")
