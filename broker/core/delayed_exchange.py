"""The x-delayed-message exchange: the interface of RabbitMQ's
rabbitmq_delayed_message_exchange plugin.

An exchange of type `x-delayed-message` routes as its `x-delayed-type` (direct, fanout,
topic or headers) would, but a message whose `x-delay` header asks for a delay of
1 ms .. 2^32-1 ms is held and routed when the delay expires, with the bindings as they
are then. Due times are wall-clock milliseconds (they stay right across a restart); the
scheduler's monotonic timer only wakes the exchange up, and a message is released only
once the wall clock has reached its due time, so it is never early.

Held messages are kept in one heap of (due time, seq, message), without their decoded
properties (dropped when held, decoded again if a feature needs them). A durable
exchange writes persistent messages to its DelayedStore (the server's, over a queue
file) in the same group commit as every other durable write, so a publisher confirm
means the message is on disk.
"""

import heapq
import logging
import math
import re
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

from amqp_codec.field_table import text_value

from .errors import precondition_failed
from .exchange import EXCHANGE_TYPES, Exchange
from .message import Message
from .scheduler import Timer

if TYPE_CHECKING:
    from .vhost import VirtualHost

log = logging.getLogger("warren.delayed")

DELAYED_KIND = "x-delayed-message"
DELAYED_TYPE = "x-delayed-type"
DELAY_HEADER = "x-delay"
MAX_DELAY_MS = 2**32 - 1          # the plugin's limit (an Erlang timer's longest delay)
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)


class DelayedStore(Protocol):
    """Where a durable delayed exchange keeps its persistent held messages."""

    def append(self, seq: int, due_ms: int, message: Message) -> None: ...

    def remove(self, seq: int) -> None: ...

    def drop(self) -> None: ...


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
        self.vhost: "VirtualHost | None" = None
        self.store: DelayedStore | None = None
        self._due: list[tuple[int, int, Message]] = []   # heap of (due ms, seq, message)
        self._last_seq = 0
        self._timer: Timer | None = None

    @property
    def pending(self) -> int:
        return len(self._due)

    def attach(self, vhost: "VirtualHost", store: DelayedStore | None) -> None:
        self.vhost = vhost
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
        """Keep `message` until `delay` ms from now (written to the store when it is
        persistent and the exchange durable)."""
        due = math.ceil(self._wall_seconds() * 1000) + delay   # never before now + delay
        seq = self._last_seq = self._last_seq + 1
        if self.store is not None and message.persistent:
            self.store.append(seq, due, message)
        message.forget_decoded()
        self._add(due, seq, message)

    def restore_pending(self, store: DelayedStore, held: list) -> None:
        """Messages recovered from the store at start-up: (seq, due ms, message) each,
        in seq order, all persistent. Those already due are routed at the first timer
        run."""
        self.store = store
        for seq, due, message in held:
            self._last_seq = max(self._last_seq, seq)
            self._add(due, seq, message)

    def drop_pending(self) -> None:
        """The exchange is deleted: its held messages go with it, as in the plugin."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due.clear()
        if self.store is not None:
            self.store.drop()

    def _add(self, due: int, seq: int, message: Message) -> None:
        earliest = not self._due or due < self._due[0][0]
        heapq.heappush(self._due, (due, seq, message))
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
        if not self._due or self.vhost is None:
            return
        scheduler = self.vhost.scheduler
        wait = max(0, self._due[0][0] - self._now_ms()) / 1000
        self._timer = scheduler.call_at(scheduler.clock() + wait, self._release_due)

    def _release_due(self) -> None:
        """Route every message whose due time the wall clock has reached; one that
        fails is logged and dropped, the others are still routed."""
        self._timer = None
        if self.deleted:
            return
        now = self._now_ms()
        due = self._due
        while due and due[0][0] <= now:
            _, seq, message = heapq.heappop(due)
            if self.store is not None and message.persistent:
                self.store.remove(seq)
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
