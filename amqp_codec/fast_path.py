"""Struct-based codec for the hot frames, byte-identical to pamqp (tests: test_fast_path.py).

Inbound: Basic.Publish and Basic.Ack arguments. Outbound: Basic.Deliver, Basic.GetOk,
Basic.Return (each with its content header and body frames, as one bytes object, or for
bodies of LARGE_BODY bytes or more as a tuple of parts that refer to the body without
copying it), Basic.Ack and Basic.Nack; Queue.DeclareOk, whose queue name pamqp's
validation would refuse when it is not ASCII.

Content properties stay raw: the bytes of a content header payload after class_id,
weight and body_size (property flags, then property values).
"""

from struct import Struct

from pamqp import commands

from .constants import (
    CONTENT_HEADER_PREFIX_SIZE, FRAME_BODY, FRAME_END, FRAME_END_BYTE, FRAME_HEADER,
    FRAME_METHOD, FRAME_OVERHEAD, SHORTSTR_LENGTH,
)
from .wire_ids import (
    BASIC_ACK, BASIC_CLASS, BASIC_DELIVER, BASIC_GET_OK, BASIC_NACK, BASIC_RETURN,
    QUEUE_DECLARE_OK,
)

_METHOD_PREFIX = Struct(">BHIHH")        # type, channel, size, class_id, method_id
_HEADER_FRAME = Struct(">BBHIHHQ")       # end of previous frame, type, channel, size,
                                         # class_id, weight, body_size
_BODY_PREFIX = Struct(">BBHI")           # end of previous frame, type, channel, size
_TAG_AND_BIT = Struct(">QB")             # delivery_tag, bit octet
_REPLY_CODE = Struct(">H")
_MESSAGE_COUNT = Struct(">I")
_COUNTS = Struct(">IIB")                  # message_count, consumer_count, frame end
_ACK_FRAME = Struct(">BHIHHQBB")         # a whole Basic.Ack / Basic.Nack frame
_LENGTH_OCTET = SHORTSTR_LENGTH
_SHORTSTRS: dict[str, bytes] = {}
_SHORTSTRS_KEPT = 4096
_DELIVER_PARTS: dict[tuple, tuple[bytes, bytes]] = {}
_NAMES: dict[bytes, str] = {}             # raw exchange names and routing keys, decoded
_NAMES_KEPT = 4096
PUBLISH_ARGUMENTS: dict[bytes, tuple[str, str, bool, bool]] = {}   # decode_publish's
# From this body size on, encoded content is a tuple of parts (the body is not copied).
LARGE_BODY = 32 * 1024

_NACK_REQUEUE_BIT = 2  # pamqp's and RabbitMQ's default requeue=True


def shortstr(value: str) -> bytes:
    """Encode an AMQP shortstr: one length octet, then at most 255 bytes of UTF-8.
    Consumer tags, exchanges and routing keys repeat: encodings are remembered."""
    encoded = _SHORTSTRS.get(value)
    if encoded is None:
        data = value.encode()
        if len(data) > 255:
            raise ValueError(f"shortstr longer than 255 bytes of UTF-8: {value[:40]!r}...")
        encoded = _LENGTH_OCTET[len(data)] + data
        if len(_SHORTSTRS) >= _SHORTSTRS_KEPT:
            _SHORTSTRS.clear()
        _SHORTSTRS[value] = encoded
    return encoded


def decode_publish(data: bytes, start: int, end: int) -> tuple[str, str, bool, bool]:
    """Decode Basic.Publish arguments in data[start:end].

    Returns (exchange, routing_key, mandatory, immediate). Raises ValueError (or
    IndexError) when the arguments are truncated, have trailing bytes or are not UTF-8.
    A publisher repeats its arguments: their decoding is remembered, keyed by their raw
    bytes after the ticket (one slice and one look-up per publish).
    """
    if end - start < 2:     # a slice must not start past its end: compiled, that is no b""
        raise ValueError("Basic.Publish arguments shorter than the ticket")
    arguments = data[start + 2:end]
    decoded = PUBLISH_ARGUMENTS.get(arguments)
    if decoded is None:
        decoded = decode_publish_arguments(arguments)
    return decoded


def decode_publish_arguments(arguments: bytes) -> tuple[str, str, bool, bool]:
    """decode_publish for the raw arguments after the ticket, remembered in
    PUBLISH_ARGUMENTS (which a caller may look in first, as decode_publish does)."""
    exchange_end = 1 + arguments[0]
    key_end = exchange_end + 1 + arguments[exchange_end]
    if key_end + 1 != len(arguments):
        raise ValueError("Basic.Publish arguments do not fill the frame")
    bits = arguments[key_end]
    raw = arguments[1:exchange_end]
    exchange = _NAMES.get(raw)
    if exchange is None:
        exchange = _remember_name(raw)
    raw = arguments[exchange_end + 1:key_end]
    routing_key = _NAMES.get(raw)
    if routing_key is None:
        routing_key = _remember_name(raw)
    decoded = (exchange, routing_key, bits & 1 == 1, bits & 2 == 2)
    if len(PUBLISH_ARGUMENTS) >= _NAMES_KEPT:
        PUBLISH_ARGUMENTS.clear()
    PUBLISH_ARGUMENTS[arguments] = decoded
    return decoded


def _remember_name(raw: bytes) -> str:
    """Decode an exchange name or routing key and remember it: publishers repeat them,
    and a backlog of messages then shares one copy of each string. (sys.intern costs
    about 0.6 us per call for some hash seeds; a dict keyed by the raw bytes does not.)"""
    name = raw.decode()
    if len(_NAMES) >= _NAMES_KEPT:
        _NAMES.clear()
    _NAMES[raw] = name
    return name


def decode_get(data: bytes, start: int, end: int) -> commands.Basic.Get:
    """Decode Basic.Get arguments in data[start:end] (ticket, queue, no-ack bit) to a
    pamqp Basic.Get. Raises ValueError (or IndexError) when malformed."""
    queue_end = start + 3 + data[start + 2]             # skip ticket(2)
    if queue_end + 1 != end:
        raise ValueError("Basic.Get arguments do not fill the frame")
    get = commands.Basic.Get(0, "", data[queue_end] & 1 == 1)
    get.queue = data[start + 3:queue_end].decode()   # after __init__: pamqp's validate()
    return get                                       # refuses names RabbitMQ accepts


def decode_ack(data: bytes, start: int, end: int) -> commands.Basic.Ack:
    """Decode Basic.Ack arguments in data[start:end] (exactly 9 bytes) to a pamqp Basic.Ack."""
    if end - start != 9:
        raise ValueError("Basic.Ack arguments are not 9 bytes")
    delivery_tag, bits = _TAG_AND_BIT.unpack_from(data, start)
    return commands.Basic.Ack(delivery_tag, bits & 1 == 1)


def join_with_content(parts: list, channel: int, properties: bytes, body,
                      frame_max: int) -> bytes | tuple:
    """Join ``parts`` (a method frame without its end octet) with the end octet, the
    content header frame and the body frames (payload <= frame_max - 8; 0 = no limit).
    A body of LARGE_BODY bytes or more is not copied: the result is then a tuple of
    bytes-like parts to write in order."""
    body_size = len(body)
    parts.append(_HEADER_FRAME.pack(FRAME_END, FRAME_HEADER, channel,
                                    CONTENT_HEADER_PREFIX_SIZE + len(properties),
                                    BASIC_CLASS, 0, body_size))
    parts.append(properties)
    limit = frame_max - FRAME_OVERHEAD if frame_max else body_size
    if body_size <= limit:
        if body_size:
            parts.append(_BODY_PREFIX.pack(FRAME_END, FRAME_BODY, channel, body_size))
            parts.append(body)
    else:
        _append_body_frames(parts, channel, body, limit)
    parts.append(FRAME_END_BYTE)
    if body_size >= LARGE_BODY:
        return tuple(parts)
    return b"".join(parts)


def _append_body_frames(parts: list, channel: int, body, limit: int) -> None:
    """Cut ``body`` into body frames of at most ``limit`` payload bytes."""
    if limit <= 0:
        raise ValueError(f"frame_max must exceed {FRAME_OVERHEAD} to carry a body")
    view = memoryview(body)
    for start in range(0, len(view), limit):
        chunk = view[start:start + limit]
        parts.append(_BODY_PREFIX.pack(FRAME_END, FRAME_BODY, channel, len(chunk)))
        parts.append(chunk)


def encode_deliver(channel: int, consumer_tag: str, delivery_tag: int, redelivered: bool,
                   exchange: str, routing_key: str, properties: bytes, body,
                   frame_max: int) -> bytes | tuple:
    """Basic.Deliver + content header + body frames (see join_with_content)."""
    return deliver_encoder(frame_max)(channel, consumer_tag, delivery_tag, redelivered,
                                      exchange, routing_key, properties, body)


def deliver_encoder(frame_max: int):
    """encode_deliver for one frame_max, without the argument: a connection's Framer
    holds one (made again when its frame_max changes), so that a delivery costs a single
    call."""
    # Bodies up to this size go in one body frame, encoded by the common case below.
    one_frame = (min(LARGE_BODY - 1, frame_max - FRAME_OVERHEAD) if frame_max
                 else LARGE_BODY - 1)
    # The last delivery's content header frame and body frame prefix, and the channel,
    # properties and body size they were made for: deliveries mostly repeat them. Three
    # variables rather than a tuple: no tuple made per delivery to compare them.
    content_channel = 0
    content_properties = b""
    content_size = 0
    content = b""

    def encode(channel: int, consumer_tag: str, delivery_tag: int, redelivered: bool,
               exchange: str, routing_key: str, properties: bytes, body) -> bytes | tuple:
        nonlocal content_channel, content_properties, content_size, content
        body_size = len(body)
        if 0 < body_size <= one_frame:
            # The common case in one join (same bytes as the general path); the bytes
            # around the delivery tag repeat for a consumer and a routing key.
            around_tag = _DELIVER_PARTS.get((channel, consumer_tag, exchange, routing_key))
            if around_tag is None:
                around_tag = _deliver_parts(channel, consumer_tag, exchange, routing_key)
            if (body_size != content_size or properties != content_properties
                    or channel != content_channel):
                content_channel = channel
                content_properties = properties
                content_size = body_size
                content = _content_frames_to_body(channel, properties, body_size)
            return b"".join((around_tag[0], _TAG_AND_BIT.pack(delivery_tag, redelivered),
                             around_tag[1], content, body, FRAME_END_BYTE))
        tag, exchange_b = shortstr(consumer_tag), shortstr(exchange)
        key = shortstr(routing_key)
        size = 13 + len(tag) + len(exchange_b) + len(key)
        parts = [_METHOD_PREFIX.pack(FRAME_METHOD, channel, size, *BASIC_DELIVER),
                 tag, _TAG_AND_BIT.pack(delivery_tag, redelivered), exchange_b, key]
        return join_with_content(parts, channel, properties, body, frame_max)

    return encode


def _content_frames_to_body(channel: int, properties: bytes, body_size: int) -> bytes:
    """The end of a method frame, a content header frame and a body frame's prefix: what
    goes between a method frame's arguments and a body sent in one frame."""
    return b"".join((
        _HEADER_FRAME.pack(FRAME_END, FRAME_HEADER, channel,
                           CONTENT_HEADER_PREFIX_SIZE + len(properties), BASIC_CLASS, 0,
                           body_size),
        properties, _BODY_PREFIX.pack(FRAME_END, FRAME_BODY, channel, body_size)))


def _deliver_parts(channel: int, consumer_tag: str, exchange: str,
                   routing_key: str) -> tuple[bytes, bytes]:
    """A Basic.Deliver frame's bytes before the delivery tag (frame prefix, method ids,
    consumer tag) and after it (exchange, routing key), remembered."""
    tag, exchange_b, key = shortstr(consumer_tag), shortstr(exchange), shortstr(routing_key)
    size = 13 + len(tag) + len(exchange_b) + len(key)
    parts = (_METHOD_PREFIX.pack(FRAME_METHOD, channel, size, *BASIC_DELIVER)
             + tag, exchange_b + key)
    if len(_DELIVER_PARTS) >= _SHORTSTRS_KEPT:
        _DELIVER_PARTS.clear()
    _DELIVER_PARTS[(channel, consumer_tag, exchange, routing_key)] = parts
    return parts


def encode_get_ok(channel: int, delivery_tag: int, redelivered: bool, exchange: str,
                  routing_key: str, message_count: int, properties: bytes, body,
                  frame_max: int) -> bytes | tuple:
    """Basic.GetOk + content header + body frames (see join_with_content)."""
    exchange_b, key = shortstr(exchange), shortstr(routing_key)
    size = 17 + len(exchange_b) + len(key)
    parts = [_METHOD_PREFIX.pack(FRAME_METHOD, channel, size, *BASIC_GET_OK),
             _TAG_AND_BIT.pack(delivery_tag, redelivered), exchange_b, key,
             _MESSAGE_COUNT.pack(message_count)]
    return join_with_content(parts, channel, properties, body, frame_max)


def encode_return(channel: int, reply_code: int, reply_text: str, exchange: str,
                  routing_key: str, properties: bytes, body, frame_max: int) -> bytes | tuple:
    """Basic.Return + content header + body frames (see join_with_content)."""
    text, exchange_b, key = shortstr(reply_text), shortstr(exchange), shortstr(routing_key)
    size = 6 + len(text) + len(exchange_b) + len(key)
    parts = [_METHOD_PREFIX.pack(FRAME_METHOD, channel, size, *BASIC_RETURN),
             _REPLY_CODE.pack(reply_code), text, exchange_b, key]
    return join_with_content(parts, channel, properties, body, frame_max)


def encode_queue_declare_ok(channel: int, queue: str, message_count: int,
                            consumer_count: int) -> bytes:
    """A Queue.DeclareOk frame. Not through pamqp: its validate() refuses queue names
    outside an ASCII pattern, and RabbitMQ names may be any UTF-8."""
    name = shortstr(queue)
    return b"".join((
        _METHOD_PREFIX.pack(FRAME_METHOD, channel, 12 + len(name), *QUEUE_DECLARE_OK),
        name, _COUNTS.pack(message_count, consumer_count, FRAME_END)))


def encode_basic_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """A Basic.Ack frame (publisher confirms)."""
    return _ACK_FRAME.pack(FRAME_METHOD, channel, 13, *BASIC_ACK,
                           delivery_tag, multiple, FRAME_END)


def encode_basic_nack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """A Basic.Nack frame (publisher confirms); requeue is set, as pamqp and RabbitMQ do."""
    return _ACK_FRAME.pack(FRAME_METHOD, channel, 13, *BASIC_NACK,
                           delivery_tag, multiple | _NACK_REQUEUE_BIT, FRAME_END)

