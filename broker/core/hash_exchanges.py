"""Exchange types that send each message to exactly one of their bound destinations.

- `x-consistent-hash` (RabbitMQ's rabbitmq_consistent_hash_exchange plugin): a binding's
  routing key is its weight (1 .. 10000, as text). Each binding owns as many buckets as
  its weight, numbered in binding order; a message goes to the owner of the bucket that
  jump consistent hashing (Lamping and Veach, 2014) picks for a hash of its routing key,
  of the header named by the exchange argument `hash-header`, or of the property named
  by `hash-property` (message_id, correlation_id, timestamp). Shares follow the weights,
  a key stays on its destination while the bindings stay, and a new binding takes keys
  only for its own buckets.
- `x-modulus-hash` (the rabbitmq_sharding plugin's type, built into RabbitMQ 4.3):
  erlang:phash2 of the message's routing keys modulo the number of bindings, over the
  destinations sorted as RabbitMQ 4.3 sorts them (exchanges before queues, then by
  name): each message goes to the queue RabbitMQ 4.3 sends it to.
- `x-local-random` (RabbitMQ 4.0+): one bound classic queue chosen at random (every queue
  is local on Warren's one node).

The consistent hash is Warren's own (BLAKE2b), not the plugin's: the same key goes to
the same destination, but not to the one RabbitMQ would pick (docs/compatibility.md).
"""

import random
import re
import struct
from hashlib import blake2b

from amqp_codec.properties import property_spans
from amqp_codec.reply_codes import ReplyCode

from .erlang_hash import phash2
from .errors import ConnectionFailure, precondition_failed
from .exchange import Exchange
from .message import Message

CONSISTENT_HASH_KIND = "x-consistent-hash"
MODULUS_HASH_KIND = "x-modulus-hash"
LOCAL_RANDOM_KIND = "x-local-random"

HASH_HEADER = "hash-header"
HASH_PROPERTY = "hash-property"
HASH_PROPERTIES = ("correlation_id", "message_id", "timestamp")
MAX_WEIGHT = 10_000          # the plugin's cap on a binding's weight (4.3)
PHASH2_RANGE = 2 ** 27       # x-modulus-hash's erlang:phash2 range (RabbitMQ 4.3)
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)   # what Erlang's list_to_integer reads
_TIMESTAMP = struct.Struct(">Q")
_MASK_64 = 2**64 - 1
_JUMP_MULTIPLIER = 2862933555777941757    # the jump hash paper's 64-bit LCG
_UNDEFINED = b"u"            # a missing header or property: all such messages hash alike
_EMPTY_ARRAY = b"[]"

# hash_on modes of a consistent-hash exchange
_ROUTING_KEY, _HEADER, _PROPERTY = 0, 1, 2


def key_hash(data: bytes) -> int:
    """A 64-bit hash of `data`, the same in every process (unlike hash())."""
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "big")


def jump_bucket(key: int, buckets: int) -> int:
    """The bucket (0 .. buckets-1) jump consistent hashing gives a 64-bit key: growing
    `buckets` from n to m moves a key only into a bucket numbered n or above."""
    bucket = -1
    candidate = 0
    while candidate < buckets:
        bucket = candidate
        key = (key * _JUMP_MULTIPLIER + 1) & _MASK_64
        candidate = int((bucket + 1) * (2147483648.0 / ((key >> 33) + 1)))
    return bucket


def value_bytes(value) -> bytes:
    """A header or property value as the bytes its hash is taken of: tagged by type, so
    that the string "1" and the integer 1 differ (as in RabbitMQ); an array by its first
    element (as the plugin takes it); a missing value as one fixed value."""
    if value is None:
        return _UNDEFINED
    if isinstance(value, str):
        return b"s" + value.encode("utf-8", "surrogateescape")
    if isinstance(value, bytes):     # a long string that is not UTF-8
        return b"s" + value
    if isinstance(value, bytearray):
        return b"x" + bytes(value)
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, int):
        return b"i" + str(value).encode()
    if isinstance(value, list):
        return value_bytes(value[0]) if value else _EMPTY_ARRAY
    return b"o" + repr(value).encode("utf-8", "backslashreplace")


def erlang_binary(data: bytes) -> str:
    """A binary as Erlang's `~tp` prints it in the plugin's refusal texts."""
    if not data:
        return "<<>>"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.isprintable():
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{escaped}">>' if text.isascii() else f'<<"{escaped}"/utf8>>'
    return "<<" + ",".join(str(byte) for byte in data) + ">>"


def _routing_key_bytes(routing_key: str) -> bytes:
    return b"s" + routing_key.encode("utf-8", "surrogateescape")


def _raw_timestamp(properties: bytes) -> int | None:
    """The timestamp property as sent (seconds, any 64-bit value): the decoded one is a
    datetime, clamped."""
    span = property_spans(properties).get("timestamp")
    return None if span is None else _TIMESTAMP.unpack_from(properties, span[0])[0]


def _hash_argument(arguments: dict, name: str) -> str | None:
    """A hash-header or hash-property argument: a long string, or absent. The plugin
    reads only long strings and fails on any other type: RabbitMQ's channel dies and
    the connection closes with 541 and the bare text "INTERNAL_ERROR"."""
    value = arguments.get(name)
    if value is None and name not in arguments:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "surrogateescape")
    if not isinstance(value, str):
        raise ConnectionFailure(ReplyCode.INTERNAL_ERROR, "")
    return value


class ConsistentHashExchange(Exchange):
    """x-consistent-hash: one destination per message, in proportion to binding weights.

    As in the plugin, a destination owns buckets for its first binding only (a second
    binding to it adds none), and removing any binding to it removes all of its buckets;
    the buckets of later bindings move down to close the gap."""

    kind = CONSISTENT_HASH_KIND

    def __init__(self, name: str, durable: bool = False, auto_delete: bool = False,
                 internal: bool = False, arguments: dict | None = None):
        given = arguments or {}
        header = _hash_argument(given, HASH_HEADER)
        hash_property = _hash_argument(given, HASH_PROPERTY)
        if header is not None and hash_property is not None:
            raise precondition_failed(
                "hash-header and hash-property are mutually exclusive")
        if hash_property is not None and hash_property not in HASH_PROPERTIES:
            raise precondition_failed(f"Unsupported property: {hash_property}")
        super().__init__(name, durable, auto_delete, internal, arguments)
        self._hash_on = (_HEADER if header is not None else
                         _PROPERTY if hash_property is not None else _ROUTING_KEY)
        self._hash_name: str = header or hash_property or ""
        # bucket number -> its destination; a destination's buckets are contiguous
        self._buckets: list = []
        self._bucketed: set = set()     # destinations that own buckets

    def bind(self, destination, routing_key: str, arguments: dict | None) -> bool:
        """The plugin's check of a binding key (406), then the binding."""
        data = routing_key.encode("utf-8", "surrogateescape")
        if not _INTEGER_TEXT.fullmatch(routing_key):
            raise precondition_failed(
                f"The binding key must be an integer: {erlang_binary(data)}")
        weight = int(routing_key)
        if weight < 1:
            raise precondition_failed("The binding key must be greater than 0")
        if weight > MAX_WEIGHT:
            raise precondition_failed(f"The binding key must not exceed {MAX_WEIGHT}")
        return super().bind(destination, routing_key, arguments)

    def route(self, message: Message) -> tuple:
        buckets = self._buckets
        count = len(buckets)
        if count <= 1:
            return tuple(buckets)
        return (buckets[jump_bucket(key_hash(self._hashed_bytes(message)), count)],)

    def _hashed_bytes(self, message: Message) -> bytes:
        """What the exchange hashes: the routing key (the one published; CC and BCC
        keys do not count, as in the plugin), a header, or a property."""
        if self._hash_on == _ROUTING_KEY:
            return _routing_key_bytes(message.routing_key)
        if self._hash_on == _HEADER:
            return value_bytes(message.headers.get(self._hash_name))
        if self._hash_name == "timestamp":
            seconds = _raw_timestamp(message.properties)
            return _UNDEFINED if seconds is None else value_bytes(str(seconds))
        return value_bytes(getattr(message.decoded_properties, self._hash_name))

    def _index_add(self, destination, routing_key, arguments):
        if destination not in self._bucketed:
            self._bucketed.add(destination)
            self._buckets.extend([destination] * int(routing_key))

    def _index_remove(self, destination, routing_key, arguments):
        if destination in self._bucketed:
            self._bucketed.discard(destination)
            self._buckets = [owner for owner in self._buckets if owner is not destination]


def _resource_order(destination) -> tuple:
    """RabbitMQ 4.3's order of binding destinations: exchanges before queues (by the
    resource kind's name), then by name as bytes."""
    return (destination.is_queue, destination.name.encode("utf-8", "surrogateescape"))


class ModulusHashExchange(Exchange):
    """x-modulus-hash: the destination at (hash of the routing keys) mod (bindings), in
    RabbitMQ 4.3's order; a destination bound twice counts twice, as there."""

    kind = MODULUS_HASH_KIND

    def __init__(self, name: str, durable: bool = False, auto_delete: bool = False,
                 internal: bool = False, arguments: dict | None = None):
        super().__init__(name, durable, auto_delete, internal, arguments)
        self._destinations: tuple = ()   # one entry per binding, sorted

    def route(self, message: Message) -> tuple:
        """RabbitMQ 4.3's choice: erlang:phash2 of the list of the message's routing
        keys (CC and BCC ones included), in the range 2^27, modulo the bindings."""
        destinations = self._destinations
        count = len(destinations)
        if count <= 1:
            return destinations
        keys = [routing_key.encode("utf-8", "surrogateescape")
                for routing_key in (message.routing_key, *message.extra_routing_keys)]
        return (destinations[phash2(keys) % PHASH2_RANGE % count],)

    def _index_add(self, destination, routing_key, arguments):
        self._sort_destinations()

    def _index_remove(self, destination, routing_key, arguments):
        self._sort_destinations()

    def _sort_destinations(self) -> None:
        self._destinations = tuple(sorted((key[0] for key in self.bindings),
                                          key=_resource_order))


class LocalRandomExchange(Exchange):
    """x-local-random: one bound classic queue at random per message. As in RabbitMQ,
    a binding needs an empty key and a classic queue as its destination (406)."""

    kind = LOCAL_RANDOM_KIND

    def __init__(self, name: str, durable: bool = False, auto_delete: bool = False,
                 internal: bool = False, arguments: dict | None = None):
        super().__init__(name, durable, auto_delete, internal, arguments)
        self._destinations: list = []    # one entry per binding, in binding order
        self.chooser = random.Random()   # a test gives it a seed

    def bind(self, destination, routing_key: str, arguments: dict | None) -> bool:
        """RabbitMQ's checks of the binding (406), then the binding."""
        if routing_key:
            raise precondition_failed(f"Non empty binding '{routing_key}' key not permitted")
        if not destination.is_queue:
            raise precondition_failed("Destination not found")
        queue_type = destination.kind.name
        if queue_type != "classic":
            raise precondition_failed(
                f"Queue type rabbit_{queue_type}_queue not valid for this exchange type")
        return super().bind(destination, routing_key, arguments)

    def route(self, message: Message) -> tuple:
        destinations = self._destinations
        count = len(destinations)
        if count <= 1:
            return tuple(destinations)
        return (destinations[self.chooser.randrange(count)],)

    def _index_add(self, destination, routing_key, arguments):
        self._destinations.append(destination)

    def _index_remove(self, destination, routing_key, arguments):
        self._destinations.remove(destination)


HASH_EXCHANGE_TYPES = {cls.kind: cls for cls in
                       (ConsistentHashExchange, ModulusHashExchange, LocalRandomExchange)}
