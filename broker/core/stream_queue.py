"""Stream queues: an append-only log read by offset. Publishing appends; every consumer
reads from its own position, and acks only return credit (nothing is removed).

Consumers read only what a commit made durable, so an offset a client has seen is never
reused after a crash. Deliveries carry their offset in the `x-stream-offset` header. A
consumer with a filter (stream_filter.py) gets only the messages it matches.
"""

import datetime
from typing import NoReturn

from amqp_codec import MalformedProperties, with_long_header
from amqp_codec.reply_codes import ReplyCode
from amqp_codec.wire_ids import BASIC_CONSUME, BASIC_GET, QUEUE_PURGE

from .errors import ConnectionFailure, precondition_failed
from .policy import stream_setting
from .queue_base import (ClientConnection, Consumer, ConsumerChannel, DeliveredOffset,
                         QueueBase, QueueHost)
from .stream_arguments import (StreamConsumerOptions, StreamRetention, StreamStart,
                               parse_duration, stream_consumer_options)
from .stream_filter import StreamFilter, consumer_filter

OFFSET_HEADER = b"x-stream-offset"
READ_BATCH = 256   # messages asked of the store per call, at most


class StreamConsumer(Consumer):
    """A consumer's cursor in a stream, and (when tracking) what it has processed."""

    __slots__ = ("position", "tracking", "end", "outstanding", "stored", "filter")

    def __init__(self, tag: str, channel: ConsumerChannel[ClientConnection], queue,
                 exclusive: bool, prefetch: int, arguments: dict,
                 options: StreamConsumerOptions, wanted: StreamFilter | None = None):
        super().__init__(tag, channel, queue, False, exclusive, prefetch, arguments)
        self.position = 0             # the next offset to deliver
        self.tracking = options.tracking
        self.end = options.end
        self.outstanding: dict[int, None] = {}   # delivered, not yet acked (tracking)
        self.stored = -1              # the tracked offset last stored
        self.filter = wanted          # only the messages it matches (None: all)


class StreamQueue(QueueBase[DeliveredOffset[StreamConsumer], StreamConsumer]):
    """A durable stream over a StreamStore (ports.py). It is never exclusive
    nor auto-deleted (its kind refuses such a declaration), and holds no messages
    itself: consumers read them through its store."""

    def __init__(self, vhost: QueueHost, name: str, durable: bool,
                 exclusive_owner: ClientConnection | None, auto_delete: bool,
                 arguments: dict, store):
        super().__init__(vhost, name, durable, exclusive_owner, auto_delete, arguments,
                         store)
        store.queue = self

    @property
    def message_count(self) -> int:
        """Messages in the stream (retention may have removed older ones)."""
        return self.store.next_offset - self.store.first_offset

    @property
    def published(self) -> int:
        """The next offset: every message appended, retention's removals included."""
        return self.store.next_offset

    @property
    def bookkeeping_bytes(self) -> int:
        """None: a stream holds no messages in memory."""
        return 0

    # -- publishing ------------------------------------------------------------------

    def enqueue(self, message, publisher=None) -> bool:
        """Append to the log. Nothing waits in memory, so publishers are never slowed."""
        self.store.append(message)
        if self.consumers:
            self.vhost.persistence.request_commit()   # consumers read only durable data
        return True

    # -- consumers -------------------------------------------------------------------

    def make_consumer(self, tag: str, channel: ConsumerChannel[ClientConnection],
                      no_ack: bool, exclusive: bool, prefetch: int,
                      arguments: dict) -> StreamConsumer:
        """A consumer at the position its arguments ask for. As RabbitMQ: 406 without
        a prefetch, 540 (connection) with automatic acks; 406 for malformed arguments."""
        # As RabbitMQ names the stream: 3.10 "for 'queue 'S' in vhost 'V''", "by stream
        # queues queue 'S' ...", 4.0 and later "for stream queue 'S' ...", "by stream
        # queue 'S' ..."
        named = f"queue '{self.name}' in vhost '{self.vhost.name}'"
        by_stream = self.vhost.profile.line.stream_refusals_say_stream
        if not prefetch:
            subject = f"stream {named}" if by_stream else f"'{named}'"
            raise precondition_failed(
                f"consumer prefetch count is not set for {subject} (stream consumers "
                "need Basic.Qos with a prefetch count and manual acknowledgements)")
        if no_ack:
            subject = f"stream {named}" if by_stream else f"stream queues {named}"
            raise ConnectionFailure(
                ReplyCode.NOT_IMPLEMENTED, f"automatic acknowledgement not supported by "
                f"{subject} (consume with manual acks)", *BASIC_CONSUME)
        options = stream_consumer_options(arguments, self.name)
        wanted = (consumer_filter(arguments or {}, self.name)
                  if self.vhost.profile.line.stream_filtering else None)
        consumer = StreamConsumer(tag, channel, self, exclusive, prefetch, arguments,
                                  options, wanted)
        consumer.position = self._start_offset(options.start)
        if consumer.tracking:
            stored = self.store.consumer_offset(tag)
            if stored is not None:
                consumer.position = consumer.stored = stored
                consumer.position += 1
        return consumer

    def _start_offset(self, start: StreamStart) -> int:
        store = self.store
        kind = start.kind
        if kind == "first":
            return store.first_offset
        if kind == "next":
            return store.next_offset
        if kind == "last":
            return max(store.first_offset, store.next_offset - 1)
        if kind == "offset":
            return max(start.value, store.first_offset)
        if kind == "timestamp":
            moment = start.value
            assert isinstance(moment, datetime.datetime), "a timestamp start is a datetime"
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=datetime.timezone.utc)
            return store.offset_for_timestamp(moment.timestamp())
        return self.store.offset_for_age(start.value)   # interval

    def add_consumer(self, consumer: StreamConsumer) -> None:
        self.consumers.append(consumer)
        if self.store.next_offset > self.store.durable_offset + 1:
            self.vhost.persistence.request_commit()
        self._feed(consumer)

    def touch(self) -> None:
        """Streams do not expire (x-expires is refused)."""

    def apply_policy(self, definition: dict) -> None:
        """Retention (max-length-bytes, max-age) and the segment size: the policy's
        values where it sets them, as RabbitMQ lets a policy win over a stream's
        arguments. The store applies lower limits at its next maintenance."""
        age = stream_setting(self.arguments, definition, "max-age")
        self.store.set_retention(StreamRetention(
            stream_setting(self.arguments, definition, "max-length-bytes"),
            None if age is None else parse_duration(age),
            stream_setting(self.arguments, definition, "stream-max-segment-size-bytes")))

    # -- delivery --------------------------------------------------------------------

    def dispatch(self, now: float | None = None) -> None:
        for consumer in list(self.consumers):
            self._feed(consumer)

    def _feed(self, consumer: StreamConsumer) -> None:
        """Deliver durable messages from the consumer's position while it has credit
        and the store has them in memory (it calls `dispatch` when more arrive); cancel
        the consumer once it has reached its end offset."""
        store = self.store
        channel = consumer.channel
        end = consumer.end
        if consumer.position < store.first_offset:
            consumer.position = store.first_offset   # retention removed the rest
        if consumer.filter is not None:
            self._feed_filtered(consumer, consumer.filter)
        else:
            self._feed_all(consumer)
        if end is not None and consumer.position >= end and consumer in self.consumers:
            self.consumers.remove(consumer)
            channel.consumer_cancelled_by_broker(consumer)

    def _readable_end(self, consumer: StreamConsumer) -> int:
        """The offset the consumer may read up to now: the durable end of the log, or
        its end offset if that comes first."""
        limit = self.store.durable_offset + 1
        return limit if consumer.end is None else min(limit, consumer.end)

    def _feed_all(self, consumer: StreamConsumer) -> None:
        store = self.store
        channel = consumer.channel
        while channel.can_deliver(consumer):
            position = consumer.position
            limit = self._readable_end(consumer)
            if position >= limit:
                break
            count = min(READ_BATCH, limit - position,
                        consumer.prefetch - consumer.unacked)
            records = store.read(position, count)
            if not records:
                break
            for record in records:
                offset = record.offset
                if offset >= limit:
                    break
                if consumer.tracking:
                    consumer.outstanding[offset] = None
                channel.deliver_record(
                    consumer, DeliveredOffset(consumer, offset), record.exchange,
                    record.routing_key, _with_offset(record.properties, offset),
                    record.body)
                consumer.position = offset + 1

    def _feed_filtered(self, consumer: StreamConsumer, wanted: StreamFilter) -> None:
        """As _feed_all, for a consumer with a filter: the messages it does not match
        are passed over without using credit, so reads are not bounded by the credit."""
        store = self.store
        channel = consumer.channel
        while channel.can_deliver(consumer):
            position = consumer.position
            limit = self._readable_end(consumer)
            if position >= limit:
                return
            records = store.read(position, min(READ_BATCH, limit - position))
            if not records:
                return
            for record in records:
                offset = record.offset
                if offset >= limit:
                    break
                if wanted.matches(record.properties):
                    if not channel.can_deliver(consumer):
                        return
                    if consumer.tracking:
                        consumer.outstanding[offset] = None
                    channel.deliver_record(
                        consumer, DeliveredOffset(consumer, offset), record.exchange,
                        record.routing_key, _with_offset(record.properties, offset),
                        record.body)
                consumer.position = offset + 1

    # -- outcomes of deliveries --------------------------------------------------------

    def settle(self, entry: DeliveredOffset[StreamConsumer]) -> None:
        """An ack: the consumer processed the message (credit is returned by the
        channel). A tracking consumer stores the offset below which all is processed."""
        consumer = entry.consumer
        if consumer.tracking:
            self._processed(consumer, entry.offset)

    def discard(self, entries: list[DeliveredOffset[StreamConsumer]],
                reason: str) -> None:
        """Reject/nack without requeue: done with, like an ack (messages stay)."""
        for entry in entries:
            self.settle(entry)

    def requeue(self, entries: list[DeliveredOffset[StreamConsumer]],
                failed: bool = True) -> None:
        """Reject/nack with requeue, recover, or a closed channel: the credit comes back
        but a stream does not deliver again in this session; a tracking consumer does not
        count these as processed, so a reconnect resumes from the first of them."""
        if not self.deleted:
            self.dispatch()

    def _processed(self, consumer: StreamConsumer, offset: int) -> None:
        outstanding = consumer.outstanding
        outstanding.pop(offset, None)
        done = next(iter(outstanding)) - 1 if outstanding else consumer.position - 1
        if done > consumer.stored and not self.deleted:
            consumer.stored = done
            self.store.store_consumer_offset(consumer.tag, done)

    # -- what streams do not do ----------------------------------------------------------

    def take(self) -> NoReturn:
        raise ConnectionFailure(
            ReplyCode.NOT_IMPLEMENTED,
            f"basic.get not supported by stream queues queue '{self.name}' in vhost "
            f"'{self.vhost.name}' (consume with Basic.Qos and an x-stream-offset instead)",
            *BASIC_GET)

    def purge(self) -> int:
        raise ConnectionFailure(
            ReplyCode.NOT_IMPLEMENTED,
            f"queue.purge not supported by stream queues queue '{self.name}' in vhost "
            f"'{self.vhost.name}' (retention removes old messages: x-max-length-bytes, "
            "x-max-age)", *QUEUE_PURGE)

    def drop_messages(self) -> int:
        """The stream is deleted: its log goes with the store (RabbitMQ reports 0)."""
        return 0


def _with_offset(properties: bytes, offset: int) -> bytes:
    """The properties with the x-stream-offset header; a block too malformed to take
    it (the broker does not read the properties on publish, RabbitMQ refuses such a
    publish) is delivered as it was stored."""
    try:
        return with_long_header(properties, OFFSET_HEADER, offset)
    except MalformedProperties:
        return properties
