"""loopback_users: a listed user logs in only from a loopback address, refused from any
other exactly as RabbitMQ 3.10 refuses it (the same 403 and text as a wrong password),
with a log line that says why. The non-loopback case over a real network is
tests/integration/test_loopback_users.py."""

import logging

import pytest
from pamqp import commands

from amqp_codec import InboundMethod
from broker.config import ConfigError, load_settings
from broker.core.auth import is_loopback
from broker.core.broker import Broker
from broker.core.connection import Connection
from broker.core.handshake import ConnectionState

from core_harness import RecordingTransport, close_code

REFUSAL = ("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
           "For details see the broker logfile.")
CLOSE_CAPABLE = {"authentication_failure_close": True}


def negotiate(broker, address, response="\0guest\0guest", capabilities=None):
    """Log in from `address` and open vhost "/": (connection, transport, the methods
    written after Start, StartOk, TuneOk and Open)."""
    transport = RecordingTransport()
    connection = Connection(broker, transport, "test", address)
    connection.handshake.start()
    replies = [transport.methods()]
    for step in [commands.Connection.StartOk(
                     client_properties={"capabilities": capabilities or {}},
                     mechanism="PLAIN", response=response),
                 commands.Connection.TuneOk(2047, 131072, 0),
                 commands.Connection.Open(virtual_host="/")]:
        if transport.closed:
            break
        connection.handle(InboundMethod(0, step))
        replies.append(transport.methods())
    return connection, transport, replies


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.255.3.9", "::1", "::ffff:127.0.0.1", "0:0:0:0:0:ffff:7f01:203"])
def test_loopback_addresses(address):
    assert is_loopback(address)


@pytest.mark.parametrize("address", [
    "10.1.2.3", "192.168.0.7", "0.0.0.0", "::", "::ffff:10.1.2.3", "fe80::1%eth0",
    "2001:db8::1", "", "localhost", "127.0.0.1:5672"])
def test_other_addresses_are_not_loopback(address):
    assert not is_loopback(address)


def test_guest_from_a_remote_address_is_refused_like_rabbitmq_and_the_log_says_why(caplog):
    caplog.set_level(logging.DEBUG, logger="warren")
    connection, transport, replies = negotiate(Broker(), "10.20.30.40",
                                               capabilities=CLOSE_CAPABLE)
    (_, close), = replies[1]
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        403, REFUSAL, 0, 0)
    assert connection.user == "" and connection.handshake.login_refused and transport.closed
    [line] = [record.getMessage() for record in caplog.records
              if "event=login_refused" in record.getMessage()]
    assert "user='guest'" in line and "reason=not_loopback" in line
    assert "loopback_users" in line
    assert [record.levelno for record in caplog.records
            if "event=login_refused" in record.getMessage()] == [logging.WARNING]


def test_without_authentication_failure_close_the_socket_is_just_closed():
    _, transport, replies = negotiate(Broker(), "10.20.30.40")
    assert replies[1] == [] and transport.closed


def test_a_wrong_password_from_a_remote_address_is_a_plain_wrong_password(caplog):
    caplog.set_level(logging.DEBUG, logger="warren")
    _, _, replies = negotiate(Broker(), "10.20.30.40", response="\0guest\0wrong",
                              capabilities=CLOSE_CAPABLE)
    assert close_code(replies[1]) == 403
    assert "not_loopback" not in caplog.text


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "::ffff:127.0.0.1"])
def test_guest_from_loopback_opens(address):
    connection, _, _ = negotiate(Broker(), address)
    assert connection.state is ConnectionState.OPEN


def test_users_not_listed_open_from_anywhere():
    connection, _, _ = negotiate(Broker(loopback_users=["monitor"]), "10.20.30.40")
    assert connection.state is ConnectionState.OPEN      # guest, not in this list


def test_an_empty_list_lets_guest_in_from_anywhere():
    connection, _, _ = negotiate(Broker(loopback_users=[]), "10.20.30.40")
    assert connection.state is ConnectionState.OPEN


def test_the_setting_is_read_from_the_file(tmp_path):
    assert load_settings(None, {}).loopback_users == ["guest"]
    config = tmp_path / "warren.toml"
    config.write_text('loopback_users = []\n')
    assert load_settings(str(config), {}).loopback_users == []
    config.write_text('loopback_users = ["guest", "monitor"]\n')
    assert load_settings(str(config), {}).loopback_users == ["guest", "monitor"]


@pytest.mark.parametrize("value", ['"guest"', "[1]", "false"])
def test_a_setting_that_is_not_a_list_of_names_is_refused(tmp_path, value):
    config = tmp_path / "warren.toml"
    config.write_text(f"loopback_users = {value}\n")
    with pytest.raises(ConfigError, match="'loopback_users' .* must be a list of user"):
        load_settings(str(config), {})
