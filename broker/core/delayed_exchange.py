"""The x-delayed-message exchange: the interface of RabbitMQ's
rabbitmq_delayed_message_exchange plugin.

An exchange of type `x-delayed-message` routes as its `x-delayed-type` (direct, fanout,
topic or headers) would, but a message whose `x-delay` header asks for a delay of
1 ms .. 2^32-1 ms is held and routed when the delay expires, with the bindings as they
are then. Due times are wall-clock milliseconds (they stay right across a restart); the
scheduler's monotonic timer only wakes the exchange up, and a message is released only
once the wall clock has reached its due time, so it is never early.

Held messages are written to the exchange's DelayedStore (the server's, over a queue
file of its own; in memory on a broker without a data directory); the exchange keeps
only a heap of ints, each packing a message's due time, seq and persistence, so memory
grows with the number of held messages, not their size. When messages are due, the
store reads their records back (off the event loop) and they are routed in due-time
order, one batch at a time. Persistent messages held by a durable exchange are written
in the same group commit as every other durable write, so a publisher confirm means the
message is on disk; the others are written for paging only.
"""

import heapq
import logging
import math
import re
import struct
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Protocol, Sequence

from amqp_codec import headers_entries, replace_properties
from amqp_codec.field_table import text_value

from .errors import precondition_failed
from .exchange import EXCHANGE_TYPES, Exchange
from .message import Message, SenderRoutedMessage
from .queue_base import QueueBase
from .scheduler import Scheduler, Timer

if TYPE_CHECKING:
    from .channel import Channel

log = logging.getLogger("warren.delayed")

DELAYED_KIND = "x-delayed-message"
DELAYED_TYPE = "x-delayed-type"
DELAY_HEADER = "x-delay"
MAX_DELAY_MS = 2**32 - 1          # the plugin's limit (an Erlang timer's longest delay)
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)


class DelayedStore(Protocol):
    """Where a delayed exchange keeps the records of its held messages."""

    def append(self, seq: int, due_ms: int, message: Message) -> bool:
        """Write the message; True if it is kept across a restart (persistent)."""

    def read(self, seqs: list[int], on_read) -> None:
        """Read the messages `seqs` back; `on_read(messages)` follows (on the event
        loop), each a Message or None when it could not be read."""

    def remove(self, seq: int, persistent: bool) -> None: ...

    def drop(self) -> None: ...

    @property
    def last_seq(self) -> int:
        """The highest seq the store ever took: the next one must be above it."""


class DelayingHost(Protocol):
    """The virtual host of a delayed exchange, as the exchange uses it (a VirtualHost):
    its clocks, and the routing of a message whose delay is over."""

    @property
    def scheduler(self) -> Scheduler: ...

    def route(self, exchange: Exchange, message: Message,
              holds: list | None = None) -> Sequence[QueueBase]: ...


class MemoryDelayedStore:
    """A delayed exchange's store on a broker without a data directory."""

    __slots__ = ("messages",)

    def __init__(self):
        self.messages: dict[int, Message] = {}

    def append(self, seq: int, due_ms: int, message: Message) -> bool:
        self.messages[seq] = message
        return False

    def read(self, seqs: list[int], on_read) -> None:
        on_read([self.messages.get(seq) for seq in seqs])

    def remove(self, seq: int, persistent: bool) -> None:
        self.messages.pop(seq, None)

    def drop(self) -> None:
        self.messages.clear()

    @property
    def last_seq(self) -> int:
        return max(self.messages, default=0)


# A held message in the exchange's heap: one int, ordered by due time then seq.
_SEQ_BITS = 48                     # seqs restart from the store's last one; 2^48 is far
_DUE_SHIFT = _SEQ_BITS + 1
_SEQ_MASK = (1 << _SEQ_BITS) - 1
READ_BATCH = 1000                  # messages read back and routed at once


def _held(due: int, seq: int, persistent: bool) -> int:
    return (due << _DUE_SHIFT) | (seq << 1) | persistent


def _held_seq(held: int) -> int:
    return (held >> 1) & _SEQ_MASK


def delay_ms(message: Message) -> int:
    """The delay the `x-delay` header asks for, as the plugin reads it: an integer as
    it is, a float or decimal truncated, a string of decimal digits parsed; anything
    else, or a value out of 1 .. 2^32-1, is 0 (routed at once)."""
    value = message.headers.get(DELAY_HEADER)
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, (float, Decimal)):
        value = int(value)
    elif isinstance(value, (str, bytes, bytearray)):
        text = text_value(value)
        if not isinstance(text, str) or not _INTEGER_TEXT.fullmatch(text):
            return 0
        value = int(text)
    if not isinstance(value, int) or not 0 < value <= MAX_DELAY_MS:
        return 0
    return value


def with_delay_negated(message: Message, delay: int) -> Message:
    """The message as the plugin forwards it when due: its `x-delay` header replaced,
    where it was, by the negated delay (a signed 32-bit integer; 64-bit above 2^31-1),
    so that it is not delayed again downstream and consumers can tell it was delayed."""
    value = (b"I" + struct.pack(">i", -delay) if delay < 2**31
             else b"l" + struct.pack(">q", -delay))
    entry = b"\x07" + DELAY_HEADER.encode() + value
    headers = b"".join(entry if key == DELAY_HEADER else raw
                       for key, _value, raw in headers_entries(message.properties))
    properties = replace_properties(message.properties, headers=headers)
    return Message(message.exchange, message.routing_key, properties, message.body)


def routing_class(name: str, arguments: dict | None) -> type:
    """The exchange class x-delayed-type names; 406 as in the plugin when it is missing
    or not a type an x-delayed-message exchange can route as."""
    kind = text_value((arguments or {}).get(DELAYED_TYPE))
    if kind not in EXCHANGE_TYPES:
        raise precondition_failed(
            f"Invalid argument, '{DELAYED_TYPE}' must be an existing exchange type "
            f"(direct, fanout, topic or headers) for exchange '{name}'")
    return EXCHANGE_TYPES[kind]


class DelayedExchange(Exchange):
    """Routes as its x-delayed-type; holds messages with a positive x-delay."""

    kind = DELAYED_KIND
    delays_messages = True

    def __init__(self, name: str, durable: bool = False, auto_delete: bool = False,
                 internal: bool = False, arguments: dict | None = None):
        inner_class = routing_class(name, arguments)
        super().__init__(name, durable, auto_delete, internal, arguments)
        self.routing = inner_class(name)      # the bindings' index, as its type keeps it
        self.vhost: DelayingHost | None = None
        self.store: DelayedStore = MemoryDelayedStore()
        self._due: list[int] = []       # heap of _held(due ms, seq, persistent)
        self._extra_keys: dict[int, tuple] = {}   # seq -> CC/BCC routing keys
        self._last_seq = 0
        self._timer: Timer | None = None
        self._reading = False           # a batch of due messages is being read back

    @property
    def pending(self) -> int:
        return len(self._due)

    def attach(self, vhost: DelayingHost, store: DelayedStore | None) -> None:
        self.vhost = vhost
        if store is not None:
            self.store = store

    # -- routing as the x-delayed-type --------------------------------------------------

    def validate_binding(self, arguments: dict | None) -> None:
        self.routing.validate_binding(arguments)

    def route(self, message: Message):
        return self.routing.route(message)

    def _index_add(self, destination, routing_key, arguments):
        self.routing.bind(destination, routing_key, arguments)

    def _index_remove(self, destination, routing_key, arguments):
        self.routing.unbind(destination, routing_key, arguments)

    # -- holding ------------------------------------------------------------------------

    def hold(self, message: Message, delay: int) -> None:
        """Keep `message` until `delay` ms from now (written to the store: durably when
        it is persistent and the exchange durable)."""
        due = math.ceil(self._wall_seconds() * 1000) + delay   # never before now + delay
        seq = self._last_seq = self._last_seq + 1
        persistent = self.store.append(seq, due, with_delay_negated(message, delay))
        if message.extra_routing_keys:     # the BCC keys are not in the record
            self._extra_keys[seq] = message.extra_routing_keys
        self._add(_held(due, seq, persistent))

    def restore_pending(self, store: DelayedStore, held: list) -> None:
        """Messages recovered from the store at start-up: (seq, due ms) each, in seq
        order, all persistent. Those already due are routed at the first timer run; new
        ones continue above every seq the store used (released ones included)."""
        self.store = store
        self._last_seq = max(self._last_seq, store.last_seq)
        for seq, due in held:
            self._add(_held(due, seq, True))

    def drop_pending(self) -> None:
        """The exchange is deleted: its held messages go with it, as in the plugin."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due.clear()
        self._extra_keys.clear()
        self.store.drop()

    def _add(self, held: int) -> None:
        earliest = not self._due or held < self._due[0]
        heapq.heappush(self._due, held)
        if earliest:
            self._schedule()

    def _wall_seconds(self) -> float:
        assert self.vhost is not None, "a delayed exchange is attached to its vhost"
        return self.vhost.scheduler.wall_clock()

    def _now_ms(self) -> int:
        """The wall clock in whole milliseconds, rounded down (a due time is reached
        only once it has fully passed)."""
        return math.floor(self._wall_seconds() * 1000)

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._due or self.vhost is None or self._reading:
            return
        scheduler = self.vhost.scheduler
        wait = max(0, (self._due[0] >> _DUE_SHIFT) - self._now_ms()) / 1000
        self._timer = scheduler.call_at(scheduler.clock() + wait, self._release_due)

    def _release_due(self) -> None:
        """Take up to READ_BATCH messages whose due time the wall clock has reached and
        have the store read them back; they are routed when the read is done."""
        self._timer = None
        if self.deleted or self._reading:
            return
        limit = (self._now_ms() + 1) << _DUE_SHIFT    # every due time <= now
        due = self._due
        batch: list[int] = []
        while due and due[0] < limit and len(batch) < READ_BATCH:
            batch.append(heapq.heappop(due))
        if not batch:
            self._schedule()
            return
        self._reading = True
        self.store.read([_held_seq(held) for held in batch],
                        partial(self._route_batch, batch))

    def _route_batch(self, batch: list[int], messages: list) -> None:
        """Route the messages read back, in due-time order; one that cannot be read
        (the store logged why) or fails to route is logged and dropped, the others are
        still routed."""
        self._reading = False
        if self.deleted:
            return
        for held, message in zip(batch, messages):
            seq = _held_seq(held)
            extra_keys = self._extra_keys.pop(seq, ())
            self.store.remove(seq, bool(held & 1))
            if message is None:
                log.error("event=delayed_message_unreadable exchange=%r seq=%d",
                          self.name, seq)
                continue
            if extra_keys:
                message = SenderRoutedMessage(message.exchange, message.routing_key,
                                              message.properties, message.body,
                                              extra_keys)
            try:
                self._route_now(message)
            except Exception as error:
                log.error("event=delayed_route_failed exchange=%r", self.name,
                          exc_info=error)
        self._schedule()

    def _route_now(self, message: Message) -> None:
        assert self.vhost is not None
        for queue in self.vhost.route(self, message):
            queue.enqueue(message)


# A channel's publish that reaches delayed exchanges (Channel.route):


def hold_published(channel: "Channel", exchange, message: Message, mandatory: bool,
                   delay: int) -> bool:
    """A delayed message is held by its exchange, to be routed when it is due. A
    mandatory one that nothing bound now would route is returned at once (on this
    channel, which may be gone by the due time) and not held."""
    if mandatory and not channel.vhost.route(exchange, message):
        channel.return_unroutable(message)
        return True
    exchange.hold(message, delay)
    return True


def hold_reached(channel: "Channel", queues, message: Message, mandatory: bool) -> bool:
    """The message reached delayed exchanges (the channel's holds) through
    exchange-to-exchange bindings or as an alternate exchange: each holds it, as the
    plugin does, and the queues reached on the way get it at once. A mandatory one
    that reached no queue and that none of these exchanges would route now is returned
    and held nowhere, as one published to a delayed exchange."""
    holds = channel.holds[:]
    channel.holds.clear()
    if mandatory and not queues and not any(channel.vhost.route(exchange, message)
                                            for exchange, _delay in holds):
        channel.return_unroutable(message)
        return True
    for exchange, delay in holds:
        exchange.hold(message, delay)
    accepted = True
    for queue in queues:
        if not queue.enqueue(message, channel.connection):
            accepted = False
    return accepted
