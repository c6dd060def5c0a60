"""A published message as the broker holds it: raw properties, body, routing data."""

import re

from pamqp import commands

from amqp_codec import decode_properties
from amqp_codec.properties import delivery_mode
from amqp_codec.wire_ids import EXPIRATION_FLAG, HEADERS_FLAG, REPLY_TO_FLAG, USER_ID_FLAG

# The flags are tested in the property block's first two bytes, one byte at a time.
EXPIRATION_BIT = EXPIRATION_FLAG >> 8    # in the first (high) byte (Queue.enqueue tests it)
_REPLY_TO_BIT = REPLY_TO_FLAG >> 8       # in the first byte
_HEADERS_BIT = HEADERS_FLAG >> 8         # in the first byte
USER_ID_BIT = USER_ID_FLAG               # in the second (low) byte
# Channel.publish: a message with any of these set needs a look (user_id in the low byte)
CHECKED_HIGH_BITS = EXPIRATION_BIT | _REPLY_TO_BIT | _HEADERS_BIT
_EXPIRATION = re.compile(r"\+?[0-9]+", re.ASCII)


class Message:
    """One published message, shared by reference by every queue it was routed to.

    `properties` is the raw content-header property block exactly as the publisher sent
    it, forwarded untouched to consumers; it is decoded only when a feature needs a field.
    """

    # The caches `decoded_cache` (the decoded properties) and `persistent_cache` are None
    # until first asked for. Two makers skip __init__ (cheaper) and must stay in step
    # with these slots: the decoder makes a PublishedMessage (it sets every attribute
    # of an amqp_codec.InboundPublish, these two caches included), and
    # backlog.MemoryRun.move_to.
    __slots__ = ("exchange", "routing_key", "properties", "body", "decoded_cache",
                 "persistent_cache")

    # The routing keys a CC or BCC header added (a SenderRoutedMessage's slot); a class
    # attribute here, so that a message without them costs nothing to make.
    extra_routing_keys: tuple[str, ...] = ()

    def __init__(self, exchange: str, routing_key: str, properties: bytes,
                 body: bytes | None):
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties = properties
        self.body = body   # None while paged out to the queue file
        self.decoded_cache: commands.Basic.Properties | None = None
        self.persistent_cache: bool | None = None

    @property
    def persistent(self) -> bool:
        """delivery_mode 2: kept across restarts when in a durable queue."""
        persistent = self.persistent_cache
        if persistent is None:
            persistent = self.persistent_cache = delivery_mode(self.properties) == 2
        return persistent

    def with_body(self, body: bytes) -> "Message":
        """A copy with its body read back from the queue file."""
        copy = Message(self.exchange, self.routing_key, self.properties, body)
        copy.persistent_cache = self.persistent
        return copy

    def with_properties(self, properties: bytes) -> "Message":
        """A copy with another property block (a queue that rewrites headers for its
        own deliveries, such as a quorum queue's x-delivery-count)."""
        body = self.body
        copy = (Message(self.exchange, self.routing_key, properties, body)
                if body is not None else
                PagedOutMessage(self.exchange, self.routing_key, properties,
                                body_size(self)))
        copy.persistent_cache = self.persistent
        return copy

    def dead_lettered(self) -> bool:
        """Whether the broker dead-lettered this message (DeadLetteredMessage): its
        x-death header is then the history the broker wrote, not one a client published
        (RabbitMQ 4.x reads only the former when it dead-letters the message again)."""
        return False

    def may_name_recipients(self) -> bool:
        """Whether a CC or BCC header may be present: headers are set and "CC" occurs
        in the property block (a scan of raw bytes, no decoding)."""
        properties = self.properties
        return len(properties) >= 2 and bool(properties[0] & _HEADERS_BIT) \
            and b"CC" in properties

    def has_user_id(self) -> bool:
        """Whether the user_id property is present (bit 4 of the property flags)."""
        properties = self.properties
        return len(properties) >= 2 and bool(properties[1] & USER_ID_BIT)

    def has_reply_to(self) -> bool:
        properties = self.properties
        return len(properties) >= 2 and bool(properties[0] & _REPLY_TO_BIT)

    def has_expiration(self) -> bool:
        properties = self.properties
        return len(properties) >= 2 and bool(properties[0] & EXPIRATION_BIT)

    def expiration_ms(self) -> int | None:
        """The per-message TTL in milliseconds, or None; ValueError when it is not a
        non-negative integer written in ASCII digits (an optional "+" first), which
        is what RabbitMQ 3.10 accepts ("5", "+5", "007"; not " 5", "1.5", "1_0", "")."""
        if not self.has_expiration():
            return None
        text = self.decoded_properties.expiration
        if text is None:
            return None
        if not _EXPIRATION.fullmatch(text):
            raise ValueError(text)
        return int(text)

    def forget_decoded(self) -> None:
        """Drop the decoded properties (a message held long keeps only its raw ones)."""
        self.decoded_cache = None

    @property
    def decoded_properties(self) -> commands.Basic.Properties:
        """The pamqp Basic.Properties of this message, decoded once on first use."""
        decoded = self.decoded_cache
        if decoded is None:
            decoded = self.decoded_cache = decode_properties(self.properties)
        return decoded

    @property
    def headers(self) -> dict:
        return self.decoded_properties.headers or {}


class PublishedMessage(Message):
    """A message as a client published it: the decoder makes it (Framer's publish_type)
    with Basic.Publish's arguments, as an amqp_codec.InboundPublish, so that the channel
    routes this object itself instead of copying it into a Message (one object fewer
    to build per message: ~2,000 callgrind instructions, bench/core_hot_path.py).
    A publish whose body the decoder dropped (above max_body_size) is an InboundPublish
    instead."""

    __slots__ = ("channel", "mandatory", "immediate")

    def __init__(self, channel: int, exchange: str, routing_key: str, mandatory: bool,
                 immediate: bool, properties: bytes = b"", body: bytes = b""):
        self.channel = channel
        self.exchange = exchange
        self.routing_key = routing_key
        self.mandatory = mandatory
        self.immediate = immediate
        self.properties = properties
        self.body = body
        self.decoded_cache = None
        self.persistent_cache = None


class SenderRoutedMessage(Message):
    """A message its publisher also addressed to more routing keys (CC and BCC
    headers): it is routed with its routing key and each of these."""

    __slots__ = ("extra_routing_keys",)

    def __init__(self, exchange: str, routing_key: str, properties: bytes,
                 body: bytes | None, extra_routing_keys: tuple[str, ...]):
        super().__init__(exchange, routing_key, properties, body)
        self.extra_routing_keys = extra_routing_keys


class PagedOutMessage(Message):
    """A message whose body is only in the queue file; its size is still known (a
    queue's max-length-bytes counts it)."""

    __slots__ = ("body_size",)

    def __init__(self, exchange: str, routing_key: str, properties: bytes,
                 body_size: int):
        super().__init__(exchange, routing_key, properties, None)
        self.body_size = body_size


class DeadLetteredMessage(SenderRoutedMessage):
    """A message the broker dead-lettered (dead_letter.py), with the routing keys of its
    CC and BCC headers when it is routed with them again. The mark is kept by every copy
    (a body read back, new delivery counts: DeadLetteredPagedOut) and in the queue
    file (its DEAD_LETTERED flag). Not kept in a MemoryRun's parts (backlog.py), which
    hold plain messages only."""

    __slots__ = ()

    def dead_lettered(self) -> bool:
        return True

    def with_properties(self, properties: bytes) -> "Message":
        copy = DeadLetteredMessage(self.exchange, self.routing_key, properties, self.body,
                                   ())
        copy.persistent_cache = self.persistent
        return copy


class DeadLetteredPagedOut(PagedOutMessage):
    """A message the broker dead-lettered (DeadLetteredMessage) whose body is only in
    the queue file."""

    __slots__ = ()

    def dead_lettered(self) -> bool:
        return True

    def with_body(self, body: bytes) -> "Message":
        copy = DeadLetteredMessage(self.exchange, self.routing_key, self.properties, body,
                                   ())
        copy.persistent_cache = self.persistent
        return copy

    def with_properties(self, properties: bytes) -> "Message":
        copy = DeadLetteredPagedOut(self.exchange, self.routing_key, properties,
                                    self.body_size)
        copy.persistent_cache = self.persistent
        return copy


class PagedOutPlaceholders:
    """Makes the placeholders of paged-out messages. Consecutive ones alike (same
    exchange, routing key, property block and body size, as in a backlog of similar
    messages) share one: a deep backlog then costs no Message object per message. Only
    the last one made is remembered, so distinct messages never accumulate here."""

    __slots__ = ("_last",)

    def __init__(self):
        self._last: PagedOutMessage | None = None

    def placeholder(self, exchange: str, routing_key: str, properties: bytes,
                    body_size: int, dead_lettered: bool = False) -> PagedOutMessage:
        """The placeholder of a paged-out message; with `dead_lettered`, of a
        DeadLetteredMessage (one of its own: they are rare)."""
        if dead_lettered:
            return DeadLetteredPagedOut(exchange, routing_key, properties, body_size)
        last = self._last
        if (last is not None and last.body_size == body_size
                and last.properties == properties and last.routing_key == routing_key
                and last.exchange == exchange):
            return last
        self._last = PagedOutMessage(exchange, routing_key, properties, body_size)
        return self._last


def body_size(message: Message) -> int:
    """The length of the message's body, in memory or paged out."""
    body = message.body
    if body is not None:
        return len(body)
    assert isinstance(message, PagedOutMessage), "a message without body is paged out"
    return message.body_size


# Whether the classes here can be made by object.__new__ and their slots set, without
# their __init__ (cheaper in pure Python: backlog.MemoryRun.move_to does so). Not in a
# compiled build (mypyc): object.__new__ refuses its classes ("not safe").
MADE_BY_OBJECT_NEW = Message.__new__ is object.__new__


class QueueEntry:
    """A message's place in one queue: the shared Message plus per-queue state."""

    # backlog.MemoryRun.move_to sets every slot without __init__ (cheaper): keep in step.
    __slots__ = ("message", "seq", "redelivered", "expires_at")

    def __init__(self, message: Message, seq: int, redelivered: bool = False,
                 expires_at: float | None = None):
        self.message = message
        self.seq = seq
        self.redelivered = redelivered
        self.expires_at = expires_at
