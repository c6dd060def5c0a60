"""Stream-log recovery: rebuilding a `StreamLog`'s segments, offsets and consumer
offsets from its directory after a restart or a crash (`StreamLog.recover` runs it).

Sealed segments with a valid index file are only checked against it (unless `verify`);
the part of a segment its index does not cover is scanned and checked, and its index
rewritten. A torn tail of the newest segment, the normal result of a crash mid-write, is
cut off; damage anywhere else is reported as a problem. The format is in
docs/storage-format.md, section "Stream logs".
"""

import logging
import os
import struct

from .record import SEGMENT_HEADER_SIZE, STREAM_SEGMENT_MAGIC, decode_segment_header
from .segment_file import read_file, segment_numbers, settle_damage
from .stream_files import (INDEX_SUFFIX, OFFSETS_FILE, TEMP_SUFFIX, IndexFile,
                           decode_consumer_offsets, decode_index, index_name)
from .stream_log import INDEX_INTERVAL, MAX_READ_WINDOW, SegmentReader, StreamLog, StreamSegment

log = logging.getLogger("warren.storage")


def replay(stream: StreamLog, verify: bool) -> list[str]:
    """Fill the freshly set up `stream` from its directory; a description of every
    problem found."""
    problems: list[str] = []
    directory = stream.directory
    stream._directory_exists = os.path.isdir(directory)
    if not stream._directory_exists:
        return problems
    numbers = segment_numbers(directory)
    stream._next_segment = numbers[-1] + 1 if numbers else 1
    present = set(numbers)
    for name in os.listdir(directory):
        stem = name[:-len(INDEX_SUFFIX)]
        if name.endswith(TEMP_SUFFIX) or (
                name.endswith(INDEX_SUFFIX) and stem.isdigit()
                and int(stem) not in present):
            os.unlink(os.path.join(directory, name))    # unfinished or orphaned
    # A newest segment without a valid header holds nothing yet: a crash right
    # after creating it.
    while numbers:
        path = stream._path(numbers[-1])
        with open(path, "rb") as file:
            head = file.read(SEGMENT_HEADER_SIZE + 1)
        if len(head) > SEGMENT_HEADER_SIZE or \
                decode_segment_header(head, STREAM_SEGMENT_MAGIC) is not None:
            break
        stream._unlink_segment(numbers.pop())
        log.info("event=torn_segment_removed path=%s bytes=%d", path, len(head))

    high = 0        # one past the highest offset seen anywhere
    last_ts = 0
    for number in numbers:
        newest = number == numbers[-1]
        segment = _recover_segment(stream, number, newest, high, verify, problems)
        if segment is None:
            continue
        high = max(high, segment.next)
        if segment.last_ts is not None:
            last_ts = max(last_ts, segment.last_ts)
        stream._segments.append(segment)
        stream._bases.append(segment.base)
        stream._total_bytes += segment.file_size

    stream._consumers = _read_consumer_offsets(directory, problems)
    for name, offset in stream._consumers.items():
        high = max(high, offset + 1)
    stream._next_offset = stream._disk_next = stream._durable_next = high
    stream._pending_base = high
    stream._first_offset = stream._segments[0].base if stream._segments else high
    stream._last_ts = last_ts
    return problems


def _recover_segment(stream: StreamLog, number: int, newest: bool, previous_next: int,
                     verify: bool, problems: list[str]) -> StreamSegment | None:
    path = stream._path(number)
    file_size = os.path.getsize(path)
    with open(path, "rb") as file:
        base = decode_segment_header(file.read(SEGMENT_HEADER_SIZE), STREAM_SEGMENT_MAGIC)
    segment = StreamSegment(number, base if base is not None else previous_next)
    segment.file_size = file_size
    index = None if verify or base is None else _read_index(stream.directory, number)
    if index is not None and (index.base != base or index.size > file_size
                              or index.size < SEGMENT_HEADER_SIZE):
        if index.size > file_size:
            problems.append(f"{path}: {file_size} bytes, shorter than the "
                            f"{index.size} its index covers; segment scanned")
        index = None
    if index is not None:
        segment.next, segment.size, segment.count = index.next, index.size, index.records
        if index.records:
            segment.first_ts, segment.last_ts = index.first_ts, index.last_ts
        segment.offsets, segment.positions, segment.timestamps = \
            index.offsets, index.positions, index.timestamps
        segment.indexed_size = index.size
        expected: int | None = index.next
    else:
        expected = base
    found: list[str] = []
    if segment.size < file_size:
        _scan_rest(segment, path, file_size, expected, newest, found)
    if base is None:
        if not segment.count:       # (nothing in `found` matters then)
            stream._unlink_segment(number)
            if newest:      # a crash while creating it
                log.info("event=torn_segment_removed path=%s bytes=%d", path, file_size)
            else:
                problems.append(f"{path}: no valid header and no records; removed")
            return None
        problems.append(f"{path}: segment header damaged; records read anyway")
        first = segment.offsets[0]
        segment.base = min(first, previous_next) if stream._segments else first
    elif base < previous_next:
        problems.append(f"{path}: starts at offset {base}, below the end of the "
                        f"previous segment ({previous_next})")
    problems += found
    if segment.indexed_size != segment.size:
        stream._write_index(segment)
    return segment


def _scan_rest(segment: StreamSegment, path: str, file_size: int, expected: int | None,
               newest: bool, problems: list[str]) -> None:
    """Walk and check the records after `segment.size`, extending its index."""
    last_sample = segment.positions[-1] if segment.positions else -INDEX_INTERVAL
    with SegmentReader(path, file_size) as reader:
        for offset, timestamp, position, length, _fields in reader.records(
                segment.size, expected, 0, MAX_READ_WINDOW, copy=False):
            if position - last_sample >= INDEX_INTERVAL:
                segment.offsets.append(offset)
                segment.positions.append(position)
                segment.timestamps.append(timestamp)
                last_sample = position
            if segment.first_ts is None:
                segment.first_ts = timestamp
            segment.last_ts = timestamp
            segment.count += 1
            segment.next = offset + 1
            segment.size = position + length
        segment.file_size = settle_damage(path, file_size, reader.damaged, reader.tail,
                                          newest, "position", "bad length, checksum or offset",
                                          problems)


def _read_index(directory: str, number: int) -> IndexFile | None:
    try:
        data = read_file(os.path.join(directory, index_name(number)))
    except FileNotFoundError:
        return None
    return decode_index(data)


def _read_consumer_offsets(directory: str, problems: list[str]) -> dict[str, int]:
    path = os.path.join(directory, OFFSETS_FILE)
    try:
        data = read_file(path)
    except FileNotFoundError:
        return {}
    try:
        return decode_consumer_offsets(data)
    except (ValueError, IndexError, struct.error) as exc:
        problems.append(f"{path}: consumer-offset file damaged ({exc}); consumer "
                        f"offsets lost")
        return {}
