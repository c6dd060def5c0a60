"""Publishing one Spark task's rows: a connection in confirm mode, the rows' frames
written 100 messages at a time, and a window of unconfirmed messages (see writer.py
for what the task guarantees).

Imported by the writer's tasks only: Spark's commit workers unpickle the writer
(writer.py) without needing pika or pyarrow.
"""

import pika.spec

from .connection import CONNECTION_ERRORS, AmqpConnection, AmqpConnectorError
from .messages import MessageEncoder, PublishFrames
from .options import WriteOptions, redact_url

# Most messages published and not yet confirmed, per task.
CONFIRM_WINDOW = 1000
# Send the marshalled frames (one socket write) and read confirms every this many messages.
FLUSH_EVERY = 100


def _no_op() -> None:
    pass


class AmqpPublishError(AmqpConnectorError):
    """The broker did not confirm a message: the task fails."""


class ConfirmingPublisher:
    """Publishes on one connection in confirm mode with a window of unconfirmed messages.

    pika's BlockingChannel waits for each confirm; this uses the channel object under it
    (pika.channel.Channel, whose confirm_delivery/add_on_return_callback/add_on_close_callback
    are public API) to keep up to `window` messages in flight, and BlockingConnection's
    process_data_events for the I/O. The messages' frames are marshalled here
    (``PublishFrames``) and handed to the connection's transport in one write per
    FLUSH_EVERY messages through ``_adapter_emit_data``, the method pika's own
    ``basic_publish`` ends in (pika 1.x). Confirms are counted from 1 per channel.
    """

    def __init__(self, options: WriteOptions, window: int = CONFIRM_WINDOW):
        self.options = options
        self.window = window
        self.target = f"exchange {options.exchange!r} on {redact_url(options.url)}"
        self.amqp = AmqpConnection(options.url, purpose=f"writer to {options.exchange!r}")
        self.channel = None  # the pika.channel.Channel under the BlockingChannel
        self.frames = None  # PublishFrames for that channel
        self._emit = None  # the connection's transport write
        self._waiting = False  # in _io_until: wake process_data_events on a confirm
        self.unconfirmed = {}  # publish sequence number -> routing key, ascending
        self.published = 0
        self.error = None

    def open(self) -> None:
        self.amqp.open()
        selected = []
        with self.amqp.lock:
            self.channel = self.amqp.channel._impl
            self.channel.add_on_return_callback(self._on_return)
            self.channel.add_on_close_callback(self._on_channel_closed)
            self.channel.confirm_delivery(ack_nack_callback=self._on_confirm,
                                          callback=lambda frame: selected.append(frame))
            self._io_until(lambda: selected)
            connection = self.amqp.connection._impl
            self.frames = PublishFrames(self.channel.channel_number,
                                        connection.params.frame_max,
                                        self.options.exchange, self.options.mandatory)
            self._emit = connection._adapter_emit_data

    def _on_channel_closed(self, channel, reason) -> None:
        if self.error is None:
            self.error = AmqpPublishError(
                f"the broker closed the channel publishing to {self.target} after "
                f"{self.published} messages of this task: {reason!r}")

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
        if self._waiting:
            # process_data_events(time_limit) returns early only for BlockingConnection's
            # own events; a zero-delay timer is one, so a wait for confirms ends when
            # they come rather than at the time limit.
            self.amqp.connection.call_later(0, _no_op)

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
        self._waiting = True
        try:
            while not done():
                self._io(0.1)
        finally:
            self._waiting = False

    def publish(self, messages) -> None:
        """Publish (routing_key, body, properties tuple) triples (``MessageEncoder``)."""
        out = []
        for routing_key, body, properties in messages:
            self.frames.append(out, routing_key, body, properties)
            self.published += 1
            self.unconfirmed[self.published] = routing_key
            if self.published % FLUSH_EVERY == 0:
                self._send(out)
                out = []
        if out:
            self._send(out)

    def _send(self, frames: list) -> None:
        with self.amqp.lock:
            if self.error is not None:
                raise self.error
            if not self.channel.is_open:
                raise AmqpPublishError(f"publishing to {self.target}: the channel is closed")
            self._emit(b"".join(frames))
            if len(self.unconfirmed) >= self.window:
                self._io_until(lambda: len(self.unconfirmed) < self.window // 2)
            else:
                self._io(0)

    def finish(self) -> int:
        """Wait until every message is confirmed; returns how many were published."""
        with self.amqp.lock:
            self._io_until(lambda: not self.unconfirmed)
        return self.published

    def close(self) -> None:
        self.amqp.close()


def publish_batches(options: WriteOptions, schema, batches) -> int:
    """Publish every row of the Arrow record batches, all confirmed; returns the number
    published."""
    encoder = MessageEncoder(schema, options.routing_key)
    publisher = None
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if publisher is None:
                # Connect on the first rows: computing them may take long, and a task with
                # an empty partition needs no connection.
                publisher = ConfirmingPublisher(options)
                publisher.open()
            publisher.publish(encoder.encode(batch))
        return publisher.finish() if publisher is not None else 0
    finally:
        if publisher is not None:
            publisher.close()
