"""Queue-file recovery: rebuilding a `QueueFile`'s state from its segment files after a
restart or a crash (`QueueFile.recover` runs it).

Every segment is read and scanned, oldest first. A message's newest copy is its home
(compaction leaves older copies behind until their segment goes); an ack record
(tombstone) drops it, a delivered record makes it come back redelivered; transient
records (paging only) are not recovered. A torn tail of the newest segment, the normal
result of a crash mid-write, is cut off; damage anywhere else is reported as a problem
and skipped. The format is in docs/storage-format.md.
"""

import logging
import os
from functools import lru_cache

from .names import decode_name
from .queue_file import QueueFile, QueueSegment, RecoveredMessage
from .record import (FLAG_DEAD_LETTERED, FLAG_PERSISTENT, FLAG_REDELIVERED, KIND_ACK,
                     KIND_MESSAGE, SEGMENT_HEADER_SIZE, MessageFields, decode_message,
                     decode_segment_header, scan_segment)
from .segment_file import read_file, segment_numbers, settle_damage

log = logging.getLogger("warren.storage")

Location = tuple[int, int, int, int]    # (segment, offset, length, flags) of a record


class _AlikeFields:
    """Consecutive records alike share their exchange, routing key and property block
    objects: a deep backlog of similar messages is recovered without a copy of each per
    message."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: MessageFields | None = None

    def shared(self, fields: MessageFields) -> MessageFields:
        last = self._last
        if last is None:
            self._last = fields
            return fields
        exchange, routing_key, properties, body, body_size = fields
        fields = MessageFields(
            last.exchange if exchange == last.exchange else exchange,
            last.routing_key if routing_key == last.routing_key else routing_key,
            last.properties if properties == last.properties else properties,
            body, body_size)
        self._last = fields
        return fields


class _Replay:
    """What the records of the segments say, read oldest segment first."""

    def __init__(self, queue_file: QueueFile, load_bodies: bool):
        self.queue_file = queue_file
        self.load_bodies = load_bodies
        self.problems: list[str] = []
        self.homes: dict[int, Location] = {}    # seq -> where its newest copy is
        self.older: dict[int, list[int]] = {}   # seq -> segments holding older copies
        self.fields: dict[int, MessageFields] = {}  # seq -> fields of its newest copy
        self.alike = _AlikeFields()
        self.acked: set[int] = set()
        self.marked: set[int] = set()
        self.acks_in: dict[int, list[int]] = {}     # segment -> seqs acked by its records
        self.marks_in: dict[int, list[int]] = {}
        self.high = 0

    def read_segment(self, number: int, newest: bool) -> QueueSegment | None:
        """The segment `number` as its file says (None: removed, it held nothing)."""
        path = self.queue_file._path(number)
        data = read_file(path)
        segment = QueueSegment(number)
        base_seq = decode_segment_header(data)
        scan = scan_segment(data) if len(data) > SEGMENT_HEADER_SIZE else None
        problems = self.problems
        if base_seq is None:
            if scan is None or not scan.records:
                os.unlink(path)
                if not newest:
                    problems.append(f"{path}: no valid header and no records; removed")
                else:
                    log.info("event=torn_segment_removed path=%s bytes=%d",
                             path, len(data))
                return None
            problems.append(f"{path}: segment header damaged; records read anyway")
        else:
            self.high = max(self.high, base_seq)
        segment.size = len(data)
        if scan is not None:
            segment.size = settle_damage(path, len(data), scan.corrupt, scan.tail, newest,
                                         "offset", "bad length or checksum", problems)
            segment.damaged = bool(scan.corrupt) or (
                scan.tail is not None and segment.size != scan.tail[0])
            self._read_records(segment, data, scan.records)
        if base_seq is None:
            segment.damaged = True
        return segment

    def _read_records(self, segment: QueueSegment, data: bytes, records: list) -> None:
        number = segment.number
        homes, older, fields, acked = self.homes, self.older, self.fields, self.acked
        high = self.high
        for record in records:
            seq = record.seq
            if seq > high:
                high = seq
            if record.kind == KIND_MESSAGE:
                previous = homes.get(seq)
                if previous is not None:
                    older.setdefault(seq, []).append(previous[0])
                homes[seq] = (number, record.offset, record.length, record.flags)
                segment.cover(seq)
                if record.flags & FLAG_PERSISTENT and seq not in acked:
                    fields[seq] = self.alike.shared(decode_message(
                        data, record.offset, record.length, self.load_bodies))
            elif record.kind == KIND_ACK:
                acked.add(seq)
                fields.pop(seq, None)
                self.acks_in.setdefault(number, []).append(seq)
            else:
                self.marked.add(seq)
                self.marks_in.setdefault(number, []).append(seq)
        self.high = high

    def live_messages(self) -> list[RecoveredMessage]:
        """Index the live messages (in seq order) and count them in their segments."""
        queue_file = self.queue_file
        segments = queue_file._segments
        messages = []
        name = lru_cache(maxsize=256)(decode_name)   # one str per name, not per message
        for seq in sorted(self.fields):
            home = self.homes[seq]
            number, _offset, length, flags = home
            queue_file._index[seq] = home
            segment = segments[number]
            segment.live += 1
            segment.live_bytes += length
            dups = [copy for copy in self.older.get(seq, ()) if copy != number]
            if dups:
                queue_file._dups[seq] = dups
            redelivered = bool(flags & FLAG_REDELIVERED) or seq in self.marked
            if redelivered:
                queue_file._delivered.add(seq)
            exchange, routing_key, properties, body, body_size = self.fields[seq]
            messages.append(RecoveredMessage(seq, name(exchange), name(routing_key),
                                             properties, body, redelivered, body_size,
                                             bool(flags & FLAG_DEAD_LETTERED)))
        return messages

    def add_refs(self) -> None:
        """Each segment refers to the segments holding the messages its acks name, and
        those of the live messages its delivered marks name."""
        queue_file = self.queue_file
        segments = queue_file._segments
        for number, seqs in self.acks_in.items():
            segment = segments[number]
            for seq in seqs:
                for copy in self._copies(seq):
                    queue_file._add_ref(segment, copy)
        for number, seqs in self.marks_in.items():
            segment = segments[number]
            for seq in seqs:
                if seq in queue_file._index:
                    for copy in self._copies(seq):
                        queue_file._add_ref(segment, copy)

    def _copies(self, seq: int) -> list[int]:
        """The segments holding a copy of message `seq`, oldest first."""
        home = self.homes.get(seq)
        return [] if home is None else [*self.older.get(seq, ()), home[0]]


def replay(queue_file: QueueFile, load_bodies: bool
           ) -> tuple[list[RecoveredMessage], list[str]]:
    """Fill the freshly set up `queue_file` from its directory; its live messages in seq
    order, and a description of every problem found."""
    numbers = segment_numbers(queue_file.directory)
    queue_file._directory_exists = os.path.isdir(queue_file.directory)
    found = _Replay(queue_file, load_bodies)
    for number in numbers:
        segment = found.read_segment(number, number == numbers[-1])
        if segment is not None:
            queue_file._segments[number] = segment
    messages = found.live_messages()
    found.add_refs()
    queue_file._high_seq = queue_file._last_seq = queue_file._durable_seq = found.high
    queue_file._next_segment = (numbers[-1] + 1) if numbers else 1
    queue_file._collect_due = True
    queue_file._collect_garbage()
    return messages, found.problems
