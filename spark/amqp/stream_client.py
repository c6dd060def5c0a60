"""pika clients for stream queues (x-queue-type=stream): finding offsets in the driver and
reading one offset range in an executor.

A stream consumer needs Basic.Qos with a prefetch count and manual acknowledgements;
every delivery carries its offset in the ``x-stream-offset`` header; acknowledgements
only return credit. Two things about RabbitMQ shape this module:

* RabbitMQ 3.10 closes the connection (540) when a stream delivery is nacked or
  rejected, and pika's ``BlockingChannel.basic_cancel`` rejects the deliveries it has
  buffered. So stream consumers here run on a plain ``pika.channel.Channel`` opened on
  the BlockingConnection (``StreamChannel``): its cancel and close send Basic.Cancel /
  Channel.Close and nothing else. The BlockingConnection still does the I/O
  (``process_data_events``), and a broker-initiated Basic.Cancel (Warren's end offset)
  reaches our callback instead of BlockingChannel's bookkeeping.
* RabbitMQ ignores Warren's ``x-stream-end-offset`` and starts a numeric
  ``x-stream-offset`` at the beginning of the chunk holding it, and its ``last`` is the
  first message of the last chunk. ``StreamRangeConsumer`` therefore filters by offset
  (drops offsets below the start and from the end on) and stops by itself when the
  offset end - 1 (or anything beyond) has arrived; Warren's cancel after the range is
  the other way to stop, and the only one when retention deleted the whole range.
  ``StreamProbe`` reads on from RabbitMQ's ``last`` until the deliveries pause.

With the ``filter`` option, only messages whose ``x-stream-filter-value`` header is one
of its values are read (``StreamFilter``). Warren gets the filter as the consumer's
``x-stream-filter`` and delivers exactly the matching messages of the range before it
cancels the consumer. RabbitMQ is not given it: its Bloom filter would hold back the
chunks that do not match, among them perhaps the one holding offset end - 1, the only
way a range read sees its end there; so the range is read whole and filtered here.
"""

import logging
import time
from collections import deque

import pika.exceptions

from .connection import (
    CONNECTION_ERRORS, CONSUMER_PUMP_INTERVAL, KEEPALIVE_INTERVAL, AmqpConnection,
    AmqpConnectorError, _noop, _queue_error,
)
from .messages import ARROW_BATCH_ROWS, Delivery
from .options import redact_url

log = logging.getLogger("warren.spark")

OFFSET_HEADER = "x-stream-offset"
END_OFFSET_ARGUMENT = "x-stream-end-offset"  # Warren extension: deliver [start, end)
FILTER_VALUE_HEADER = "x-stream-filter-value"
FILTER_ARGUMENT = "x-stream-filter"
MATCH_UNFILTERED_ARGUMENT = "x-stream-match-unfiltered"

RPC_TIMEOUT = 30.0  # seconds for a channel open, qos, consume-ok, close
# Finding an offset by consuming "first" or "last": how long to wait for the delivery
# when the stream has messages, and when it says it has none (RabbitMQ 3.10 may report
# 0 for a non-empty stream; Warren's count is exact, so it does not wait then).
PROBE_TIMEOUT = 10.0
EMPTY_PROBE_WAIT = 0.5
# RabbitMQ: "last" starts at the first message of the newest chunk; the probe reads on
# until no delivery came for this long (at most PROBE_DRAIN_LIMIT seconds in all).
PROBE_QUIET = 0.1
PROBE_DRAIN_LIMIT = 2.0
PROBE_PREFETCH = 256
# A range read fails when the broker sent nothing for this long.
RANGE_IDLE_TIMEOUT = 60.0


class DataLossError(AmqpConnectorError):
    """Offsets a batch must read were removed by the stream's retention first."""


class NotAStreamError(AmqpConnectorError):
    """Deliveries without an x-stream-offset header: the queue is not a stream."""


def _not_a_stream(queue: str) -> str:
    return (f"queue {queue!r} is not a stream queue (x-queue-type=stream); read plain "
            f"queues without the startingOffset option")


def _text(value) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)


def is_warren(amqp: AmqpConnection) -> bool:
    """Whether the broker is Warren: its ``product`` is RabbitMQ's (it emulates a
    RabbitMQ line), its ``platform`` begins with ``Warren``."""
    properties = amqp.connection._impl.server_properties or {}
    return _text(properties.get("platform")).startswith("Warren ")


class _CloseAdapter:
    """What BlockingConnection.close() expects to find as the 'cookie' of each channel
    (normally the BlockingChannel): ``is_open`` and ``close(code, text)``. Without it,
    closing a connection that still has a plain pika Channel open fails."""

    def __init__(self, channel):
        self._channel = channel

    @property
    def is_open(self) -> bool:
        return self._channel.is_open

    def close(self, reply_code=0, reply_text="Normal shutdown") -> None:
        if self._channel.is_open:
            self._channel.close(reply_code, reply_text)


class StreamChannel:
    """A plain pika Channel on `amqp`'s BlockingConnection, consuming one stream.

    Callbacks run inside ``process_data_events`` in whichever thread holds
    ``amqp.lock`` (the owner or the keepalive thread); they only append to
    ``deliveries`` or set flags, and wake the waiting ``process_data_events`` up:
    BlockingConnection only returns early for its own channels' events, so without the
    wake-up every wait would last its whole time limit.
    """

    def __init__(self, amqp: AmqpConnection, queue: str):
        self.amqp = amqp
        self.queue = queue
        self.deliveries = deque()
        self.cancelled = False  # the broker cancelled the consumer (end offset reached)
        self.close_reason = None
        self.error = None
        opened = []
        self._connection = amqp.connection
        with amqp.lock:
            self.channel = amqp.connection._impl.channel(on_open_callback=self._waking(opened))
            self.channel._set_cookie(_CloseAdapter(self.channel))
            self.channel.add_on_close_callback(self._on_close)
            self.channel.add_on_cancel_callback(self._on_cancel)
            self.until(lambda: opened, "opening a channel")

    def _wake(self) -> None:
        # A 0-delay timer puts an event in BlockingConnection's ready list, which ends
        # the current process_data_events (and later runs the no-op). Not while the
        # connection closes (AmqpConnection.close has already let go of it then).
        connection = self._connection
        if connection is not None and connection.is_open:
            connection.call_later(0, _noop)

    def _waking(self, results: list):
        def callback(result) -> None:
            results.append(result)
            self._wake()
        return callback

    def _on_close(self, channel, reason) -> None:
        self.close_reason = reason
        self.amqp.unroute_deliveries(channel.channel_number)
        self._wake()

    def _on_cancel(self, frame) -> None:
        self.cancelled = True
        self._wake()

    def _on_delivery(self, delivery_tag, redelivered, exchange, routing_key, properties,
                     body) -> None:
        headers = properties.headers or {}
        offset = headers.get(OFFSET_HEADER)
        if not isinstance(offset, int):
            if self.error is None:
                self.error = NotAStreamError(
                    _not_a_stream(self.queue) + f" (a delivery without an integer "
                                                f"{OFFSET_HEADER} header)")
            return
        if not self.deliveries:
            self._wake()
        self.deliveries.append(Delivery(delivery_tag, exchange, routing_key, redelivered,
                                        properties, body, int(offset)))

    def _on_message(self, channel, method, properties, body) -> None:
        # pika's path: only for a delivery DeliveryFrames left to pika (none in practice:
        # the channel is routed to it before Basic.Consume).
        self._on_delivery(method.delivery_tag, method.redelivered, method.exchange,
                          method.routing_key, properties, body)

    def check(self) -> None:
        if self.error is not None:
            raise self.error
        if self.amqp.failure is not None:
            raise AmqpConnectorError(f"connection to {redact_url(self.amqp.url)} was lost: "
                                     f"{self.amqp.failure!r}")
        reason = self.close_reason
        if reason is not None:
            if (isinstance(reason, pika.exceptions.ChannelClosedByBroker)
                    and reason.reply_code == 406 and OFFSET_HEADER in str(reason.reply_text)):
                # RabbitMQ refuses the consumer argument on other queue types.
                raise NotAStreamError(_not_a_stream(self.queue) + f" ({reason!r})")
            raise _queue_error(reason, self.queue, self.amqp.url)

    def io(self, seconds: float) -> None:
        """Process I/O for up to `seconds` (0: what has arrived). Caller holds the lock."""
        try:
            self.amqp.connection.process_data_events(time_limit=seconds)
        except CONNECTION_ERRORS as error:
            self.amqp.failure = error
        self.check()

    def until(self, predicate, what: str, timeout: float = RPC_TIMEOUT) -> None:
        """Process I/O until `predicate()`; the caller holds the lock (or is setting up)."""
        deadline = time.monotonic() + timeout
        self.io(0)
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AmqpConnectorError(
                    f"{what} on queue {self.queue!r} at {redact_url(self.amqp.url)}: no "
                    f"answer within {timeout:.0f} s")
            self.io(min(0.05, remaining))

    def consume(self, prefetch: int, arguments: dict) -> None:
        with self.amqp.lock:
            done = []
            self.channel.basic_qos(prefetch_count=prefetch, callback=self._waking(done))
            self.until(lambda: done, "Basic.Qos")
            self.amqp.route_deliveries(self.channel.channel_number, self._on_delivery)
            self.channel.basic_consume(self.queue, self._on_message, auto_ack=False,
                                       arguments=arguments, callback=self._waking(done))
            self.until(lambda: len(done) > 1 or self.cancelled, "Basic.Consume")

    def ack_through(self, tag: int) -> None:
        """Return credit for every delivery up to `tag` (sent with the next I/O)."""
        with self.amqp.lock:
            self.check()
            self.channel.basic_ack(delivery_tag=tag, multiple=True)

    def close(self) -> None:
        """Close the channel (a plain Channel.Close: no nack, no reject)."""
        with self.amqp.lock:
            if not self.channel.is_open or self.amqp.failure is not None:
                return
            try:
                self.channel.close()
                self.until(lambda: self.channel.is_closed, "closing the channel")
            except AmqpConnectorError:
                pass


class StreamProbe:
    """Finds offsets of streams for the driver (the reader's runner process): the
    message count, the oldest offset and the tail (the offset the next message will get).

    One connection, opened on first use and reopened when lost; each probe consumes on a
    channel of its own and closes it.
    """

    def __init__(self, url: str, purpose: str):
        self.url = url
        self.purpose = purpose
        self._amqp = None
        self.is_warren = False

    def _live(self) -> AmqpConnection:
        amqp = self._amqp
        if amqp is not None and amqp.is_open:
            return amqp
        if amqp is not None:
            amqp.close()
        amqp = AmqpConnection(self.url, self.purpose, pump_interval=KEEPALIVE_INTERVAL)
        amqp.open()
        self.is_warren = is_warren(amqp)
        self._amqp = amqp
        return amqp

    def message_count(self, queue: str) -> int:
        """Declare-Ok's message count (passive declare: the stream must exist). Exact on
        Warren; approximate on RabbitMQ 3.10 (may be 0 for a non-empty stream)."""
        amqp = self._live()
        with amqp.lock:
            try:
                return amqp.channel.queue_declare(queue, passive=True).method.message_count
            except CONNECTION_ERRORS as error:
                amqp.failure = error
                raise _queue_error(error, queue, self.url) from None

    def _consume_offset(self, queue: str, where: str, wait: float, drain: bool):
        """The offset of the first delivery of a consumer starting at `where` ("first",
        "last" or a datetime), or None when nothing came within `wait` seconds. With
        `drain`, keep reading until the deliveries pause and return the highest offset
        seen."""
        amqp = self._live()
        stream = StreamChannel(amqp, queue)
        try:
            stream.consume(PROBE_PREFETCH if drain else 1, {OFFSET_HEADER: where})
            with amqp.lock:
                deadline = time.monotonic() + wait
                while not stream.deliveries and not stream.cancelled:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    stream.io(min(0.05, remaining))
                if not stream.deliveries:
                    return None
                if not drain:
                    return stream.deliveries[0].offset
                highest = stream.deliveries[-1].offset
                now = time.monotonic()
                deadline, quiet_since = now + PROBE_DRAIN_LIMIT, now
                while True:
                    if stream.deliveries:
                        last = stream.deliveries[-1]
                        highest = max(highest, last.offset)
                        stream.deliveries.clear()
                        stream.channel.basic_ack(delivery_tag=last.tag, multiple=True)
                        quiet_since = time.monotonic()
                    now = time.monotonic()
                    if now - quiet_since >= PROBE_QUIET or now >= deadline:
                        return highest
                    stream.io(0.02)
        finally:
            stream.close()

    def tail(self, queue: str):
        """The stream's tail (offset of the newest message + 1; 0 when empty), or None
        when it could not be found in time. On RabbitMQ the value may be lower than the
        real tail (never higher)."""
        count = self.message_count(queue)
        if self.is_warren:
            if count == 0:
                return 0
            newest = self._consume_offset(queue, "last", PROBE_TIMEOUT, drain=False)
        else:
            newest = self._consume_offset(queue, "last",
                                          PROBE_TIMEOUT if count else EMPTY_PROBE_WAIT,
                                          drain=True)
            if newest is None and count == 0:
                return 0
        return None if newest is None else newest + 1

    def head(self, queue: str):
        """The oldest offset in the stream, or None when it is empty (or nothing came in
        time)."""
        count = self.message_count(queue)
        if self.is_warren and count == 0:
            return None
        return self._consume_offset(queue, "first",
                                    PROBE_TIMEOUT if count else EMPTY_PROBE_WAIT, drain=False)

    def at_timestamp(self, queue: str, moment):
        """The first offset published at or after `moment` (a datetime), or None when
        there is none (or nothing came in time). RabbitMQ answers with the start of the
        chunk holding that offset: possibly a little earlier."""
        count = self.message_count(queue)
        if self.is_warren and count == 0:
            return None
        return self._consume_offset(queue, moment,
                                    PROBE_TIMEOUT if count else EMPTY_PROBE_WAIT, drain=False)

    def close(self) -> None:
        if self._amqp is not None:
            self._amqp.close()
            self._amqp = None


class StreamFilter:
    """Which deliveries a filtered read keeps: those whose x-stream-filter-value is one of
    `values`, and with `match_unfiltered` those without one (an empty value is none, as
    the brokers count it). Exactly what Warren delivers to such a consumer, and what
    RabbitMQ's chunk filter lets through must be filtered down to."""

    def __init__(self, values, match_unfiltered: bool):
        self.values = frozenset(values)
        self.match_unfiltered = match_unfiltered

    def arguments(self) -> dict:
        """The consumer arguments that ask the broker for this filter."""
        return {FILTER_ARGUMENT: sorted(self.values),
                MATCH_UNFILTERED_ARGUMENT: self.match_unfiltered}

    def matches(self, properties) -> bool:
        value = (properties.headers or {}).get(FILTER_VALUE_HEADER)
        if isinstance(value, (bytes, bytearray)):
            value = bytes(value).decode("utf-8", "replace")
        if value is None or value == "":
            return self.match_unfiltered
        return value in self.values


class StreamRangeConsumer:
    """Reads the offsets [start, end) of one stream (in an executor task).

    Consumes with x-stream-offset=start and x-stream-end-offset=end (Warren delivers
    exactly the range, then cancels the consumer; RabbitMQ ignores the end), returns
    credit with multiple acks as it goes, and stops when the delivery with offset end - 1
    arrived or the broker cancelled the consumer. Offsets that retention deleted before
    they were read raise DataLossError with `fail_on_data_loss`; otherwise they are
    skipped (logged, and counted in `lost`). With `wanted` (a StreamFilter) only the
    deliveries it matches are kept (see the module's docstring).
    """

    def __init__(self, url: str, queue: str, start: int, end: int, prefetch: int,
                 idle_timeout: float = RANGE_IDLE_TIMEOUT, fail_on_data_loss: bool = True,
                 wanted: StreamFilter | None = None):
        self.url = url
        self.queue = queue
        self.start = start
        self.end = end
        self.prefetch = prefetch
        self.idle_timeout = idle_timeout
        self.fail_on_data_loss = fail_on_data_loss
        self.wanted = wanted
        self.lost = 0
        self.amqp = AmqpConnection(url, f"stream range {queue}[{start},{end})",
                                   pump_interval=CONSUMER_PUMP_INTERVAL)
        self.stream = None

    def batches(self, rows: int = ARROW_BATCH_ROWS):
        """Lists of deliveries in offset order, at most `rows` each, covering the range."""
        if self.end <= self.start:
            return
        self.amqp.open()
        arguments = {OFFSET_HEADER: self.start, END_OFFSET_ARGUMENT: self.end}
        wanted = self.wanted
        # When the broker filters, a gap in the offsets is a message it left out, not
        # one that retention removed.
        broker_filters = wanted is not None and is_warren(self.amqp)
        if broker_filters:
            self._check_retained()
            arguments.update(wanted.arguments())
        self.stream = StreamChannel(self.amqp, self.queue)
        self.stream.consume(self.prefetch, arguments)
        ack_every = max(1, self.prefetch // 2)
        pending = []
        unacked = 0
        last_offset = self.start - 1
        finished = False
        last_progress = time.monotonic()
        while not finished:
            with self.amqp.lock:
                self.stream.io(0)
                got = list(self.stream.deliveries)
                self.stream.deliveries.clear()
                cancelled = self.stream.cancelled
            for delivery in got:
                unacked += 1
                offset = delivery.offset
                if offset <= last_offset:
                    continue  # RabbitMQ: the chunk before `start`
                if offset >= self.end:
                    finished = True  # RabbitMQ: past the end (no end offset there)
                    if last_offset < self.end - 1:
                        self._missing(last_offset + 1, self.end)
                    break
                if offset > last_offset + 1 and not broker_filters:
                    self._missing(last_offset + 1, offset)
                if wanted is None or wanted.matches(delivery.properties):
                    pending.append(delivery)
                last_offset = offset
                if offset == self.end - 1:
                    finished = True
                    break
            if got:
                last_progress = time.monotonic()
                if unacked >= ack_every and not finished:
                    self.stream.ack_through(got[-1].tag)
                    unacked = 0
            if cancelled:
                finished = True  # Warren: the range is complete (deleted offsets skipped)
                if last_offset < self.end - 1 and not broker_filters:
                    self._missing(last_offset + 1, self.end)
            if len(pending) >= rows:
                yield pending[:rows]
                pending = pending[rows:]
            if finished or got:
                continue
            if time.monotonic() - last_progress > self.idle_timeout:
                raise AmqpConnectorError(
                    f"stream {self.queue!r} at {redact_url(self.url)}: no delivery for "
                    f"{self.idle_timeout:.0f} s while reading offsets [{self.start}, "
                    f"{self.end}) (read up to {last_offset})")
            with self.amqp.lock:
                self.stream.io(0.05)
        while pending:
            yield pending[:rows]
            pending = pending[rows:]

    def _check_retained(self) -> None:
        """Before a read that Warren filters: the first offset of the range still in
        the stream, from one unfiltered delivery (none: the whole range is gone); the
        offsets below it are lost. (Removals while the range is read are not seen.)"""
        probe = StreamChannel(self.amqp, self.queue)
        try:
            probe.consume(1, {OFFSET_HEADER: self.start, END_OFFSET_ARGUMENT: self.end})
            with self.amqp.lock:
                probe.until(lambda: probe.deliveries or probe.cancelled,
                            "finding the first offset kept", self.idle_timeout)
                first = probe.deliveries[0].offset if probe.deliveries else self.end
        finally:
            probe.close()
        if first > self.start:
            self._missing(self.start, first)

    def _missing(self, first: int, end: int) -> None:
        """Offsets [first, end) of the range are gone (removed by retention)."""
        if self.fail_on_data_loss:
            raise DataLossError(
                f"offsets {first} to {end - 1} of stream {self.queue!r} were removed by the "
                f"stream's retention before this query read them. Set option "
                f"failOnDataLoss to false to skip lost offsets, or keep more of the stream "
                f"(x-max-length-bytes, x-max-age)")
        self.lost += end - first
        log.warning("event=amqp_stream_data_lost stream=%r first=%d end=%d", self.queue,
                    first, end)

    def close(self) -> None:
        # Closing the connection ends the consumer; no cancel (whose pika BlockingChannel
        # version would reject deliveries, which RabbitMQ 3.10 punishes with 540).
        try:
            self.amqp.close()
        except Exception as error:  # the range is read (or failed already): only log
            log.warning("event=amqp_stream_close_failed stream=%r error=%r", self.queue, error)
