"""Vhost and user limits in the core (broker/core/limits.py), set through the admin
operations: what each limit refuses, with RabbitMQ 3.10's reply code and text (probed on
the reference node), and that the counts behind them follow every way a connection or a
channel ends, once."""

import pytest
from pamqp import commands

from amqp_codec import InboundMethod
from broker.core.admin import Administration
from broker.core.broker import Broker
from broker.core.connection import Connection
from broker.core.rabbitmq_lines import LINE_3_10, Profile

from core_harness import RecordingTransport, kinds


class Login:
    """A client connection of `user` on `vhost` driven through the handshake."""

    def __init__(self, core_broker: Broker, user: str = "guest", vhost: str = "/",
                 password: str = "pw"):
        self.transport = RecordingTransport()
        self.connection = Connection(core_broker, self.transport, "test")
        self.connection.handshake.start()
        self.method(0, commands.Connection.StartOk(
            client_properties={"capabilities": {}}, mechanism="PLAIN",
            response=f"\0{user}\0{'guest' if user == 'guest' else password}"))
        self.method(0, commands.Connection.TuneOk(channel_max=100, frame_max=131072,
                                                  heartbeat=0))
        self.open_replies = self.method(0, commands.Connection.Open(virtual_host=vhost))

    @property
    def opened(self) -> bool:
        return kinds(self.open_replies) == [(0, commands.Connection.OpenOk)]

    def method(self, channel: int, method) -> list:
        self.connection.handle(InboundMethod(channel, method))
        return self.transport.methods()

    def open_channel(self, number: int) -> list:
        return self.method(number, commands.Channel.Open())

    def declare(self, name: str, **kwargs) -> list:
        return self.method(1, commands.Queue.Declare(queue=name, **kwargs))

    def close(self) -> None:
        self.method(0, commands.Connection.Close(reply_code=200, reply_text="bye"))


def connection_close(replies: list) -> commands.Connection.Close:
    (channel, close), = replies
    assert channel == 0 and isinstance(close, commands.Connection.Close), replies
    return close


def channel_close(replies: list) -> commands.Channel.Close:
    (_, close), = replies
    assert isinstance(close, commands.Channel.Close), replies
    return close


@pytest.fixture
def core_broker():
    """A broker of the 3.10 line (its texts and order: test_refusal_texts_by_line.py has
    the later lines') with vhost "v", and users alice and bob with full access to "/"
    and "v" (guest has "/" only)."""
    core_broker = Broker(profile=Profile(LINE_3_10))
    admin = Administration(core_broker)
    admin.add_vhost("v")
    for user in ("alice", "bob"):
        admin.add_user(user, password="pw")
        for vhost in ("/", "v"):
            admin.set_permissions(user, vhost, ".*", ".*", ".*")
    return core_broker


@pytest.fixture
def admin(core_broker):
    return Administration(core_broker)


# -- vhost max-connections -----------------------------------------------------------

def test_vhost_connection_limit_refuses_the_next_open_with_530(core_broker, admin):
    admin.set_vhost_limits("v", {"max-connections": 2})
    first, second = Login(core_broker, "alice", "v"), Login(core_broker, "bob", "v")
    assert first.opened and second.opened
    assert Login(core_broker, "alice", "/").opened          # other vhosts do not count
    third = Login(core_broker, "alice", "v")
    close = connection_close(third.open_replies)
    assert (close.reply_code, close.class_id, close.method_id) == (530, 10, 40)
    assert close.reply_text == ("NOT_ALLOWED - access to vhost 'v' refused for user "
                                "'alice': connection limit (2) is reached")
    first.close()
    assert Login(core_broker, "alice", "v").opened          # the closed one freed its place


def test_zero_allows_no_connection_and_a_negative_limit_is_no_limit(core_broker, admin):
    admin.set_vhost_limits("v", {"max-connections": 0})
    close = connection_close(Login(core_broker, "alice", "v").open_replies)
    assert close.reply_text.endswith("connection limit (0) is reached")
    admin.set_vhost_limits("v", {"max-connections": -1})
    assert all(Login(core_broker, "alice", "v").opened for _ in range(5))


def test_lowering_a_limit_closes_nothing_and_refuses_the_next(core_broker, admin):
    open_ones = [Login(core_broker, "alice", "v") for _ in range(3)]
    open_ones[0].open_channel(1)
    admin.set_vhost_limits("v", {"max-connections": 1})
    assert not Login(core_broker, "bob", "v").opened
    for login in open_ones:
        assert not login.transport.closed
    assert kinds(open_ones[0].declare("q")) == [(1, commands.Queue.DeclareOk)]


# -- the order of the checks at Connection.Open -----------------------------------------

def test_an_unknown_vhost_is_refused_before_any_limit(core_broker, admin):
    admin.set_user_limits("alice", {"max-connections": 0})
    close = connection_close(Login(core_broker, "alice", "nope").open_replies)
    assert (close.reply_code, close.reply_text) == (530, "NOT_ALLOWED - vhost nope not found")


def test_the_vhost_limit_comes_before_the_user_limit_and_both_before_access(core_broker, admin):
    admin.add_user("carol", password="pw")      # no permissions anywhere
    admin.set_vhost_limits("v", {"max-connections": 0})
    admin.set_user_limits("carol", {"max-connections": 0})
    close = connection_close(Login(core_broker, "carol", "v").open_replies)
    assert "connection limit (0) is reached" in close.reply_text
    assert close.reply_text.startswith("NOT_ALLOWED - access to vhost 'v'")
    admin.clear_vhost_limits("v")
    close = connection_close(Login(core_broker, "carol", "v").open_replies)
    assert close.reply_text == ("NOT_ALLOWED - connection refused for user 'carol': user "
                                "connection limit (0) is reached")
    admin.clear_user_limits("carol")
    close = connection_close(Login(core_broker, "carol", "v").open_replies)
    assert close.reply_text == "NOT_ALLOWED - access to vhost 'v' refused for user 'carol'"


# -- user max-connections ------------------------------------------------------------

def test_user_connection_limit_counts_every_vhost_of_the_user(core_broker, admin):
    admin.set_user_limits("alice", {"max-connections": 2})
    assert Login(core_broker, "alice", "/").opened and Login(core_broker, "alice", "v").opened
    close = connection_close(Login(core_broker, "alice", "/").open_replies)
    assert (close.reply_code, close.class_id, close.method_id) == (530, 10, 40)
    assert close.reply_text == ("NOT_ALLOWED - connection refused for user 'alice': user "
                                "connection limit (2) is reached")
    assert Login(core_broker, "bob", "/").opened


def test_a_connection_the_broker_closed_is_uncounted_once(core_broker, admin):
    admin.set_user_limits("alice", {"max-connections": 2})
    closed_by_broker, kept = Login(core_broker, "alice"), Login(core_broker, "alice")
    closed_by_broker.open_channel(1)
    assert connection_close(closed_by_broker.open_channel(1)).reply_code == 504  # reopened
    closed_by_broker.connection.lost()      # then its socket goes: counted out once
    assert kept.opened and Login(core_broker, "alice").opened
    assert not Login(core_broker, "alice").opened


# -- user max-channels ---------------------------------------------------------------

def test_user_channel_limit_is_a_connection_error_across_connections(core_broker, admin):
    admin.set_user_limits("alice", {"max-channels": 2})
    first, second = Login(core_broker, "alice"), Login(core_broker, "alice", "v")
    assert kinds(first.open_channel(1)) == [(1, commands.Channel.OpenOk)]
    assert kinds(second.open_channel(1)) == [(1, commands.Channel.OpenOk)]
    close = connection_close(second.open_channel(2))
    assert (close.reply_code, close.class_id, close.method_id) == (530, 0, 0)
    assert close.reply_text == ("NOT_ALLOWED - number of channels opened for user "
                                "'alice' has reached the maximum allowed user limit of (2)")
    bob = Login(core_broker, "bob")
    assert kinds(bob.open_channel(1)) == [(1, commands.Channel.OpenOk)]


def test_every_way_a_channel_ends_gives_its_place_back_once(core_broker, admin):
    admin.set_user_limits("alice", {"max-channels": 3})
    login = Login(core_broker, "alice")
    for number in (1, 2, 3):
        login.open_channel(number)
    login.method(1, commands.Channel.Close(reply_code=200, reply_text="", class_id=0,
                                           method_id=0))                  # client close
    assert kinds(login.open_channel(4)) == [(4, commands.Channel.OpenOk)]
    closed = channel_close(login.method(4, commands.Queue.Declare(queue="m",
                                                                   passive=True)))
    assert closed.reply_code == 404                                     # error close
    login.method(4, commands.Channel.CloseOk())
    other = Login(core_broker, "alice", "v")
    assert kinds(other.open_channel(1)) == [(1, commands.Channel.OpenOk)]
    assert connection_close(other.open_channel(2)).reply_code == 530    # 2 + 1 open
    login.close()                                                       # connection close
    third = Login(core_broker, "alice")
    for number in (1, 2, 3):
        assert kinds(third.open_channel(number)) == [(number, commands.Channel.OpenOk)]
    assert connection_close(third.open_channel(4)).reply_code == 530


def test_lowering_the_channel_limit_leaves_open_channels_working(core_broker, admin):
    login = Login(core_broker, "alice")
    login.open_channel(1)
    login.open_channel(2)
    admin.set_user_limits("alice", {"max-channels": 1})
    assert kinds(login.declare("q")) == [(1, commands.Queue.DeclareOk)]
    assert connection_close(login.open_channel(3)).reply_code == 530


# -- vhost max-queues ----------------------------------------------------------------

def test_queue_limit_counts_exclusive_and_server_named_queues(core_broker, admin):
    admin.set_vhost_limits("v", {"max-queues": 2})
    login = Login(core_broker, "alice", "v")
    login.open_channel(1)
    assert kinds(login.declare("q1")) == [(1, commands.Queue.DeclareOk)]
    assert kinds(login.declare("", exclusive=True)) == [(1, commands.Queue.DeclareOk)]
    close = channel_close(login.declare("q3"))
    assert (close.reply_code, close.class_id, close.method_id) == (406, 50, 10)
    assert close.reply_text == ("PRECONDITION_FAILED - cannot declare queue 'q3': queue "
                                "limit in vhost 'v' (2) is reached")
    login.method(1, commands.Channel.CloseOk())
    login.open_channel(1)
    close = channel_close(login.declare(""))
    assert close.reply_text.startswith("PRECONDITION_FAILED - cannot declare queue "
                                       "'amq.gen-")          # the name it would have had
    assert not login.transport.closed


def test_redeclaring_an_existing_queue_is_not_refused(core_broker, admin):
    login = Login(core_broker, "alice", "v")
    login.open_channel(1)
    login.declare("q1")
    login.declare("q2")
    admin.set_vhost_limits("v", {"max-queues": 1})           # already above it
    assert kinds(login.declare("q1")) == [(1, commands.Queue.DeclareOk)]
    assert kinds(login.declare("q2", passive=True)) == [(1, commands.Queue.DeclareOk)]
    login.method(1, commands.Queue.Delete(queue="q2"))
    assert channel_close(login.declare("q3")).reply_code == 406     # still 1 of 1
    login.method(1, commands.Channel.CloseOk())
    login.open_channel(1)
    login.method(1, commands.Queue.Delete(queue="q1"))
    assert kinds(login.declare("q3")) == [(1, commands.Queue.DeclareOk)]


def test_the_queue_limit_is_checked_after_the_name_and_before_the_arguments(core_broker, admin):
    admin.set_vhost_limits("v", {"max-queues": 0})
    login = Login(core_broker, "alice", "v")
    login.open_channel(1)
    assert channel_close(login.declare("amq.q")).reply_code == 403
    login.method(1, commands.Channel.CloseOk())
    login.open_channel(1)
    close = channel_close(login.declare("q", arguments={"x-max-length": "ten"}))
    assert "queue limit in vhost 'v' (0) is reached" in close.reply_text


def test_a_deleted_vhost_or_user_takes_its_limits_along(core_broker, admin):
    admin.set_vhost_limits("v", {"max-connections": 0})
    admin.set_user_limits("bob", {"max-connections": 0})
    admin.delete_vhost("v")
    admin.delete_user("bob")
    admin.add_vhost("v")
    admin.add_user("bob", password="pw")
    admin.set_permissions("bob", "v", ".*", ".*", ".*")
    assert Login(core_broker, "bob", "v").opened

