"""Auto-delete exchanges go when their last binding as a source is removed, and only
then (RabbitMQ 3.10's rule; differential: run also with WARREN_TEST_BROKER)."""

import pika
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline: fixture)
    _test_deadline, close_quietly, wait_until,
)


@pytest.fixture
def space(warren):
    connection = pika.BlockingConnection(warren.connection_parameters())
    try:
        yield connection, connection.channel()
    finally:
        close_quietly(connection)


def exists(connection, exchange):
    channel = connection.channel()
    try:
        channel.exchange_declare(exchange, passive=True)
    except Exception:   # 404 closes the probe channel
        return False
    channel.close()
    return True


def test_never_bound_auto_delete_exchange_stays_when_a_queue_is_deleted(space):
    connection, channel = space
    channel.exchange_declare("x", "direct", auto_delete=True)
    channel.queue_declare("q")
    channel.queue_delete("q")
    assert exists(connection, "x")


def test_exchange_unbind_of_last_binding_deletes_the_source_only(space):
    connection, channel = space
    channel.exchange_declare("x", "fanout", auto_delete=True)
    channel.exchange_declare("y", "fanout", auto_delete=True)
    channel.exchange_declare("z", "fanout")
    channel.exchange_bind("y", "x")
    channel.exchange_bind("z", "y")
    channel.exchange_unbind("y", "x")
    assert not exists(connection, "x")
    assert exists(connection, "y")     # still the source of y -> z


def test_deleting_the_destination_exchange_deletes_the_auto_delete_source(space):
    connection, channel = space
    channel.exchange_declare("x", "fanout", auto_delete=True)
    channel.exchange_declare("y", "fanout")
    channel.exchange_bind("y", "x")
    channel.exchange_delete("y")
    assert not exists(connection, "x")


def test_deletion_cascades_through_auto_delete_exchanges(space):
    connection, channel = space
    channel.exchange_declare("x", "fanout", auto_delete=True)
    channel.exchange_declare("y", "fanout", auto_delete=True)
    channel.queue_declare("q")
    channel.queue_bind("q", "y")
    channel.exchange_bind("y", "x")
    channel.queue_delete("q")
    assert not exists(connection, "y")
    assert not exists(connection, "x")


def test_one_of_two_bindings_removed_keeps_the_exchange(space):
    connection, channel = space
    channel.exchange_declare("x", "direct", auto_delete=True)
    channel.queue_declare("q")
    channel.queue_bind("q", "x", "a")
    channel.queue_bind("q", "x", "b")
    channel.queue_unbind("q", "x", "a")
    assert exists(connection, "x")
    channel.queue_unbind("q", "x", "b")
    assert not exists(connection, "x")


def test_closing_the_connection_of_an_exclusive_queue_deletes_the_exchange(warren, space):
    connection, channel = space
    channel.exchange_declare("x", "fanout", auto_delete=True)
    owner = pika.BlockingConnection(warren.connection_parameters())
    owned = owner.channel()
    queue = owned.queue_declare("", exclusive=True).method.queue
    owned.queue_bind(queue, "x")
    owner.close()
    assert wait_until(connection, lambda: not exists(connection, "x"))
