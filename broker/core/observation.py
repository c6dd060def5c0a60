"""What the core tells an observer of a vhost: the points a test broker records so that
tests can inspect and wait on them (broker/server/testing/recorder.py).

A vhost's `observer` is None in a production broker; every call site is one attribute
check against None. The methods run on the broker's loop, in the middle of the core's
work: an observer keeps what it needs and returns, it never changes broker state."""

from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    from .channel import Channel, Delivery
    from .exchange import Exchange
    from .message import Message
    from .queue_base import QueueBase

# How a client settled deliveries (Basic.Ack, Basic.Nack, Basic.Reject).
ACK, NACK, REJECT = "ack", "nack", "reject"


class Observer(Protocol):
    """Told what happened in one vhost; every method does nothing here. A Protocol:
    a class outside the core implements it without subclassing it, which a compiled
    build (mypyc) refuses ("interpreted classes cannot inherit from compiled")."""

    def published(self, exchange: "Exchange", message: "Message", queues: int) -> None:
        """`message` was routed by `exchange` to `queues` queues."""

    def returned(self, message: "Message") -> None:
        """A mandatory `message` reached no queue and went back to its publisher."""

    def dropped(self, message: "Message") -> None:
        """A `message` that reached no queue was dropped (not mandatory)."""

    def settled(self, deliveries: Sequence["Delivery"], outcome: str,
                requeue: bool) -> None:
        """A client settled `deliveries` with `outcome` (ACK, NACK or REJECT);
        `requeue` is the nack's or reject's flag."""

    def dead_lettered(self, queue: "QueueBase", reason: str,
                      message: "Message") -> None:
        """`queue` dead-lettered a message for `reason`; `message` is the copy
        republished to its dead-letter exchange (with x-death)."""

    def confirming(self, channel: "Channel", acks: int, nacks: int) -> None:
        """`channel` is about to confirm `acks` publishes with Basic.Ack and `nacks`
        with Basic.Nack."""
