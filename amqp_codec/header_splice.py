"""Adding one header to raw content properties without decoding them (tests:
test_header_splice.py).

Stream queues deliver each message with an ``x-stream-offset`` header, a signed 64-bit
``l`` entry as RabbitMQ sends it. The properties stay raw (property flags, then values;
see fast_path.py), so the entry is spliced into the bytes: skip content_type and
content_encoding by their lengths, then insert a headers table holding just the entry or
append the entry to the existing table and fix its length. Everything after the headers
is copied as it is.

Anything unusual takes the slow path, which reads the block's structure: a second
property-flags word, a block too short for the lengths it announces, or a table in
which the encoded name appears at all (the key may already be there; RabbitMQ then
overwrites it, so the old entry is dropped and the new one goes at the end).
"""

from struct import Struct

from .constants import SHORTSTR_LENGTH
from .properties import headers_entries, replace_properties
from .wire_ids import (CONTENT_ENCODING_FLAG, CONTENT_TYPE_FLAG, CONTINUATION_FLAG,
                       HEADERS_FLAG)

_FLAGS = Struct(">H")
_TABLE_LENGTH = Struct(">I")
_LONG_LONG = Struct(">q")
_LENGTH_OCTET = SHORTSTR_LENGTH


def with_long_header(properties: bytes, name: bytes, value: object) -> bytes:
    """``properties`` (raw) with the header ``name`` set to ``value`` as a signed 64-bit
    long (table type ``l``), e.g. ``with_long_header(raw, b"x-stream-offset", 42)``.

    ``name`` is the header name as UTF-8 (at most 255 bytes). Raises ValueError when the
    name is longer or ``value`` is not an integer that fits in 64 signed bits (typed
    ``object`` so that a compiled build checks it here too, not at the call), and
    MalformedProperties when the properties are not well formed.
    """
    if len(name) > 255:
        raise ValueError(f"header name longer than 255 bytes: {name[:40]!r}...")
    key = _LENGTH_OCTET[len(name)] + name
    try:
        entry = key + b"l" + _LONG_LONG.pack(value)
    except Exception as exc:  # struct.error: out of range or not an int
        raise ValueError(f"header value is not a signed 64-bit integer: {value!r}") from exc
    spliced = _splice(properties, key, entry)
    if spliced is None:
        return _rebuilt(properties, name, entry)
    return spliced


def _splice(properties: bytes, key: bytes | None, entry: bytes) -> bytes | None:
    """The spliced block, or None when the slow path must decide. ``key`` (the encoded
    name) must not occur in an existing table; None skips that check."""
    size = len(properties)
    if size < 2:
        return None
    flags = properties[0] << 8 | properties[1]
    if flags & CONTINUATION_FLAG:   # Basic needs no second flag word; the slow path copes
        return None
    offset = 2
    try:
        if flags & CONTENT_TYPE_FLAG:
            offset += 1 + properties[offset]
        if flags & CONTENT_ENCODING_FLAG:
            offset += 1 + properties[offset]
    except IndexError:
        return None
    if not flags & HEADERS_FLAG:
        if offset > size:
            return None
        return b"".join((_FLAGS.pack(flags | HEADERS_FLAG), properties[2:offset],
                         _TABLE_LENGTH.pack(len(entry)), entry, properties[offset:]))
    start = offset + 4      # of the table's entries
    if start > size:
        return None
    length = _TABLE_LENGTH.unpack_from(properties, offset)[0]
    end = start + length
    if end > size or (key is not None and properties.find(key, start, end) != -1):
        return None
    return b"".join((properties[:offset], _TABLE_LENGTH.pack(length + len(entry)),
                     properties[start:end], entry, properties[end:]))


def _rebuilt(properties: bytes, name: bytes, entry: bytes) -> bytes:
    """Slow path: the headers without any entry named ``name``, then the new entry;
    every other header and property is copied as it is. Raises MalformedProperties."""
    text = name.decode("utf-8", "surrogateescape")
    kept = [raw for key, _value, raw in headers_entries(properties) if key != text]
    return replace_properties(properties, headers=b"".join(kept) + entry)
