"""The side files of a stream log (stream_log.py): the sparse index of each segment
(`00000001.idx`, derived data that recovery checks and rebuilds) and the consumer-offset
file `offsets`. Their layout, encoded and decoded on bytes, and the atomic replacement
both are written with. The layout is in docs/storage-format.md, section "Stream logs".
"""

import os
import struct
import sys
import zlib
from array import array
from typing import NamedTuple

from .names import decode_name, encode_name
from .segment_file import O_CLOEXEC, fsync_directory

INDEX_SUFFIX = ".idx"
OFFSETS_FILE = "offsets"
TEMP_SUFFIX = ".tmp"

INDEX_MAGIC = b"WARRENSX"
OFFSETS_MAGIC = b"WARRENCO"
_FILE_VERSION = 1
# magic, version, reserved, base offset, next offset, indexed size, records, first
# timestamp, last timestamp, samples
_INDEX_HEAD = struct.Struct(">8sHHQQQQqqI")
_OFFSETS_HEAD = struct.Struct(">8sHHI")    # magic, version, reserved, entries
_OFFSET_ENTRY = struct.Struct(">Q")
_U32 = struct.Struct(">I")

_LITTLE_ENDIAN = sys.byteorder == "little"


class IndexFile(NamedTuple):
    """A segment's index: the segment's offset range, indexed size, record count and
    timestamps, and its samples (three parallel arrays)."""

    base: int
    next: int
    size: int
    records: int
    first_ts: int
    last_ts: int
    offsets: array
    positions: array
    timestamps: array


def index_name(number: int) -> str:
    return f"{number:08d}{INDEX_SUFFIX}"


def _pack_int64s(values: array) -> bytes:
    if _LITTLE_ENDIAN:
        values = array("q", values)
        values.byteswap()
    return values.tobytes()


def _unpack_int64s(data: bytes) -> array:
    values = array("q")
    values.frombytes(data)
    if _LITTLE_ENDIAN:
        values.byteswap()
    return values


def encode_index(index: IndexFile) -> bytes:
    head = _INDEX_HEAD.pack(INDEX_MAGIC, _FILE_VERSION, 0, index.base, index.next,
                            index.size, index.records, index.first_ts, index.last_ts,
                            len(index.offsets))
    data = b"".join((head, _pack_int64s(index.offsets), _pack_int64s(index.positions),
                     _pack_int64s(index.timestamps)))
    return data + _U32.pack(zlib.crc32(data))


def decode_index(data: bytes) -> IndexFile | None:
    """The index in `data`, or None when it is damaged."""
    if len(data) < _INDEX_HEAD.size + _U32.size:
        return None
    (crc,) = _U32.unpack_from(data, len(data) - _U32.size)
    if zlib.crc32(memoryview(data)[:-_U32.size]) != crc:
        return None
    magic, version, _reserved, base, next_, size, count, first_ts, last_ts, samples = \
        _INDEX_HEAD.unpack_from(data)
    if (magic != INDEX_MAGIC or version != _FILE_VERSION
            or len(data) != _INDEX_HEAD.size + 24 * samples + _U32.size):
        return None
    start = _INDEX_HEAD.size
    offsets, positions, timestamps = [
        _unpack_int64s(data[start + 8 * samples * k:start + 8 * samples * (k + 1)])
        for k in range(3)]
    return IndexFile(base, next_, size, count, first_ts, last_ts, offsets, positions,
                     timestamps)


def encode_consumer_offsets(consumers: dict[str, int]) -> bytes:
    parts = [_OFFSETS_HEAD.pack(OFFSETS_MAGIC, _FILE_VERSION, 0, len(consumers))]
    for name, offset in consumers.items():
        encoded = encode_name(name)
        parts += (len(encoded).to_bytes(1, "big"), encoded, _OFFSET_ENTRY.pack(offset))
    data = b"".join(parts)
    return data + _U32.pack(zlib.crc32(data))


def decode_consumer_offsets(data: bytes) -> dict[str, int]:
    """The consumer offsets in `data`; ValueError, IndexError or struct.error when it
    is damaged."""
    consumers = {}
    (crc,) = _U32.unpack_from(data, len(data) - _U32.size)
    if zlib.crc32(memoryview(data)[:-_U32.size]) != crc:
        raise ValueError("checksum")
    magic, version, _reserved, entries = _OFFSETS_HEAD.unpack_from(data)
    if magic != OFFSETS_MAGIC or version != _FILE_VERSION:
        raise ValueError("magic or version")
    position = _OFFSETS_HEAD.size
    for _ in range(entries):
        length = data[position]
        name = decode_name(data[position + 1:position + 1 + length])
        (offset,) = _OFFSET_ENTRY.unpack_from(data, position + 1 + length)
        consumers[name] = offset
        position += 1 + length + _OFFSET_ENTRY.size
    if position != len(data) - _U32.size:
        raise ValueError("length")
    return consumers


def write_file_atomically(directory: str, name: str, data: bytes, durable: bool) -> None:
    """Replace `name` in `directory` by `data` via a temporary file and rename; with
    `durable`, the data and the rename are fsynced (else a crash may leave either version,
    or a damaged one: only for derived data that is checked and rebuilt)."""
    path = os.path.join(directory, name)
    temporary = path + TEMP_SUFFIX
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    if durable:
        fsync_directory(directory)
