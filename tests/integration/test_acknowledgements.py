"""Basic.Ack / Nack / Reject / Recover and requeueing with BlockingConnection.

To check which messages were settled, a test leaves the others unacked and closes the
channel: every unacked message returns (redelivered) in one go, and the acked ones must
not be among them.
"""

import socket

import pika.exceptions
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn, names: fixtures)
    _test_deadline, chan, conn, connect, exclusive_queue, expect_channel_error,
    expect_connection_error, get_all, names, publish_bodies, ready_count, wait_for_count,
    wait_until,
)


def fill(channel, count):
    """An exclusive queue holding bodies "0".."count-1" (all enqueued on return)."""
    queue = exclusive_queue(channel)
    publish_bodies(channel, "", queue, [str(n) for n in range(count)])
    return queue


def take(channel, queue, count):
    """Basic.Get `count` messages without ack; returns their GetOk methods."""
    methods = []
    for _ in range(count):
        method, _, _ = channel.basic_get(queue, auto_ack=False)
        assert method is not None
        methods.append(method)
    return methods


def contents(channel, queue):
    """Everything in `queue` (auto-ack) as [(body, redelivered)]."""
    return [(body.decode(), method.redelivered) for method, _, body in get_all(channel, queue)]


def close_and_collect(conn, worker, observer, queue, expected_count):
    """Close `worker` (requeueing its unacked messages) and return the queue's contents."""
    worker.close()
    assert wait_for_count(observer, queue, expected_count) == expected_count
    return contents(observer, queue)


def test_ack_settles_only_that_message(conn, chan):
    queue = fill(chan, 3)
    worker = conn.channel()
    methods = take(worker, queue, 3)
    worker.basic_ack(methods[1].delivery_tag)
    assert close_and_collect(conn, worker, chan, queue, 2) == [("0", True), ("2", True)]


def test_multiple_ack_settles_up_to_the_tag(conn, chan):
    queue = fill(chan, 5)
    worker = conn.channel()
    methods = take(worker, queue, 5)
    worker.basic_ack(methods[2].delivery_tag, multiple=True)
    assert close_and_collect(conn, worker, chan, queue, 2) == [("3", True), ("4", True)]


def test_ack_zero_multiple_settles_everything_outstanding(conn, chan):
    queue = fill(chan, 4)
    worker = conn.channel()
    take(worker, queue, 3)
    worker.basic_ack(0, multiple=True)
    assert close_and_collect(conn, worker, chan, queue, 1) == [("3", False)]


def test_ack_zero_multiple_with_nothing_outstanding_is_harmless(chan):
    queue = fill(chan, 2)
    chan.basic_ack(0, multiple=True)
    assert [body for body, _ in contents(chan, queue)] == ["0", "1"]
    assert chan.is_open


def test_nack_requeue_returns_message_to_the_head(chan):
    queue = fill(chan, 4)
    methods = take(chan, queue, 2)
    chan.basic_nack(methods[1].delivery_tag, requeue=True)
    method, _, body = chan.basic_get(queue, auto_ack=False)
    assert (body, method.redelivered) == (b"1", True)
    assert method.message_count == 2
    chan.basic_ack(0, multiple=True)
    assert contents(chan, queue) == [("2", False), ("3", False)]


def test_nack_without_requeue_drops(conn, chan):
    queue = fill(chan, 3)
    worker = conn.channel()
    methods = take(worker, queue, 3)
    worker.basic_nack(methods[0].delivery_tag, requeue=False)
    assert close_and_collect(conn, worker, chan, queue, 2) == [("1", True), ("2", True)]


def test_nack_multiple_requeue(chan):
    queue = fill(chan, 5)
    methods = take(chan, queue, 4)
    chan.basic_nack(methods[2].delivery_tag, multiple=True, requeue=True)
    # 0..2 are back at the head in their original order; 3 is still unacked.
    assert contents(chan, queue) == [("0", True), ("1", True), ("2", True), ("4", False)]
    chan.basic_ack(methods[3].delivery_tag)
    assert chan.is_open


def test_nack_multiple_without_requeue(conn, chan):
    queue = fill(chan, 5)
    worker = conn.channel()
    methods = take(worker, queue, 4)
    worker.basic_nack(methods[1].delivery_tag, multiple=True, requeue=False)
    assert close_and_collect(conn, worker, chan, queue, 3) == [
        ("2", True), ("3", True), ("4", False)]


def test_reject_requeue(chan):
    queue = fill(chan, 2)
    method, _, body = chan.basic_get(queue, auto_ack=False)
    chan.basic_reject(method.delivery_tag, requeue=True)
    assert contents(chan, queue) == [("0", True), ("1", False)]


def test_reject_without_requeue_drops(conn, chan):
    queue = fill(chan, 3)
    worker = conn.channel()
    methods = take(worker, queue, 2)
    worker.basic_reject(methods[1].delivery_tag, requeue=False)
    assert close_and_collect(conn, worker, chan, queue, 2) == [("0", True), ("2", False)]


def test_requeued_messages_keep_their_original_order(chan):
    queue = fill(chan, 5)
    methods = take(chan, queue, 4)
    # Rejected last-first, they still come back ahead of the rest in queue order.
    chan.basic_reject(methods[3].delivery_tag, requeue=True)
    chan.basic_reject(methods[0].delivery_tag, requeue=True)
    chan.basic_reject(methods[2].delivery_tag, requeue=True)
    assert contents(chan, queue) == [("0", True), ("2", True), ("3", True), ("4", False)]
    chan.basic_ack(methods[1].delivery_tag)


def test_consumer_gets_nacked_message_again(conn, chan):
    queue = fill(chan, 1)
    received = []
    chan.basic_consume(queue, lambda ch, method, props, body: received.append(method))
    assert wait_until(conn, lambda: len(received) == 1)
    assert received[0].redelivered is False
    chan.basic_nack(received[0].delivery_tag, requeue=True)
    assert wait_until(conn, lambda: len(received) == 2)
    assert received[1].redelivered is True
    assert received[1].delivery_tag != received[0].delivery_tag
    chan.basic_ack(received[1].delivery_tag)


def test_unknown_delivery_tag_is_406(conn, chan):
    queue = fill(chan, 1)
    take(chan, queue, 1)
    error = expect_channel_error(conn, chan, 406, lambda: chan.basic_ack(99))
    assert "PRECONDITION_FAILED" in error.reply_text
    assert "unknown delivery tag" in error.reply_text


def test_unknown_delivery_tag_in_nack_and_reject_is_406(conn):
    for settle in (lambda ch: ch.basic_nack(42), lambda ch: ch.basic_reject(42),
                   lambda ch: ch.basic_ack(42, multiple=True)):
        channel = conn.channel()
        expect_channel_error(conn, channel, 406, lambda: settle(channel))


def test_double_ack_is_406(conn, chan):
    queue = fill(chan, 2)
    method, _, _ = chan.basic_get(queue, auto_ack=False)
    chan.basic_ack(method.delivery_tag)
    expect_channel_error(conn, chan, 406, lambda: chan.basic_ack(method.delivery_tag))


def test_acking_an_auto_acked_delivery_is_406(conn, chan):
    queue = fill(chan, 1)
    method, _, _ = chan.basic_get(queue, auto_ack=True)
    expect_channel_error(conn, chan, 406, lambda: chan.basic_ack(method.delivery_tag))


def test_delivery_tags_are_per_channel(conn, chan):
    queue = fill(chan, 1)
    method, _, _ = chan.basic_get(queue, auto_ack=False)
    other = conn.channel()
    expect_channel_error(conn, other, 406, lambda: other.basic_ack(method.delivery_tag))
    chan.basic_ack(method.delivery_tag)
    assert chan.is_open


def test_channel_error_requeues_the_channels_unacked_messages(conn, chan):
    queue = fill(chan, 3)
    worker = conn.channel()
    take(worker, queue, 2)
    expect_channel_error(conn, worker, 406, lambda: worker.basic_ack(1000))
    assert wait_for_count(chan, queue, 3) == 3
    assert contents(chan, queue) == [("0", True), ("1", True), ("2", False)]


def test_recover_requeue_redelivers_unacked(chan):
    queue = fill(chan, 4)
    take(chan, queue, 3)
    chan.basic_recover(requeue=True)
    assert contents(chan, queue) == [("0", True), ("1", True), ("2", True), ("3", False)]


def test_recover_redelivers_to_the_consumer(conn, chan):
    queue = fill(chan, 2)
    received = []
    chan.basic_consume(queue, lambda ch, method, props, body: received.append((method, body)))
    assert wait_until(conn, lambda: len(received) == 2)
    chan.basic_recover(requeue=True)
    assert wait_until(conn, lambda: len(received) == 4)
    again = received[2:]
    assert [body for _, body in again] == [b"0", b"1"]
    assert all(method.redelivered for method, _ in again)
    chan.basic_ack(0, multiple=True)
    assert ready_count(chan, queue) == 0


def test_recover_without_requeue_is_not_implemented(conn, chan):
    # RabbitMQ refuses Basic.Recover(requeue=False): connection error 540.
    queue = fill(chan, 1)
    take(chan, queue, 1)
    error = expect_connection_error(conn, 540, lambda: chan.basic_recover(requeue=False))
    assert "NOT_IMPLEMENTED" in error.reply_text


def test_unacked_messages_return_when_the_connection_closes(warren, chan, names):
    queue = names.queue()
    chan.queue_declare(queue)
    publish_bodies(chan, "", queue, ["a", "b", "c"])
    assert wait_for_count(chan, queue, 3) == 3
    worker = connect(warren)
    try:
        channel = worker.channel()
        received = []
        channel.basic_consume(queue, lambda ch, method, props, body: received.append(body))
        assert wait_until(worker, lambda: len(received) == 3)
        channel.basic_ack(1)
    finally:
        worker.close()
    assert wait_for_count(chan, queue, 2) == 2
    assert contents(chan, queue) == [("b", True), ("c", True)]


def test_unacked_messages_return_when_the_connection_drops(warren, chan, names):
    queue = names.queue()
    chan.queue_declare(queue)
    publish_bodies(chan, "", queue, ["x", "y"])
    assert wait_for_count(chan, queue, 2) == 2
    worker = connect(warren)
    channel = worker.channel()
    received = []
    channel.basic_consume(queue, lambda ch, method, props, body: received.append(body))
    assert wait_until(worker, lambda: len(received) == 2)
    # Drop the TCP connection without Connection.Close.
    worker._impl._transport._sock.shutdown(socket.SHUT_RDWR)
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        wait_until(worker, lambda: worker.is_closed)
    assert wait_for_count(chan, queue, 2) == 2
    assert contents(chan, queue) == [("x", True), ("y", True)]
