"""Transactions with pika: publishes, acks and rejects take effect at commit only."""

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn: fixtures)
    _test_deadline, chan, conn, exclusive_queue, get_all, publish_bodies, ready_count,
)


def test_publishes_wait_for_commit_and_vanish_on_rollback(chan):
    queue = exclusive_queue(chan)
    chan.tx_select()
    publish_bodies(chan, "", queue, ["rolled back"])
    chan.tx_rollback()
    publish_bodies(chan, "", queue, ["committed"])
    assert ready_count(chan, queue) == 0
    chan.tx_commit()
    assert [body for _, _, body in get_all(chan, queue)] == [b"committed"]


def test_nack_inside_a_transaction_requeues_only_at_commit(conn, chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, ["m"])
    chan.tx_select()
    method, _, _ = chan.basic_get(queue)
    chan.basic_nack(method.delivery_tag, requeue=True)
    chan.tx_rollback()
    assert ready_count(chan, queue) == 0          # rolled back: still unacked
    chan.basic_nack(method.delivery_tag, requeue=True)
    chan.tx_commit()
    (again, _, body), = get_all(chan, queue, auto_ack=False)
    assert (body, again.redelivered) == (b"m", True)


def test_reject_without_requeue_inside_a_transaction_drops_at_commit(chan):
    queue = exclusive_queue(chan)
    publish_bodies(chan, "", queue, ["m"])
    chan.tx_select()
    method, _, _ = chan.basic_get(queue)
    chan.basic_reject(method.delivery_tag, requeue=False)
    chan.tx_commit()
    chan.close()
    other = chan.connection.channel()
    assert ready_count(other, queue) == 0
