"""The broker with its metadata on PostgreSQL (`warren serve --metadata-url
postgresql+psycopg://...`), end to end with pika: a durable topology (exchanges of every
type, one internal, queues with arguments, a stream, queue bindings with patterns and
header arguments, exchange-to-exchange bindings) and persistent messages published with
confirms survive a clean restart and a SIGKILL, on the same data directory and the same
database; afterwards routing still works through the restored bindings.

PostgreSQL comes from the `postgres_server` fixture (tests/support/postgres_support.py: a
throwaway server started once per session, run as the `postgres` user under root); if
it cannot be started the test fails with the reason, it is never skipped.
"""

import signal
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pika.exceptions
import pytest

from tests.support.pika_helpers import close_quietly, expect_channel_error, get_all
from broker.core.passwords import SHA256_ALGORITHM, hash_password
from storage.metadata import SQLITE_FILE_NAME, MetadataStore, PasswordHash
from tests.support.stream_helpers import Reader

pytestmark = pytest.mark.warren_only(
    "Warren's metadata on PostgreSQL (--metadata-url), restarted and killed (broker_factory)")

PER_ROUTE = 5          # messages published along each route in each phase
STREAM_WAIT = 30.0     # seconds for a stream reader to receive what the stream holds


@dataclass(frozen=True)
class ExchangeSpec:
    name: str
    kind: str
    internal: bool = False
    arguments: dict = field(default_factory=dict)


@dataclass(frozen=True)
class QueueSpec:
    name: str
    arguments: dict = field(default_factory=dict)

    @property
    def is_stream(self) -> bool:
        return self.arguments.get("x-queue-type") == "stream"


@dataclass(frozen=True)
class Route:
    """A publish that must reach exactly `queues` through the bindings."""

    name: str
    exchange: str
    routing_key: str
    queues: tuple[str, ...]
    headers: dict | None = None


EXCHANGES = (
    ExchangeSpec("pg.direct", "direct"),
    ExchangeSpec("pg.fanout", "fanout", arguments={"x-owner": "test_postgres_broker"}),
    ExchangeSpec("pg.topic", "topic"),
    ExchangeSpec("pg.headers", "headers"),
    ExchangeSpec("pg.inner", "topic", internal=True),
)
QUEUES = (
    QueueSpec("pg.q.direct", {"x-max-length": 10_000, "x-overflow": "reject-publish"}),
    QueueSpec("pg.q.fanout", {"x-message-ttl": 3_600_000,
                              "x-dead-letter-exchange": "pg.direct",
                              "x-dead-letter-routing-key": "k.dead"}),
    QueueSpec("pg.q.topic", {"x-max-priority": 5}),
    QueueSpec("pg.q.headers", {"x-queue-mode": "lazy"}),
    QueueSpec("pg.q.inner"),
    QueueSpec("pg.stream", {"x-queue-type": "stream", "x-max-length-bytes": 50_000_000}),
)
QUEUE_BINDINGS = (   # (queue, exchange, routing key, arguments)
    ("pg.q.direct", "pg.direct", "k.direct", None),
    ("pg.q.fanout", "pg.fanout", "", None),
    ("pg.stream", "pg.fanout", "", None),
    ("pg.q.topic", "pg.topic", "orders.*.new", None),
    ("pg.q.headers", "pg.headers", "", {"x-match": "all", "kind": "invoice",
                                        "region": "eu"}),
    ("pg.q.inner", "pg.inner", "#", None),
)
EXCHANGE_BINDINGS = (   # (destination, source, routing key)
    ("pg.inner", "pg.direct", "k.inner"),
    ("pg.fanout", "pg.topic", "audit.#"),
)
ROUTES = (
    Route("direct", "pg.direct", "k.direct", ("pg.q.direct",)),
    Route("fanout", "pg.fanout", "anything", ("pg.q.fanout", "pg.stream")),
    Route("topic", "pg.topic", "orders.eu.new", ("pg.q.topic",)),
    Route("topic-to-fanout", "pg.topic", "audit.login.ok", ("pg.q.fanout", "pg.stream")),
    Route("headers", "pg.headers", "", ("pg.q.headers",),
          headers={"kind": "invoice", "region": "eu", "extra": "yes"}),
    Route("direct-to-internal", "pg.direct", "k.inner", ("pg.q.inner",)),
)
UNROUTABLE = (   # bound nowhere: the bindings keep their keys and arguments
    Route("headers-mismatch", "pg.headers", "", (), headers={"kind": "invoice",
                                                             "region": "us"}),
    Route("topic-mismatch", "pg.topic", "orders.eu.old", ()),
    Route("direct-mismatch", "pg.direct", "k.other", ()),
)


def test_topology_and_confirmed_messages_survive_restart_and_sigkill_on_postgres(
        broker_factory, postgres_server, tmp_path):
    data_dir = tmp_path / "data"
    expected: dict[str, list[str]] = {queue.name: [] for queue in QUEUES}
    with postgres_server.database() as url:
        broker = broker_factory("--metadata-url", url, data_dir=str(data_dir))
        with _connection(broker) as connection:
            _declare_topology(connection)
            _publish_along_every_route(connection, "first", expected)
        _check_metadata_is_in_postgres(url, tmp_path)
        assert not (data_dir / SQLITE_FILE_NAME).exists()

        assert broker.stop() == 0, "".join(broker.log_lines)
        broker = broker_factory("--metadata-url", url, data_dir=str(data_dir))
        _check_restored(broker, expected, "after a clean restart")
        with _connection(broker) as connection:
            _publish_along_every_route(connection, "restarted", expected)
        _check_messages(broker, expected, "published after the clean restart")

        broker.process.send_signal(signal.SIGKILL)
        assert broker.process.wait(10) == -signal.SIGKILL
        broker = broker_factory("--metadata-url", url, data_dir=str(data_dir))
        _check_restored(broker, expected, "after SIGKILL")
        with _connection(broker) as connection:
            _publish_along_every_route(connection, "killed", expected)
        _check_messages(broker, expected, "published after the SIGKILL")
        assert broker.stop() == 0, "".join(broker.log_lines)


class _connection:
    """A pika BlockingConnection to `broker`, closed on leaving the block."""

    def __init__(self, broker):
        self.connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", broker.port, connection_attempts=1))

    def __enter__(self) -> pika.BlockingConnection:
        return self.connection

    def __exit__(self, *exc_info) -> None:
        close_quietly(self.connection)


def _declare_topology(connection) -> None:
    channel = connection.channel()
    for exchange in EXCHANGES:
        channel.exchange_declare(exchange.name, exchange.kind, durable=True,
                                 internal=exchange.internal,
                                 arguments=exchange.arguments or None)
    for queue in QUEUES:
        channel.queue_declare(queue.name, durable=True, arguments=queue.arguments or None)
    for queue, exchange, routing_key, arguments in QUEUE_BINDINGS:
        channel.queue_bind(queue, exchange, routing_key, arguments=arguments)
    for destination, source, routing_key in EXCHANGE_BINDINGS:
        channel.exchange_bind(destination, source, routing_key)
    channel.close()


def _publish_along_every_route(connection, phase: str,
                               expected: dict[str, list[str]]) -> None:
    """Persistent messages, mandatory, on a confirm channel: each basic_publish returns
    once the broker confirmed it (pika raises for a nack or a return). Messages that
    must not be routed anywhere come back (UnroutableError)."""
    channel = connection.channel()
    channel.confirm_delivery()
    for route in ROUTES:
        for index in range(PER_ROUTE):
            body = f"{phase}/{route.name}/{index}"
            channel.basic_publish(route.exchange, route.routing_key, body.encode(),
                                  _persistent(route.headers), mandatory=True)
            for queue in route.queues:
                expected[queue].append(body)
    for route in UNROUTABLE:
        with pytest.raises(pika.exceptions.UnroutableError):
            channel.basic_publish(route.exchange, route.routing_key,
                                  f"{phase}/{route.name}".encode(),
                                  _persistent(route.headers), mandatory=True)
    channel.close()


def _persistent(headers: dict | None) -> pika.BasicProperties:
    return pika.BasicProperties(delivery_mode=2, headers=headers)


def _check_metadata_is_in_postgres(url: str, tmp_path: Path) -> None:
    """The durable topology the broker confirmed is in the PostgreSQL database."""
    guest = PasswordHash(hash_password("guest"), SHA256_ALGORITHM)   # not used: it exists
    with MetadataStore.open(url, str(tmp_path / "unused"), guest) as store:
        exchanges = {record.name: record for record in store.list_exchanges("/")}
        queues = {record.name: record for record in store.list_queues("/")}
        bindings = {(record.source, record.destination_kind, record.destination)
                    for record in store.list_bindings("/")}
    for exchange in EXCHANGES:
        record = exchanges[exchange.name]
        assert (record.type, record.internal, record.arguments) == (
            exchange.kind, exchange.internal, exchange.arguments)
    for queue in QUEUES:
        assert queues[queue.name].arguments == queue.arguments
    for destination, source, _key in EXCHANGE_BINDINGS:
        assert (source, "exchange", destination) in bindings
    for queue, exchange, _key, _arguments in QUEUE_BINDINGS:
        assert (exchange, "queue", queue) in bindings


def _check_restored(broker, expected: dict[str, list[str]], when: str) -> None:
    with _connection(broker) as connection:
        _check_topology(connection)
    _check_messages(broker, expected, when)


def _check_topology(connection) -> None:
    """Every exchange and queue exists (passive declare) and is what was declared: an
    identical redeclaration is accepted (type, flags and arguments restored) and a
    different one refused with 406."""
    channel = connection.channel()
    for exchange in EXCHANGES:
        channel.exchange_declare(exchange.name, passive=True)
        channel.exchange_declare(exchange.name, exchange.kind, durable=True,
                                 internal=exchange.internal,
                                 arguments=exchange.arguments or None)
    for queue in QUEUES:
        channel.queue_declare(queue.name, passive=True)
        channel.queue_declare(queue.name, durable=True, arguments=queue.arguments or None)
    for exchange in EXCHANGES:
        other = connection.channel()
        other_kind = "direct" if exchange.kind != "direct" else "fanout"
        expect_channel_error(connection, other, 406, lambda: other.exchange_declare(
            exchange.name, other_kind, durable=True, internal=exchange.internal,
            arguments=exchange.arguments or None))
    for queue in QUEUES:
        other = connection.channel()
        # x-max-length-bytes is compared on classic queues and streams alike
        changed = {**queue.arguments,
                   "x-max-length-bytes": queue.arguments.get("x-max-length-bytes", 0) + 1}
        expect_channel_error(connection, other, 406, lambda: other.queue_declare(
            queue.name, durable=True, arguments=changed))
    channel.close()


def _check_messages(broker, expected: dict[str, list[str]], when: str) -> None:
    """Each classic queue holds exactly the expected bodies in order (read with
    Basic.Get, then requeued by closing the channel); the stream holds them from its
    first offset on."""
    with _connection(broker) as connection:
        for queue in QUEUES:
            if queue.is_stream:
                reader = Reader(connection, queue.name, offset="first")
                received = reader.read(len(expected[queue.name]), timeout=STREAM_WAIT)
                reader.close()
            else:
                received = _browse(connection, queue.name)
            assert received == expected[queue.name], (queue.name, when)


def _browse(connection, queue: str) -> list[str]:
    channel = connection.channel()
    count = channel.queue_declare(queue, passive=True).method.message_count
    bodies = [body.decode() for _, _, body in get_all(channel, queue, auto_ack=False)]
    channel.close()       # the unacked messages go back to the queue, in order
    assert count == len(bodies), (queue, count, bodies)
    return bodies
