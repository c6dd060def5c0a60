"""``spark.readStream.format("amqp")`` on a plain queue: at-least-once micro-batches.

Where things run. Spark drives a Python data source's stream reader from one long-lived
Python process next to the driver (PySpark's streaming source runner): ``initialOffset``,
``read`` (through PySpark's prefetching wrapper of SimpleDataSourceStreamReader),
``commit`` and ``prepareForTriggerAvailableNow`` are all called there, one at a time, for
the lifetime of the query. The rows ``read`` returns are cached by the wrapper in that
process and shipped to the executors through Spark's block manager; ``readBetweenOffsets``
runs only when that cache misses, which happens after a restart, and then in an executor
Python worker holding a fresh, unconnected reader.

AMQP delivery tags belong to the channel that received the deliveries, so the reader
consumes, holds and acknowledges on one connection opened (lazily: the reader is pickled
and constructed several times) in the runner process:

* ``read(start)`` takes up to maxMessagesPerTrigger buffered deliveries (basic.consume
  with manual acks and prefetch), returns them as Arrow record batches and the end offset
  ``{run, seq}`` of the new micro-batch. The deliveries stay unacknowledged.
* A batch is acknowledged as soon as Spark's own records show it complete, with one
  basic.ack(multiple=true) for every batch of this run up to it. Two calls show that:
  ``read(start)`` for the batch after ``start`` (Spark's micro-batch engine plans batch
  N + 1 only after batch N ran and its entry was written to the checkpoint's commit log)
  and ``commit(end)`` (which comes later still, when batch N + 1 is written to the offset
  log). So an ``availableNow`` query acknowledges its last batch in the final
  ``read(start)`` that finds nothing left to read, and a running query acknowledges a
  batch when it next polls the queue (the default trigger polls at once).
* Nothing else acknowledges. When the query stops, fails or the driver dies, the
  connection closes and the broker requeues every unacknowledged delivery (redelivered =
  true): a batch that was not completed, and one that completed in the moment before a
  stop (before Spark polled again). Those are read again after a restart: at-least-once,
  with duplicates only around failures and stops.
* A batch that was planned but not completed before a restart is replayed by Spark
  through ``readBetweenOffsets`` with the old run's offsets. Its messages were never
  acknowledged and are back in the queue, so the replay returns no rows and the messages
  come again (marked redelivered) in the next batches: nothing is lost, and nothing is
  read twice within one completed batch.
"""

import logging
import uuid

from pyspark.sql.datasource import SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from .connection import AmqpConnectorError, QueueConsumer
from .messages import to_record_batches
from .offsets import QueueOffset, parse_offset
from .options import StreamReadOptions, redact_url

log = logging.getLogger("warren.spark")

# availableNow: how long one read may wait for messages the broker said were ready.
FILL_TIMEOUT = 30.0


class _PendingBatch:
    """A batch read but not yet acknowledged: its highest delivery tag and the
    consumer (connection) that received it."""

    __slots__ = ("last_tag", "consumer", "count")

    def __init__(self, last_tag: int, consumer: QueueConsumer, count: int):
        self.last_tag = last_tag
        self.consumer = consumer
        self.count = count


class AmqpStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream reader of one plain queue; see the module docstring for the protocol."""

    def __init__(self, options: StreamReadOptions):
        self.options = options
        self.run = uuid.uuid4().hex
        self._consumer = None
        self._pending = {}  # seq -> _PendingBatch, in ascending seq order
        self._last_seq = 0
        self._available_now_remaining = None  # set by prepareForTriggerAvailableNow

    # Pickling: the reader is constructed in the driver and sent to Python workers; a
    # connection never travels (there is none before the first read).
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_consumer"] = None
        state["_pending"] = {}
        return state

    def _live_consumer(self) -> QueueConsumer:
        consumer = self._consumer
        if consumer is not None and consumer.is_open:
            return consumer
        if consumer is not None:
            lost = sum(b.count for b in self._pending.values() if b.consumer is consumer)
            log.warning("event=amqp_reconnect queue=%r unacknowledged_requeued=%d",
                        self.options.queue, lost)
            consumer.close()
        consumer = QueueConsumer(self.options.url, self.options.queue, self.options.prefetch,
                                 purpose=f"stream reader of {self.options.queue}")
        consumer.start()
        self._consumer = consumer
        log.info("event=amqp_stream_reader_connected queue=%r url=%s run=%s prefetch=%d",
                 self.options.queue, redact_url(self.options.url), self.run,
                 self.options.prefetch)
        return consumer

    def initialOffset(self) -> dict:
        return QueueOffset(self.options.queue, self.run, 0).to_dict()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target of an availableNow query: the messages ready in the queue now
        (and any already delivered to this reader). Later arrivals are left for the next
        query."""
        consumer = self._live_consumer()
        ready = consumer.settle()
        self._available_now_remaining = ready + len(consumer.buffer)
        log.info("event=amqp_available_now queue=%r target=%d", self.options.queue,
                 self._available_now_remaining)

    def _take(self, limit: int) -> list:
        available_now = self._available_now_remaining is not None
        for attempt in (1, 2):
            consumer = self._live_consumer()
            try:
                if available_now:
                    consumer.fill(limit, FILL_TIMEOUT)
                else:
                    consumer.pump()
                return consumer.take(limit, self.options.max_bytes_per_trigger)
            except AmqpConnectorError:
                if attempt == 2:
                    raise
                # One reconnect: the deliveries of the lost connection are back in the
                # queue and arrive again on the new one.
        return []

    def read(self, start: dict):
        start_offset = parse_offset(start, self.options.queue)
        # Spark asks for the batch after `start` only once the batch ending there completed.
        self._acknowledge_through(start_offset)
        limit = self.options.max_messages_per_trigger
        if self._available_now_remaining is not None:
            limit = min(limit, self._available_now_remaining)
            if limit <= 0:
                return iter(()), start
        deliveries = self._take(limit)
        if not deliveries:
            if self._available_now_remaining is not None:
                # The queue is empty (someone else took the rest): the target is reached.
                self._available_now_remaining = 0
            return iter(()), start
        if self._available_now_remaining is not None:
            self._available_now_remaining -= len(deliveries)
        seq = max(start_offset.seq, self._last_seq) + 1
        self._last_seq = seq
        self._pending[seq] = _PendingBatch(deliveries[-1].tag, self._consumer, len(deliveries))
        end = QueueOffset(self.options.queue, self.run, seq)
        return iter(to_record_batches(deliveries, self.options.queue)), end.to_dict()

    def readBetweenOffsets(self, start: dict, end: dict):
        """Replay of a batch after a restart (called in an executor, see the module
        docstring). Its messages were not acknowledged, so the broker requeued them when
        the previous run's connection closed; they are read again in later batches."""
        parse_offset(end, self.options.queue)
        log.info("event=amqp_replay_empty queue=%r start=%r end=%r", self.options.queue,
                 start, end)
        return iter(())

    def commit(self, end: dict) -> None:
        self._acknowledge_through(parse_offset(end, self.options.queue))

    def _acknowledge_through(self, offset: QueueOffset) -> None:
        """Acknowledge every batch of this run up to `offset`, which Spark has completed."""
        if offset.run != self.run:
            # A batch of a previous run (the last one before a restart): this reader has
            # no tags for it; the broker requeued its messages when that run stopped.
            return
        done = [seq for seq in self._pending if seq <= offset.seq]
        if not done:
            return
        batches = [self._pending.pop(seq) for seq in done]
        consumer = self._consumer
        live = [b for b in batches if b.consumer is consumer]
        lost = sum(b.count for b in batches if b.consumer is not consumer)
        if lost:
            log.warning("event=amqp_commit_after_reconnect queue=%r requeued=%d",
                        self.options.queue, lost)
        if not live:
            return
        try:
            consumer.ack_through(max(b.last_tag for b in live))
        except AmqpConnectorError as error:
            # The connection died: the broker requeues the batch; it will be read again.
            log.warning("event=amqp_ack_failed queue=%r messages=%d error=%s",
                        self.options.queue, sum(b.count for b in live), error)

    def stop(self) -> None:
        """Close the connection; unacknowledged deliveries go back to the queue.

        (PySpark's wrapper does not forward stop() to simple readers; the runner process
        exits when the query stops, which closes the connection just the same.)
        """
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
