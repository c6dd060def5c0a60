"""Stream logs: the replayable, offset-addressed message log of one stream queue.

A `StreamLog` owns one directory holding segment files `00000001.seg`, `00000002.seg`, ...
(the queue-file record layout, segment magic `WARRENSL`, record kind 4), one sparse index
file per segment (`00000001.idx`, derived data that recovery can rebuild) and the
consumer-offset file `offsets`. Every appended message gets the next 64-bit offset
(0, 1, 2, ...); publishing only appends, consuming never removes anything, and retention
deletes whole old segments. The format and the guarantees are in docs/storage-format.md,
section "Stream logs".

A failed write (ENOSPC, EIO) is cut back and what it held is buffered again for the
next `sync`, as in `QueueFile`.

Threads (as `QueueFile`: `segment_file.SegmentLog`). `append` and
`store_consumer_offset` are for the event-loop thread: memory only (no system call) under
a short lock. `sync`, `apply_retention`, `close` and `drop` do blocking I/O and serialize
on a second lock, while the loop keeps appending. In the broker, `sync` runs in the group
committer's worker thread (broker/server/committer.py: `trio.lowlevel.start_thread_soon`,
one commit at a time) and `apply_retention` in its maintenance pass (`trio.to_thread`).
`read`, `offset_for_timestamp` and the properties may run on any thread (`read` runs in a
thread of broker/server/read_pool.py, `offset_for_timestamp` on the loop); `read` does its
file I/O outside the locks.
"""

import bisect
import logging
import math
import os
import time
import zlib
from array import array
from typing import NamedTuple

from .names import decode_name, encode_name
from .record import (CRC_START, KIND_STREAM, MIN_STREAM_PAYLOAD, RECORD_HEADER_SIZE,
                     RECORD_MAGIC, SEGMENT_HEADER_SIZE, STREAM_HEAD, STREAM_KINDS,
                     STREAM_SEGMENT_MAGIC, append_stream_record, encode_segment_header,
                     parse_record, stream_fields)
from .segment_file import (O_CLOEXEC, Segment, SegmentLog, StorageError, create_segment_file,
                           fsync_directory, segment_numbers)
from .stream_files import (OFFSETS_FILE, IndexFile, encode_consumer_offsets, encode_index,
                           index_name, write_file_atomically)

log = logging.getLogger("warren.storage")

DEFAULT_MAX_SEGMENT_BYTES = 500_000_000     # RabbitMQ's x-stream-max-segment-size-bytes
INDEX_INTERVAL = 64 * 1024          # at least this many segment bytes between index samples
INDEX_CHECKPOINT = 8 * 1024 * 1024  # rewrite the active segment's index after this growth
READ_WINDOW = 256 * 1024            # bytes per pread when walking a segment
MAX_READ_WINDOW = 4 * 1024 * 1024
_CURSOR_CACHE = 256                 # remembered (offset -> file position) read resumes
_HEAD_SIZE = STREAM_HEAD.size       # record header + timestamp: 28

_new_tuple = tuple.__new__


class StreamRecord(NamedTuple):
    """One message read back from a stream log."""

    offset: int
    timestamp: float        # publish time, seconds since the epoch (millisecond precision)
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes


class StreamSegment(Segment):
    """One segment file of a stream log: its offset range, size and sparse index.

    The flusher thread writes these fields; readers look at them under the log's lock.
    The sparse index holds one sample (offset, file position, timestamp) for the first
    record of the segment and then for the first record at least INDEX_INTERVAL bytes
    after the previous sample: a few samples per megabyte, not one entry per message.
    """

    __slots__ = ("base", "next", "file_size", "count", "first_ts", "last_ts", "offsets",
                 "positions", "timestamps", "indexed_size")

    def __init__(self, number: int, base: int):
        super().__init__(number, SEGMENT_HEADER_SIZE)   # `size`: only durable records
        self.base = base                # the offset its first record has (or had)
        self.next = base                # one past the offset of its last record
        self.file_size = SEGMENT_HEADER_SIZE  # bytes on disk (retention counts these)
        self.count = 0                  # valid records
        self.first_ts: int | None = None    # publish timestamps (ms) of its first/last record
        self.last_ts: int | None = None
        self.offsets = array("q")       # the sparse index, three parallel arrays
        self.positions = array("q")
        self.timestamps = array("q")
        self.indexed_size = 0           # `size` when its index file was last written

    def start_for(self, offset: int) -> tuple[int, int]:
        """(file position, offset) of the last sampled record at or before `offset`."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        if i < 0:
            return SEGMENT_HEADER_SIZE, self.base
        return self.positions[i], self.offsets[i]


class SegmentReader:
    """Walks the records of one segment file window by window, checking them.

    Damage is skipped the way `record.scan_segment` skips it (the next record after a
    record with a bad checksum, else the next position holding a valid record) and noted
    in `damaged` (position, length); bytes after the last valid record are `tail`.
    """

    __slots__ = ("path", "fd", "end", "damaged", "tail")

    def __init__(self, path: str, end: int):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | O_CLOEXEC)
        self.end = end
        self.damaged: list[tuple[int, int]] = []
        self.tail: tuple[int, int] | None = None

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self.close()

    def records(self, position: int, expected: int | None, verify_from: int,
                window: int = READ_WINDOW, copy: bool = True, skip: bool = False):
        """Yield (offset, timestamp, position, length, fields) of every record from
        `position` (which holds the record with offset `expected`, None if unknown).

        Records with an offset >= `verify_from` are checked completely (CRC and layout)
        and `fields` is (exchange, routing key, properties, body), as bytes with `copy`
        else as memoryviews. Earlier ones are only checked for a sane header and the
        expected offset (the read is skipping them) and `fields` is None; with `skip`
        they are not yielded at all.
        """
        fd = self.fd
        unpack = STREAM_HEAD.unpack_from
        crc32 = zlib.crc32
        window = max(window, 4096)
        while position < self.end:
            size = min(window, self.end - position)
            data = os.pread(fd, size, position)
            if len(data) < size:        # the file is shorter than it should be
                self.end = position + len(data)
            n = len(data)
            view = memoryview(data)
            source = data if copy else view
            p = 0
            bad = False
            while p + _HEAD_SIZE <= n:
                magic, crc, kind, _flags, length, offset, timestamp = unpack(data, p)
                stop = p + RECORD_HEADER_SIZE + length
                if (magic != RECORD_MAGIC or kind != KIND_STREAM
                        or length < MIN_STREAM_PAYLOAD
                        or (expected is not None and offset != expected)):
                    bad = True
                    break
                if stop > n:
                    if position + stop > self.end:
                        bad = True
                    break
                if offset >= verify_from:
                    if crc32(view[p + CRC_START:stop]) != crc:
                        bad = True
                        break
                    fields = stream_fields(source, p, stop)
                    if fields is None:
                        bad = True
                        break
                elif skip:
                    p = stop
                    expected = offset + 1
                    continue
                else:
                    fields = None
                yield offset, timestamp, position + p, stop - p, fields
                p = stop
                expected = offset + 1
            if not bad and p == 0:
                # The record at `position` does not fit the window: widen it, or it is torn.
                if n >= _HEAD_SIZE:
                    window = max(window, stop)
                    continue
                bad = True
            if bad:
                at = position + p
                found = self._resync(at, expected)
                if found is None:
                    self.tail = (at, self.end - at)
                    return
                resume, expected = found
                if resume > at:
                    self.damaged.append((at, resume - at))
                position = resume
                continue
            position += p

    def _valid_at(self, position: int, expected: int | None) -> int | None:
        """The offset of the valid record at `position` (not below `expected`), or None."""
        head = os.pread(self.fd, _HEAD_SIZE, position)
        if len(head) < _HEAD_SIZE:
            return None
        magic, _crc, kind, _flags, length, offset, _timestamp = STREAM_HEAD.unpack_from(head)
        if (magic != RECORD_MAGIC or kind != KIND_STREAM or length < MIN_STREAM_PAYLOAD
                or position + RECORD_HEADER_SIZE + length > self.end
                or (expected is not None and offset < expected)):
            return None
        data = os.pread(self.fd, RECORD_HEADER_SIZE + length, position)
        if parse_record(data, 0, STREAM_KINDS) is None:
            return None
        return offset

    def _resync(self, position: int, expected: int | None) -> tuple[int, int] | None:
        """Where the walk resumes after the invalid record at `position`: (position,
        offset) of the next valid record, or None when none follows."""
        offset = self._valid_at(position, expected)
        if offset is not None:      # valid after all (it only broke the offset sequence)
            return position, offset
        head = os.pread(self.fd, _HEAD_SIZE, position)
        if len(head) == _HEAD_SIZE:
            magic, _crc, kind, _flags, length, _offset, _ts = STREAM_HEAD.unpack_from(head)
            if magic == RECORD_MAGIC and kind == KIND_STREAM and length >= MIN_STREAM_PAYLOAD:
                after = position + RECORD_HEADER_SIZE + length
                if after < self.end:    # only the checksum is wrong: the next record is fine
                    offset = self._valid_at(after, expected)
                    if offset is not None and (expected is None or offset == expected + 1):
                        return after, offset
        search = position + 1
        while search < self.end:
            chunk = os.pread(self.fd, min(READ_WINDOW, self.end - search), search)
            if not chunk:
                break
            i = chunk.find(RECORD_MAGIC)
            while i >= 0:
                offset = self._valid_at(search + i, expected)
                if offset is not None:
                    return search + i, offset
                i = chunk.find(RECORD_MAGIC, i + 1)
            if search + len(chunk) >= self.end:
                break
            search += len(chunk) - 1    # a magic split across two chunks is found next time
        return None


class StreamLog(SegmentLog[StreamSegment]):
    """The append-only, segmented, offset-addressed log of one stream queue.

    Offsets start at 0 and increase by one per appended message, across restarts and
    retention. Publish timestamps are milliseconds since the epoch from `clock` (seconds,
    like `time.time`), made non-decreasing: a clock that steps back does not make them go
    back, so a timestamp lookup is a binary search. After `close`, reads keep working on
    what is on disk.
    """

    def __init__(self, directory, max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
                 max_bytes: int | None = None, max_age_seconds: float | None = None,
                 clock=time.time):
        """A new, empty stream log in `directory` (created on the first write).

        Raises FileExistsError if the directory already holds segments: use `recover`.
        """
        self._setup(directory, max_segment_bytes, max_bytes, max_age_seconds, clock)
        if segment_numbers(self.directory):
            raise FileExistsError(f"{self.directory} holds segments: use StreamLog.recover")

    def _setup(self, directory, max_segment_bytes, max_bytes, max_age_seconds, clock):
        self.set_retention(max_segment_bytes, max_bytes, max_age_seconds)
        self._setup_files(directory)
        self._clock = clock
        # Loop side and reader view, guarded by _lock.
        self._pending: list[tuple] = []     # (timestamp, exchange, key, properties, body)
        self._pending_base = 0              # offset of _pending[0]
        self._inflight: list[tuple] | None = None   # the batch a sync is writing
        self._inflight_base = 0
        self._next_offset = 0               # the offset the next append gets
        self._first_offset = 0              # the oldest offset still in the log
        self._disk_next = 0                 # offsets below this are in segment files
        self._durable_next = 0              # offsets below this are durable
        self._last_ts = 0                   # the newest timestamp handed out (ms)
        self._segments: list[StreamSegment] = []     # ascending; the last one is the newest
        self._bases: list[int] = []         # segment base offsets, for bisect
        self._cursors: dict[int, tuple[int, int]] = {}  # offset -> (segment, position)
        self._consumers: dict[str, int] = {}
        self._consumers_dirty = False
        self._reported: set[tuple[int, int]] = set()
        # One-entry caches (name, encoded name) of the last names appended.
        self._exchange_cache = self._routing_key_cache = (None, b"")
        # Flusher side, guarded by _sync_lock.
        self._total_bytes = 0
        self._dir_dirty = False

    def __repr__(self) -> str:
        return (f"<StreamLog {self.directory!r} first_offset={self._first_offset} "
                f"next_offset={self._next_offset}>")

    # -- properties -----------------------------------------------------------------------

    @property
    def first_offset(self) -> int:
        """The oldest offset still in the log (== next_offset when the log is empty)."""
        return self._first_offset

    @property
    def next_offset(self) -> int:
        """The offset the next append gets; the newest message has next_offset - 1."""
        return self._next_offset

    @property
    def durable_offset(self) -> int:
        """The highest offset a completed `sync` made durable (-1: none yet)."""
        return self._durable_next - 1

    # -- the event-loop side: memory only -------------------------------------------------

    def append(self, exchange, routing_key, properties: bytes, body) -> int:
        """Buffer a message, stamped with clock(); return its offset. The next `sync`
        writes it and makes it durable. After `drop` nothing is stored and -1 is returned.
        """
        timestamp = int(self._clock() * 1000)
        cached = self._exchange_cache
        if exchange == cached[0]:
            exchange = cached[1]
        else:
            self._exchange_cache = (exchange, exchange := encode_name(exchange))
        cached = self._routing_key_cache
        if routing_key == cached[0]:
            routing_key = cached[1]
        else:
            self._routing_key_cache = (routing_key, routing_key := encode_name(routing_key))
        with self._lock:
            if self._dropped:
                return -1
            if self._closed:
                raise StorageError(f"{self.directory}: stream log is closed")
            if timestamp < self._last_ts:
                timestamp = self._last_ts
            else:
                self._last_ts = timestamp
            offset = self._next_offset
            self._next_offset = offset + 1
            self._pending.append((timestamp, exchange, routing_key, properties, body))
        return offset

    def store_consumer_offset(self, name: str, offset: int) -> None:
        """Remember `offset` for the consumer `name` (its last processed message); durable
        with the next `sync`. Memory only."""
        if not isinstance(name, str):
            raise TypeError("a consumer name is a str")
        if len(encode_name(name)) == 0:
            raise ValueError("a consumer name must not be empty")
        with self._lock:
            if not 0 <= offset < self._next_offset:
                raise ValueError(f"offset {offset} is not in the log "
                                 f"(next offset {self._next_offset})")
            if self._dropped:
                return
            if self._consumers.get(name) != offset:
                self._consumers[name] = offset
                self._consumers_dirty = True

    def consumer_offset(self, name: str) -> int | None:
        """The offset last stored for the consumer `name`, or None."""
        with self._lock:
            return self._consumers.get(name)

    def consumer_offsets(self) -> dict[str, int]:
        with self._lock:
            return dict(self._consumers)

    # -- the flusher side: blocking I/O ---------------------------------------------------

    def sync(self) -> int:
        """Write what was appended, fdatasync it, and return the highest offset now
        durable (-1 when the log has never held a message).

        Every message appended before this call started is on stable storage when it
        returns, and so is every consumer offset stored before it started.
        """
        with self._sync_lock:
            self._check_usable()
            with self._lock:
                consumers = dict(self._consumers) if self._consumers_dirty else None
                batch = self._pending
                if self._dropped or self._closed or (not batch and consumers is None):
                    return self._durable_next - 1
                base = self._pending_base
                self._pending = []
                self._pending_base = base + len(batch)
                self._inflight = batch
                self._inflight_base = base
                self._consumers_dirty = False
            target = base + len(batch)
            try:
                if batch:
                    self._write_batch(batch, base)
                if consumers is not None:
                    self._write_consumer_offsets(consumers)
            except BaseException as exc:
                if isinstance(exc, OSError):    # cut back: written again by the next sync
                    self._return_to_buffer(batch, consumers is not None)
                else:
                    self._failed = exc
                raise
            with self._lock:
                self._durable_next, self._inflight = target, None
            return target - 1

    def _return_to_buffer(self, batch: list, consumers_dirty: bool) -> None:
        """A write failed (ENOSPC, EIO): what did not reach a segment goes back ahead of
        what was appended meanwhile, for the next `sync` to write again (the failed
        segment write was cut back, so nothing of it is left in the file)."""
        with self._lock:
            written = self._disk_next - self._inflight_base
            self._pending = batch[written:] + self._pending
            self._pending_base = self._disk_next
            self._inflight = None
            self._consumers_dirty = self._consumers_dirty or consumers_dirty

    def set_retention(self, max_segment_bytes: int, max_bytes: int | None,
                      max_age_seconds: float | None) -> None:
        """New limits (a policy changed them): `apply_retention` applies them next; a
        new segment size applies to the segments started from now on."""
        if max_segment_bytes <= SEGMENT_HEADER_SIZE:
            raise ValueError(f"max_segment_bytes must exceed {SEGMENT_HEADER_SIZE}")
        if max_bytes is not None and max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        if max_age_seconds is not None and max_age_seconds < 0:
            raise ValueError("max_age_seconds must not be negative")
        self.max_segment_bytes = max_segment_bytes
        self.max_bytes = max_bytes
        self.max_age_seconds = max_age_seconds

    def apply_retention(self) -> int:
        """Delete whole old segments beyond the limits; return how many were deleted.

        From the oldest, a segment is deleted while the log's bytes exceed `max_bytes`,
        or when its newest message is older than `max_age_seconds`, or when it holds none.
        The newest segment is never deleted. Blocking (unlink, fsync of the directory).
        """
        if self.max_bytes is None and self.max_age_seconds is None:
            return 0
        with self._sync_lock:
            if not self._usable():
                return 0
            cutoff = None
            if self.max_age_seconds is not None:
                cutoff = self._clock() * 1000 - self.max_age_seconds * 1000
            removed = []
            while len(self._segments) > 1:
                oldest = self._segments[0]
                over = self.max_bytes is not None and self._total_bytes > self.max_bytes
                expired = oldest.count == 0 or (cutoff is not None
                                                and oldest.last_ts < cutoff)
                if not (over or expired):
                    break
                with self._lock:
                    del self._segments[0]
                    del self._bases[0]
                    self._first_offset = max(self._first_offset, self._segments[0].base)
                self._total_bytes -= oldest.file_size
                try:
                    self._unlink_segment(oldest.number)
                except BaseException as exc:
                    self._failed = exc
                    raise
                removed.append(oldest)
            if removed:
                fsync_directory(self.directory)
                log.info("event=stream_retention path=%s segments=%d first_offset=%d",
                         self.directory, len(removed), self._first_offset)
            return len(removed)

    def _discard_buffered(self) -> None:
        self._pending = []
        self._pending_base = self._next_offset = self._disk_next

    def _forget(self) -> None:
        self._pending = []
        self._inflight = None
        self._segments = []
        self._bases = []
        self._consumers = {}

    def _seal_active(self) -> None:
        active = self._active
        if active is not None and active.indexed_size != active.size:
            self._write_index(active)   # spares the next recovery the scan

    def stats(self) -> dict:
        """Segment and index figures, for diagnostics and tests."""
        with self._lock:
            segments = [(s.number, s.base, s.next, s.size, s.count, len(s.offsets))
                        for s in self._segments]
            return {
                "segments": segments,
                "index_entries": sum(entry[5] for entry in segments),
                "pending": len(self._pending),
                "first_offset": self._first_offset,
                "next_offset": self._next_offset,
                "durable_offset": self._durable_next - 1,
                "total_bytes": self._total_bytes,
                "consumers": len(self._consumers),
            }

    # -- reading --------------------------------------------------------------------------

    def read(self, offset: int, max_count: int, durable_only: bool = False
             ) -> list[StreamRecord]:
        """Up to `max_count` messages from `offset` on, in offset order.

        An offset below `first_offset` (deleted by retention) reads from `first_offset`;
        one at or past `next_offset` reads nothing. Messages not written yet come from
        memory, unless `durable_only`, which stops at the last durable offset. Damaged
        records are skipped (and reported once on the "warren.storage" logger), so
        offsets may have gaps only where the disk lost data.
        """
        out: list[StreamRecord] = []
        cursor = offset
        names: dict[bytes, str] = {}
        while len(out) < max_count:
            with self._lock:
                if self._dropped:
                    return []
                if cursor < self._first_offset:
                    cursor = self._first_offset
                limit = self._durable_next if durable_only else self._next_offset
                if cursor >= limit:
                    break
                if cursor >= self._disk_next:
                    memory = self._memory_slice(cursor, min(max_count - len(out),
                                                            limit - cursor))
                    plan = None
                else:
                    plan = self._plan_read(cursor)
                    if plan is None:    # nothing on disk at or after cursor
                        cursor = self._disk_next
                        continue
            if plan is None:
                for offset_, (timestamp, exchange, routing_key, properties, body) \
                        in enumerate(memory, cursor):
                    out.append(_new_tuple(StreamRecord, (
                        offset_, timestamp / 1000, _cached_name(names, exchange),
                        _cached_name(names, routing_key), bytes(properties),
                        body if type(body) is bytes else bytes(body))))
                break
            segment, path, position, start, size, segment_next, average = plan
            cursor = max(cursor, start)
            want = max_count - len(out)
            window = min(MAX_READ_WINDOW, max(READ_WINDOW // 4,
                                              average * (cursor - start + want) + 1024))
            try:
                reader = SegmentReader(path, size)
            except FileNotFoundError:
                with self._lock:
                    if segment in self._segments or self._dropped:
                        if self._dropped_meanwhile():
                            return []
                        raise StorageError(f"{path}: segment file is missing") from None
                continue    # deleted by retention meanwhile: read from the new start
            last = None
            with reader:
                for record_offset, timestamp, record_position, length, fields \
                        in reader.records(position, start, cursor, window, skip=True):
                    if record_offset >= limit:
                        break
                    exchange, routing_key, properties, body = fields
                    exchange_name = names.get(exchange)
                    if exchange_name is None:
                        exchange_name = names[exchange] = decode_name(exchange)
                    key_name = names.get(routing_key)
                    if key_name is None:
                        key_name = names[routing_key] = decode_name(routing_key)
                    out.append(_new_tuple(StreamRecord, (
                        record_offset, timestamp / 1000, exchange_name, key_name,
                        properties, body)))
                    last = (record_offset, record_position + length)
                    if len(out) >= max_count:
                        break
            if reader.damaged or reader.tail:
                self._report_damage(segment, path, reader.damaged, reader.tail)
            if last is not None:
                cursor = last[0] + 1
                if cursor < segment_next:
                    self._remember(cursor, segment.number, last[1])
            if len(out) < max_count:
                cursor = max(cursor, segment_next)
        return out

    def offset_for_timestamp(self, timestamp: float) -> int:
        """The first offset whose publish time is >= `timestamp` (seconds since the epoch,
        millisecond precision); `next_offset` when every message is older, `first_offset`
        when every message is newer. Exact per message: the sparse index narrows the
        search to one sample interval, which is then walked."""
        target = math.ceil(timestamp * 1000 - 1e-6)
        while True:
            with self._lock:
                if self._dropped:
                    return self._next_offset
                found = None
                for segment in self._segments:
                    if (segment.count and segment.last_ts is not None
                            and segment.last_ts >= target):
                        found = segment
                        break
                if found is None:
                    return self._memory_offset_for(target)
                if found.first_ts is not None and found.first_ts >= target:
                    return max(found.base, self._first_offset)
                i = bisect.bisect_left(found.timestamps, target) - 1
                if i >= 0:
                    position, start = found.positions[i], found.offsets[i]
                else:
                    position, start = SEGMENT_HEADER_SIZE, found.base
                path, size, segment_next = self._path(found.number), found.size, found.next
            try:
                reader = SegmentReader(path, size)
            except FileNotFoundError:
                with self._lock:
                    if found in self._segments and not self._dropped:
                        raise StorageError(f"{path}: segment file is missing") from None
                continue    # deleted by retention (or dropped) meanwhile
            with reader:
                for offset, record_ts, _position, _length, _fields \
                        in reader.records(position, start, 1 << 64):
                    if record_ts >= target:
                        return offset
            return segment_next

    def _memory_offset_for(self, target: int) -> int:
        """Under _lock: the first unwritten offset with a timestamp >= target."""
        for records, base in ((self._inflight, self._inflight_base),
                              (self._pending, self._pending_base)):
            if records:
                i = bisect.bisect_left(records, target, key=_timestamp_of)
                if i < len(records):
                    return max(base + i, self._disk_next)
        return self._next_offset

    def _memory_slice(self, offset: int, count: int) -> list:
        """Under _lock: up to `count` unwritten records from `offset` on."""
        out: list[tuple] = []
        for records, base in ((self._inflight, self._inflight_base),
                              (self._pending, self._pending_base)):
            if records and len(out) < count:
                start = offset + len(out) - base
                if 0 <= start < len(records):
                    out += records[start:start + count - len(out)]
        return out

    def _plan_read(self, offset: int):
        """Under _lock: where on disk the walk for `offset` starts, or None."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            i = 0
        segments = self._segments
        while i < len(segments) and offset >= segments[i].next:
            i += 1
            if i < len(segments):
                offset = max(offset, segments[i].base)
        if i >= len(segments):
            return None
        segment = segments[i]
        hint = self._cursors.get(offset)
        if hint is not None and hint[0] == segment.number:
            position, start = hint[1], offset
        else:
            position, start = segment.start_for(offset)
        average = (segment.size - SEGMENT_HEADER_SIZE) // segment.count if segment.count else 0
        return (segment, self._path(segment.number), position, start, segment.size,
                segment.next, average)

    def _remember(self, offset: int, number: int, position: int) -> None:
        with self._lock:
            cursors = self._cursors
            if len(cursors) >= _CURSOR_CACHE:
                del cursors[next(iter(cursors))]
            cursors[offset] = (number, position)

    def _report_damage(self, segment: StreamSegment, path: str, damaged, tail) -> None:
        spans = list(damaged) + ([tail] if tail else [])
        with self._lock:
            new = [span for span in spans if (segment.number, span[0]) not in self._reported]
            self._reported.update((segment.number, span[0]) for span in new)
        for position, length in new:
            log.warning("event=stream_damage path=%s position=%d bytes=%d "
                        "(damaged records skipped)", path, position, length)

    # -- writing --------------------------------------------------------------------------

    def _write_batch(self, batch: list, base: int) -> None:
        """Write `batch` (offsets from `base`) across as many segments as it fills."""
        limit = self.max_segment_bytes
        count = len(batch)
        i = 0
        offset = base
        while i < count:
            segment = self._active
            if segment is None:
                segment = self._new_segment(offset)
            first = i
            start = position = segment.size
            last_sample = segment.positions[-1] if segment.positions else -INDEX_INTERVAL
            sampled: list[tuple[int, int, int]] = []
            buffer = bytearray()
            while i < count:
                timestamp, exchange, routing_key, properties, body = batch[i]
                if position - last_sample >= INDEX_INTERVAL:
                    sampled.append((offset, position, timestamp))
                    last_sample = position
                position += append_stream_record(buffer, offset, timestamp, exchange,
                                                 routing_key, properties, body)
                offset += 1
                i += 1
                if position >= limit:
                    break
            self.written_bytes += self._append(segment, buffer, sync=True) - start
            with self._lock:
                for sample_offset, sample_position, sample_ts in sampled:
                    segment.offsets.append(sample_offset)
                    segment.positions.append(sample_position)
                    segment.timestamps.append(sample_ts)
                if segment.count == 0:
                    segment.first_ts = batch[first][0]
                segment.count += i - first
                segment.last_ts = batch[i - 1][0]
                segment.next = offset
                segment.size = segment.file_size = position
                self._disk_next = offset
            self._total_bytes += position - start
            if position >= limit:
                self._write_index(segment)      # sealed: its index is final
                self._close_active()
        if self._dir_dirty:
            fsync_directory(self.directory)
            self._dir_dirty = False
        active = self._active
        if active is not None and active.size - active.indexed_size >= INDEX_CHECKPOINT:
            self._write_index(active)

    def _new_segment(self, base: int) -> StreamSegment:
        self._ensure_directory()
        segment = StreamSegment(self._next_segment, base)
        self._next_segment += 1
        path = self._path(segment.number)
        segment.fd = create_segment_file(
            path, encode_segment_header(base, STREAM_SEGMENT_MAGIC))
        self._dir_dirty = True
        self._total_bytes += SEGMENT_HEADER_SIZE
        self.written_bytes += SEGMENT_HEADER_SIZE
        with self._lock:
            self._segments.append(segment)
            self._bases.append(base)
        self._active = segment
        return segment

    def _write_index(self, segment: StreamSegment) -> None:
        """Write the segment's sparse index file (derived data: not fsynced; recovery
        checks it against the segment and rebuilds it when it is missing or damaged)."""
        data = encode_index(IndexFile(
            segment.base, segment.next, segment.size, segment.count, segment.first_ts or 0,
            segment.last_ts or 0, segment.offsets, segment.positions, segment.timestamps))
        write_file_atomically(self.directory, index_name(segment.number), data,
                              durable=False)
        segment.indexed_size = segment.size

    def _unlink_segment(self, number: int) -> None:
        os.unlink(self._path(number))
        try:
            os.unlink(os.path.join(self.directory, index_name(number)))
        except FileNotFoundError:
            pass

    def _write_consumer_offsets(self, consumers: dict) -> None:
        """Replace the consumer-offset file durably (temp file, fsync, rename, fsync)."""
        self._ensure_directory()
        write_file_atomically(self.directory, OFFSETS_FILE,
                              encode_consumer_offsets(consumers), durable=True)

    # -- recovery -------------------------------------------------------------------------

    @classmethod
    def recover(cls, directory, max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
                max_bytes: int | None = None, max_age_seconds: float | None = None,
                clock=time.time, verify: bool = False) -> tuple["StreamLog", list[str]]:
        """Rebuild a stream log from its directory after a restart or a crash.

        Returns the log (appends continue after the highest offset found) and a
        description of every problem found. Sealed segments with a valid index file are
        not read (only checked against it) unless `verify`, which checks every record's
        CRC; their damage is found and reported when it is read. The part of a segment its
        index does not cover is scanned and checked. A torn tail of the newest segment, the
        normal result of a crash mid-write, is cut off and is not a problem.
        """
        from .stream_log_recovery import replay     # (which builds on this module)
        stream = cls.__new__(cls)
        stream._setup(directory, max_segment_bytes, max_bytes, max_age_seconds, clock)
        problems = replay(stream, verify)
        for problem in problems:
            log.warning("event=recovery_problem %s", problem)
        return stream, problems

def _timestamp_of(record: tuple) -> int:
    return record[0]


def _cached_name(names: dict, value) -> str:
    text = names.get(value)
    if text is None:
        text = names[value] = decode_name(value)
    return text
