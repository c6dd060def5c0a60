"""A vhost and user per test for the differential tests of users, tags and limits: the
`warren` fixture's, with the broker's admin operations (Warren's control socket, or
the management API when WARREN_TEST_BROKER names RabbitMQ) for what a test sets on them,
so tests sharing a broker never see each other's users, vhosts or limits. Also raw AMQP
connections as a given user, to read the exact Connection.Close (code, text, class and
method) a refusal carries.
"""

import time
from dataclasses import dataclass

from pamqp import commands

from tests.support.raw_amqp import CloseInfo, RawAmqpClient

# How long a broker may take to count a closed connection or channel out (RabbitMQ
# tracks them asynchronously; Warren at once).
RELEASE_DEADLINE = 10.0
# Deadline of each read: Warren answers a refused login after a delay that grows up to
# 5 s with repeated failures from one address.
READ_DEADLINE = 15.0


@dataclass
class Tenant:
    admin: object       # WarrenAdmin or RabbitAdmin (tests/support/broker_admin.py)
    vhost: str
    user: str
    password: str


def tenant_of(broker_admin, warren) -> Tenant:
    """The `warren` fixture's vhost and user, with the broker's admin operations (the
    `broker_admin` fixture) for what the test sets on them (limits, tags, permissions)."""
    return Tenant(broker_admin, warren.vhost, warren.user, warren.password)


class OpenRefused(Exception):
    """Connection.Open was answered with Connection.Close."""

    def __init__(self, close: CloseInfo):
        super().__init__(f"{close.reply_code} {close.reply_text}")
        self.close = close


def open_as(broker, user: str, password: str, vhost: str) -> RawAmqpClient:
    """A raw connection through Connection.OpenOk; OpenRefused carries the refusal."""
    client = RawAmqpClient(broker.host, broker.port, READ_DEADLINE)
    try:
        client.start_handshake()
        client.send_start_ok(user, password)
        reply = client.read_frame_skip_heartbeats()     # Tune, or a refused login
        if isinstance(reply.value, commands.Connection.Tune):
            client.tune = reply.value
            client.send_tune_ok(heartbeat=0)
            client.send_method(0, commands.Connection.Open(virtual_host=vhost))
            reply = client.read_frame_skip_heartbeats()
    except BaseException:
        client.close()
        raise
    if isinstance(reply.value, commands.Connection.OpenOk):
        return client
    client.close()
    close = reply.value
    if not isinstance(close, commands.Connection.Close):
        raise AssertionError(f"expected Tune, OpenOk or Close, got {reply!r}")
    raise OpenRefused(CloseInfo(reply.channel, close.reply_code, close.reply_text,
                                close.class_id, close.method_id))


def open_tenant(broker, tenant: Tenant) -> RawAmqpClient:
    return open_as(broker, tenant.user, tenant.password, tenant.vhost)


def refusal_of_open(broker, user: str, password: str, vhost: str) -> CloseInfo:
    """The Connection.Close that answers Connection.Open (fails when it opens)."""
    try:
        client = open_as(broker, user, password, vhost)
    except OpenRefused as refused:
        return refused.close
    client.close()
    raise AssertionError(f"user {user!r} could open vhost {vhost!r}")


def opens_in_time(warren, user: str, password: str, vhost: str) -> RawAmqpClient:
    """Open right after closed connections gave their slots back, on the broker of the
    test's `warren` vhost. Warren counts a connection out before it sends Close-Ok, so
    the first attempt must succeed there; RabbitMQ tracks connections asynchronously and
    offers no event to wait for, so against it (an external broker) the open is retried
    until RELEASE_DEADLINE."""
    if warren.has_test_hooks:     # Warren
        return open_as(warren, user, password, vhost)
    deadline = time.monotonic() + RELEASE_DEADLINE
    while True:
        try:
            return open_as(warren, user, password, vhost)
        except OpenRefused:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.02)   # RabbitMQ only: poll its asynchronous connection tracking


def close_connection(client: RawAmqpClient) -> None:
    """Connection.Close, and wait for Connection.CloseOk."""
    client.send_method(0, commands.Connection.Close(reply_code=200, reply_text="bye",
                                                    class_id=0, method_id=0))
    client.expect(commands.Connection.CloseOk, channel=0)
    client.close()


def reply_to(client: RawAmqpClient, channel: int, method):
    """Send `method` and return the next frame's method (a reply, or a Close)."""
    client.send_method(channel, method)
    return client.read_frame_skip_heartbeats().value


def reopen_after_close(client: RawAmqpClient, channel: int) -> None:
    """Answer the broker's Channel.Close and open the channel again."""
    client.send_method(channel, commands.Channel.CloseOk())
    client.open_channel(channel)
