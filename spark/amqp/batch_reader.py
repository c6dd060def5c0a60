"""``spark.read.format("amqp")``: drain messages from a queue into a DataFrame.

Reading a plain AMQP queue is destructive: the read consumes the messages. The read runs
as one Spark task (one partition) in an executor. It counts the messages ready in the
queue when it starts, consumes that many (at most maxMessages) with manual
acknowledgements, hands them to Spark, and acknowledges them all (one basic.ack with
multiple=true) once Spark has taken the last row. If the task fails or Spark stops
reading early, the connection closes without an acknowledgement and the broker requeues
every message the read took.

Every action on the DataFrame runs the read again and takes further messages: cache or
persist the DataFrame if it is used more than once.
"""

import logging

from pyspark.sql.datasource import DataSourceReader, InputPartition

from .connection import QueueConsumer
from .gc_pause import cyclic_gc_paused
from .messages import to_record_batches
from .options import MAX_PREFETCH, BatchReadOptions

log = logging.getLogger("warren.spark")

# How long the read may wait for messages the broker said were ready.
FILL_TIMEOUT = 60.0


class AmqpBatchReader(DataSourceReader):
    def __init__(self, options: BatchReadOptions):
        self.options = options

    def partitions(self):
        return [InputPartition(0)]

    def read(self, partition):
        options = self.options
        consumer = QueueConsumer(options.url, options.queue, prefetch=0,
                                 purpose=f"batch reader of {options.queue}")
        try:
            yield from self._drain(consumer)
        finally:
            # Without the acknowledgement (failure, early stop) this requeues everything.
            consumer.close()

    def _drain(self, consumer: QueueConsumer):
        options = self.options
        target = consumer.open()
        if options.max_messages is not None:
            target = min(target, options.max_messages)
        if target == 0:
            return
        # A prefetch of exactly `target`: the broker sends no message the read will not
        # take (above MAX_PREFETCH, no limit; the surplus is requeued at the end).
        consumer.prefetch = target if target <= MAX_PREFETCH else 0
        consumer.consume()
        consumer.fill(target, FILL_TIMEOUT)
        deliveries = consumer.take(target)
        if not deliveries:
            return
        consumer.cancel()
        with cyclic_gc_paused():  # not while Spark takes the rows
            batches = to_record_batches(deliveries, options.queue)
        yield from batches
        # Spark consumed every row: the read is complete.
        consumer.ack_through(deliveries[-1].tag)
        log.info("event=amqp_batch_read queue=%r messages=%d", options.queue, len(deliveries))
