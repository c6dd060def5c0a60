"""Raw content properties: reading them, and changing some without touching the rest
(tests: test_properties.py).

The broker forwards the property block exactly as the publisher sent it (property
flags, then the values of the flagged properties in a fixed order) and reads it only
when a feature needs a field. Reading takes any value RabbitMQ takes: a timestamp of
any 64-bit value, strings that are not UTF-8, headers nested as deep as MAX_DEPTH. A
block that is not well formed (a value cut short, bytes left over, an unknown table
type, a flag word after the first with bits set) raises MalformedProperties.

When the broker must change a field (dead-lettering's x-death and expiration, the
direct reply-to token, a stream's offset header), ``replace_properties`` rewrites only
those fields and copies every other value byte for byte.
"""

from struct import Struct, error as StructError

from pamqp import commands

from .constants import SHORTSTR_LENGTH
from .field_table import TableError, decode_table, table_entries, timestamp_value
from .wire_ids import (
    APP_ID_FLAG, CLUSTER_ID_FLAG, CONTENT_ENCODING_FLAG, CONTENT_TYPE_FLAG,
    CONTINUATION_FLAG, CORRELATION_ID_FLAG, DELIVERY_MODE_FLAG, EXPIRATION_FLAG, HEADERS_FLAG,
    MESSAGE_ID_FLAG, MESSAGE_TYPE_FLAG, PRIORITY_FLAG, REPLY_TO_FLAG, TIMESTAMP_FLAG,
    USER_ID_FLAG,
)

_SHORT = Struct(">H")
_LONG = Struct(">I")
_TIMESTAMP = Struct(">Q")
_SHORTSTR, _TABLE, _OCTET, _STAMP = "shortstr", "table", "octet", "timestamp"
# (pamqp attribute, flag bit, wire type) in wire order.
LAYOUT = (
    ("content_type", CONTENT_TYPE_FLAG, _SHORTSTR),
    ("content_encoding", CONTENT_ENCODING_FLAG, _SHORTSTR),
    ("headers", HEADERS_FLAG, _TABLE), ("delivery_mode", DELIVERY_MODE_FLAG, _OCTET),
    ("priority", PRIORITY_FLAG, _OCTET), ("correlation_id", CORRELATION_ID_FLAG, _SHORTSTR),
    ("reply_to", REPLY_TO_FLAG, _SHORTSTR), ("expiration", EXPIRATION_FLAG, _SHORTSTR),
    ("message_id", MESSAGE_ID_FLAG, _SHORTSTR), ("timestamp", TIMESTAMP_FLAG, _STAMP),
    ("message_type", MESSAGE_TYPE_FLAG, _SHORTSTR), ("user_id", USER_ID_FLAG, _SHORTSTR),
    ("app_id", APP_ID_FLAG, _SHORTSTR), ("cluster_id", CLUSTER_ID_FLAG, _SHORTSTR),
)
_SIZES = {_OCTET: 1, _STAMP: 8}
_KINDS = {name: kind for name, _flag, kind in LAYOUT}
_LENGTH_OCTET = SHORTSTR_LENGTH


class MalformedProperties(ValueError):
    """A content property block that is not well formed."""


def property_spans(raw: bytes) -> dict[str, tuple[int, int]]:
    """Where each present property's value lies in ``raw``: name -> (start, end).
    Checks the structure (flags, lengths, nothing left over), not the values."""
    if len(raw) < 2:
        raise MalformedProperties("property flags are missing")
    flags = _SHORT.unpack_from(raw)[0]
    offset = 2
    more = flags & CONTINUATION_FLAG
    while more:     # Basic defines no property beyond the first word: any bit is wrong
        if len(raw) < offset + 2:
            raise MalformedProperties("property flags are truncated")
        word = _SHORT.unpack_from(raw, offset)[0]
        if word & ~CONTINUATION_FLAG:
            raise MalformedProperties(f"property flag word {word:#06x} names no property")
        offset += 2
        more = word & CONTINUATION_FLAG
    spans = {}
    for name, flag, kind in LAYOUT:
        if flags & flag:
            end = _value_end(raw, offset, kind, name)
            spans[name] = (offset, end)
            offset = end
    if offset != len(raw):
        raise MalformedProperties(f"{len(raw) - offset} bytes after the last property")
    return spans


def _value_end(raw: bytes, offset: int, kind: str, name: str) -> int:
    if kind == _SHORTSTR:
        end = offset + 1 + raw[offset] if offset < len(raw) else offset + 1
    elif kind == _TABLE:
        end = offset + 4 + _LONG.unpack_from(raw, offset)[0] if offset + 4 <= len(raw) \
            else offset + 4
    else:
        end = offset + _SIZES[kind]
    if end > len(raw):
        raise MalformedProperties(f"property {name} is truncated")
    return end


def decode_properties(raw: bytes | memoryview) -> commands.Basic.Properties:
    """The whole block as pamqp's Basic.Properties (strings that are not UTF-8 decoded
    with surrogateescape, the timestamp as timestamp_value reads it, headers with
    field_table's decoder). Raises MalformedProperties."""
    raw = bytes(raw)
    props = commands.Basic.Properties()
    for name, (start, end) in property_spans(raw).items():
        setattr(props, name, _decoded_value(raw, start, end, name))
    return props


def _decoded_value(raw: bytes, start: int, end: int, name: str):
    kind = _KINDS[name]
    if kind == _SHORTSTR:
        return raw[start + 1:end].decode("utf-8", "surrogateescape")
    if kind == _OCTET:
        return raw[start]
    if kind == _STAMP:
        return timestamp_value(_TIMESTAMP.unpack_from(raw, start)[0])
    try:
        return decode_table(raw, start)[0]
    except TableError as error:
        raise MalformedProperties(f"headers: {error}") from None


def headers_entries(raw: bytes):
    """(key, value, entry bytes) of each header, the entry bytes exactly as sent; empty
    without headers. Raises MalformedProperties."""
    span = property_spans(raw).get("headers")
    if span is None:
        return []
    try:
        return [(key, value, raw[start:end])
                for key, value, start, end in table_entries(raw, span[0])]
    except TableError as error:
        raise MalformedProperties(f"headers: {error}") from None


def replace_properties(raw: bytes, **changes) -> bytes:
    """``raw`` with the named properties replaced; every other value copied as it is.

    A value is the property's encoded value without its length prefix (``bytes``: a
    shortstr's UTF-8, a table's entries) or an int for an octet or the timestamp, or
    None to remove the property. Raises MalformedProperties for a malformed block and
    ValueError for a shortstr over 255 bytes."""
    spans = property_spans(raw)
    flags = 0
    parts = []
    for name, flag, kind in LAYOUT:
        if name in changes:
            value = changes[name]
            if value is None:
                continue
            parts.append(_encoded(kind, value, name))
        elif name in spans:
            start, end = spans[name]
            parts.append(raw[start:end])
        else:
            continue
        flags |= flag
    return _SHORT.pack(flags) + b"".join(parts)


def _encoded(kind: str, value, name: str) -> bytes:
    if kind == _SHORTSTR:
        if len(value) > 255:
            raise ValueError(f"property {name} is longer than 255 bytes")
        return _LENGTH_OCTET[len(value)] + value
    if kind == _TABLE:
        return _LONG.pack(len(value)) + value
    if kind == _OCTET:
        return bytes((value,))
    return _TIMESTAMP.pack(value)


def delivery_mode(properties: bytes) -> int:
    """The delivery_mode of raw content properties (0 when absent).

    Skips content_type, content_encoding and the headers table by their lengths: a few
    operations instead of a full decode on every publish. Raises MalformedProperties
    when the lengths run past the block.
    """
    if len(properties) < 2:
        return 0
    flags = _SHORT.unpack_from(properties)[0]
    if not flags & DELIVERY_MODE_FLAG:
        return 0
    if flags & CONTINUATION_FLAG:   # Basic needs no second flag word; the full read copes
        return decode_properties(properties).delivery_mode or 0
    try:
        return properties[_offset_past_headers(properties, flags)]
    except (IndexError, StructError):
        raise MalformedProperties("property delivery_mode is truncated") from None


def priority(properties: bytes) -> int:
    """The priority of raw content properties (0 when absent), read past the fields
    before it by their lengths as delivery_mode is (a priority queue reads it for each
    message it queues). Raises MalformedProperties when the lengths run past the block."""
    if len(properties) < 2:
        return 0
    flags = _SHORT.unpack_from(properties)[0]
    if not flags & PRIORITY_FLAG:
        return 0
    if flags & CONTINUATION_FLAG:
        return decode_properties(properties).priority or 0
    try:
        offset = _offset_past_headers(properties, flags)
        if flags & DELIVERY_MODE_FLAG:
            offset += 1
        return properties[offset]
    except (IndexError, StructError):
        raise MalformedProperties("property priority is truncated") from None


def _offset_past_headers(properties: bytes, flags: int) -> int:
    """Where the field after headers starts: past content_type, content_encoding and
    headers, each skipped by its length when present. Raises IndexError or StructError
    when a length runs past the block."""
    offset = 2
    if flags & CONTENT_TYPE_FLAG:
        offset += 1 + properties[offset]
    if flags & CONTENT_ENCODING_FLAG:
        offset += 1 + properties[offset]
    if flags & HEADERS_FLAG:
        offset += 4 + _LONG.unpack_from(properties, offset)[0]
    return offset
