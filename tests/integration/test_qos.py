"""Basic.Qos prefetch limits with BlockingConnection.

A limit is shown without sleeping: wait until the allowed deliveries arrived, then the
queue's ready count (passive declare) says how many the broker held back, and after that
round trip every delivery the broker had sent is in pika's buffer, so `flush` dispatches
it and the count of deliveries is exact.
"""

import time

import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn: fixtures)
    WAIT, _test_deadline, chan, conn, exclusive_queue, expect_connection_error, flush,
    publish_bodies, wait_for_count, wait_until,
)


def full_queue(channel, count):
    queue = exclusive_queue(channel)
    publish_bodies(channel, "", queue, [str(n) for n in range(count)])
    assert wait_for_count(channel, queue, count) == count
    return queue


def wait_for_total(channel, queues, expected, timeout=WAIT):
    """Poll the summed ready counts of `queues` until they equal `expected` (or time out);
    returns the last sum."""
    deadline = time.monotonic() + timeout
    while True:
        total = sum(channel.queue_declare(q, passive=True).method.message_count for q in queues)
        if total == expected or time.monotonic() >= deadline:
            return total
        channel.connection.process_data_events(time_limit=0.01)


def collector(sink, label=None):
    def on_message(ch, method, properties, body):
        sink.append((label, method, body) if label else (method, body))
    return on_message


def test_prefetch_count_limits_unacked_deliveries(conn, chan):
    queue = full_queue(chan, 10)
    observer = conn.channel()
    chan.basic_qos(prefetch_count=3)
    received = []
    chan.basic_consume(queue, collector(received))
    assert wait_until(conn, lambda: len(received) >= 3)
    assert wait_for_count(observer, queue, 7) == 7
    flush(conn)
    assert len(received) == 3
    # Each ack frees one slot.
    chan.basic_ack(received[0][0].delivery_tag)
    assert wait_until(conn, lambda: len(received) >= 4)
    assert wait_for_count(observer, queue, 6) == 6
    flush(conn)
    assert len(received) == 4
    # A multiple ack frees several.
    chan.basic_ack(received[3][0].delivery_tag, multiple=True)
    assert wait_until(conn, lambda: len(received) >= 7)
    assert wait_for_count(observer, queue, 3) == 3
    flush(conn)
    assert len(received) == 7
    assert [int(body) for _, body in received] == list(range(7))


def test_prefetch_zero_means_unlimited(conn, chan):
    queue = full_queue(chan, 20)
    chan.basic_qos(prefetch_count=0)
    received = []
    chan.basic_consume(queue, collector(received))
    assert wait_until(conn, lambda: len(received) == 20)
    assert wait_for_count(chan, queue, 0) == 0


def test_per_consumer_prefetch_applies_to_each_consumer(conn, chan):
    first, second = full_queue(chan, 5), full_queue(chan, 5)
    observer = conn.channel()
    chan.basic_qos(prefetch_count=2)  # global_qos=False: a limit per consumer
    received = []
    chan.basic_consume(first, collector(received, "first"))
    chan.basic_consume(second, collector(received, "second"))
    assert wait_until(conn, lambda: len(received) >= 4)
    assert wait_for_count(observer, first, 3) == 3
    assert wait_for_count(observer, second, 3) == 3
    flush(conn)
    assert sorted(label for label, _, _ in received) == ["first", "first", "second", "second"]


@pytest.mark.warren_rabbitmq("3.10")   # 4.3 denies global qos
def test_global_prefetch_is_shared_by_the_channels_consumers(conn, chan):
    first, second = full_queue(chan, 5), full_queue(chan, 5)
    observer = conn.channel()
    chan.basic_qos(prefetch_count=2, global_qos=True)
    received = []
    chan.basic_consume(first, collector(received, "first"))
    chan.basic_consume(second, collector(received, "second"))
    assert wait_until(conn, lambda: len(received) >= 2)
    assert wait_for_total(observer, [first, second], 8) == 8
    flush(conn)
    assert len(received) == 2
    # Acking one lets exactly one more through, from either queue.
    chan.basic_ack(received[0][1].delivery_tag)
    assert wait_until(conn, lambda: len(received) >= 3)
    assert wait_for_total(observer, [first, second], 7) == 7
    flush(conn)
    assert len(received) == 3


def test_global_and_per_consumer_limits_combine(conn, chan):
    first, second = full_queue(chan, 5), full_queue(chan, 5)
    observer = conn.channel()
    chan.basic_qos(prefetch_count=3, global_qos=True)
    chan.basic_qos(prefetch_count=1)
    received = []
    chan.basic_consume(first, collector(received, "first"))
    chan.basic_consume(second, collector(received, "second"))
    # One each (the per-consumer limit), well under the channel's limit of three.
    assert wait_until(conn, lambda: len(received) >= 2)
    assert wait_for_count(observer, first, 4) == 4
    assert wait_for_count(observer, second, 4) == 4
    flush(conn)
    assert sorted(label for label, _, _ in received) == ["first", "second"]


def test_qos_does_not_limit_basic_get(chan):
    queue = full_queue(chan, 5)
    chan.basic_qos(prefetch_count=1)
    bodies = []
    for _ in range(5):
        method, _, body = chan.basic_get(queue, auto_ack=False)
        assert method is not None
        bodies.append(body)
    assert bodies == [b"0", b"1", b"2", b"3", b"4"]
    chan.basic_ack(0, multiple=True)


def test_qos_does_not_limit_auto_ack_consumers(conn, chan):
    queue = full_queue(chan, 10)
    chan.basic_qos(prefetch_count=1)
    received = []
    chan.basic_consume(queue, collector(received), auto_ack=True)
    assert wait_until(conn, lambda: len(received) == 10)


def test_fair_dispatch_with_prefetch_one(conn, chan):
    queue = exclusive_queue(chan)
    slow, fast = conn.channel(), conn.channel()
    slow.basic_qos(prefetch_count=1)
    fast.basic_qos(prefetch_count=1)
    slow_got, fast_got = [], []
    slow.basic_consume(queue, collector(slow_got))  # never acks

    def ack_at_once(ch, method, properties, body):
        fast_got.append(body)
        ch.basic_ack(method.delivery_tag)

    fast.basic_consume(queue, ack_at_once)
    publish_bodies(chan, "", queue, [str(n) for n in range(10)])
    assert wait_until(conn, lambda: len(slow_got) + len(fast_got) == 10)
    assert len(slow_got) == 1
    assert len(fast_got) == 9


def test_prefetch_size_is_not_implemented(conn, chan):
    # RabbitMQ closes the connection: 540 NOT_IMPLEMENTED for a non-zero prefetch_size.
    error = expect_connection_error(conn, 540, lambda: chan.basic_qos(prefetch_size=4096))
    assert "NOT_IMPLEMENTED" in error.reply_text


def test_consumer_priority_serves_the_higher_consumer_until_its_prefetch_is_full(conn):
    feeder = conn.channel()
    queue = feeder.queue_declare("", exclusive=True).method.queue
    high_channel, low_channel = conn.channel(), conn.channel()
    high_channel.basic_qos(prefetch_count=2)
    got = []
    high_channel.basic_consume(queue, lambda ch, method, props, body: got.append("high"),
                               arguments={"x-priority": 10})
    low_channel.basic_consume(queue, lambda ch, method, props, body: got.append("low"),
                              auto_ack=True)
    for index in range(5):
        feeder.basic_publish("", queue, str(index).encode())
    assert wait_until(conn, lambda: len(got) == 5)
    assert got[:2] == ["high", "high"] and got.count("high") == 2
