"""Helpers shared by the stream-queue tests (test_streams.py, the Warren-only
test_stream_extensions.py and test_stream_crash.py): declaring and filling streams,
a Reader that records deliveries and broker cancels, offsets from headers."""

import time
from dataclasses import dataclass

from pika import spec

from tests.support.pika_helpers import WAIT, wait_until

STREAM = {"x-queue-type": "stream"}
PREFETCH = 100
# How long a consumer must stay without a delivery to show the broker holds one back.
QUIET = 1.0
ABSENT = object()   # no x-stream-offset argument at all


def declare_stream(channel, names, **arguments) -> str:
    """Declare a durable stream with a unique name (deleted after the test)."""
    queue = names.queue("stream")
    channel.queue_declare(queue, durable=True, arguments={**STREAM, **arguments})
    return queue


def confirm_channel(connection):
    """A new channel in confirm mode: each basic_publish returns once the broker
    confirmed the message (pika raises if it is nacked or returned)."""
    channel = connection.channel()
    channel.confirm_delivery()
    return channel


def publish_confirmed(channel, queue, bodies):
    """Publish `bodies` (text) to `queue` one by one on a confirm-mode channel."""
    for body in bodies:
        channel.basic_publish("", queue, body.encode())


def texts(prefix, count, start=0):
    return [f"{prefix}{index}" for index in range(start, start + count)]


def stream_offset(properties) -> int:
    return properties.headers["x-stream-offset"]


@dataclass
class Delivery:
    method: spec.Basic.Deliver
    properties: spec.BasicProperties
    body: bytes

    @property
    def offset(self) -> int:
        return stream_offset(self.properties)

    @property
    def text(self) -> str:
        return self.body.decode()


class Reader:
    """A stream consumer on a channel of its own: qos `prefetch`, manual acks (each
    delivery is acked as it comes unless `ack=False`), `offset` the x-stream-offset
    argument (ABSENT: none), `arguments` any further consumer arguments. Records
    deliveries and broker-sent cancels."""

    def __init__(self, connection, queue, offset=ABSENT, prefetch=PREFETCH, ack=True,
                 consumer_tag=None, arguments=None):
        self.connection = connection
        self.queue = queue
        self.ack = ack
        self.deliveries = []
        self.cancels = []
        self.channel = connection.channel()
        self.channel.basic_qos(prefetch_count=prefetch)
        self.channel.add_on_cancel_callback(lambda frame: self.cancels.append(frame.method))
        arguments = dict(arguments or {})
        if offset is not ABSENT:
            arguments["x-stream-offset"] = offset
        self.tag = self.channel.basic_consume(queue, self._on_message, auto_ack=False,
                                              arguments=arguments or None,
                                              consumer_tag=consumer_tag)

    def _on_message(self, channel, method, properties, body):
        self.deliveries.append(Delivery(method, properties, body))
        if self.ack:
            channel.basic_ack(method.delivery_tag)

    def wait_for(self, count: int, timeout: float = WAIT) -> bool:
        """Process I/O until at least `count` deliveries came (False on timeout)."""
        return wait_until(self.connection, lambda: len(self.deliveries) >= count, timeout)

    def read(self, count: int, timeout: float = WAIT) -> list:
        """Wait for `count` deliveries in all; returns the texts of all received."""
        assert self.wait_for(count, timeout), (
            f"{len(self.deliveries)} of {count} deliveries after {timeout} s: {self.texts}")
        return self.texts

    def cancel(self) -> None:
        """Basic.Cancel; only when no delivery can still be on its way (pika would
        reject it, which RabbitMQ 3.10 answers with connection error 540)."""
        self.channel.basic_cancel(self.tag)

    def close(self) -> None:
        """Close the reader's channel (cancelling its consumer: the same caveat)."""
        self.channel.close()

    @property
    def offsets(self) -> list:
        return [delivery.offset for delivery in self.deliveries]

    @property
    def texts(self) -> list:
        return [delivery.text for delivery in self.deliveries]


def filled_stream(connection, names, count, prefix="m", **arguments):
    """A stream holding `count` confirmed messages `<prefix>0`, `<prefix>1`, ...; returns
    (queue, confirm-mode publishing channel)."""
    publisher = confirm_channel(connection)
    queue = declare_stream(publisher, names, **arguments)
    publish_confirmed(publisher, queue, texts(prefix, count))
    return queue, publisher


def next_delivery(messages, timeout: float = WAIT):
    """The next (method, properties, body) from a `consume` generator made with
    inactivity_timeout=QUIET, waiting up to `timeout` for it."""
    deadline = time.monotonic() + timeout
    while True:
        method, properties, body = next(messages)
        if method is not None:
            return method, properties, body
        assert time.monotonic() < deadline, "no delivery"


def nothing_more(messages) -> bool:
    """Whether a `consume` generator made with inactivity_timeout=QUIET stays quiet
    (waits QUIET seconds: there is no event to wait for when nothing must happen)."""
    return next(messages) == (None, None, None)
