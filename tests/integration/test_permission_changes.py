"""What a refusal and a change of permissions do to open connections, with pika, the
same on Warren and on RabbitMQ 3.10 (WARREN_TEST_BROKER=127.0.0.1:5673):

- a refused operation closes its channel (403) and nothing else: the connection, its
  other channels and their consumers carry on;
- set_permissions, clear_permissions and topic permission changes apply to the next
  operation of an open connection; clearing a user's permissions on the vhost does not
  close its connections (every operation is then refused, and a new grant works again).

RabbitMQ keeps allowing a resource a channel used less than about a second before the
change (its per-channel cache lives until the channel idles); Warren applies the change
to that channel too (tests/unit/test_channel_access.py). The checks here use channels
that have not used the resource since the change, where both agree.
"""


import pika
import pytest

from tests.support.pika_helpers import _test_deadline, expect_channel_error, wait_until  # noqa: F401


@pytest.fixture
def account(broker_admin, warren):
    """A fresh vhost and a user with every permission on it (the `warren` fixture's),
    with the broker's admin operations to change them: (admin, user, vhost)."""
    return broker_admin, warren.user, warren.vhost


@pytest.fixture
def open_connection(warren):
    """Opens a connection as the account's user to its vhost."""
    return lambda: pika.BlockingConnection(warren.connection_parameters())


def refused_text(kind: str, name: str, user: str, vhost: str) -> str:
    return (f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '{vhost}' refused for "
            f"user '{user}'")


def publish_refused(connection, exchange: str, routing_key: str = "k"):
    """Publish on a new channel; the ChannelClosedByBroker it got (403 asserted)."""
    channel = connection.channel()
    return expect_channel_error(connection, channel, 403,
                                lambda: channel.basic_publish(exchange, routing_key, b"x"))


def publish_confirmed(connection, exchange: str, routing_key: str = "k") -> None:
    """Publish with a confirm on a new channel (raises if the channel is closed)."""
    channel = connection.channel()
    channel.confirm_delivery()
    channel.basic_publish(exchange, routing_key, b"x")
    channel.close()


def test_a_refusal_closes_its_channel_and_nothing_else(account, open_connection):
    admin, user, vhost = account
    admin.set_permissions(user, vhost, ".*", "^open-", ".*")
    connection = open_connection()
    try:
        worker = connection.channel()
        worker.exchange_declare("open-x", "fanout")
        worker.queue_declare("open-q")
        worker.queue_bind("open-q", "open-x")
        received = []
        worker.basic_consume("open-q", lambda _ch, _m, _p, body: received.append(body),
                             auto_ack=True)

        error = publish_refused(connection, "amq.direct")

        assert error.reply_text == refused_text("exchange", "amq.direct", user, vhost)
        worker.basic_publish("open-x", "", b"on the other channel")
        assert wait_until(connection, lambda: len(received) == 1)
        publish_confirmed(connection, "open-x")
        assert wait_until(connection, lambda: len(received) == 2)
        assert received == [b"on the other channel", b"x"]
        assert worker.is_open and connection.is_open
    finally:
        connection.close()


def test_set_permissions_applies_to_the_next_operation(account, open_connection):
    admin, user, vhost = account
    connection = open_connection()
    try:
        publish_confirmed(connection, "amq.direct")
        waiting = connection.channel()      # open before the change, not used yet
        admin.set_permissions(user, vhost, ".*", "^amq\\.fanout$", ".*")

        error = expect_channel_error(
            connection, waiting, 403, lambda: waiting.basic_publish("amq.direct", "k", b"x"))

        assert error.reply_text == refused_text("exchange", "amq.direct", user, vhost)
        publish_confirmed(connection, "amq.fanout")
        admin.set_permissions(user, vhost, ".*", ".*", ".*")
        publish_confirmed(connection, "amq.direct")
    finally:
        connection.close()


def test_clear_permissions_refuses_everything_but_keeps_the_connection(account, open_connection):
    admin, user, vhost = account
    connection = open_connection()
    try:
        channel = connection.channel()
        channel.queue_declare("kept")
        admin.clear_permissions(user, vhost)

        refused = connection.channel()
        error = expect_channel_error(connection, refused, 403,
                                     lambda: refused.basic_get("kept"))
        assert error.reply_text == refused_text("queue", "kept", user, vhost)
        passive = connection.channel()
        passive.queue_declare("kept", passive=True)   # needs no permission
        assert connection.is_open
        admin.set_permissions(user, vhost, "", "", ".*")
        assert connection.channel().basic_get("kept") == (None, None, None)
    finally:
        connection.close()


def test_topic_permission_changes_apply_to_the_next_operation(account, open_connection):
    admin, user, vhost = account
    connection = open_connection()
    try:
        publish_confirmed(connection, "amq.topic", "any.key")
        admin.set_topic_permissions(user, vhost, "amq.topic", "^ok\\.", "^ok\\.")

        error = publish_refused(connection, "amq.topic", "any.key")

        assert error.reply_text == (
            f"ACCESS_REFUSED - access to topic 'any.key' in exchange 'amq.topic' in vhost "
            f"'{vhost}' refused for user '{user}'")
        publish_confirmed(connection, "amq.topic", "ok.key")
        binder = connection.channel()
        binder.queue_declare("topic-q")
        expect_channel_error(connection, binder, 403,
                             lambda: binder.queue_bind("topic-q", "amq.topic", "any.key"))
        admin.clear_topic_permissions(user, vhost)
        publish_confirmed(connection, "amq.topic", "any.key")
        connection.channel().queue_bind("topic-q", "amq.topic", "any.key")
    finally:
        connection.close()
