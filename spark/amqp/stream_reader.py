"""``spark.readStream.format("amqp")`` on plain queues: at-least-once micro-batches.

Where things run. Spark drives a Python data source's stream reader from one long-lived
Python process next to the driver (PySpark's streaming source runner): ``initialOffset``,
``read`` (through PySpark's prefetching wrapper of SimpleDataSourceStreamReader),
``commit`` and ``prepareForTriggerAvailableNow`` are all called there, one at a time, for
the lifetime of the query. The rows ``read`` returns are cached by the wrapper in that
process and shipped to the executors through Spark's block manager; ``readBetweenOffsets``
runs only when that cache misses, which happens after a restart, and then in an executor
Python worker holding a fresh, unconnected reader.

AMQP delivery tags belong to the channel that received the deliveries, so the reader
consumes, holds and acknowledges in the runner process, on one connection per queue
(``queue=a,b,c`` reads several queues, each with its own consumer and I/O thread),
opened lazily (the reader is pickled and constructed several times):

* ``read(start)`` takes up to maxMessagesPerTrigger buffered deliveries (basic.consume
  with manual acks and prefetch; with several queues, an even share from each), returns
  them as Arrow record batches and the end offset ``{run, seq}`` of the new micro-batch.
  The deliveries stay unacknowledged.
* A batch is acknowledged as soon as Spark's own records show it complete, with one
  basic.ack(multiple=true) per queue for every batch of this run up to it. Two calls show that:
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
from .gc_pause import cyclic_gc_paused
from .messages import to_record_batches, warm_up_arrow_in_background
from .offsets import QueueOffset, parse_offset
from .options import StreamReadOptions, redact_url

log = logging.getLogger("warren.spark")

# availableNow: how long one read may wait for messages the broker said were ready.
FILL_TIMEOUT = 30.0
# The first batch of a reader takes at most this many messages: Spark's first batch in a
# session costs seconds whatever its size (code generation, first Python workers), and
# a full batch adds the time to receive and convert maxMessagesPerTrigger rows before
# any row is committed. The next batches take the full maxMessagesPerTrigger.
FIRST_BATCH_MESSAGES = 1_000


class _PendingBatch:
    """A batch read but not yet acknowledged: per queue, the consumer (connection) that
    received its deliveries and the highest delivery tag among them."""

    __slots__ = ("tags", "count")

    def __init__(self, tags: dict, count: int):
        self.tags = tags  # queue -> (QueueConsumer, last tag)
        self.count = count


class AmqpStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream reader of one or more plain queues (one consumer, with its own connection
    and I/O thread, per queue); see the module docstring for the protocol."""

    def __init__(self, options: StreamReadOptions):
        self.options = options
        self.run = uuid.uuid4().hex
        self._consumers = {}  # queue -> QueueConsumer
        self._pending = {}  # seq -> _PendingBatch, in ascending seq order
        self._last_seq = 0
        self._batches_read = 0
        self._available_now_remaining = None  # queue -> count, by prepareForTriggerAvailableNow

    # Pickling: the reader is constructed in the driver and sent to Python workers; a
    # connection never travels (there is none before the first read).
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_consumers"] = {}
        state["_pending"] = {}
        return state

    def _live_consumer(self, queue: str) -> QueueConsumer:
        consumer = self._consumers.get(queue)
        if consumer is not None and consumer.is_open:
            return consumer
        return self._new_consumer(queue)[0]

    def _new_consumer(self, queue: str) -> tuple:
        """A consumer of `queue` on a new connection (replacing a lost one), and the
        queue's ready-message count from just before its Basic.Consume."""
        consumer = self._consumers.get(queue)
        if consumer is not None:
            lost = sum(b.count for b in self._pending.values()
                       if b.tags.get(queue, (None,))[0] is consumer)
            log.warning("event=amqp_reconnect queue=%r unacknowledged_requeued=%d", queue, lost)
            consumer.close()
        if not self._consumers:
            warm_up_arrow_in_background()
        consumer = QueueConsumer(self.options.url, queue, self.options.prefetch,
                                 purpose=f"stream reader of {queue}")
        ready = consumer.open()
        consumer.consume()
        self._consumers[queue] = consumer
        log.info("event=amqp_stream_reader_connected queue=%r url=%s run=%s prefetch=%d",
                 queue, redact_url(self.options.url), self.run, self.options.prefetch)
        return consumer, ready

    def initialOffset(self) -> dict:
        return QueueOffset(self.options.queue, self.run, 0).to_dict()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target of an availableNow query: per queue, the messages ready in it
        now (and any already delivered to this reader). Later arrivals are left for the
        next query."""
        remaining = {}
        for queue in self.options.queues:
            consumer = self._consumers.get(queue)
            if consumer is not None and consumer.is_open:
                remaining[queue] = consumer.settle() + len(consumer.buffer)
            else:
                # Counted before Basic.Consume, when nothing is delivered yet: counting
                # after it would first wait for a whole prefetch window of deliveries
                # (up to 60,000 by default, a second or more before the first trigger).
                _, remaining[queue] = self._new_consumer(queue)
        self._available_now_remaining = remaining
        log.info("event=amqp_available_now queue=%r target=%d", self.options.queue,
                 sum(remaining.values()))

    def _take_from(self, queue: str, limit: int, max_bytes: int | None,
                   at_least_one: bool) -> list:
        available_now = self._available_now_remaining is not None
        for attempt in (1, 2):
            consumer = self._live_consumer(queue)
            try:
                if available_now:
                    consumer.fill(limit, FILL_TIMEOUT)
                else:
                    consumer.pump()
                return consumer.take(limit, max_bytes, at_least_one)
            except AmqpConnectorError:
                if attempt == 2:
                    raise
                # One reconnect: the deliveries of the lost connection are back in the
                # queue and arrive again on the new one.
        return []

    def _take(self) -> dict:
        """The next batch's deliveries, by queue (queues without any left out): at most
        maxMessagesPerTrigger in all (the first batch: FIRST_BATCH_MESSAGES), shared
        evenly between the queues (what one leaves unused goes to the next ones), and at
        most maxBytesPerTrigger of bodies; with availableNow, at most what is left of
        each queue's target."""
        remaining = self._available_now_remaining
        left = self.options.max_messages_per_trigger
        if not self._batches_read:
            left = min(left, FIRST_BATCH_MESSAGES)
        budget = self.options.max_bytes_per_trigger
        queues = self.options.queues
        taken = {}
        for index, queue in enumerate(queues):
            limit = -(-left // (len(queues) - index))
            if remaining is not None:
                limit = min(limit, remaining[queue])
            if limit <= 0 or (budget is not None and budget <= 0):
                continue
            first = not taken
            deliveries = self._take_from(queue, limit, budget, at_least_one=first)
            if remaining is not None:
                # Nothing although a message was allowed: the queue ran empty (someone
                # else took the rest), so its target is reached.
                emptied = not deliveries and (budget is None or first)
                remaining[queue] = 0 if emptied else remaining[queue] - len(deliveries)
            if deliveries:
                taken[queue] = deliveries
                left -= len(deliveries)
                if budget is not None:
                    budget -= sum(len(d.body) for d in deliveries)
        return taken

    def read(self, start: dict):
        start_offset = parse_offset(start, self.options.queue)
        # Spark asks for the batch after `start` only once the batch ending there completed.
        self._acknowledge_through(start_offset)
        with cyclic_gc_paused():
            return self._read_after(start, start_offset)

    def _read_after(self, start: dict, start_offset: QueueOffset):
        """read's batch after `start`: the deliveries taken and their record batches."""
        taken = self._take()
        if not taken:
            return iter(()), start
        seq = max(start_offset.seq, self._last_seq) + 1
        self._last_seq = seq
        self._batches_read += 1
        self._pending[seq] = _PendingBatch(
            {queue: (self._consumers[queue], deliveries[-1].tag)
             for queue, deliveries in taken.items()},
            sum(len(deliveries) for deliveries in taken.values()))
        end = QueueOffset(self.options.queue, self.run, seq)
        batches = [batch for queue, deliveries in taken.items()
                   for batch in to_record_batches(deliveries, queue)]
        return iter(batches), end.to_dict()

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
        """Acknowledge every batch of this run up to `offset`, which Spark has completed:
        one basic.ack(multiple=true) per queue, on the connection that received them."""
        if offset.run != self.run:
            # A batch of a previous run (the last one before a restart): this reader has
            # no tags for it; the broker requeued its messages when that run stopped.
            return
        done = [seq for seq in self._pending if seq <= offset.seq]
        batches = [self._pending.pop(seq) for seq in done]
        for queue in self.options.queues:
            tags = [b.tags[queue] for b in batches if queue in b.tags]
            if tags:
                self._acknowledge_queue(queue, tags)

    def _acknowledge_queue(self, queue: str, tags: list) -> None:
        """Acknowledge, on `queue`'s current connection, the highest of `tags` ((consumer,
        tag) pairs) that this connection received; tags of a lost connection are void."""
        consumer = self._consumers.get(queue)
        live = [tag for received_by, tag in tags if received_by is consumer]
        if len(live) < len(tags):
            log.warning("event=amqp_commit_after_reconnect queue=%r batches_requeued=%d",
                        queue, len(tags) - len(live))
        if not live:
            return
        try:
            consumer.ack_through(max(live))
        except AmqpConnectorError as error:
            # The connection died: the broker requeues the batch; it will be read again.
            log.warning("event=amqp_ack_failed queue=%r error=%s", queue, error)

    def stop(self) -> None:
        """Close the connections; unacknowledged deliveries go back to the queues.

        (PySpark's wrapper does not forward stop() to simple readers; the runner process
        exits when the query stops, which closes the connections just the same.)
        """
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers = {}
