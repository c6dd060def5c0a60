"""Connections and channels with pika's BlockingConnection: open/close, negotiation,
authentication, virtual hosts, several channels, Channel.Flow."""

import uuid

import pika
import pika.exceptions
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn, names: fixtures)
    _test_deadline, chan, conn, connect, exclusive_queue, expect_connection_error, get_bodies,
    names, params, ready_count, wait_for_bodies, wait_for_count, wait_until,
)


def test_connection_opens_and_closes_cleanly(warren):
    connection = connect(warren)
    assert connection.is_open
    channel = connection.channel()
    assert channel.is_open
    connection.close()
    assert connection.is_closed
    assert channel.is_closed


def test_server_advertises_capabilities_pika_relies_on(conn):
    properties = conn._impl.server_properties
    capabilities = properties["capabilities"]
    # consumer_cancel_notify makes add_on_cancel_callback meaningful (Basic.Cancel from the
    # server); authentication_failure_close means a bad login gets Connection.Close 403
    # rather than a dropped socket; pika reads basic.nack into basic_nack_supported.
    assert capabilities.get("basic.nack") is True
    assert capabilities.get("consumer_cancel_notify") is True
    assert capabilities.get("authentication_failure_close") is True
    assert conn.basic_nack_supported
    assert conn.consumer_cancel_notify_supported


def test_tune_limits_are_usable(conn):
    tuned = conn._impl.params
    # RabbitMQ proposes channel_max 2047 and frame_max 131072; pika takes the smaller of
    # its own and the server's values.
    assert tuned.channel_max == 2047
    assert tuned.frame_max == 131072


def test_default_heartbeat_is_the_servers_proposal(warren):
    connection = connect(warren)  # pika's default: accept the server's heartbeat
    try:
        assert connection._impl.params.heartbeat == 60
    finally:
        connection.close()


def test_heartbeat_zero_disables_heartbeats(warren):
    connection = connect(warren, heartbeat=0)
    try:
        assert connection._impl.params.heartbeat == 0
        assert connection._impl._heartbeat_checker is None
        channel = connection.channel()
        assert exclusive_queue(channel).startswith("amq.gen-")
    finally:
        connection.close()


def test_negotiated_heartbeat_is_honoured_by_the_server(warren):
    connection = connect(warren, heartbeat=1)
    try:
        assert connection._impl.params.heartbeat == 1
        checker = connection._impl._heartbeat_checker
        assert checker is not None
        # With a 1 s heartbeat the server must send heartbeat frames on an idle
        # connection (RabbitMQ sends one every 0.5 s) and must keep the connection open
        # while pika sends its own.
        assert wait_until(connection, lambda: checker._heartbeat_frames_received >= 3, 5.0)
        assert connection.is_open
        channel = connection.channel()
        assert channel.is_open
    finally:
        connection.close()


def test_wrong_password_is_refused(warren):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        connect(warren, credentials=pika.PlainCredentials(warren.user, "not-the-password"))
    # pika advertises authentication_failure_close, so the broker explains itself with
    # Connection.Close 403 ACCESS_REFUSED instead of dropping the socket.
    assert "403" in str(info.value)
    assert "ACCESS_REFUSED" in str(info.value)


def test_unknown_user_is_refused(warren):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        connect(warren, credentials=pika.PlainCredentials(f"nobody-{uuid.uuid4().hex}", "x"))
    assert "403" in str(info.value)


def test_unknown_vhost_is_refused_with_530(warren):
    vhost = f"no-such-vhost-{uuid.uuid4().hex}"
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        connect(warren, virtual_host=vhost)
    assert "530" in str(info.value)
    assert "NOT_ALLOWED" in str(info.value)


def test_refused_login_leaves_the_broker_serving_others(warren):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(warren, credentials=pika.PlainCredentials(warren.user, "wrong"))
    connection = connect(warren)
    try:
        assert connection.channel().is_open
    finally:
        connection.close()


def test_channel_open_and_close(conn):
    channel = conn.channel()
    assert channel.is_open
    number = channel.channel_number
    channel.close()
    assert channel.is_closed
    assert conn.is_open
    again = conn.channel()
    assert again.is_open
    # A closed channel's state is gone: its number can be reused by a fresh channel.
    assert again.channel_number == number


def test_explicit_channel_numbers(conn):
    channel = conn.channel(channel_number=17)
    assert channel.channel_number == 17
    queue = exclusive_queue(channel)
    channel.basic_publish("", queue, b"on channel 17")
    assert get_bodies(channel, queue) == ["on channel 17"]


def test_many_channels_are_independent(conn):
    channels = [conn.channel() for _ in range(25)]
    assert len({channel.channel_number for channel in channels}) == 25
    queues = [exclusive_queue(channel) for channel in channels]
    for index, (channel, queue) in enumerate(zip(channels, queues)):
        channel.basic_publish("", queue, f"message {index}".encode())
    # Publish on one channel, read on another: queues belong to the vhost, not to a
    # channel. (Nothing orders one channel's publish before another channel's get, so
    # the reader waits for the message.)
    for index, queue in enumerate(queues):
        reader = channels[(index + 1) % len(channels)]
        assert wait_for_bodies(reader, queue, 1) == [f"message {index}"]
        assert get_bodies(reader, queue) == []
    for channel in channels[::2]:
        channel.close()
    for channel in channels[1::2]:
        assert channel.is_open
        assert ready_count(channel, queues[0]) == 0


def test_closing_a_channel_cancels_its_consumers_and_requeues_unacked(conn, names):
    worker = conn.channel()
    observer = conn.channel()
    queue = names.queue()
    observer.queue_declare(queue)
    for body in (b"a", b"b", b"c"):
        observer.basic_publish("", queue, body)
    received = []
    worker.basic_consume(queue, lambda ch, method, props, body: received.append(body))
    assert wait_until(conn, lambda: len(received) == 3)
    assert ready_count(observer, queue) == 0
    worker.close()
    assert wait_for_count(observer, queue, 0, field="consumer_count") == 0
    assert wait_for_count(observer, queue, 3) == 3
    method, _, body = observer.basic_get(queue, auto_ack=True)
    assert body == b"a"
    assert method.redelivered is True


def test_closing_the_connection_closes_every_channel(warren):
    connection = connect(warren)
    channels = [connection.channel() for _ in range(3)]
    connection.close()
    assert all(channel.is_closed for channel in channels)


def test_channel_flow_active_true_is_acknowledged(chan):
    assert chan.flow(True) is True
    assert chan.is_open
    queue = exclusive_queue(chan)
    chan.basic_publish("", queue, b"still flowing")
    assert get_bodies(chan, queue) == ["still flowing"]


def test_channel_flow_active_false_is_not_implemented(conn, chan):
    # RabbitMQ does not support stopping deliveries with Channel.Flow: it closes the
    # connection with 540 NOT_IMPLEMENTED.
    error = expect_connection_error(conn, 540, lambda: chan.flow(False))
    assert "NOT_IMPLEMENTED" in error.reply_text


def test_connection_parameters_with_client_properties(warren):
    connection = pika.BlockingConnection(params(
        warren, client_properties={"connection_name": "warren-test", "app": {"nested": 1}}))
    try:
        assert connection.channel().is_open
    finally:
        connection.close()
