"""Field tables and arrays decoded in bounded time and depth, and encoded with only the
types the RabbitMQ Java client reads (tests: test_field_table.py).

pamqp's table decoder recurses without a limit (a table nested a few hundred deep
raises RecursionError) and copies the rest of the data for every entry (quadratic in
the table's size). This one walks the data by offset, so its work is linear in the
bytes, and refuses nesting deeper than MAX_DEPTH with TableError, as it does an unknown
type tag, a length that runs past the data, or trailing bytes after an array element.

Values decode to the Python types pamqp gives (so code written against pamqp's tables
keeps working), with two differences that keep every table RabbitMQ accepts decodable:
a key that is not UTF-8 is decoded with ``surrogateescape`` (pamqp raises), and a
timestamp after ``datetime``'s year 9999 is read as datetime.max (pamqp raises; the
wire value is unsigned, so none is before year 1). As in pamqp, a long string that is
not UTF-8 stays ``bytes``, and a timestamp above 2**32 - 1 is read as milliseconds.

Encoding: pamqp picks the smallest integer type for a table value, ``u`` (unsigned 16
bits) and ``i`` (unsigned 32 bits) included, and the RabbitMQ Java client 5.x rejects
those ("Unrecognised type in table"). pamqp only avoids them when a process-wide switch
is on (``pamqp.encode.support_deprecated_rabbitmq``), which the codec leaves alone:
``encode_table`` chooses the integer types itself and writes every other value with
pamqp's encoder, so its output is what pamqp writes with that switch on.
"""

import datetime
from decimal import Decimal
from struct import Struct

from pamqp import encode as pamqp_encode

MAX_DEPTH = 100   # nested tables/arrays; RabbitMQ has no limit, Python's stack has one

_UNSIGNED_LONG = Struct(">I")
_PARSERS: dict[int, tuple] = {}      # type tag -> (Struct, size) for fixed-size values
for _tag, _format in ((b"b", ">b"), (b"B", ">B"), (b"s", ">h"), (b"u", ">H"),
                      (b"I", ">i"), (b"i", ">I"), (b"l", ">q"), (b"L", ">q"),
                      (b"f", ">f"), (b"d", ">d")):
    _struct = Struct(_format)
    _PARSERS[_tag[0]] = (_struct, _struct.size)
_TIMESTAMP = Struct(">Q")
_DECIMAL = Struct(">BI")
_LATEST = datetime.datetime.max.replace(tzinfo=datetime.UTC)
# Table integers the Java client reads, smallest first: (type tag, Struct, lowest, highest).
_INTEGERS = tuple((tag, Struct(fmt), -2 ** (bits - 1), 2 ** (bits - 1) - 1)
                  for tag, fmt, bits in ((b"b", ">b", 8), (b"s", ">h", 16),
                                         (b"I", ">i", 32), (b"l", ">q", 64)))
_MAX_KEY_BYTES = 128     # pamqp cuts longer table keys to this


class TableError(ValueError):
    """The bytes are not a field table (or array) this decoder accepts."""


class Long(int):
    """An integer ``encode_table`` writes as a long-long (``l``, 64 bits signed) whatever
    its size, as RabbitMQ writes the counts of its x-death entries."""


class EncodedValue(bytes):
    """A table or array value already encoded (its type tag first), which
    ``encode_table`` writes as it is: a value copied from received data keeps its types."""


def decode_table(data: bytes, offset: int = 0, depth: int = 0) -> tuple[dict, int]:
    """The table whose 4-byte length is at ``data[offset]``; returns (table, offset just
    after it)."""
    start, end = _extent(data, offset, "table")
    table = {}
    while start < end:
        key, value_offset = _key(data, start, end)
        table[key], start = _value(data, value_offset, end, depth)
    return table, end


def table_entries(data: bytes, offset: int = 0):
    """Yield (key, value, entry_start, entry_end) for each top-level entry of the table
    at ``data[offset]`` (an entry runs from its key's length octet to its value's end),
    so that a caller can copy the entries it does not change byte for byte."""
    start, end = _extent(data, offset, "table")
    while start < end:
        key, value_offset = _key(data, start, end)
        value, value_end = _value(data, value_offset, end, 0)
        yield key, value, start, value_end
        start = value_end


def array_elements(data: bytes, offset: int = 0):
    """Yield (value, EncodedValue) for each element of the array whose 4-byte length is
    at ``data[offset]``."""
    start, end = _extent(data, offset, "array")
    while start < end:
        value, value_end = _value(data, start, end, 1)
        yield value, EncodedValue(data[start:value_end])
        start = value_end


def with_table_entry(table: EncodedValue, key: str, value) -> EncodedValue:
    """The encoded table ``table`` (an EncodedValue of type ``F``) with ``key`` set to
    ``value``, written first; every other entry copied byte for byte."""
    entries = [table[start:end] for name, _value, start, end in table_entries(table, 1)
               if name != key]
    body = encode_table({key: value})[4:] + b"".join(entries)
    return EncodedValue(b"F" + _with_length(body))


def _extent(data: bytes, offset: int, kind: str) -> tuple[int, int]:
    if offset + 4 > len(data):
        raise TableError(f"{kind} length is truncated")
    start = offset + 4
    end = start + _UNSIGNED_LONG.unpack_from(data, offset)[0]
    if end > len(data):
        raise TableError(f"{kind} length runs past the end of the data")
    return start, end


def _key(data: bytes, start: int, end: int) -> tuple[str, int]:
    """The key of the entry at data[start] and the offset of its value's type tag."""
    key_end = start + 1 + data[start]
    if key_end >= end:
        raise TableError("table entry is truncated")
    return data[start + 1:key_end].decode("utf-8", "surrogateescape"), key_end


def _value(data: bytes, offset: int, end: int, depth: int):
    """Decode the value whose type tag is at data[offset] (must end by ``end``)."""
    tag = data[offset]
    offset += 1
    parser = _PARSERS.get(tag)
    if parser is not None:
        value_end = offset + parser[1]
        if value_end > end:
            raise TableError(f"value of type {chr(tag)!r} is truncated")
        value = parser[0].unpack_from(data, offset)[0]
    elif tag == 0x74:                                   # t
        value_end = offset + 1
        _check(value_end, end, tag)
        value = bool(data[offset])
    elif tag in (0x53, 0x78):                           # S, x
        start, value_end = _extent(data, offset, "string")
        _check(value_end, end, tag)
        raw = data[start:value_end]
        value = bytearray(raw) if tag == 0x78 else _long_string(raw)
    elif tag in (0x46, 0x41):                           # F, A
        if depth >= MAX_DEPTH:
            raise TableError(f"tables and arrays nested deeper than {MAX_DEPTH}")
        if tag == 0x46:
            value, value_end = decode_table(data, offset, depth + 1)
        else:
            value, value_end = _decode_array(data, offset, depth + 1)
        _check(value_end, end, tag)
    elif tag == 0x54:                                   # T
        value_end = offset + 8
        _check(value_end, end, tag)
        value = timestamp_value(_TIMESTAMP.unpack_from(data, offset)[0])
    elif tag == 0x44:                                   # D
        value_end = offset + 5
        _check(value_end, end, tag)
        places, digits = _DECIMAL.unpack_from(data, offset)
        value = Decimal(digits) * (Decimal(10) ** -places)
    elif tag in (0x56, 0x00):                           # V (and 0, seen in the wild)
        value_end, value = offset, None
    else:
        raise TableError(f"unknown field type {tag:#04x}")
    return value, value_end



def _decode_array(data: bytes, offset: int, depth: int) -> tuple[list, int]:
    start, end = _extent(data, offset, "array")
    values = []
    while start < end:
        value, start = _value(data, start, end, depth)
        values.append(value)
    return values, end


def _check(value_end: int, end: int, tag: int) -> None:
    if value_end > end:
        raise TableError(f"value of type {chr(tag)!r} is truncated")


def _long_string(raw: bytes) -> str | bytes:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw


def timestamp_value(value: int) -> datetime.datetime:
    """pamqp's reading (above 2**32 - 1 it is milliseconds), clamped to datetime's
    range instead of raising."""
    seconds = value / 1000.0 if value > 0xFFFFFFFF else value
    try:
        return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    except (OverflowError, ValueError, OSError):
        return _LATEST


def text_value(value):
    """A string argument or header that decoded to bytes (a long string that is not
    UTF-8, or a byte array), as text with U+FFFD for what is not UTF-8; any other value
    as it is."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value


def encode_table(table: dict) -> bytes:
    """A field table: its 4-byte length, then an entry per key in sorted order. Integers
    are written as b, s, I or l, the smallest that holds them, a Long always as l, an
    EncodedValue as it is; other values as pamqp writes them (bool t, float f, str S,
    Decimal D, datetime T, bytearray x, None V), nested dicts and lists as tables and
    arrays. A key longer than 128 bytes of UTF-8 is cut to 128, as pamqp cuts it. Raises
    TypeError for a value of another type or an integer beyond 64 signed bits (and what
    pamqp raises for a value it cannot write, e.g. OverflowError for a float beyond
    single precision)."""
    if not table:
        return bytes(4)
    if not isinstance(table, dict):
        raise TypeError(f"a field table must be a dict, not {type(table).__name__}")
    parts = []
    for key, value in sorted(table.items()):
        name = key.encode()
        if len(name) > _MAX_KEY_BYTES:
            name = name[:_MAX_KEY_BYTES].decode("utf-8", "ignore").encode()
        parts.append(bytes((len(name),)) + name)
        try:
            parts.append(_encoded_value(value))
        except TypeError as error:
            raise TypeError(f"table key {key!r}: {error}") from error
    return _with_length(b"".join(parts))


def _encoded_value(value) -> bytes:
    """A table or array value with its type tag."""
    if isinstance(value, EncodedValue):
        return bytes(value)
    if isinstance(value, Long):
        tag, struct, lowest, highest = _INTEGERS[-1]
        if not lowest <= value <= highest:
            raise TypeError(f"integer {value} does not fit in 64 signed bits")
        return tag + struct.pack(value)
    if isinstance(value, bool):
        return b"t\x01" if value else b"t\x00"
    if isinstance(value, int):
        for tag, struct, lowest, highest in _INTEGERS:
            if lowest <= value <= highest:
                return tag + struct.pack(value)
        raise TypeError(f"integer {value} does not fit in 64 signed bits")
    if isinstance(value, dict):
        return b"F" + encode_table(value)
    if isinstance(value, list):
        return b"A" + _with_length(b"".join(map(_encoded_value, value)))
    return pamqp_encode.encode_table_value(value)


def _with_length(data: bytes) -> bytes:
    return _UNSIGNED_LONG.pack(len(data)) + data
