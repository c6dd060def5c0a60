"""Connection.Update-Secret (class 10, method 70), the same on Warren and on RabbitMQ
3.10 (WARREN_TEST_BROKER=127.0.0.1:5673).

RabbitMQ hands a new secret only to authentication backends whose credentials expire
(OAuth 2); its internal user database is not one, so any secret, the wrong password
included, is answered Update-Secret-Ok and the connection carries on as the user it
logged in as, with the same permissions. The stored password does not change either.
Before Connection.Open the method is out of place, as any connection method is.
"""

import struct
import uuid

import pika
import pytest
from pamqp import commands

from tests.support.raw_amqp import CloseInfo, method_frame
from tests.support.tenants import (READ_DEADLINE, RawAmqpClient, close_connection, open_tenant,
                                   refusal_of_open, reply_to, tenant_of)

REFUSED_LOGIN = 403


@pytest.fixture
def tenant(broker_admin, warren):
    return tenant_of(broker_admin, warren)


def update_secret(client: RawAmqpClient, secret: str, reason: str = "rotation"):
    """Send Update-Secret on channel 0; the method that answers it."""
    return reply_to(client, 0, commands.Connection.UpdateSecret(new_secret=secret,
                                                                reason=reason))


def declares_a_queue(client: RawAmqpClient, channel: int) -> bool:
    reply = reply_to(client, channel, commands.Queue.Declare(
        queue=f"secret-{uuid.uuid4().hex[:8]}", auto_delete=True))
    return isinstance(reply, commands.Queue.DeclareOk)


def test_the_current_password_as_new_secret_is_acknowledged(warren, tenant):
    client = open_tenant(warren, tenant)
    try:
        client.open_channel(1)
        assert isinstance(update_secret(client, tenant.password),
                          commands.Connection.UpdateSecretOk)
        assert declares_a_queue(client, 1)
        client.open_channel(2)
        assert declares_a_queue(client, 2)
        close_connection(client)
    finally:
        client.close()


def test_a_wrong_new_secret_is_acknowledged_and_changes_nothing(warren, tenant):
    """The internal user database does not check the new secret: the connection keeps
    its user and permissions, the stored password stays the one that logs in."""
    client = open_tenant(warren, tenant)
    try:
        client.open_channel(1)
        assert isinstance(update_secret(client, "not-the-password"),
                          commands.Connection.UpdateSecretOk)
        assert declares_a_queue(client, 1)
        close_connection(client)
    finally:
        client.close()
    assert refusal_of_login(warren, tenant.user, "not-the-password") == REFUSED_LOGIN
    open_tenant(warren, tenant).close()


def test_a_binary_new_secret_is_acknowledged(warren, tenant):
    """The secret is a long string of any bytes (an opaque token), not UTF-8 text."""
    client = open_tenant(warren, tenant)
    try:
        secret = b"\xff\x00\xfe token"
        reason = b"binary"
        client.send_raw(method_frame(0, 10, 70, struct.pack(">I", len(secret)) + secret
                                     + bytes([len(reason)]) + reason))
        client.expect(commands.Connection.UpdateSecretOk, channel=0)
        client.open_channel(1)
        assert declares_a_queue(client, 1)
    finally:
        client.close()


def test_pika_update_secret_returns_and_the_connection_keeps_working(warren, tenant):
    parameters = pika.ConnectionParameters(
        warren.host, warren.port, tenant.vhost,
        pika.PlainCredentials(tenant.user, tenant.password),
        blocked_connection_timeout=READ_DEADLINE)
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        connection.update_secret("a-new-token", "token refreshed")
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"after the update")
        method, _, body = channel.basic_get(queue, auto_ack=True)
        assert body == b"after the update"
    finally:
        connection.close()


def test_update_secret_before_connection_open_is_504(warren, tenant):
    """Out of place before Open, as any unexpected connection method is."""
    client = RawAmqpClient(warren.host, warren.port, READ_DEADLINE)
    try:
        client.start_handshake()
        client.send_start_ok(tenant.user, tenant.password)
        client.tune = client.expect(commands.Connection.Tune, channel=0)
        client.send_tune_ok(heartbeat=0)
        client.send_method(0, commands.Connection.UpdateSecret(
            new_secret=tenant.password, reason="early"))
        assert client.wait_for_connection_close() == CloseInfo(
            0, 504, "CHANNEL_ERROR - unexpected method in connection state opening",
            10, 70)
    finally:
        client.close()


def refusal_of_login(warren, user: str, password: str) -> int:
    """The reply code of the Connection.Close refusing a login (fails when it opens)."""
    return refusal_of_open(warren, user, password, "/").reply_code
