"""The foundation issue's acceptance scenario: an unmodified pika client does real work.

Declare a topic exchange and a queue, bind them, publish 100,000 small messages carrying
their sequence numbers, then consume them with manual acks and prefetch 100: every
message arrives exactly once, in order.
"""

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, conn, names: fixtures)
    _test_deadline, conn, names, wait_for_count,
)

PIKA_TEST_TIMEOUT = 300  # the one heavy test; RabbitMQ needs about 10 s
MESSAGES = 100_000
PREFETCH = 100


def test_hundred_thousand_messages_exactly_once_in_order(conn, names):
    channel = conn.channel()
    exchange = names.exchange("acceptance")
    queue = names.queue("acceptance")
    channel.exchange_declare(exchange, "topic")
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange, "acceptance.#")

    for sequence in range(MESSAGES):
        channel.basic_publish(exchange, f"acceptance.part{sequence % 7}", b"%d" % sequence)
    assert wait_for_count(channel, queue, MESSAGES, timeout=60) == MESSAGES

    channel.basic_qos(prefetch_count=PREFETCH)
    expected = 0
    most_buffered = 0
    for method, properties, body in channel.consume(queue, inactivity_timeout=30):
        assert method is not None, f"no delivery for 30 s after message {expected - 1}"
        assert int(body) == expected, f"got {body!r}, expected {expected}"
        assert method.redelivered is False
        assert method.routing_key == f"acceptance.part{expected % 7}"
        # Deliveries pika holds that were not yielded yet are unacked as well, so with one
        # more in hand they can never exceed the prefetch window.
        most_buffered = max(most_buffered, channel.get_waiting_message_count())
        channel.basic_ack(method.delivery_tag)
        expected += 1
        if expected == MESSAGES:
            break
    # Nothing beyond the 100,000 was delivered (cancel() reports deliveries it had to
    # return), and nothing is left in the queue.
    assert channel.cancel() == 0
    assert expected == MESSAGES
    assert most_buffered < PREFETCH
    declare = channel.queue_declare(queue, passive=True).method
    assert (declare.message_count, declare.consumer_count) == (0, 0)
