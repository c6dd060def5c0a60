"""Basic.Deliver frames taken straight from a consuming connection's socket bytes.

pika turns every delivery into three frame objects, each passed through its frame
decoder, the connection's callback table, the channel's content assembler and (for a
BlockingChannel) an event queue before the consumer's callback sees it: about 10 us per
message, most of a plain-queue reader's CPU. ``DeliveryFrames`` sits in front of pika's
``_on_data_available`` of one connection. It cuts the socket bytes into frames itself;
the frames of deliveries on the channels routed to it (Basic.Deliver, the content
header, the body frames) are parsed here with ``struct`` and handed to a callback as
``(delivery_tag, redelivered, exchange, routing_key, properties, body)``. Every other
frame (heartbeats, method replies, Basic.Cancel, Channel.Close, Connection.Close,
frames of other channels, anything malformed) goes to pika's own ``_on_data_available``,
whole and in order, so the handshake, acknowledgements, heartbeats and failures stay
pika's. Properties become ``ReceivedProperties`` (pika's ``BasicProperties`` attribute
names and values; header tables decoded by pika's own ``decode_table``, except a stream
queue's table of x-stream-offset alone, read directly), decoded once per run of
deliveries whose raw properties are equal.
"""

import functools
import struct
from collections import namedtuple
from collections.abc import Callable

import pika.data
import pika.spec

FRAME_METHOD, FRAME_HEADER, FRAME_BODY = 1, 2, 3
FRAME_END = 0xCE
FRAME_PREFIX_SIZE = 7  # type (1) + channel (2) + payload size (4)
_FRAME_PREFIX = struct.Struct(">BHI")
_DELIVER_ID = struct.pack(">HH", 60, 60)  # Basic.Deliver: class 60, method 60
_DELIVERY_TAG = struct.Struct(">Q")
_BODY_SIZE = struct.Struct(">Q")  # after the content header's class id and weight
_TIMESTAMP = struct.Struct(">Q")
HEADER_FIXED_SIZE = 12  # class id (2) + weight (2) + body size (8)

# Basic's properties in wire order (flag bits 15 down to 2) and their types: shortstr,
# table, octet, long long (AMQP 0-9-1, 4.2.5.2).
PROPERTY_NAMES = ("content_type", "content_encoding", "headers", "delivery_mode", "priority",
                  "correlation_id", "reply_to", "expiration", "message_id", "timestamp",
                  "type", "user_id", "app_id", "cluster_id")
_PROPERTY_KINDS = "sstoossssqssss"
_NO_PROPERTIES = (None,) * len(PROPERTY_NAMES)

# The headers table a stream queue delivers when the publisher sent no headers: one
# entry, x-stream-offset, a signed long long (type "l"), 25 bytes after the table size.
STREAM_OFFSET_HEADER = "x-stream-offset"
_STREAM_OFFSET_TABLE = b"\x00\x00\x00\x19\x0fx-stream-offsetl"
_STREAM_OFFSET_TABLE_SIZE = len(_STREAM_OFFSET_TABLE) + 8
_LONG_LONG = struct.Struct(">q")
ReceivedProperties = namedtuple("ReceivedProperties", PROPERTY_NAMES)

# (delivery_tag, redelivered, exchange, routing_key, properties, body)
DeliveryCallback = Callable[[int, bool, object, object, object, bytes], None]


def _short_string(raw: bytes):
    """A shortstr as pika decodes it: text, or the bytes when they are not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


@functools.lru_cache(maxsize=64)
def _present(flags: int) -> tuple:
    """(index, kind) of each property that property flags `flags` say is present."""
    return tuple((index, kind) for index, kind in enumerate(_PROPERTY_KINDS)
                 if flags & (1 << (15 - index)))


def decode_properties(raw: bytes):
    """A content header's property flags and list -> ReceivedProperties (absent ones
    None), with pika's values: shortstr as text (bytes when not UTF-8), tables by
    pika.data.decode_table, timestamp as an integer."""
    flags = raw[0] << 8 | raw[1]
    if flags & 1:  # a continuation flag word: no 0-9-1 property needs one
        return pika.spec.BasicProperties().decode(raw)
    values = list(_NO_PROPERTIES)
    at = 2
    for index, kind in _present(flags):
        if kind == "s":
            end = at + 1 + raw[at]
            values[index] = _short_string(raw[at + 1:end])
            at = end
        elif kind == "t":
            values[index], at = decode_table(raw, at)
        elif kind == "o":
            values[index] = raw[at]
            at += 1
        else:
            values[index] = _TIMESTAMP.unpack_from(raw, at)[0]
            at += 8
    return ReceivedProperties._make(values)


def decode_table(raw: bytes, at: int) -> tuple:
    """(the field table at raw[at:], the index after it), as ``pika.data.decode_table``
    reads it; a stream queue's table of x-stream-offset alone is read here directly."""
    if raw.startswith(_STREAM_OFFSET_TABLE, at) and len(raw) >= at + _STREAM_OFFSET_TABLE_SIZE:
        offset = _LONG_LONG.unpack_from(raw, at + len(_STREAM_OFFSET_TABLE))[0]
        return {STREAM_OFFSET_HEADER: offset}, at + _STREAM_OFFSET_TABLE_SIZE
    return pika.data.decode_table(raw, at)


def parse_deliver(payload: bytes, start: int) -> tuple:
    """(delivery_tag, redelivered, exchange, routing_key) of a Basic.Deliver method frame
    whose payload starts at `start` (at the class id); raises IndexError or struct.error
    when it is cut short."""
    at = start + 5 + payload[start + 4]  # past the ids and the consumer tag
    delivery_tag = _DELIVERY_TAG.unpack_from(payload, at)[0]
    redelivered = bool(payload[at + 8] & 1)
    at += 9
    length = payload[at]
    exchange = _short_string(payload[at + 1:at + 1 + length])
    at += 1 + length
    length = payload[at]
    routing_key = _short_string(payload[at + 1:at + 1 + length])
    return delivery_tag, redelivered, exchange, routing_key


class DeliveryFrames:
    """Parses the deliveries of the channels routed to it on pika connection `connection`
    (a ``pika.connection.Connection``, e.g. ``BlockingConnection._impl``); see the module
    docstring. One per connection: it replaces the connection's ``_on_data_available``.

    Route a channel before its Basic.Consume, so that no delivery of the channel takes
    pika's path (which would reorder them), and unroute it when the channel closes
    (pika reuses channel numbers)."""

    def __init__(self, connection):
        self._connection = connection
        self._channels = {}  # channel number -> _ChannelDeliveries
        self._pika_data_available = connection._on_data_available
        self._held = []  # bytes of a frame that has not fully arrived
        self._held_size = 0
        self._needed = 0  # bytes the held frame needs in all
        connection._on_data_available = self.data_received

    def route(self, channel_number: int, on_delivery: DeliveryCallback) -> None:
        """Parse the deliveries of `channel_number` here and pass them to `on_delivery`."""
        self._channels[channel_number] = _ChannelDeliveries(on_delivery)

    def unroute(self, channel_number: int) -> None:
        """Leave the frames of `channel_number` to pika again."""
        self._channels.pop(channel_number, None)

    def data_received(self, data: bytes) -> None:
        """Bytes from the socket (pika's ``_on_data_available``)."""
        if self._held:
            self._held.append(data)
            self._held_size += len(data)
            if self._held_size < self._needed:
                return
            data = b"".join(self._held)
            self._held = []
            self._held_size = 0
        used = self._frames(data)
        if used < len(data):
            rest = data[used:]
            self._held = [rest]
            self._held_size = len(rest)
            self._needed = FRAME_PREFIX_SIZE if len(rest) < FRAME_PREFIX_SIZE \
                else FRAME_PREFIX_SIZE + _FRAME_PREFIX.unpack_from(rest)[2] + 1

    def _frames(self, data: bytes) -> int:
        """Handle the complete frames at the start of `data`; returns the bytes used."""
        at, end = 0, len(data)
        connection = self._connection
        channels = self._channels
        while end - at >= FRAME_PREFIX_SIZE:
            kind, channel, size = _FRAME_PREFIX.unpack_from(data, at)
            frame_end = at + FRAME_PREFIX_SIZE + size  # the frame-end octet's index
            if frame_end >= end:
                break
            deliveries = channels.get(channel)
            if (deliveries is not None and data[frame_end] == FRAME_END
                    and deliveries.take(kind, data, at + FRAME_PREFIX_SIZE, frame_end)):
                connection.bytes_received += frame_end + 1 - at
                connection.frames_received += 1
            else:
                self._pika_data_available(data[at:frame_end + 1])
            at = frame_end + 1
        return at


class _ChannelDeliveries:
    """The deliveries of one channel, assembled from their frames."""

    def __init__(self, on_delivery: DeliveryCallback):
        self._on_delivery = on_delivery
        self._method = None  # the delivery being assembled: parse_deliver's tuple
        self._properties = None  # ... its properties, once the content header came
        self._body_size = 0
        self._body_parts = []
        self._body_received = 0
        self._raw_properties = None  # the last raw properties and their decoded form
        self._decoded_properties = None

    def take(self, kind: int, data: bytes, start: int, end: int) -> bool:
        """Take the frame whose payload is data[start:end] if it belongs to a delivery;
        False leaves it to pika."""
        if kind == FRAME_METHOD:
            if self._method is not None or data[start:start + 4] != _DELIVER_ID:
                return False
            try:
                self._method = parse_deliver(data[start:end], 0)
            except (IndexError, struct.error):
                return False  # pika reports the malformed frame
            return True
        if self._method is None:
            return False  # content of another method (Basic.GetOk, Basic.Return)
        if kind == FRAME_HEADER and self._properties is None:
            if end - start < HEADER_FIXED_SIZE:
                return False
            self._body_size = _BODY_SIZE.unpack_from(data, start + 4)[0]
            self._properties = self._decode_properties(data[start + HEADER_FIXED_SIZE:end])
            if self._body_size == 0:
                self._deliver(b"")
            return True
        if kind == FRAME_BODY and self._properties is not None:
            if self._body_received + end - start > self._body_size:
                return False  # longer than announced: pika reports it
            if end - start == self._body_size:
                self._deliver(data[start:end])  # the usual case: one body frame
                return True
            self._body_parts.append(data[start:end])
            self._body_received += end - start
            if self._body_received == self._body_size:
                self._deliver(b"".join(self._body_parts))
            return True
        return False

    def _decode_properties(self, raw: bytes) -> ReceivedProperties:
        if raw != self._raw_properties:
            self._decoded_properties = decode_properties(raw)
            self._raw_properties = raw
        return self._decoded_properties

    def _deliver(self, body: bytes) -> None:
        delivery_tag, redelivered, exchange, routing_key = self._method
        properties = self._properties
        self._method = None
        self._properties = None
        self._body_parts = []
        self._body_received = 0
        self._on_delivery(delivery_tag, redelivered, exchange, routing_key, properties, body)
