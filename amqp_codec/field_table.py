"""Field tables and arrays decoded in bounded time and depth (tests: test_field_table.py).

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
"""

import datetime
from decimal import Decimal
from struct import Struct

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


class TableError(ValueError):
    """The bytes are not a field table (or array) this decoder accepts."""


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
