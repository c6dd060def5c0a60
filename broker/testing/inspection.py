"""Inspecting a Warren test broker from a test: the TestVhost methods that read its
queues, exchanges, bindings and ready messages, and what it recorded of the vhost's
traffic (dead-lettered and returned messages, publisher confirms). Warren only: on
another broker they raise NotOnThisBroker (a skip under pytest)."""

import base64
import datetime
import decimal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any


@dataclass(frozen=True)
class QueueState:
    """A queue as the broker sees it now."""

    name: str
    ready: int          # messages waiting for delivery
    unacked: int        # delivered and not settled yet
    consumers: int
    consumer_tags: list[str]
    durable: bool
    auto_delete: bool
    exclusive: bool
    arguments: dict


@dataclass(frozen=True)
class ExchangeState:
    name: str
    type: str
    durable: bool
    auto_delete: bool
    internal: bool
    arguments: dict


@dataclass(frozen=True)
class Binding:
    source: str             # the exchange
    destination: str
    destination_type: str   # "queue" or "exchange"
    routing_key: str
    arguments: dict


@dataclass(frozen=True)
class InspectedMessage:
    """A message as the broker holds it. `body` is None for a message paged out to
    disk; `properties` has the set ones (headers among them)."""

    exchange: str
    routing_key: str
    body: bytes | None
    properties: dict
    redelivered: bool = False
    headers: dict = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "headers", self.properties.get("headers") or {})

    @property
    def message_id(self) -> str | None:
        return self.properties.get("message_id")


@dataclass(frozen=True)
class DeadLetteredMessage(InspectedMessage):
    """A message a queue dead-lettered, as republished to its dead-letter exchange:
    `queue` it came from, `reason` (rejected, expired, maxlen, delivery_limit)."""

    queue: str = ""
    reason: str = ""

    @property
    def x_death(self) -> list[dict]:
        """The x-death header: the newest death first, each a table (count, queue,
        reason, exchange, routing-keys, time)."""
        return self.headers.get("x-death") or []


@dataclass(frozen=True)
class ChannelConfirms:
    """Publisher confirms one channel sent: `connection` is the client's
    connection_name property (else its address)."""

    connection: str
    channel: int
    acks: int
    nacks: int


class Inspection:
    """TestVhost methods reading the broker's state of this vhost (mixin; `self.call`
    is TestVhost.call)."""

    if TYPE_CHECKING:
        def call(self, operation: str, **arguments: Any) -> Any: ...

    def queue(self, name: str) -> QueueState:
        return QueueState(**_decoded(self.call("queue", name=name)))

    def queues(self) -> list[QueueState]:
        return [QueueState(**_decoded(state)) for state in self.call("queues")]

    def exchanges(self) -> list[ExchangeState]:
        return [ExchangeState(**_decoded(state)) for state in self.call("exchanges")]

    def bindings(self) -> list[Binding]:
        """Bindings from every exchange but the default one."""
        return [Binding(**_decoded(binding)) for binding in self.call("bindings")]

    def peek(self, queue: str, count: int = 10) -> list[InspectedMessage]:
        """The first `count` ready messages of `queue` (at most 1,000), not consumed."""
        return [_message(InspectedMessage, found)
                for found in self.call("peek", queue=queue, count=count)]

    def dead_lettered(self, queue: str | None = None) -> list[DeadLetteredMessage]:
        """Messages dead-lettered from `queue` (any queue when None), oldest first; the
        broker keeps the last 1,000."""
        answer = self.call("dead_lettered", queue=queue)
        return [_message(DeadLetteredMessage, found) for found in answer["messages"]]

    def returned(self) -> list[InspectedMessage]:
        """Mandatory messages no queue took, returned to their publishers (the last
        1,000), oldest first."""
        return [_message(InspectedMessage, found)
                for found in self.call("returned")["messages"]]

    def confirms(self) -> list[ChannelConfirms]:
        """Publisher confirms sent, per channel that was in confirm mode."""
        return [ChannelConfirms(**found) for found in self.call("confirms")]


def _message(kind: type, found: dict):
    body = found.pop("body")
    return kind(body=None if body is None else base64.b64decode(body), **_decoded(found))


def _decoded(value: Any) -> Any:
    """A JSON answer with the broker's tagged values ($bytes, $timestamp, $decimal)
    turned back into bytes, datetime and Decimal."""
    if isinstance(value, list):
        return [_decoded(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (tag, text), = value.items()
        if tag == "$bytes":
            return base64.b64decode(text)
        if tag == "$timestamp":
            return datetime.datetime.fromisoformat(text)
        if tag == "$decimal":
            return decimal.Decimal(text)
    return {key: _decoded(item) for key, item in value.items()}
