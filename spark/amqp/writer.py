"""``df.write.format("amqp")`` and ``df.writeStream.format("amqp")``: publish rows.

Each Spark task publishes its partition's rows on its own connection, in confirm mode,
with up to CONFIRM_WINDOW messages awaiting the broker's confirmation at a time (waiting
for each confirm before the next publish costs a round trip per message); publisher.py
does it, imported by the task itself. Spark hands the rows over as Arrow record batches
(``DataSourceArrowWriter``), which are converted column by column; the messages' frames
are marshalled by ``PublishFrames`` and sent FLUSH_EVERY messages per socket write
(pika's ``basic_publish`` marshals three frames and makes a send call for each, per
message). The task returns only when every message is confirmed. A Basic.Nack (the
broker refused a message, e.g. a full queue with x-overflow reject-publish), a returned
message (mandatory=true and no queue bound), a channel closed by the broker (e.g. the
exchange does not exist) or a lost connection raises, which fails the task.
Spark retries a failed task (and a streaming query re-runs a failed batch after a
restart); the retry publishes the whole partition again, so the rows a failed attempt
had already published are published twice: at-least-once.
"""

import logging
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage,
)

from .options import WriteOptions

log = logging.getLogger("warren.spark")


@dataclass
class AmqpCommitMessage(WriterCommitMessage):
    published: int


def _publish(options: WriteOptions, schema, batches) -> AmqpCommitMessage:
    # Imported here, in the task: the driver's commit worker unpickles this module's
    # writers only to call commit/abort, and needs neither pika nor pyarrow.
    from .publisher import publish_batches

    return AmqpCommitMessage(publish_batches(options, schema, batches))


class AmqpWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions, schema):
        self.options = options
        self.schema = schema

    def write(self, iterator):
        return _publish(self.options, self.schema, iterator)

    def commit(self, messages) -> None:
        total = sum(m.published for m in messages if m is not None)
        log.info("event=amqp_write_committed exchange=%r messages=%d",
                 self.options.exchange, total)

    def abort(self, messages) -> None:
        total = sum(m.published for m in messages if m is not None)
        log.warning("event=amqp_write_aborted exchange=%r published_before_failure=%d",
                    self.options.exchange, total)


class AmqpStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions, schema):
        self.options = options
        self.schema = schema

    def write(self, iterator):
        return _publish(self.options, self.schema, iterator)

    def commit(self, messages, batchId) -> None:
        total = sum(m.published for m in messages if m is not None)
        log.info("event=amqp_stream_write_committed exchange=%r batch=%d messages=%d",
                 self.options.exchange, batchId, total)

    def abort(self, messages, batchId) -> None:
        total = sum(m.published for m in messages if m is not None)
        log.warning("event=amqp_stream_write_aborted exchange=%r batch=%d "
                    "published_before_failure=%d", self.options.exchange, batchId, total)
