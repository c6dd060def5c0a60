"""``df.write.format("amqp")`` and ``df.writeStream.format("amqp")``: publish rows.

Each Spark task publishes its partition's rows on its own connection, in confirm mode,
with up to CONFIRM_WINDOW messages awaiting the broker's confirmation at a time (waiting
for each confirm before the next publish costs a round trip per message). The task
returns only when every message is confirmed. A Basic.Nack (the broker refused a
message, e.g. a full queue with x-overflow reject-publish), a returned message
(mandatory=true and no queue bound), or a lost connection raises, which fails the task.
Spark retries a failed task (and a streaming query re-runs a failed batch after a
restart); the retry publishes the whole partition again, so the rows a failed attempt
had already published are published twice: at-least-once.
"""

import logging
from dataclasses import dataclass

import pika.spec
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from .connection import CONNECTION_ERRORS, AmqpConnection, AmqpConnectorError
from .messages import MessageEncoder
from .options import WriteOptions, redact_url

log = logging.getLogger("warren.spark")


# Most messages published and not yet confirmed, per task.
CONFIRM_WINDOW = 1000
# Flush published frames and read confirms every this many publishes.
FLUSH_EVERY = 100


class AmqpPublishError(AmqpConnectorError):
    """The broker did not confirm a message: the task fails."""


@dataclass
class AmqpCommitMessage(WriterCommitMessage):
    published: int


class ConfirmingPublisher:
    """Publishes on one connection in confirm mode with a window of unconfirmed messages.

    pika's BlockingChannel waits for each confirm; this uses the channel object under it
    (pika.channel.Channel, whose confirm_delivery/basic_publish/add_on_return_callback
    are public API) to keep up to `window` messages in flight, and BlockingConnection's
    process_data_events for the I/O. Confirms are counted from 1 per channel.
    """

    def __init__(self, options: WriteOptions, window: int = CONFIRM_WINDOW):
        self.options = options
        self.window = window
        self.target = f"exchange {options.exchange!r} on {redact_url(options.url)}"
        self.amqp = AmqpConnection(options.url, purpose=f"writer to {options.exchange!r}")
        self.channel = None  # the pika.channel.Channel under the BlockingChannel
        self.unconfirmed = {}  # publish sequence number -> routing key, ascending
        self.published = 0
        self.error = None

    def open(self) -> None:
        self.amqp.open()
        selected = []
        with self.amqp.lock:
            self.channel = self.amqp.channel._impl
            self.channel.add_on_return_callback(self._on_return)
            self.channel.confirm_delivery(ack_nack_callback=self._on_confirm,
                                          callback=lambda frame: selected.append(frame))
            self._io_until(lambda: selected)

    def _on_return(self, channel, method, properties, body) -> None:
        # RabbitMQ and Warren send Basic.Return before the message's Basic.Ack.
        if self.error is None:
            self.error = AmqpPublishError(
                f"a message with routing key {method.routing_key!r} was returned by "
                f"{self.target}: {method.reply_code} {method.reply_text} (mandatory=true "
                f"and no queue is bound for it: unroutable)")

    def _on_confirm(self, frame) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack) and self.error is None:
            key = self.unconfirmed.get(method.delivery_tag)
            self.error = AmqpPublishError(
                f"the broker refused (Basic.Nack) message {method.delivery_tag} of this task "
                f"(routing key {key!r}) on {self.target}, e.g. a full queue with "
                f"x-overflow=reject-publish")
        if method.multiple:
            for tag in list(self.unconfirmed):
                if tag > method.delivery_tag:
                    break
                del self.unconfirmed[tag]
        else:
            self.unconfirmed.pop(method.delivery_tag, None)

    def _io(self, time_limit: float) -> None:
        """Process I/O (sends buffered frames, dispatches confirms); raise on failure."""
        try:
            if self.amqp.failure is not None:
                raise self.amqp.failure
            self.amqp.connection.process_data_events(time_limit=time_limit)
        except CONNECTION_ERRORS as error:
            raise AmqpPublishError(
                f"publishing to {self.target} failed after {self.published} messages of "
                f"this task ({len(self.unconfirmed)} unconfirmed): {error!r}") from None
        if self.error is not None:
            raise self.error

    def _io_until(self, done) -> None:
        self._io(0)
        while not done():
            self._io(0.1)

    def publish(self, routing_key: str, body: bytes, properties) -> None:
        with self.amqp.lock:
            if self.error is not None:
                raise self.error
            try:
                self.channel.basic_publish(self.options.exchange, routing_key, body,
                                           properties, mandatory=self.options.mandatory)
            except CONNECTION_ERRORS as error:
                raise AmqpPublishError(f"publishing to {self.target}: {error!r}") from None
            self.published += 1
            self.unconfirmed[self.published] = routing_key
            if len(self.unconfirmed) >= self.window:
                self._io_until(lambda: len(self.unconfirmed) < self.window // 2)
            elif self.published % FLUSH_EVERY == 0:
                self._io(0)

    def finish(self) -> int:
        """Wait until every message is confirmed; returns how many were published."""
        with self.amqp.lock:
            self._io_until(lambda: not self.unconfirmed)
        return self.published

    def close(self) -> None:
        self.amqp.close()


def publish_rows(options: WriteOptions, schema, rows) -> int:
    """Publish every row of `rows`, all confirmed; returns the number published."""
    encoder = MessageEncoder(schema, options.routing_key)
    publisher = None
    try:
        for row in rows:
            routing_key, body, properties = encoder.encode(row)
            if publisher is None:
                # Connect on the first row: computing it may take long, and a task with an
                # empty partition needs no connection.
                publisher = ConfirmingPublisher(options)
                publisher.open()
            publisher.publish(routing_key, body, properties)
        return publisher.finish() if publisher is not None else 0
    finally:
        if publisher is not None:
            publisher.close()


class AmqpWriter(DataSourceWriter):
    def __init__(self, options: WriteOptions, schema):
        self.options = options
        self.schema = schema

    def write(self, iterator):
        return AmqpCommitMessage(publish_rows(self.options, self.schema, iterator))

    def commit(self, messages) -> None:
        total = sum(m.published for m in messages if m is not None)
        log.info("event=amqp_write_committed exchange=%r messages=%d",
                 self.options.exchange, total)

    def abort(self, messages) -> None:
        total = sum(m.published for m in messages if m is not None)
        log.warning("event=amqp_write_aborted exchange=%r published_before_failure=%d",
                    self.options.exchange, total)


class AmqpStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: WriteOptions, schema):
        self.options = options
        self.schema = schema

    def write(self, iterator):
        return AmqpCommitMessage(publish_rows(self.options, self.schema, iterator))

    def commit(self, messages, batchId) -> None:
        total = sum(m.published for m in messages if m is not None)
        log.info("event=amqp_stream_write_committed exchange=%r batch=%d messages=%d",
                 self.options.exchange, batchId, total)

    def abort(self, messages, batchId) -> None:
        total = sum(m.published for m in messages if m is not None)
        log.warning("event=amqp_stream_write_aborted exchange=%r batch=%d "
                    "published_before_failure=%d", self.options.exchange, batchId, total)
