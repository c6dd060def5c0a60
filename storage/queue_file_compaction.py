"""Queue-file compaction: a segment that is mostly dead has what it still holds that
matters (live messages, and the acks and delivered marks that refer to segments that
still exist) copied into the active segment, and is then deleted (`QueueFile.compact`
runs it on the flusher side, under its sync lock).

Crash-safe: the copies are fsynced before the source is unlinked, and recovery dedupes
the two copies of a message by seq (queue_file_recovery.py).
"""

import logging
import os
from typing import TYPE_CHECKING

from .record import (FLAG_REDELIVERED, KIND_ACK, KIND_DELIVERED, KIND_MESSAGE,
                     RECORD_HEADER_SIZE, SEGMENT_HEADER_SIZE, append_marker,
                     decode_segment_header, scan_segment, with_flags)
from .segment_file import fsync_directory, read_file

if TYPE_CHECKING:
    from .queue_file import QueueFile, QueueSegment

log = logging.getLogger("warren.storage")


def compaction_candidate(queue_file: "QueueFile") -> "QueueSegment | None":
    """The first segment (oldest first) worth compacting: not the newest nor the active
    one, undamaged, and what it still holds that matters is below `compact_ratio` of it."""
    newest = queue_file._newest()
    for number, segment in queue_file._segments.items():
        if number == newest or segment.damaged or segment is queue_file._active:
            continue
        content = segment.size - SEGMENT_HEADER_SIZE
        if content <= 0:
            continue
        refs = queue_file._unresolved(segment)
        if segment.live == 0 and not refs:
            continue    # garbage collection deletes it without copying
        keep = segment.live_bytes + RECORD_HEADER_SIZE * sum(refs.values())
        if keep < queue_file.compact_ratio * content:
            return segment
    return None


def compact_segment(queue_file: "QueueFile", source: "QueueSegment") -> bool:
    """Copy what `source` still holds that matters into the active segment, then
    delete it. Crash-safe: the copies are fsynced before the source is unlinked, and
    recovery dedupes the two copies of a message by seq."""
    path = queue_file._path(source.number)
    data = read_file(path)
    scan = scan_segment(data)
    if scan.corrupt or scan.tail or decode_segment_header(data) is None:
        source.damaged = True
        log.warning("event=compaction_skipped path=%s reason=damaged_segment", path)
        return False
    index = queue_file._index
    segments = queue_file._segments
    number = source.number
    targets = [segments[t] for t in queue_file._unresolved(source)]
    buffer = bytearray()
    moved = []              # (seq, relative offset, length, flags)
    forwarded = []          # (seq, [segments the copied ack/delivered record refers to])
    for record in scan.records:
        seq = record.seq
        if record.kind == KIND_MESSAGE:
            location = index.get(seq)
            if location is None or location[0] != number or location[1] != record.offset:
                continue        # acked, or a stale duplicate of a copy made elsewhere
            flags = record.flags | (FLAG_REDELIVERED if seq in queue_file._delivered else 0)
            raw = data[record.offset:record.offset + record.length]
            if flags != record.flags:
                raw = with_flags(raw, flags)
            moved.append((seq, len(buffer), record.length, flags))
            buffer += raw
        elif record.kind == KIND_ACK:
            refers = [t.number for t in targets if t.holds(seq)]
            if refers:
                append_marker(buffer, KIND_ACK, seq)
                forwarded.append(refers)
        else:
            location = index.get(seq)
            if location is not None and location[0] != number:
                append_marker(buffer, KIND_DELIVERED, seq)
                forwarded.append([location[0], *queue_file._dups.get(seq, ())])
    if buffer:
        active = queue_file._writable_segment()
        base = active.size
        queue_file._write(active, buffer)
        queue_file._step("compact:copied")
        with queue_file._lock:
            for seq, offset, length, flags in moved:
                index[seq] = (active.number, base + offset, length, flags)
        for seq, _offset, length, _flags in moved:
            active.live += 1
            active.live_bytes += length
            active.cover(seq)
        for refers in forwarded:
            for target in refers:
                queue_file._add_ref(active, target)
    source.live = 0
    source.live_bytes = 0
    source.refs.clear()
    os.unlink(path)
    del segments[number]
    queue_file._step("compact:unlinked")
    fsync_directory(queue_file.directory)
    queue_file._collect_due = True
    log.info("event=segment_compacted path=%s moved=%d forwarded=%d",
             path, len(moved), len(forwarded))
    return True
