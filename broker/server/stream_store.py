"""A stream queue's store: its StreamLog, with the same commit protocol as the queue-file
store (appends touch memory only; the group committer syncs them off the event loop and
then calls `synced`, which lets consumers read what became durable).

Consumers' reads are served from chunks of records that the ReadPool's worker threads
read from the log (`StreamLog.read` is safe beside a running sync or retention): a read
the chunks cannot answer starts a background read and answers nothing; the queue's
`dispatch()` runs when the records arrive. While a consumer reads a chunk, the next one
is read ahead if there is more durable data. Consumers at or near the tail need no
read: the latest messages (at least those the latest commit made durable, and up to
TAIL_RECORDS, or about TAIL_BYTES of bodies) stay in memory.
"""

import bisect
import itertools
import logging
import time
from collections import OrderedDict, deque
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, Callable, NamedTuple

from broker.core.message import Message
from broker.core.persistence import Persistence
from broker.core.ports import DropStoreFiles
from broker.core.stream_arguments import StreamRetention
from storage.stream_log import DEFAULT_MAX_SEGMENT_BYTES, StreamLog

from .read_pool import ReadPool
from .store_ports import CommitStore, StreamStorePort

if TYPE_CHECKING:
    from broker.core.stream_queue import StreamQueue

log = logging.getLogger("warren.storage")

READ_COUNT = 256         # records per background read, at most ...
READ_BYTES = 1 << 20     # ... and about this many bytes of properties and bodies
MAX_CHUNKS = 8           # chunks kept per stream; the least recently used goes first
TAIL_RECORDS = 16_384    # the latest messages kept in memory for consumers at the tail,
TAIL_BYTES = 8 << 20     # ... or about this many bytes of bodies (judged at each commit
                         # by the size of the latest message: nothing is counted per append)
MIN_SEGMENT_BYTES = 1024   # smaller x-stream-max-segment-size-bytes values are raised
_offset_of = attrgetter("offset")
_new_tuple = tuple.__new__


class TailRecord(NamedTuple):
    """A message at the tail of a stream, as the queue reads records."""

    offset: int
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes


class DurableStreamStore(CommitStore, StreamStorePort):
    """Every message of a stream goes to its log, whatever its delivery mode."""

    __slots__ = ("log", "persistence", "store_id", "dropped", "clock", "queue", "reads",
                 "_chunks", "_reading", "_record_size", "_tail", "_tail_floor")

    kernel_sync_store = None    # a commit syncs a stream log in its worker thread

    def __init__(self, log: StreamLog, persistence: Persistence, store_id: str,
                 reads: ReadPool, clock: Callable[[], float] = time.time):
        self.log = log
        self.persistence = persistence
        self.store_id = store_id
        self.dropped = False
        self.clock = clock            # wall clock, seconds: interval starts count from it
        self.queue: StreamQueue | None = None   # told when appends become durable
        self.reads = reads            # the ReadPool (or a test's stand-in)
        # Records read: first offset asked for -> (end offset, records); reads in
        # flight: first offset -> count; the mean size of a record read, in bytes.
        self._chunks: OrderedDict[int, tuple[int, list]] = OrderedDict()
        self._reading: dict[int, int] = {}
        self._record_size = 1024
        # (offset, message) of the latest appends, and where the latest commit's
        # messages start (the tail keeps those whatever its size).
        self._tail: deque[tuple[int, Message]] = deque()
        self._tail_floor = log.durable_offset + 1

    @property
    def first_offset(self) -> int:
        return self.log.first_offset

    @property
    def next_offset(self) -> int:
        return self.log.next_offset

    @property
    def durable_offset(self) -> int:
        return self.log.durable_offset

    def consumer_offset(self, name: str) -> int | None:
        return self.log.consumer_offset(name)

    def offset_for_timestamp(self, seconds: float) -> int:
        return self.log.offset_for_timestamp(seconds)

    def read(self, offset: int, count: int) -> list:
        """Up to `count` durable records from `offset` on that are in memory now (see
        the module docstring)."""
        log_ = self.log
        offset = max(offset, log_.first_offset)
        durable_end = log_.durable_offset + 1
        if offset >= durable_end or self.dropped:
            return []
        tail = self._tail
        if tail and offset >= tail[0][0]:
            first = tail[0][0]
            return [_new_tuple(TailRecord, (at, message.exchange, message.routing_key,
                                            message.properties, message.body))
                    for at, message in itertools.islice(
                        tail, offset - first, min(offset + count, durable_end) - first)]
        start = self._chunk_at(offset)
        if start is None:
            self._fetch(offset, durable_end)
            return []
        chunks = self._chunks
        chunks.move_to_end(start)
        end, records = chunks[start]
        if end < durable_end:
            self._fetch(end, durable_end)       # the next chunk, before it is needed
        index = bisect.bisect_left(records, offset, key=_offset_of)
        return records[index:index + count]

    def _chunk_at(self, offset: int) -> int | None:
        """The start of the chunk holding `offset`, or None."""
        for start, (end, _records) in self._chunks.items():
            if start <= offset < end:
                return start
        return None

    def _fetch(self, offset: int, durable_end: int) -> None:
        """Start a background read from `offset`, unless one is on its way or done."""
        for start, count in self._reading.items():
            if start <= offset < start + count:
                return
        if self._chunk_at(offset) is not None:
            return
        count = min(READ_COUNT, max(16, READ_BYTES // self._record_size),
                    durable_end - offset)
        self._reading[offset] = count
        self.reads.submit(partial(self._read_records, offset, count),
                          partial(self._records_read, offset))

    def _read_records(self, offset: int, count: int):
        """(worker thread) The records, or the exception that stopped the read."""
        try:
            return self.log.read(offset, count, durable_only=True)
        except Exception as error:
            return error

    def _records_read(self, offset: int, result) -> None:
        """(event loop) A background read finished: keep its records, let the
        queue deliver them."""
        del self._reading[offset]
        if self.dropped:
            return
        if isinstance(result, Exception):
            log.error("event=stream_read_failed store=%s offset=%d error=%r",
                      self.store_id, offset, result)
            return
        if not result:
            return      # nothing readable there (damaged records were logged)
        size = sum(len(record.properties) + len(record.body) for record in result)
        self._record_size = max(1, size // len(result))
        chunks = self._chunks
        chunks[offset] = (result[-1].offset + 1, result)
        chunks.move_to_end(offset)
        if len(chunks) > MAX_CHUNKS:
            chunks.popitem(last=False)
        if self.queue is not None:
            self.queue.dispatch()

    def append(self, message) -> int:
        offset = self.log.append(message.exchange, message.routing_key,
                                 message.properties, message.body)
        if offset >= 0:
            self._tail.append((offset, message))
        self.persistence.store_written(self)
        return offset

    def store_consumer_offset(self, name: str, offset: int) -> None:
        self.log.store_consumer_offset(name, offset)
        self.persistence.store_touched(self)

    def offset_for_age(self, seconds: float) -> int:
        """The first offset published at most `seconds` ago."""
        return self.log.offset_for_timestamp(self.clock() - seconds)

    def synced(self) -> None:
        """Called on the event loop after a commit that synced this store: older
        messages leave the tail while it is over its size (not those this commit made
        durable: consumers at the tail read them next)."""
        tail = self._tail
        if tail:
            floor = self._tail_floor
            newest = tail[-1][1].body or b""    # (a stream's messages keep their body)
            keep = min(TAIL_RECORDS, TAIL_BYTES // (len(newest) + 1) + 1)
            while len(tail) > keep and tail[0][0] < floor:
                tail.popleft()
        self._tail_floor = self.log.durable_offset + 1
        if self.queue is not None and not self.dropped:
            self.queue.dispatch()

    def drop(self) -> None:
        """The stream is deleted: its files go once the deletion is committed."""
        self.dropped = True
        self._chunks.clear()
        self._tail.clear()
        self.persistence.record(DropStoreFiles(self))

    # -- blocking, in the committer's worker thread -----------------------------------

    @property
    def written_bytes(self) -> int:
        """Bytes ever written to its files (the disk alarm's accounting)."""
        return self.log.written_bytes

    def sync(self) -> int:
        return self.log.sync()

    def maintain(self) -> bool:
        """Retention: delete whole old segments beyond x-max-length-bytes/x-max-age.
        True with an age limit: segments age without writes, so look again next pass."""
        self.log.apply_retention()
        return self.log.max_age_seconds is not None

    def set_retention(self, retention: StreamRetention) -> None:
        """A policy changed the stream's limits: the next commit visits the store, so
        the maintenance after it applies them."""
        self.log.set_retention(**log_settings(retention))
        self.persistence.store_touched(self)

    def drop_files(self) -> None:
        self.log.drop()

    def close(self) -> None:
        self.log.close()


def log_settings(retention: StreamRetention) -> dict:
    """A StreamLog's limits for a stream's retention settings."""
    segment_bytes = retention.max_segment_bytes or DEFAULT_MAX_SEGMENT_BYTES
    return {"max_segment_bytes": max(segment_bytes, MIN_SEGMENT_BYTES),
            "max_bytes": retention.max_bytes,
            "max_age_seconds": retention.max_age_seconds}
