"""Channel-wide Basic.Qos (global=true) with per-consumer limits, as RabbitMQ 3.10
applies them (differential: run also with WARREN_TEST_BROKER=127.0.0.1:5673).

A count of deliveries is exact without sleeping: wait for the expected deliveries,
then for the queues' ready counts (passive declare) to show what the broker held back;
after that round trip every delivery sent is in pika's buffer, and `flush` hands it over.
"""

import pika
import pika.exceptions
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, conn: fixtures)
    _test_deadline, conn, flush, publish_bodies, wait_for_count, wait_until,
)

# Global qos as RabbitMQ 3.10 (and 4.0) honour it; 4.3 denies the deprecated feature and
# limits each consumer instead (tests/integration/test_rabbitmq_line_selection.py).
pytestmark = pytest.mark.warren_rabbitmq("3.10")


def full_queue(channel, name, count=5, arguments=None):
    channel.queue_declare(name, durable=arguments is not None, arguments=arguments)
    publish_bodies(channel, "", name, [f"{name}{n}" for n in range(count)])
    assert wait_for_count(channel, name, count) == count
    return name


def settled(connection, observer, received, expected_ready):
    """The deliveries once each queue's ready count is as given ({queue: count})."""
    for queue, ready in expected_ready.items():
        assert wait_for_count(observer, queue, ready) == ready
    flush(connection)
    return sorted(label for label, _ in received)


def consume(channel, queue, received, label, auto_ack=False):
    return channel.basic_consume(
        queue, lambda ch, m, p, b: received.append((label, m.delivery_tag)),
        auto_ack=auto_ack)


def test_global_limit_spans_consumers_on_several_queues(conn):
    channel, observer = conn.channel(), conn.channel()
    a, b = full_queue(channel, "a"), full_queue(channel, "b")
    channel.basic_qos(prefetch_count=3, global_qos=True)
    received = []
    consume(channel, a, received, "a")
    consume(channel, b, received, "b")
    assert wait_until(conn, lambda: len(received) >= 3)
    ready = 10 - 3
    assert len(settled_total(conn, observer, received, [a, b], ready)) == 3
    channel.basic_ack(received[0][1])
    assert wait_until(conn, lambda: len(received) >= 4)
    assert len(settled_total(conn, observer, received, [a, b], ready - 1)) == 4


def settled_total(connection, observer, received, queues, expected):
    assert wait_until(connection, lambda: sum(
        observer.queue_declare(q, passive=True).method.message_count
        for q in queues) == expected)
    flush(connection)
    return received


def test_per_consumer_qos_after_global_lifts_the_channel_limit(conn):
    """RabbitMQ 3.x: Basic.Qos global=false clears the channel-wide limit."""
    channel, observer = conn.channel(), conn.channel()
    a, b = full_queue(channel, "a"), full_queue(channel, "b")
    channel.basic_qos(prefetch_count=3, global_qos=True)
    channel.basic_qos(prefetch_count=2)
    received = []
    consume(channel, a, received, "a")
    consume(channel, b, received, "b")
    assert wait_until(conn, lambda: len(received) >= 4)
    assert settled(conn, observer, received, {a: 3, b: 3}) == ["a", "a", "b", "b"]


def test_global_after_per_consumer_qos_applies_both(conn):
    channel, observer = conn.channel(), conn.channel()
    a, b = full_queue(channel, "a"), full_queue(channel, "b")
    channel.basic_qos(prefetch_count=2)
    channel.basic_qos(prefetch_count=3, global_qos=True)
    received = []
    consume(channel, a, received, "a")
    assert wait_until(conn, lambda: len(received) >= 2)
    consume(channel, b, received, "b")
    assert wait_until(conn, lambda: len(received) >= 3)
    assert settled(conn, observer, received, {a: 3, b: 4}) == ["a", "a", "b"]


def test_lowered_limit_takes_nothing_back_and_a_raised_one_lets_more_flow(conn):
    channel, observer = conn.channel(), conn.channel()
    a = full_queue(channel, "a", 10)
    channel.basic_qos(prefetch_count=4, global_qos=True)
    received = []
    consume(channel, a, received, "a")
    assert wait_until(conn, lambda: len(received) >= 4)
    channel.basic_qos(prefetch_count=2, global_qos=True)
    assert len(settled(conn, observer, received, {a: 6})) == 4
    channel.basic_ack(received[2][1], multiple=True)    # 1 left unacked: 1 more
    assert wait_until(conn, lambda: len(received) >= 5)
    assert len(settled(conn, observer, received, {a: 5})) == 5
    channel.basic_qos(prefetch_count=4, global_qos=True)    # 2 unacked: 2 more
    assert wait_until(conn, lambda: len(received) >= 7)
    assert len(settled(conn, observer, received, {a: 3})) == 7


def test_reached_global_limit_blocks_a_no_ack_consumer_whose_deliveries_do_not_count(conn):
    channel, observer = conn.channel(), conn.channel()
    a, b = full_queue(channel, "a"), full_queue(channel, "b")
    channel.basic_qos(prefetch_count=2, global_qos=True)
    received = []
    tag = consume(channel, a, received, "a")
    assert wait_until(conn, lambda: len(received) >= 2)
    consume(channel, b, received, "b", auto_ack=True)
    assert settled(conn, observer, received, {a: 3, b: 5}) == ["a", "a"]
    channel.basic_cancel(tag)
    channel.basic_ack(0, multiple=True)
    assert wait_until(conn, lambda: len(received) >= 7)    # all 5: none counted
    assert settled(conn, observer, received, {a: 3, b: 0}) == ["a"] * 2 + ["b"] * 5


def test_basic_get_counts_only_when_unacked_as_the_global_limit_is_set(conn):
    channel, observer = conn.channel(), conn.channel()
    a, b = full_queue(channel, "a"), full_queue(channel, "b")
    gets = [channel.basic_get(a)[0].delivery_tag for _ in range(2)]
    channel.basic_qos(prefetch_count=3, global_qos=True)     # counts the 2 gets
    received = []
    consume(channel, b, received, "b")
    assert wait_until(conn, lambda: len(received) >= 1)
    assert settled(conn, observer, received, {b: 4}) == ["b"]
    for tag in gets:    # RabbitMQ's limiter does not count these acks
        channel.basic_ack(tag)
    channel.basic_ack(received[0][1])    # frees one slot
    assert wait_until(conn, lambda: len(received) >= 2)
    assert settled(conn, observer, received, {b: 3}) == ["b", "b"]
    channel.basic_get(a)   # a get after the Basic.Qos does not count: 3 - 1 leaves room
    channel.basic_ack(received[1][1])
    assert wait_until(conn, lambda: len(received) >= 3)
    assert settled(conn, observer, received, {b: 2}) == ["b"] * 3


def test_consuming_a_quorum_queue_on_a_globally_limited_channel_closes_with_540(conn):
    channel = conn.channel()
    queue = full_queue(channel, "qq", 1, {"x-queue-type": "quorum"})
    channel.basic_qos(prefetch_count=2, global_qos=True)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        channel.basic_consume(queue, lambda *args: None)
    assert info.value.reply_code == 540
    vhost = conn._impl.params.virtual_host
    assert info.value.reply_text.startswith(
        f"NOT_IMPLEMENTED - queue '{queue}' in vhost '{vhost}' does not support global qos")


def test_global_limit_set_later_does_not_apply_to_a_quorum_consumer(conn):
    channel, observer = conn.channel(), conn.channel()
    queue = full_queue(channel, "qq", 5, {"x-queue-type": "quorum"})
    channel.basic_qos(prefetch_count=3)
    received = []
    consume(channel, queue, received, "q")
    assert wait_until(conn, lambda: len(received) >= 3)
    channel.basic_qos(prefetch_count=1, global_qos=True)
    channel.basic_ack(received[0][1])
    assert wait_until(conn, lambda: len(received) >= 4)
    assert len(settled(conn, observer, received, {queue: 1})) == 4


def test_prefetch_size_closes_the_connection_with_540(conn):
    channel = conn.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        channel.basic_qos(prefetch_size=10, prefetch_count=1)
    assert (info.value.reply_code, info.value.reply_text) == (
        540, "NOT_IMPLEMENTED - prefetch_size!=0 (10)")
