"""Transactions of one channel (Tx.Select, Tx.Commit, Tx.Rollback). On a tx channel,
Channel.publish, ack and reject only append to the channel's `transaction`; a commit
routes and settles what it buffered, a rollback makes its settled deliveries unacked
again, as does closing the channel (RabbitMQ rolls the transaction back)."""

from typing import TYPE_CHECKING

from .consumer_timeout import AckWatch
from .errors import precondition_failed

if TYPE_CHECKING:
    from .channel import Channel, Delivery


class Transaction:
    """Publishes and settlements buffered on a tx channel until Tx.Commit."""

    __slots__ = ("publishes", "acks", "rejects")

    def __init__(self):
        self.publishes: list = []            # (exchange, message, mandatory)
        self.acks: list["Delivery"] = []
        self.rejects: list = []              # (deliveries, requeue, outcome)


def select_tx(channel: "Channel") -> None:
    if channel.confirming:
        raise precondition_failed("cannot switch from confirm to tx mode")
    if channel.transaction is None:
        channel.transaction = Transaction()


def commit_tx(channel: "Channel") -> None:
    transaction = _current(channel)
    channel.transaction = Transaction()
    for exchange, message, mandatory in transaction.publishes:
        channel.route(exchange, message, mandatory)
    channel.settle_acked(transaction.acks)
    for deliveries, requeue, outcome in transaction.rejects:
        channel.settle_rejected(deliveries, requeue, outcome)
    if transaction.acks or transaction.rejects:
        channel.vhost.persistence.barrier()   # CommitOk once the acks are on disk


def rollback_tx(channel: "Channel") -> None:
    transaction = _current(channel)
    channel.transaction = Transaction()
    undo_settlements(channel, transaction)


def undo_settlements(channel: "Channel", transaction: Transaction) -> None:
    """The acks, nacks and rejects of an uncommitted transaction did not happen:
    their deliveries are unacked again."""
    pending = transaction.acks + [d for ds, _, _ in transaction.rejects for d in ds]
    for delivery in sorted(pending, key=_by_tag):
        channel.unacked[delivery.tag] = delivery
    if pending and channel.ack_watch is None:
        channel.ack_watch = AckWatch(channel, max(map(_by_tag, pending)))


def _current(channel: "Channel") -> Transaction:
    if channel.transaction is None:
        raise precondition_failed("channel is not transactional")
    return channel.transaction


def _by_tag(delivery: "Delivery") -> int:
    return delivery.tag
