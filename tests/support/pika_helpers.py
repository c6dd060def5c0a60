"""Shared helpers and fixtures for the tests that use pika (most of tests/integration/, and
tests/clients/test_pika_*.py).

The fixtures connect to the test's own vhost and user, the `warren` fixture of Warren's
pytest plugin, on the session's broker: Warren by default, or any broker named by
WARREN_TEST_BROKER=host:port (RabbitMQ is the reference). Everything a test makes goes
with its vhost at teardown; names are still unique (uuid), so that a message or a log line
names one test's queue.

Test modules import the fixtures they use by name, always with `_test_deadline` (autouse),
    from tests.support.pika_helpers import _test_deadline, chan, conn, names  # noqa: F401  (fixtures)
"""

import signal
import time
import uuid

import pika
import pika.exceptions
import pytest
from pika import spec

from broker.testing import test_vhost
from broker.testing.test_vhost import TestVhost

# A broker given by its address (`warren_broker`, or a dedicated broker of broker_factory)
# is reached as the user every fresh broker has, on its default vhost.
USER = "guest"
PASSWORD = "guest"
VHOST = "/"
# Upper bound for one wait on the broker (a delivery, a queue becoming empty, ...).
WAIT = 5.0
# Default wall-clock limit of one test; a module may set PIKA_TEST_TIMEOUT to change it.
# pika's BlockingConnection has no RPC timeout, so a broker that never answers would
# otherwise hang the run.
DEFAULT_TEST_TIMEOUT = 30


class DeadlineExceeded(Exception):
    """Raised inside a test that ran past its wall-clock limit."""


def unique(prefix: str = "t") -> str:
    """A name no other test uses: `prefix-<32 hex digits>`."""
    return f"{prefix}-{uuid.uuid4().hex}"


def params(target, **kwargs) -> pika.ConnectionParameters:
    """ConnectionParameters for `target`: a TestVhost (the `warren` fixture: its vhost,
    as its user) or a broker's address (host and port: guest on `/`); keyword arguments
    override those defaults."""
    if isinstance(target, TestVhost):
        kwargs.setdefault("credentials", pika.PlainCredentials(target.user, target.password))
        kwargs.setdefault("virtual_host", target.vhost)
    else:
        kwargs.setdefault("credentials", pika.PlainCredentials(USER, PASSWORD))
        kwargs.setdefault("virtual_host", VHOST)
    kwargs.setdefault("connection_attempts", 1)
    return pika.ConnectionParameters(host=target.host, port=target.port, **kwargs)


def connect(target, **kwargs) -> pika.BlockingConnection:
    """Open a BlockingConnection to `target` (a TestVhost or a broker's address, as
    `params`)."""
    return pika.BlockingConnection(params(target, **kwargs))


def amqp_url(target) -> str:
    """The amqp:// URL of `target` (a TestVhost or a broker's address, as `params`), for
    the clients that take one (kombu, the Spark source)."""
    if isinstance(target, TestVhost):
        return target.url
    return test_vhost.amqp_url(target.host, target.port, VHOST, USER, PASSWORD)


def close_quietly(connection) -> None:
    if connection is not None and connection.is_open:
        try:
            connection.close()
        except pika.exceptions.AMQPError:
            pass


def wait_until(connection, predicate, timeout: float = WAIT) -> bool:
    """Process I/O on `connection` until `predicate()` is true or `timeout` passes.

    Returns the final value of `predicate()`: callers assert on it. This waits for an
    event with a deadline; it never sleeps a fixed time.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        connection.process_data_events(time_limit=min(0.05, remaining))
    return bool(predicate())


def flush(connection) -> None:
    """Dispatch every event pika has already read (deliveries buffered during an RPC)."""
    connection.process_data_events(time_limit=0)


def ready_count(channel, queue: str) -> int:
    """Messages ready for delivery in `queue` (passive Queue.Declare's message_count).

    Careful: in RabbitMQ the counts in Queue.DeclareOk may lag behind messages published
    just before on the same channel (the queue answers the stat request ahead of
    deliveries still in its mailbox). Use `wait_for_count` unless nothing can be in
    flight (e.g. after a Basic.Get, Purge or a delivery, which the queue handles in order).
    """
    return channel.queue_declare(queue, passive=True).method.message_count


def consumer_count(channel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.consumer_count


def wait_for_count(channel, queue: str, expected: int, field: str = "message_count",
                   timeout: float = WAIT) -> int:
    """Passive-declare `queue` until DeclareOk's `field` equals `expected` or `timeout`
    passes; returns the last value seen (callers assert on it)."""
    deadline = time.monotonic() + timeout
    while True:
        value = getattr(channel.queue_declare(queue, passive=True).method, field)
        if value == expected or time.monotonic() >= deadline:
            return value
        channel.connection.process_data_events(time_limit=0.01)


def queue_exists(connection, queue: str) -> bool:
    """Whether `queue` exists, asked on a fresh channel of `connection` (404 -> False;
    405, an exclusive queue of another connection, counts as existing)."""
    channel = connection.channel()
    try:
        channel.queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker as error:
        if error.reply_code == 404:
            return False
        if error.reply_code == 405:
            return True
        raise
    channel.close()
    return True


def wait_until_queue_gone(connection, queue: str, timeout: float = WAIT) -> bool:
    """Poll until `queue` no longer exists (for deletions the broker makes on its own,
    e.g. when an exclusive queue's connection closes); returns whether it went."""
    deadline = time.monotonic() + timeout
    while queue_exists(connection, queue):
        if time.monotonic() >= deadline:
            return False
        connection.process_data_events(time_limit=0.01)
    return True


def publish_bodies(channel, exchange: str, routing_key: str, bodies, properties=None):
    for body in bodies:
        if isinstance(body, str):
            body = body.encode()
        channel.basic_publish(exchange, routing_key, body, properties)


def get_all(channel, queue: str, auto_ack: bool = True):
    """Basic.Get until GetEmpty; returns a list of (method, properties, body)."""
    messages = []
    while True:
        method, properties, body = channel.basic_get(queue, auto_ack=auto_ack)
        if method is None:
            return messages
        messages.append((method, properties, body))


def get_bodies(channel, queue: str):
    """Basic.Get (auto-ack) everything in `queue`; returns the bodies decoded as text."""
    return [body.decode() for _, _, body in get_all(channel, queue)]


def consume_and_ack(channel, queue: str, count: int, timeout: float = WAIT) -> list[bytes]:
    """Basic.Consume `queue` until `count` messages came, each acked; fails if none came
    for `timeout` seconds. Cancels the consumer before returning the bodies."""
    bodies = []
    for method, _properties, body in channel.consume(queue, inactivity_timeout=timeout):
        assert method is not None, f"got {len(bodies)} of {count} messages from {queue}"
        channel.basic_ack(method.delivery_tag)
        bodies.append(body)
        if len(bodies) == count:
            break
    channel.cancel()
    return bodies


def wait_for_bodies(channel, queue: str, count: int, timeout: float = WAIT):
    """Basic.Get (auto-ack) until `count` messages came or `timeout` passed; returns the
    bodies decoded as text. For messages published on another channel or connection:
    AMQP orders a channel's methods, but nothing orders one channel's publish before
    another channel's Basic.Get."""
    bodies = []
    deadline = time.monotonic() + timeout
    while len(bodies) < count:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            bodies.append(body.decode())
        elif time.monotonic() >= deadline:
            break
        else:
            channel.connection.process_data_events(time_limit=0.01)
    return bodies


def exclusive_queue(channel) -> str:
    """Declare a server-named exclusive queue (deleted with its connection)."""
    return channel.queue_declare("", exclusive=True).method.queue


def raw_rpc(connection, channel, method, replies, timeout: float = WAIT):
    """Send `method` on a BlockingChannel's underlying channel and wait for one of `replies`.

    For the few protocol details pika's public API hides (pika always sends its own
    consumer tag in Basic.Consume, so the server-generated tag is only reachable this way).
    Returns the reply frame's method.
    """
    results = []
    channel._impl._rpc(method, results.append, replies)
    assert wait_until(connection, lambda: results, timeout), f"no reply to {method}"
    return results[0].method


def server_named_consume(connection, channel, queue: str) -> str:
    """Basic.Consume with an empty consumer tag; returns the tag from ConsumeOk."""
    reply = raw_rpc(connection, channel, spec.Basic.Consume(queue=queue, consumer_tag=""),
                    [spec.Basic.ConsumeOk])
    return reply.consumer_tag


def raw_cancel(connection, channel, consumer_tag: str) -> str:
    reply = raw_rpc(connection, channel, spec.Basic.Cancel(consumer_tag=consumer_tag),
                    [spec.Basic.CancelOk])
    return reply.consumer_tag


def expect_channel_error(connection, channel, code: int, action):
    """Run `action()` and assert the broker closes `channel` with `code`.

    Errors on asynchronous methods (Basic.Publish, Basic.Ack, ...) arrive later, so after
    `action()` a synchronous round trip (a passive declare of amq.direct, which changes
    nothing) is made to collect the Channel.Close. Returns the exception; asserts the
    connection itself stayed open.
    """
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        action()
        channel.exchange_declare("amq.direct", passive=True)
    assert info.value.reply_code == code, info.value
    assert channel.is_closed
    assert connection.is_open
    return info.value


def expect_connection_error(connection, code: int, action):
    """Run `action()` and assert the broker closes the whole connection with `code`."""
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        action()
        wait_until(connection, lambda: connection.is_closed)
    assert info.value.reply_code == code, info.value
    assert connection.is_closed
    return info.value


class Names:
    """Unique queue and exchange names for a test."""

    def queue(self, prefix: str = "q") -> str:
        return unique(prefix)

    def exchange(self, prefix: str = "x") -> str:
        return unique(prefix)


@pytest.fixture
def names():
    """Unique queue/exchange names. What they name is removed with the test's vhost
    (`warren`), or with its dedicated broker."""
    return Names()


@pytest.fixture
def conn(warren):
    """A BlockingConnection to the test's vhost (`warren`), closed after the test."""
    connection = connect(warren)
    yield connection
    close_quietly(connection)


@pytest.fixture
def chan(conn):
    """A channel on `conn`."""
    return conn.channel()


@pytest.fixture(autouse=True)
def _test_deadline(request):
    """Fail (rather than hang) a test that runs past its module's PIKA_TEST_TIMEOUT."""
    seconds = getattr(request.module, "PIKA_TEST_TIMEOUT", DEFAULT_TEST_TIMEOUT)

    def expired(signum, frame):
        raise DeadlineExceeded(f"test ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
