"""pika connections for the data source: AmqpConnection (a BlockingConnection with a
background I/O thread) and QueueConsumer, which holds deliveries until told to
acknowledge them. The confirming publisher is in writer.py.

pika's BlockingConnection does I/O (heartbeats included) only while one of its methods
runs. Spark may leave a reader idle for a long time between calls (a slow micro-batch, a
long trigger interval), so every connection here has a background thread that pumps
I/O: every couple of seconds for a publisher (heartbeats), every few milliseconds for a
consumer, so that deliveries are decoded into the buffer while Spark is busy with the
previous micro-batch instead of when the next one is planned. One pump reads one socket
buffer (a few hundred small messages), so while deliveries keep coming a consumer's
thread pumps again at once rather than after the interval. pika is not thread-safe:
the thread and the caller take turns under one lock, so the connection is never used by
two threads at once.

A consuming channel's deliveries are parsed by DeliveryFrames (delivery_frames.py) from
the socket bytes, not by pika's frame objects and channel machinery; pika still does
the handshake, the other methods, acknowledgements and heartbeats on the same
connection.
"""

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

import pika
import pika.exceptions

from .delivery_frames import DeliveryFrames
from .gc_pause import cyclic_gc_paused
from .messages import Delivery
from .options import redact_url

log = logging.getLogger("warren.spark")

KEEPALIVE_INTERVAL = 2.0  # seconds between I/O pumps of an idle publisher
CONSUMER_PUMP_INTERVAL = 0.02  # ... and of a consumer
# pika exceptions that mean the connection or channel is gone.
CONNECTION_ERRORS = (pika.exceptions.AMQPError, OSError)


def _noop() -> None:
    pass


class AmqpConnectorError(RuntimeError):
    """The broker refused or lost the connection, or an AMQP operation failed."""


class AmqpConnection:
    """One BlockingConnection with one channel, shared by its owner and a keepalive thread.

    `received`, when given, counts the deliveries received so far: the thread pumps
    again without waiting as long as a pump made it grow."""

    def __init__(self, url: str, purpose: str, pump_interval: float = KEEPALIVE_INTERVAL,
                 received: Callable[[], int] | None = None):
        self.url = url
        self.purpose = purpose
        self.pump_interval = pump_interval
        self.received = received
        self.lock = threading.RLock()
        self.connection = None
        self.channel = None
        self.failure = None  # the exception that broke the connection, if any
        self._stop = threading.Event()
        self._thread = None
        self._delivery_frames = None  # DeliveryFrames, once a channel's deliveries are routed

    def open(self) -> None:
        parameters = pika.URLParameters(self.url)
        parameters.client_properties = {"connection_name": f"warren-spark {self.purpose}"}
        try:
            self.connection = pika.BlockingConnection(parameters)
            self.channel = self.connection.channel()
        except CONNECTION_ERRORS as error:
            self.close()
            raise AmqpConnectorError(
                f"cannot connect to {redact_url(self.url)} ({self.purpose}): {error!r}") from None
        self._thread = threading.Thread(target=self._keepalive, daemon=True,
                                        name=f"warren-spark keepalive ({self.purpose})")
        self._thread.start()

    def route_deliveries(self, channel_number: int, on_delivery) -> None:
        """Parse the deliveries of channel `channel_number` with DeliveryFrames (not pika)
        and pass each to `on_delivery(delivery_tag, redelivered, exchange, routing_key,
        properties, body)`; call before the channel's Basic.Consume."""
        if self._delivery_frames is None:
            self._delivery_frames = DeliveryFrames(self.connection._impl)
        self._delivery_frames.route(channel_number, on_delivery)

    def unroute_deliveries(self, channel_number: int) -> None:
        """The channel is closed: its number may be reused by a channel pika reads."""
        if self._delivery_frames is not None:
            self._delivery_frames.unroute(channel_number)

    @property
    def is_open(self) -> bool:
        return (self.failure is None and self.connection is not None
                and self.connection.is_open and self.channel is not None
                and self.channel.is_open)

    def _keepalive(self) -> None:
        while not self._stop.wait(self.pump_interval):
            while self._pump():
                pass

    def _pump(self) -> bool:
        """Process what the socket holds now; whether deliveries came (pump again)."""
        with self.lock:
            if self._stop.is_set() or not self.is_open:
                return False
            before = self.received() if self.received else 0
            try:
                with cyclic_gc_paused():  # deliveries parsed into the buffer
                    self.connection.process_data_events(time_limit=0)
            except CONNECTION_ERRORS as error:
                self.failure = error
                log.warning("event=amqp_connection_lost purpose=%r url=%s error=%r",
                            self.purpose, redact_url(self.url), error)
                return False
            return self.received is not None and self.received() != before

    def close(self) -> None:
        """Close the connection (deliveries not acknowledged go back to their queues)."""
        self._stop.set()
        with self.lock:
            connection, self.connection, self.channel = self.connection, None, None
            if connection is not None and connection.is_open:
                try:
                    connection.close()
                except CONNECTION_ERRORS:
                    pass
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.pump_interval + 1)


def _queue_error(error, queue: str, url: str) -> AmqpConnectorError:
    if isinstance(error, pika.exceptions.ChannelClosedByBroker) and error.reply_code == 404:
        return AmqpConnectorError(
            f"queue {queue!r} does not exist on {redact_url(url)} (the amqp source does not "
            f"declare queues: declare it first)")
    return AmqpConnectorError(f"queue {queue!r} on {redact_url(url)}: {error!r}")


class QueueConsumer:
    """Consumes `queue` with manual acknowledgements and at most `prefetch` (0: any number)
    unacknowledged deliveries; deliveries wait in `buffer` until taken, taken ones stay
    unacknowledged until `ack_through`."""

    def __init__(self, url: str, queue: str, prefetch: int, purpose: str):
        self.url = url
        self.queue = queue
        self.prefetch = prefetch
        self.amqp = AmqpConnection(url, purpose, pump_interval=CONSUMER_PUMP_INTERVAL,
                                   received=lambda: self.received)
        self.received = 0  # deliveries received, ever
        self.buffer = deque()
        self.taken = deque()  # delivery tags taken and not yet acknowledged, ascending
        self.consumer_tag = None
        self._waiting = False  # wait() is running: end it at the next delivery

    def _on_delivery(self, delivery_tag, redelivered, exchange, routing_key, properties,
                     body) -> None:
        self.received += 1
        self.buffer.append(Delivery(delivery_tag, exchange, routing_key, redelivered,
                                    properties, body))
        if self._waiting:
            self._waiting = False
            # A 0-delay timer ends the running process_data_events (a delivery parsed by
            # DeliveryFrames is not one of BlockingConnection's own events).
            self.amqp.connection.call_later(0, _noop)

    def _on_message(self, channel, method, properties, body) -> None:
        # pika's path: only for a delivery DeliveryFrames left to pika (none in practice:
        # it is installed before Basic.Consume).
        self._on_delivery(method.delivery_tag, method.redelivered, method.exchange,
                          method.routing_key, properties, body)

    def open(self) -> int:
        """Connect and check the queue exists; returns its ready-message count."""
        self.amqp.open()
        with self.amqp.lock:
            try:
                return self.amqp.channel.queue_declare(self.queue, passive=True) \
                    .method.message_count
            except CONNECTION_ERRORS as error:
                self.amqp.close()
                raise _queue_error(error, self.queue, self.url) from None

    def consume(self) -> None:
        """Start the consumer (Basic.Qos with `prefetch`, then Basic.Consume)."""
        with self.amqp.lock:
            channel = self.amqp.channel
            try:
                if self.prefetch:
                    channel.basic_qos(prefetch_count=self.prefetch)
                self.amqp.route_deliveries(channel.channel_number, self._on_delivery)
                self.consumer_tag = channel.basic_consume(self.queue, self._on_message,
                                                          auto_ack=False)
            except CONNECTION_ERRORS as error:
                self.amqp.close()
                raise _queue_error(error, self.queue, self.url) from None

    @property
    def is_open(self) -> bool:
        return self.amqp.is_open

    def _check(self) -> None:
        if self.amqp.failure is not None:
            raise AmqpConnectorError(f"connection to {redact_url(self.url)} was lost: "
                                     f"{self.amqp.failure!r}")

    def pump(self) -> None:
        """Read and dispatch what the socket holds now, without waiting."""
        with self.amqp.lock:
            self._check()
            try:
                with cyclic_gc_paused():
                    while True:
                        before = len(self.buffer)
                        self.amqp.connection.process_data_events(time_limit=0)
                        if len(self.buffer) == before:
                            return
            except CONNECTION_ERRORS as error:
                self.amqp.failure = error
                raise AmqpConnectorError(f"consuming {self.queue!r}: {error!r}") from None

    def wait(self, seconds: float) -> None:
        """Process I/O for up to `seconds` (returns early on nothing; pika's own timer)."""
        with self.amqp.lock:
            self._check()
            self._waiting = True
            try:
                with cyclic_gc_paused():
                    self.amqp.connection.process_data_events(time_limit=seconds)
            except CONNECTION_ERRORS as error:
                self.amqp.failure = error
                raise AmqpConnectorError(f"consuming {self.queue!r}: {error!r}") from None
            finally:
                self._waiting = False

    def settle(self) -> int:
        """The queue's ready-message count, after which every delivery the broker sent
        before counting is in `buffer`.

        Two passive declares: AMQP orders a channel's frames, so deliveries sent before
        the DeclareOk precede it; the second round trip covers brokers (RabbitMQ) whose
        queue may answer the count while a delivery is still on its way to the channel.
        """
        with self.amqp.lock:
            self._check()
            try:
                channel = self.amqp.channel
                channel.queue_declare(self.queue, passive=True)
                count = channel.queue_declare(self.queue, passive=True).method.message_count
            except CONNECTION_ERRORS as error:
                self.amqp.failure = error
                raise _queue_error(error, self.queue, self.url) from None
        self.pump()
        return count

    def credit_exhausted(self) -> bool:
        """Whether the broker may not send more (prefetch reached)."""
        return bool(self.prefetch) and len(self.taken) + len(self.buffer) >= self.prefetch

    def fill(self, target: int, timeout: float) -> None:
        """Wait until `buffer` holds `target` deliveries, the queue has no more ready
        messages, the prefetch window is full, or `timeout` passes."""
        deadline = time.monotonic() + timeout
        self.pump()
        while len(self.buffer) < target and not self.credit_exhausted():
            ready = self.settle()
            if len(self.buffer) >= target or ready == 0 or self.credit_exhausted():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning("event=amqp_fill_timeout queue=%r buffered=%d target=%d ready=%d",
                            self.queue, len(self.buffer), target, ready)
                return
            self.wait(min(0.05, remaining))

    def take(self, limit: int, max_bytes: int | None = None,
             at_least_one: bool = True) -> list:
        """Up to `limit` buffered deliveries, oldest first, with bodies of at most
        `max_bytes` in all (but, if `at_least_one`, at least one delivery, so that a
        larger message still gets through); they stay unacknowledged."""
        with self.amqp.lock:
            count = min(limit, len(self.buffer))
            if max_bytes is not None:
                count = self._count_within(count, max_bytes, at_least_one)
            deliveries = [self.buffer.popleft() for _ in range(count)]
            self.taken.extend(d.tag for d in deliveries)
            return deliveries

    def _count_within(self, limit: int, max_bytes: int, at_least_one: bool) -> int:
        """How many of the first `limit` buffered deliveries fit in `max_bytes` of bodies."""
        total = 0
        for count, delivery in enumerate(itertools.islice(self.buffer, limit)):
            total += len(delivery.body)
            if total > max_bytes:
                return max(count, 1) if at_least_one else count
        return limit

    def ack_through(self, tag: int) -> None:
        """Acknowledge every taken delivery up to and including `tag` (multiple=true).

        Deliveries are taken in delivery-tag order, so the range holds no delivery that
        is still buffered or belongs to a later batch.
        """
        with self.amqp.lock:
            self._check()
            try:
                self.amqp.channel.basic_ack(delivery_tag=tag, multiple=True)
                # Make sure the ack left the process before we forget the tags.
                self.amqp.connection.process_data_events(time_limit=0)
            except CONNECTION_ERRORS as error:
                self.amqp.failure = error
                raise AmqpConnectorError(f"acknowledging on {self.queue!r}: {error!r}") \
                    from None
            while self.taken and self.taken[0] <= tag:
                self.taken.popleft()

    def cancel(self) -> None:
        """Stop the consumer: the broker sends no more deliveries."""
        with self.amqp.lock:
            self._check()
            try:
                self.amqp.channel.basic_cancel(self.consumer_tag)
            except CONNECTION_ERRORS as error:
                self.amqp.failure = error
                raise AmqpConnectorError(f"cancelling the consumer on {self.queue!r}: "
                                         f"{error!r}") from None

    def close(self) -> None:
        self.amqp.close()
        self.buffer.clear()
        self.taken.clear()
