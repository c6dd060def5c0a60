"""The queue-file format: segment headers, records, and scanning a segment's bytes.

Pure functions on bytes; no files, no locks. The layout is documented in
docs/storage-format.md; the numbers here are the single source of truth for it.

A segment file is a 24-byte header followed by records. Every record is

    magic (2) | crc32 (4) | kind (1) | flags (1) | payload length (4) | seq (8) | payload

big-endian, the CRC covering everything from `kind` to the end of the payload. A message
record's payload is `exchange (shortstr) | routing key (shortstr) | properties length (4) |
properties | body`; ack and delivered records have no payload.

Stream logs (storage/stream_log.py) use the same record layout in their own segment files
(magic `WARRENSL`) with one kind of their own, the stream record (kind 4): `seq` is the
message's stream offset and the payload is `publish timestamp (8, signed, ms since the
epoch) | message payload`. Queue files and stream logs each scan for their own kinds only.
"""

import struct
import zlib
from typing import NamedTuple

SEGMENT_MAGIC = b"WARRENQF"
STREAM_SEGMENT_MAGIC = b"WARRENSL"
FORMAT_VERSION = 1
_SEGMENT_HEADER = struct.Struct(">8sHHQ")      # magic, version, reserved, base seq
_U32 = struct.Struct(">I")
SEGMENT_HEADER_SIZE = _SEGMENT_HEADER.size + _U32.size   # + crc32 of the above: 24

RECORD_MAGIC = b"\xfbW"      # 0xFB never occurs in UTF-8 text
_PREFIX = struct.Struct(">2sI")                 # magic, crc32
_CHECKED = struct.Struct(">BBIQ")               # kind, flags, payload length, seq
RECORD_HEADER_SIZE = _PREFIX.size + _CHECKED.size        # 20
CRC_START = _PREFIX.size     # the CRC covers the record from here to its end
MIN_MESSAGE_PAYLOAD = 1 + 1 + 4                 # two empty shortstrs + properties length

KIND_MESSAGE = 1
KIND_ACK = 2
KIND_DELIVERED = 3
KIND_STREAM = 4             # stream logs only: a message at a stream offset, with a timestamp
QUEUE_KINDS = (KIND_MESSAGE, KIND_ACK, KIND_DELIVERED)
STREAM_KINDS = (KIND_STREAM,)
_KINDS = QUEUE_KINDS

_TIMESTAMP = struct.Struct(">q")
STREAM_TIMESTAMP_SIZE = _TIMESTAMP.size
MIN_STREAM_PAYLOAD = STREAM_TIMESTAMP_SIZE + MIN_MESSAGE_PAYLOAD
# A stream record's header and timestamp in one go: magic, crc32, kind, flags, payload
# length, offset, timestamp (28 bytes).
STREAM_HEAD = struct.Struct(">2sIBBIQq")

FLAG_REDELIVERED = 0x01   # recover this message with redelivered=True
FLAG_PERSISTENT = 0x02    # recover this message at all (transient ones are only paged out)
# The broker's own mark, kept with the message and given back by recovery: the broker
# dead-lettered this message (its x-death header is the history the broker wrote). Files
# written before the flag existed have it clear.
FLAG_DEAD_LETTERED = 0x04

_FLAGS_OFFSET = _PREFIX.size + 1


def encode_segment_header(base_seq: int, magic: bytes = SEGMENT_MAGIC) -> bytes:
    """The header of a new segment; `base_seq` is the queue's highest seq when it was made
    (for a stream segment, `magic=STREAM_SEGMENT_MAGIC`: the offset its first record gets)."""
    header = _SEGMENT_HEADER.pack(magic, FORMAT_VERSION, 0, base_seq)
    return header + _U32.pack(zlib.crc32(header))


def decode_segment_header(data: bytes, magic: bytes = SEGMENT_MAGIC) -> int | None:
    """The base seq of a segment header, or None when it is missing, torn or corrupt."""
    if len(data) < SEGMENT_HEADER_SIZE:
        return None
    found, version, _reserved, base_seq = _SEGMENT_HEADER.unpack_from(data)
    (crc,) = _U32.unpack_from(data, _SEGMENT_HEADER.size)
    if found != magic or version != FORMAT_VERSION:
        return None
    if zlib.crc32(memoryview(data)[:_SEGMENT_HEADER.size]) != crc:
        return None
    return base_seq


def append_message(buffer: bytearray, seq: int, flags: int, exchange: bytes,
                   routing_key: bytes, properties, body) -> int:
    """Append a message record to `buffer`; return its length."""
    payload_length = MIN_MESSAGE_PAYLOAD + len(exchange) + len(routing_key) \
        + len(properties) + len(body)
    head = b"".join((_CHECKED.pack(KIND_MESSAGE, flags, payload_length, seq),
                     len(exchange).to_bytes(1, "big"), exchange,
                     len(routing_key).to_bytes(1, "big"), routing_key,
                     _U32.pack(len(properties)), properties))
    buffer += _PREFIX.pack(RECORD_MAGIC, zlib.crc32(body, zlib.crc32(head)))
    buffer += head
    buffer += body
    return RECORD_HEADER_SIZE + payload_length


def append_marker(buffer: bytearray, kind: int, seq: int) -> int:
    """Append an ack (tombstone) or delivered record to `buffer`; return its length."""
    checked = _CHECKED.pack(kind, 0, 0, seq)
    buffer += _PREFIX.pack(RECORD_MAGIC, zlib.crc32(checked))
    buffer += checked
    return RECORD_HEADER_SIZE


def append_stream_record(buffer: bytearray, offset: int, timestamp: int, exchange: bytes,
                         routing_key: bytes, properties, body) -> int:
    """Append a stream record (offset, timestamp in ms) to `buffer`; return its length."""
    payload_length = MIN_STREAM_PAYLOAD + len(exchange) + len(routing_key) \
        + len(properties) + len(body)
    head = b"".join((_CHECKED.pack(KIND_STREAM, 0, payload_length, offset),
                     _TIMESTAMP.pack(timestamp),
                     len(exchange).to_bytes(1, "big"), exchange,
                     len(routing_key).to_bytes(1, "big"), routing_key,
                     _U32.pack(len(properties)), properties))
    buffer += _PREFIX.pack(RECORD_MAGIC, zlib.crc32(body, zlib.crc32(head)))
    buffer += head
    buffer += body
    return RECORD_HEADER_SIZE + payload_length


def with_flags(record: bytes, flags: int) -> bytes:
    """A copy of a complete, valid record with its flags replaced (and its CRC redone)."""
    copy = bytearray(record)
    copy[_FLAGS_OFFSET] = flags
    copy[:CRC_START] = _PREFIX.pack(RECORD_MAGIC, zlib.crc32(memoryview(copy)[CRC_START:]))
    return bytes(copy)


class Record(NamedTuple):
    kind: int
    flags: int
    seq: int
    offset: int
    length: int


class MessageFields(NamedTuple):
    exchange: bytes
    routing_key: bytes
    properties: bytes
    body: bytes | None      # None when decoded without the body
    body_size: int


def stream_fields(data, offset: int, end: int) -> tuple | None:
    """The exchange, routing key, properties and body of the stream record that starts at
    `offset` and ends at `end` (its CRC already checked), as a plain tuple for the hot read
    path, or None when they overrun the record."""
    layout = _message_layout(data, offset, end, RECORD_HEADER_SIZE + STREAM_TIMESTAMP_SIZE)
    if layout is None:
        return None
    start, exchange_end, routing_key_end, properties_end = layout
    return (data[start:exchange_end], data[exchange_end + 1:routing_key_end],
            data[routing_key_end + 4:properties_end], data[properties_end:end])


def _plausible_end(data: bytes, offset: int, kinds: tuple = _KINDS) -> int | None:
    """Where the record at `offset` ends if its unchecked header fields are sane."""
    if len(data) - offset < RECORD_HEADER_SIZE or data[offset:offset + 2] != RECORD_MAGIC:
        return None
    kind, _flags, payload_length, _seq = _CHECKED.unpack_from(data, CRC_START + offset)
    if kind not in kinds:
        return None
    if kind == KIND_MESSAGE:
        if payload_length < MIN_MESSAGE_PAYLOAD:
            return None
    elif kind == KIND_STREAM:
        if payload_length < MIN_STREAM_PAYLOAD:
            return None
    elif payload_length:
        return None
    end = offset + RECORD_HEADER_SIZE + payload_length
    return end if end <= len(data) else None


def parse_record(data: bytes, offset: int, kinds: tuple = _KINDS) -> Record | None:
    """The valid record of one of `kinds` starting at `offset`, or None (torn, corrupt, or
    not a record)."""
    end = _plausible_end(data, offset, kinds)
    if end is None:
        return None
    (crc,) = _U32.unpack_from(data, offset + 2)
    if zlib.crc32(memoryview(data)[offset + CRC_START:end]) != crc:
        return None
    kind, flags, payload_length, seq = _CHECKED.unpack_from(data, offset + CRC_START)
    if kind == KIND_MESSAGE and _message_layout(data, offset, end) is None:
        return None
    if kind == KIND_STREAM and stream_fields(data, offset, end) is None:
        return None
    return Record(kind, flags, seq, offset, end - offset)


def _message_layout(data: bytes, offset: int, end: int, header: int = RECORD_HEADER_SIZE):
    """Offsets of a message record's fields (exchange, routing key, properties, body,
    starting `header` bytes into the record), or None when they overrun the record."""
    position = offset + header
    exchange_end = position + 1 + data[position]
    if exchange_end + 1 + 4 > end:
        return None
    routing_key_end = exchange_end + 1 + data[exchange_end]
    if routing_key_end + 4 > end:
        return None
    (properties_length,) = _U32.unpack_from(data, routing_key_end)
    properties_end = routing_key_end + 4 + properties_length
    if properties_end > end:
        return None
    return position + 1, exchange_end, routing_key_end, properties_end


def decode_message(data: bytes, offset: int, length: int, with_body: bool = True) -> MessageFields:
    """The fields of the (already validated) message record at `offset`."""
    end = offset + length
    exchange_start, exchange_end, routing_key_end, properties_end = \
        _message_layout(data, offset, end)
    view = memoryview(data)
    return MessageFields(bytes(view[exchange_start:exchange_end]),
                         bytes(view[exchange_end + 1:routing_key_end]),
                         bytes(view[routing_key_end + 4:properties_end]),
                         bytes(view[properties_end:end]) if with_body else None,
                         end - properties_end)


class ScanResult(NamedTuple):
    records: list          # Record, in file order
    corrupt: list          # (offset, length) of skipped damaged spans with valid records after
    tail: tuple | None     # (offset, length) of trailing bytes holding no valid record


def scan_segment(data: bytes, start: int = SEGMENT_HEADER_SIZE,
                 kinds: tuple = _KINDS) -> ScanResult:
    """Every valid record in a segment's bytes, and where the damage is.

    Records are walked by their lengths. At an invalid record the scan skips to the
    next valid one: exactly one record when only its checksum is wrong and a valid record
    follows it, otherwise the next offset holding the record magic, a sane header and a
    matching CRC. What follows the last valid record is the tail (a torn write). Only
    records of `kinds` count as valid (queue files and stream logs have their own).
    """
    records: list[Record] = []
    corrupt: list[tuple[int, int]] = []
    size = len(data)
    position = start
    while position < size:
        record = parse_record(data, position, kinds)
        if record is not None:
            records.append(record)
            position += record.length
            continue
        end = _plausible_end(data, position, kinds)
        resume: int | None
        if end is not None and end < size and parse_record(data, end, kinds) is not None:
            resume = end
        else:
            resume = _resync(data, position + 1, kinds)
        if resume is None:
            return ScanResult(records, corrupt, (position, size - position))
        corrupt.append((position, resume - position))
        position = resume
    return ScanResult(records, corrupt, None)


def _resync(data: bytes, position: int, kinds: tuple = _KINDS) -> int | None:
    while True:
        position = data.find(RECORD_MAGIC, position)
        if position < 0:
            return None
        if parse_record(data, position, kinds) is not None:
            return position
        position += 1
