"""``spark.readStream.format("amqp")`` on stream queues: exactly-once offset ranges.

Selected by the ``startingOffset`` option (or ``startingTimestamp``). The ``queue``
option names one stream or several, separated by commas. This is a full
``DataSourceStreamReader``:

* Offsets are positions in the streams: ``{"version": 1, "kind": "stream", "offsets":
  {"s1": 120, "s2": 80}}`` means "the next message to read is offset 120 of s1 and 80 of
  s2" (offsets.py).
* In the driver (PySpark's streaming source runner process), ``initialOffset`` resolves
  startingOffset (first, last, next or a number) to absolute offsets, once, when the
  query starts without a checkpoint; ``latestOffset(start, limit)`` finds each stream's
  tail (StreamProbe) and returns start + what is available, within the read limit
  (maxMessagesPerTrigger, shared fairly between the streams);
  ``prepareForTriggerAvailableNow`` fixes the tails of an availableNow query;
  ``partitions(start, end)`` cuts each stream's range [start, end) into ranges of at
  most maxMessagesPerPartition offsets. The driver reads no messages.
* In executors, ``read(partition)`` consumes exactly its range: Basic.Qos prefetch,
  Basic.Consume with x-stream-offset=start and (Warren) x-stream-end-offset=end,
  multiple acks for credit, stop at offset end - 1 or at the broker's cancel
  (StreamRangeConsumer). Reading the same range again yields the same rows. Offsets of
  the range that retention deleted fail the task (failOnDataLoss, the default) or are
  skipped.
* With the ``filter`` option only the messages it matches become rows (stream_client.py,
  ``StreamFilter``); offsets, batches and ranges still count every message.
* ``commit`` does nothing: acknowledgements on a stream only return credit, and the
  position lives in Spark's checkpoint.

So a batch that is re-run after a failure reads the same messages, and with a sink that
is idempotent per batch (the file sink, foreachBatch keyed by batch id, Delta, ...) the
output has every message exactly once.
"""

import datetime
import logging
import math
import time

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadMaxRows, SupportsTriggerAvailableNow,
)

from .connection import AmqpConnectorError
from .gc_pause import cyclic_gc_paused
from .messages import to_record_batches
from .offsets import StreamOffset, parse_stream_offset
from .options import StreamQueueReadOptions
from .stream_client import NotAStreamError, StreamFilter, StreamProbe, StreamRangeConsumer

log = logging.getLogger("warren.spark")

# latestOffset is called in a loop while a query is idle; the tails found are reused for
# this long (an older tail is never wrong, only later).
MIN_PROBE_INTERVAL = 0.1


class StreamRange(InputPartition):
    """One Spark task: offsets [start, end) of stream `queue`."""

    def __init__(self, queue: str, start: int, end: int):
        self.queue = queue
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"StreamRange({self.queue!r}, {self.start}, {self.end})"

    def __eq__(self, other) -> bool:
        return (isinstance(other, StreamRange)
                and (self.queue, self.start, self.end) == (other.queue, other.start, other.end))


def share(available: dict, budget) -> dict:
    """How many messages to take from each stream: everything when `budget` is None,
    otherwise at most `budget` in all, split evenly between the streams that have
    messages (a stream with fewer leaves its part to the others). Deterministic."""
    if budget is None:
        return dict(available)
    take = {stream: 0 for stream in available}
    active = [stream for stream in sorted(available) if available[stream] > 0]
    remaining = budget
    while remaining > 0 and active:
        part = max(1, remaining // len(active))
        for stream in list(active):
            count = min(part, available[stream] - take[stream], remaining)
            take[stream] += count
            remaining -= count
            if take[stream] == available[stream]:
                active.remove(stream)
            if remaining == 0:
                break
    return take


def split_ranges(start: dict, end: dict, per_partition: int) -> list:
    """StreamRanges covering [start, end) of every stream, each at most `per_partition`
    offsets, of nearly equal size."""
    ranges = []
    for stream in sorted(end):
        low, high = start[stream], end[stream]
        if high <= low:
            continue
        count = math.ceil((high - low) / per_partition)
        size = math.ceil((high - low) / count)
        ranges.extend(StreamRange(stream, at, min(at + size, high))
                      for at in range(low, high, size))
    return ranges


class AmqpStreamQueueReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Exactly-once reader of one or more stream queues; see the module docstring."""

    def __init__(self, options: StreamQueueReadOptions):
        self.options = options
        self._probe = None
        self._initial = None  # the resolved initial offset (dict), once computed
        self._target = None  # availableNow: stream -> tail when the query started
        self._tails = {}  # stream -> highest tail found so far
        self._probed_at = None

    # The reader is pickled to executors (read); a connection never travels.
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_probe"] = None
        return state

    # --- driver side: offsets ---------------------------------------------------------

    def _stream_probe(self) -> StreamProbe:
        if self._probe is None:
            self._probe = StreamProbe(
                self.options.url, purpose=f"stream offsets of {','.join(self.options.streams)}")
        return self._probe

    def _call(self, method, stream: str, *arguments):
        """probe.method(stream, *arguments), with one reconnect after a lost connection."""
        for attempt in (1, 2):
            try:
                return getattr(self._stream_probe(), method)(stream, *arguments)
            except NotAStreamError:
                raise
            except AmqpConnectorError:
                self._stream_probe().close()
                if attempt == 2:
                    raise
        return None

    def _refresh_tails(self, required: bool = False) -> dict:
        """Every stream's tail: probed (at most every MIN_PROBE_INTERVAL), never lower than
        a tail found before. A stream whose tail could not be found keeps its last one
        (none yet: an error if `required`, else it is left out)."""
        now = time.monotonic()
        if (self._probed_at is None or now - self._probed_at >= MIN_PROBE_INTERVAL
                or len(self._tails) < len(self.options.streams)):
            for stream in self.options.streams:
                tail = self._call("tail", stream)
                if tail is not None:
                    self._tails[stream] = max(tail, self._tails.get(stream, 0))
                elif stream not in self._tails:
                    log.warning("event=amqp_stream_tail_unknown stream=%r", stream)
            self._probed_at = time.monotonic()
        if required:
            missing = [s for s in self.options.streams if s not in self._tails]
            if missing:
                raise AmqpConnectorError(
                    f"could not find the end of stream(s) {missing}: the broker reported "
                    f"messages but delivered none from 'last' in time")
        return dict(self._tails)

    def _resolve(self, stream: str, tails: dict) -> int:
        start = self.options.starting_offset
        if isinstance(start, int):
            return start
        if isinstance(start, tuple):  # ("timestamp", milliseconds since the epoch)
            # x-stream-offset takes an AMQP timestamp: whole seconds (of this second on).
            moment = datetime.datetime.fromtimestamp(start[1] // 1000, datetime.timezone.utc)
            found = self._call("at_timestamp", stream, moment)
            return tails[stream] if found is None else found
        if start == "first":
            head = self._call("head", stream)
            return 0 if head is None else head
        tail = tails[stream]
        if start == "next":
            return tail
        return max(0, tail - 1)  # "last": the newest message (the next one if empty)

    def initialOffset(self) -> dict:
        if self._initial is None:
            start = self.options.starting_offset
            tails = {} if isinstance(start, int) or start == "first" \
                else self._refresh_tails(required=True)
            offsets = {stream: self._resolve(stream, tails) for stream in self.options.streams}
            marker = "timestamp" if isinstance(start, tuple) \
                else start if start in ("next", "last") else None
            self._initial = StreamOffset.of(offsets, marker).to_dict()
            log.info("event=amqp_stream_initial_offset startingOffset=%r offset=%s", start,
                     self._initial)
        return self._initial

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.options.max_messages_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._refresh_tails(required=True)
        log.info("event=amqp_stream_available_now target=%s", self._target)

    def latestOffset(self, start: dict, limit) -> dict:
        positions = parse_stream_offset(start, self.options.streams).as_dict()
        tails = self._refresh_tails()
        if self._target is not None:
            tails = {s: min(t, self._target[s]) for s, t in tails.items()}
        available = {s: max(0, tails.get(s, positions[s]) - positions[s]) for s in positions}
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        take = share(available, budget)
        # Always without the "start" marker: the first batch of a query that resolved
        # next/last runs (possibly empty) and puts the resolved offsets in the checkpoint.
        return StreamOffset.of({s: positions[s] + take[s] for s in positions}).to_dict()

    def reportLatestOffset(self):
        if len(self._tails) < len(self.options.streams):
            return None
        return StreamOffset.of(self._tails).to_dict()

    def partitions(self, start: dict, end: dict):
        low = parse_stream_offset(start, self.options.streams).as_dict()
        high = parse_stream_offset(end, self.options.streams).as_dict()
        return split_ranges(low, high, self.options.max_messages_per_partition)

    def commit(self, end: dict) -> None:
        # Nothing to acknowledge: a stream keeps its messages, and the position is the
        # offset Spark has checkpointed.
        parse_stream_offset(end, self.options.streams)

    def stop(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None

    # --- executor side: one range per task --------------------------------------------

    def read(self, partition: StreamRange):
        options = self.options
        wanted = (StreamFilter(options.filter_values, options.match_unfiltered)
                  if options.filter_values else None)
        consumer = StreamRangeConsumer(options.url, partition.queue, partition.start,
                                       partition.end, options.prefetch,
                                       fail_on_data_loss=options.fail_on_data_loss,
                                       wanted=wanted)
        rows = 0
        batches = consumer.batches()
        try:
            while True:
                with cyclic_gc_paused():  # not while Spark takes the rows
                    deliveries = next(batches, None)
                    if deliveries is None:
                        break
                    record_batches = to_record_batches(deliveries, partition.queue)
                rows += len(deliveries)
                del deliveries
                yield from record_batches
        finally:
            consumer.close()
        log.info("event=amqp_stream_range_read stream=%r start=%d end=%d rows=%d lost=%d",
                 partition.queue, partition.start, partition.end, rows, consumer.lost)
