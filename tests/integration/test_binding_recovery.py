"""Durable bindings come back after a restart whatever their destination is: a classic
queue, a stream queue, or another exchange. Warren only: each test restarts a broker of
its own on the same data directory."""

import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline: fixture)
    _test_deadline, close_quietly, connect, wait_for_bodies,
)
from tests.support.stream_helpers import STREAM, Reader, confirm_channel

pytestmark = pytest.mark.warren_only(
    "restarts a Warren broker of its own on the same data directory (broker_factory)")


def declare_bound_destinations(broker) -> None:
    """Fanout "up" -> direct "down" (exchange-to-exchange), and "down" -> a classic
    queue and a stream, all durable."""
    connection = connect(broker)
    channel = connection.channel()
    channel.exchange_declare("up", "fanout", durable=True)
    channel.exchange_declare("down", "direct", durable=True)
    channel.exchange_bind("down", "up")
    channel.queue_declare("classic", durable=True)
    channel.queue_declare("stream", durable=True, arguments=STREAM)
    channel.queue_bind("classic", "down", "k")
    channel.queue_bind("stream", "down", "k")
    connection.close()


def test_bindings_to_queues_streams_and_exchanges_survive_a_restart(broker_factory,
                                                                     tmp_path):
    data_dir = str(tmp_path / "data")
    broker = broker_factory(data_dir=data_dir)
    declare_bound_destinations(broker)
    assert broker.stop() == 0
    broker = broker_factory(data_dir=data_dir)
    connection = connect(broker)
    try:
        publisher = confirm_channel(connection)
        # mandatory: pika raises UnroutableError if no binding led anywhere
        publisher.basic_publish("up", "k", b"routed", mandatory=True)
        assert wait_for_bodies(connection.channel(), "classic", 1) == ["routed"]
        assert Reader(connection, "stream", "first").read(1) == ["routed"]
    finally:
        close_quietly(connection)
