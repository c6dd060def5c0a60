"""Queue files: the durable message log of one queue, cut into segment files.

A `QueueFile` owns one directory holding `00000001.seg`, `00000002.seg`, ... Messages and
acks are appended to the newest (active) segment; a segment whose messages are all acked
is deleted, and one that is mostly dead is compacted (its live records are copied into
the active segment, then it is deleted). `QueueFile.recover` rebuilds the queue after a
restart or a crash. The format and the guarantees are in docs/storage-format.md.

Threads. `append`, `ack` and `mark_delivered` are meant for the event-loop thread: they
only touch memory (no system call) under a short lock. `sync`, `compact`, `close` and
`drop` do blocking I/O; they serialize on a second lock, so one flusher thread (or
several) may run them while the loop keeps appending. `read` and `read_many` may run on
any thread.

Failed writes. When writing or fsyncing a batch fails (ENOSPC, EIO), the segment is cut
back to where the batch began and the batch goes back to the buffer: the queue file stays
usable and the next `sync` writes it again. Only when even that cut fails is the queue
file unusable until a restart recovers it from disk.
"""

import logging
import os
from dataclasses import dataclass, field
from typing import cast

from .names import encode_name
from .queue_file_compaction import compact_segment, compaction_candidate
from .record import (FLAG_DEAD_LETTERED, FLAG_PERSISTENT, FLAG_REDELIVERED, KIND_ACK,
                     KIND_DELIVERED, KIND_MESSAGE, MessageFields, append_marker, append_message,
                     decode_message, encode_segment_header, parse_record)
from .segment_file import (O_CLOEXEC, Segment, SegmentLog, StorageError, create_segment_file,
                           fdatasync, fsync_directory, segment_numbers)
from .seq_index import SeqIndex

log = logging.getLogger("warren.storage")

DEFAULT_SEGMENT_SIZE = 16 * 1024 * 1024
DEFAULT_COMPACT_RATIO = 0.3
READ_RUN_BYTES = 1024 * 1024    # read_many: adjacent records read with one pread, at most


@dataclass(slots=True)
class RecoveredMessage:
    """A message found live by `QueueFile.recover`."""

    seq: int
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes | None          # None when recovered with load_bodies=False (use `read`)
    redelivered: bool
    body_size: int              # the body's length, known with or without the body
    dead_lettered: bool = False     # appended with dead_lettered=True (FLAG_DEAD_LETTERED)


@dataclass(slots=True, eq=False)
class UnsyncedBatch:
    """A batch `QueueFile.write_for_sync` wrote and `finish_sync` completes: `fd` (a
    duplicate of its segment's descriptor; None when nothing needed writing) must be
    fdatasynced first, and the queue file's directory fsynced too when the segment was
    created for it (`segment.dir_dirty`)."""

    target: int                 # the last seq appended when it was taken
    batch: dict                 # what was taken, to buffer again if the sync fails
    acks: list
    delivered: dict
    written: list = field(default_factory=list)     # (seq, offset in batch, length, flags)
    acked: dict = field(default_factory=dict)       # seq -> its location before the ack
    marked: list = field(default_factory=list)      # (seq, location) given a delivered mark
    segment: "QueueSegment | None" = None
    base: int = 0               # where in the segment the write began
    end: int = 0                # and ended
    fd: int | None = None


class QueueSegment(Segment):
    """Bookkeeping for one segment file of a queue file (only the flusher side touches
    it)."""

    __slots__ = ("live", "live_bytes", "min_seq", "max_seq", "refs", "dir_dirty", "damaged")

    def __init__(self, number: int):
        super().__init__(number, 0)
        self.live = 0               # live messages whose home record is here
        self.live_bytes = 0
        self.min_seq: int | None = None     # seq range of every message record in the file
        self.max_seq: int | None = None
        # Segments holding messages that this segment's ack/delivered records refer to:
        # while one of them exists, this segment's records are still needed.
        self.refs: dict[int, int] = {}
        self.dir_dirty = False      # created, directory entry not fsynced yet
        self.damaged = False        # unreadable parts seen: never compacted

    def cover(self, seq: int) -> None:
        if self.min_seq is None or seq < self.min_seq:
            self.min_seq = seq
        if self.max_seq is None or seq > self.max_seq:
            self.max_seq = seq

    def holds(self, seq: int) -> bool:
        low, high = self.min_seq, self.max_seq
        return low is not None and high is not None and low <= seq <= high


def _buffered_fields(record: list) -> MessageFields:
    """The MessageFields of a record still in the write buffer."""
    _flags, exchange, routing_key, properties, body = record
    return MessageFields(bytes(exchange), bytes(routing_key), bytes(properties),
                         bytes(body), len(body))


class QueueFile(SegmentLog[QueueSegment]):
    """The append-only, segmented message log of one durable queue.

    `seq` is the queue's 64-bit message number: strictly increasing across appends and
    across restarts (`last_seq` after `recover` is where the queue continues).
    """

    def __init__(self, directory, segment_size: int = DEFAULT_SEGMENT_SIZE,
                 compact_ratio: float = DEFAULT_COMPACT_RATIO):
        """A new, empty queue file in `directory` (created on the first write).

        Raises FileExistsError if the directory already holds segments: use `recover`.
        """
        self._setup(directory, segment_size, compact_ratio)
        if segment_numbers(self.directory):
            raise FileExistsError(f"{self.directory} holds segments: use QueueFile.recover")

    def _setup(self, directory, segment_size: int, compact_ratio: float) -> None:
        if segment_size <= 0:
            raise ValueError("segment_size must be positive")
        self._setup_files(directory)
        self.segment_size = segment_size
        self.compact_ratio = compact_ratio
        # Loop side, guarded by _lock.
        self._pending: dict[int, list] = {}         # seq -> [flags, exchange, key, props, body]
        self._pending_acks: list[int] = []
        self._pending_delivered: dict[int, None] = {}
        self._inflight: dict[int, list] | None = None   # the batch a sync is writing
        self._last_seq = 0          # highest seq appended (or recovered)
        self._durable_seq = 0       # highest seq covered by a completed sync
        # Flusher side, guarded by _sync_lock; _index is also read by `read` under _lock.
        self._index = SeqIndex()                    # seq -> (segment, offset, length, flags)
        self._dups: dict[int, list[int]] = {}       # seq -> older segments holding a copy
        self._delivered: set[int] = set()           # live seqs with a delivered mark on disk
        self._segments: dict[int, QueueSegment] = {}    # by number, ascending
        self._high_seq = 0          # highest seq in any record written or recovered
        self._collect_due = False

    def __repr__(self) -> str:
        return f"<QueueFile {self.directory!r} last_seq={self._last_seq}>"

    @property
    def last_seq(self) -> int:
        """The highest seq appended or recovered; the next append must use a higher one."""
        return self._last_seq

    # -- the event-loop side: memory only -------------------------------------------------

    def append(self, seq: int, exchange, routing_key, properties, body,
               redelivered: bool = False, persistent: bool = True,
               dead_lettered: bool = False) -> None:
        """Buffer a message record; it is written and made durable by the next `sync`.

        `persistent=False` writes the record for paging only: recovery discards it.
        `dead_lettered` is kept with the record for the broker (FLAG_DEAD_LETTERED) and
        given back by recovery.
        """
        exchange = encode_name(exchange)
        routing_key = encode_name(routing_key)
        flags = (FLAG_REDELIVERED if redelivered else 0) | (FLAG_PERSISTENT if persistent else 0)
        if dead_lettered:
            flags |= FLAG_DEAD_LETTERED
        with self._lock:
            if self._dropped:
                return
            if self._closed:
                raise StorageError(f"{self.directory}: queue file is closed")
            if seq <= self._last_seq:
                raise ValueError(f"seq {seq} is not above the last seq {self._last_seq}")
            self._last_seq = seq
            self._pending[seq] = [flags, exchange, routing_key, properties, body]

    def ack(self, seq: int) -> None:
        """The message left the queue for good. Unknown seqs are ignored at the next sync.

        A message acked before any sync wrote it is simply never written.
        """
        with self._lock:
            if self._pending.pop(seq, None) is not None or self._dropped:
                return
            self._pending_delivered.pop(seq, None)
            self._pending_acks.append(seq)

    def mark_delivered(self, seq: int) -> None:
        """The message was handed to a consumer: after a crash it comes back redelivered."""
        with self._lock:
            record = self._pending.get(seq)
            if record is not None:
                record[0] |= FLAG_REDELIVERED
            elif not self._dropped:
                self._pending_delivered[seq] = None

    # -- the flusher side: blocking I/O ---------------------------------------------------

    @property
    def durable_seq(self) -> int:
        """The highest seq that a completed `sync` made durable."""
        return self._durable_seq

    def sync(self) -> int:
        """Write what was buffered, fsync it, and return the highest seq now durable.

        Every message appended with a seq <= the returned value is on disk (or was acked
        and need not be), and every ack given before this call started is on disk.
        """
        unsynced = self.write_for_sync()
        if unsynced is not None:
            try:
                self._make_durable(unsynced)
            except OSError as error:
                self.finish_sync(unsynced, error)
                raise
            self.finish_sync(unsynced)
            self.collect_garbage()
        return self._durable_seq

    def write_for_sync(self) -> "UnsyncedBatch | None":
        """The first half of `sync`, for a caller that makes the write durable itself
        (the group committer, with `KernelSync`): take what was buffered and write it
        (into the page cache: no fsync). Returns what to sync, or None when nothing was
        to be written (then `durable_seq` already covers every append). The caller must
        then sync `fd` (fdatasync; and the directory when its segment is new) and call
        `finish_sync` before any other write to this queue file. Raises OSError when
        the write fails (the batch is buffered again, as by a failed `sync`)."""
        with self._sync_lock:
            self._check_usable()
            with self._lock:
                target = self._last_seq
                if self._dropped or self._closed or not (
                        self._pending or self._pending_acks or self._pending_delivered):
                    if not self._dropped and not self._closed:
                        self._durable_seq = target
                    return None
                batch, acks, delivered = \
                    self._pending, self._pending_acks, self._pending_delivered
                self._pending, self._pending_acks, self._pending_delivered = {}, [], {}
                self._inflight = batch
            unsynced = UnsyncedBatch(target, batch, acks, delivered)
            try:
                self._write_records(unsynced)
            except OSError:
                self._return_to_buffer(batch, acks, delivered)
                raise
            except BaseException as exc:
                self._failed = exc
                raise
            return unsynced

    def finish_sync(self, unsynced: "UnsyncedBatch", error: OSError | None = None) -> None:
        """The second half of `sync`: `unsynced` was made durable (`error` None), or its
        sync failed with `error`: the segment is cut back to where the batch began and
        the batch is buffered again for the next sync. Closes `unsynced.fd`."""
        with self._sync_lock:
            fd = unsynced.fd
            if fd is not None:
                os.close(fd)
                unsynced.fd = None
            written_to = unsynced.segment if fd is not None else None
            if self._dropped or self._closed:
                return
            if error is not None:
                if written_to is not None:
                    self._cut_back(written_to, error)
                self._return_to_buffer(unsynced.batch, unsynced.acks, unsynced.delivered)
                return
            try:
                if written_to is not None:
                    written_to.dir_dirty = False
                    self.written_bytes += unsynced.end - written_to.size
                    written_to.size = unsynced.end
                    self._step("synced")
                self._apply_written(unsynced)
            except BaseException as exc:
                self._failed = exc
                raise
            with self._lock:
                self._inflight = None
                self._durable_seq = unsynced.target

    def collect_garbage(self) -> None:
        """Delete the segments that hold nothing needed any more (blocking: unlink and
        fsync the directory); `sync` does it after each batch, a caller of
        `write_for_sync` when `garbage_due` says so."""
        with self._sync_lock:
            if self._dropped or self._closed:
                return
            try:
                self._collect_garbage()
            except BaseException as exc:
                self._failed = exc
                raise

    @property
    def appends_in_place(self) -> bool:
        """Whether the next write goes into the open active segment: no file or
        directory to create, so `write_for_sync` blocks on nothing but its `pwrite`, and
        only the segment needs syncing (its directory entry is durable)."""
        active = self._active
        return (active is not None and active.fd is not None and not active.dir_dirty
                and active.size < self.segment_size and self._failed is None)

    @property
    def garbage_due(self) -> bool:
        """Whether segments may have become deletable (`collect_garbage`)."""
        return self._collect_due

    def _make_durable(self, unsynced: "UnsyncedBatch") -> None:
        fd, segment = unsynced.fd, unsynced.segment
        if fd is not None and segment is not None:
            self._sync_segment(fd, segment)

    def _sync_segment(self, fd: int, segment: QueueSegment) -> None:
        """fdatasync a segment through `fd`, and its directory entry when it is new
        (`dir_dirty` is cleared by the caller once the write counts as done)."""
        fdatasync(fd)
        if segment.dir_dirty:
            fsync_directory(self.directory)

    def _return_to_buffer(self, batch: dict, acks: list, delivered: dict) -> None:
        """A batch failed to reach the disk: buffer it again, ahead of what was appended
        meanwhile, for the next `sync`. Acks and delivered marks given meanwhile for its
        messages apply to the buffered records, as if the batch had never been taken."""
        with self._lock:
            self._inflight = None
            acked = set(self._pending_acks)
            marked = self._pending_delivered
            restored = {}
            for seq, record in batch.items():
                if seq in acked:
                    acked.discard(seq)
                    continue
                if marked.pop(seq, None) is not None:
                    record[0] |= FLAG_REDELIVERED
                restored[seq] = record
            restored.update(self._pending)
            self._pending = restored
            self._pending_acks = acks + [seq for seq in self._pending_acks
                                         if seq not in batch]
            delivered.update(marked)
            self._pending_delivered = delivered

    def compact(self, limit: int | None = None) -> int:
        """Compact up to `limit` segments whose live ratio fell below `compact_ratio`.

        Blocking (reads a segment, writes its live records to the active one, fsyncs,
        deletes it). Returns how many segments were compacted.
        """
        done = 0
        with self._sync_lock:
            if not self._usable():
                return 0
            try:
                while limit is None or done < limit:
                    segment = compaction_candidate(self)
                    if segment is None:
                        break
                    if compact_segment(self, segment):
                        done += 1
                    self._collect_garbage()
            except OSError:
                raise   # a failed copy is cut back (`_write`): the source stays in use
            except BaseException as exc:
                self._failed = exc
                raise
        return done

    def release_drained_segment(self) -> bool:
        """When no message is live and the active segment has grown past
        `segment_size // 16`, start a new segment so the old one can be deleted: a
        drained queue gives its disk space back without waiting for the segment to fill.
        Blocking. Returns whether it did."""
        with self._sync_lock:
            self._check_usable()
            active = self._active
            if (self._dropped or self._closed or self._index or active is None
                    or active.size < self.segment_size // 16):
                return False
            self._close_active()
            segment = self._writable_segment()
            fsync_directory(self.directory)
            segment.dir_dirty = False
            self._collect_garbage()
        return True

    def needs_compaction(self) -> bool:
        """Whether `compact` has work (takes the flusher lock: call it on the flusher)."""
        with self._sync_lock:
            if self._failed is not None or self._dropped or self._closed:
                return False
            return compaction_candidate(self) is not None

    def read(self, seq: int) -> bytes:
        """The body of a live message, from memory if not yet written, else from its segment.

        Raises KeyError for an unknown or acked seq, StorageError if the record is damaged.
        """
        for _attempt in range(8):
            with self._lock:
                record = self._pending.get(seq)
                if record is None and self._inflight is not None:
                    record = self._inflight.get(seq)
                if record is not None:
                    return bytes(record[4])
                location = self._index.get(seq)
            if location is None:
                raise KeyError(seq)
            number, offset, length, _flags = location
            try:
                fd = os.open(self._path(number), os.O_RDONLY | O_CLOEXEC)
            except FileNotFoundError:
                continue        # compacted meanwhile: the index already says where it went
            try:
                data = os.pread(fd, length, offset)
            finally:
                os.close(fd)
            return self._body_in(data, 0, seq, number, offset)
        raise StorageError(f"{self.directory}: message {seq} kept moving while being read")

    def read_many(self, seqs: list[int], run_bytes: int = READ_RUN_BYTES,
                  whole: bool = False) -> list:
        """The bodies of `seqs`, in order, as `read` gives them, but each segment is
        opened once and adjacent records (up to `run_bytes`) come with one pread. An
        item is the body (with `whole`, the record's MessageFields), or the exception
        `read` would raise for that seq."""
        results: list = [None] * len(seqs)
        by_segment: dict[int, list] = {}
        with self._lock:
            for index, seq in enumerate(seqs):
                record = self._pending.get(seq)
                if record is None and self._inflight is not None:
                    record = self._inflight.get(seq)
                if record is not None:
                    results[index] = (_buffered_fields(record) if whole
                                      else bytes(record[4]))
                    continue
                location = self._index.get(seq)
                if location is None:
                    results[index] = KeyError(seq)
                else:
                    by_segment.setdefault(location[0], []).append(
                        (location[1], location[2], index, seq))
        for number, records in by_segment.items():
            try:
                fd = os.open(self._path(number), os.O_RDONLY | O_CLOEXEC)
            except FileNotFoundError:   # compacted meanwhile: `read` follows each one
                for _offset, _length, index, seq in records:
                    results[index] = self._read_or_error(seq, whole)
                continue
            try:
                self._read_runs(fd, number, sorted(records), run_bytes, results, whole)
            finally:
                os.close(fd)
        return results

    def _read_runs(self, fd: int, number: int, records: list, run_bytes: int,
                   results: list, whole: bool = False) -> None:
        """Read `records` (offset, length, index, seq; by offset) of one segment, one
        pread per run of adjacent records, into `results`."""
        start = 0
        while start < len(records):
            first = records[start][0]
            end = start + 1
            reach = first + records[start][1]
            while (end < len(records) and records[end][0] == reach
                   and reach + records[end][1] - first <= run_bytes):
                reach += records[end][1]
                end += 1
            try:
                data = os.pread(fd, reach - first, first)
            except OSError as error:
                for _offset, _length, index, _seq in records[start:end]:
                    results[index] = error
            else:
                for offset, _length, index, seq in records[start:end]:
                    try:
                        results[index] = self._body_in(data, offset - first, seq, number,
                                                       offset, whole)
                    except StorageError as error:
                        results[index] = error
            start = end

    def _read_or_error(self, seq: int, whole: bool = False):
        try:
            if whole:
                return self.read_many([seq], whole=True)[0]
            return self.read(seq)
        except (KeyError, StorageError, OSError) as error:
            return error

    def _body_in(self, data: bytes, at: int, seq: int, number: int, offset: int,
                 whole: bool = False):
        """The body of message `seq` (with `whole`, its MessageFields) from its record
        at `at` in `data` (read from `offset` of segment `number`), checked."""
        parsed = parse_record(data, at)
        if parsed is None or parsed.kind != KIND_MESSAGE or parsed.seq != seq:
            raise StorageError(f"{self._path(number)}: offset {offset}: "
                               f"record of message {seq} is damaged")
        fields = decode_message(data, at, parsed.length)
        return fields if whole else fields.body

    def _discard_buffered(self) -> None:
        self._pending, self._pending_acks, self._pending_delivered = {}, [], {}

    def _forget(self) -> None:
        self._discard_buffered()
        self._index = SeqIndex()
        self._segments = {}

    def stats(self) -> dict:
        """Segment and index figures, for diagnostics and tests."""
        with self._sync_lock:
            with self._lock:
                return {
                    "segments": [(s.number, s.size, s.live, s.live_bytes)
                                 for s in self._segments.values()],
                    "active": self._active.number if self._active else None,
                    "indexed": len(self._index),
                    "pending": len(self._pending),
                    "pending_acks": len(self._pending_acks),
                    "last_seq": self._last_seq,
                    "durable_seq": self._durable_seq,
                }

    # -- writing --------------------------------------------------------------------------

    def _write_records(self, unsynced: "UnsyncedBatch") -> None:
        """Encode `unsynced`'s messages, acks and delivered marks and write them at the
        end of the active segment, not synced; note in `unsynced` what `finish_sync`
        applies to the index once they are durable."""
        index = self._index
        buffer = bytearray()
        written = unsynced.written          # (seq, relative offset, length, flags)
        for seq, (flags, exchange, routing_key, properties, body) in unsynced.batch.items():
            offset = len(buffer)
            length = append_message(buffer, seq, flags, exchange, routing_key, properties, body)
            written.append((seq, offset, length, flags))
        acked = unsynced.acked              # seq -> location, in ack order
        for seq in unsynced.acks:
            location = index.get(seq)
            if location is not None and seq not in acked:
                acked[seq] = location
                if location[3] & FLAG_PERSISTENT:
                    append_marker(buffer, KIND_ACK, seq)
        for seq in unsynced.delivered:
            location = index.get(seq)
            if (location is not None and location[3] & FLAG_PERSISTENT
                    and seq not in acked and seq not in self._delivered):
                unsynced.marked.append((seq, location))
                append_marker(buffer, KIND_DELIVERED, seq)
        segment = self._active
        if buffer:
            segment = self._writable_segment()
            unsynced.base = segment.size
            unsynced.end = self._append(segment, buffer, sync=False)
            assert segment.fd is not None       # (the active segment is open)
            unsynced.fd = os.dup(segment.fd)
        unsynced.segment = segment

    def _apply_written(self, unsynced: "UnsyncedBatch") -> None:
        """The records of `unsynced` are durable: index them, and count what they make
        live and dead."""
        index = self._index
        # What needs a segment here (records to index, the refs of tombstones and marks)
        # was written to one: it is None only when the batch wrote nothing.
        segment = cast(QueueSegment, unsynced.segment)
        written, acked = unsynced.written, unsynced.acked
        if written:     # batches are in seq order; acks and marks name older seqs
            self._high_seq = max(self._high_seq, written[-1][0])
        base = unsynced.base
        with self._lock:
            for seq, offset, length, flags in written:
                index[seq] = (segment.number, base + offset, length, flags)
            for seq in acked:
                del index[seq]
        for seq, _offset, length, _flags in written:
            segment.live += 1
            segment.live_bytes += length
            segment.cover(seq)
        segments = self._segments
        for seq, (number, _offset, length, flags) in acked.items():
            home = segments[number]
            home.live -= 1
            home.live_bytes -= length
            if home.live == 0:
                self._collect_due = True
            dups = self._dups.pop(seq, ())
            self._delivered.discard(seq)
            if flags & FLAG_PERSISTENT:
                self._add_ref(segment, number)
                for dup in dups:
                    self._add_ref(segment, dup)
        for seq, (number, *_rest) in unsynced.marked:
            self._delivered.add(seq)
            self._add_ref(segment, number)
            for dup in self._dups.get(seq, ()):
                self._add_ref(segment, dup)

    def _add_ref(self, segment: QueueSegment, target: int) -> None:
        if target != segment.number and target in self._segments:
            segment.refs[target] = segment.refs.get(target, 0) + 1

    def _writable_segment(self) -> QueueSegment:
        segment = self._active
        if segment is not None and segment.size < self.segment_size:
            return segment
        self._close_active()
        self._ensure_directory()
        segment = QueueSegment(self._next_segment)
        self._next_segment += 1
        path = self._path(segment.number)
        header = encode_segment_header(self._high_seq)
        segment.fd = create_segment_file(path, header)
        segment.dir_dirty = True
        self._collect_due = True        # the previous newest segment may be deletable now
        self.written_bytes += len(header)
        segment.size = len(header)
        self._segments[segment.number] = segment
        self._active = segment
        return segment

    def _write(self, segment: QueueSegment, buffer: bytearray) -> None:
        """Write `buffer` at the end of `segment` and make it (and the file) durable."""
        end = self._append(segment, buffer, sync=True)
        segment.dir_dirty = False
        self.written_bytes += end - segment.size
        segment.size = end
        self._step("synced")

    # -- deleting segments ----------------------------------------------------------------

    def _newest(self) -> int | None:
        return next(reversed(self._segments), None)

    def _unresolved(self, segment: QueueSegment) -> dict:
        """The refs of `segment` to segments that still exist (pruning the others)."""
        refs = segment.refs
        for target in [t for t in refs if t not in self._segments]:
            del refs[target]
        return refs

    def _collect_garbage(self) -> None:
        """Delete every segment that holds nothing needed any more.

        A segment goes when none of its messages is live, it is not the newest (whose
        header carries the queue's highest seq), and no segment it refers to (by acks or
        delivered marks) still exists. Deletions are made durable round by round, so a
        segment is never gone while an older one its acks refer to could come back.
        """
        if not self._collect_due:
            return
        self._collect_due = False
        while True:
            newest = self._newest()
            dead = [segment for number, segment in self._segments.items()
                    if number != newest and segment.live == 0
                    and not self._unresolved(segment)]
            if not dead:
                return
            for segment in dead:
                os.unlink(self._path(segment.number))
                del self._segments[segment.number]
                log.debug("event=segment_deleted path=%s", self._path(segment.number))
            fsync_directory(self.directory)

    # -- recovery -------------------------------------------------------------------------

    @classmethod
    def recover(cls, directory, segment_size: int = DEFAULT_SEGMENT_SIZE,
                compact_ratio: float = DEFAULT_COMPACT_RATIO, load_bodies: bool = True,
                ) -> tuple["QueueFile", list[RecoveredMessage], list[str]]:
        """Rebuild a queue from its directory after a restart or a crash.

        Returns the queue file (appends continue after `last_seq`), its live messages in
        seq order, and a description of every problem found (damaged records skipped,
        truncated or unreadable segments). A torn tail of the newest segment, the normal
        result of a crash mid-write, is cut off and is not a problem.
        """
        from .queue_file_recovery import replay     # (which builds on this module)
        queue_file = cls.__new__(cls)
        queue_file._setup(directory, segment_size, compact_ratio)
        messages, problems = replay(queue_file, load_bodies)
        for problem in problems:
            log.warning("event=recovery_problem %s", problem)
        return queue_file, messages, problems
