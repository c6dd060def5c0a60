"""The control socket's protocol (broker/server/control.py), attacked on a dedicated
broker while a bystander publishes and consumes: every malformed request gets an error
reply and changes nothing, the same control connection keeps serving, and so do the
socket and the AMQP listener."""

import json
import os
import socket
import stat

import pytest

from tests.support.bystander import RunningBystander
from tests.support.tenants import open_as

pytestmark = pytest.mark.warren_only(
    "Warren's control socket, attacked on a Warren broker of its own (broker_factory)")

TIMEOUT = 30.0
USAGE = 'expected {"op": NAME, "args": {...}} on one line'


class ControlConnection:
    """One connection to a control socket: write raw bytes, read JSON replies."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(path)
        self.replies = self.sock.makefile("rb")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self) -> dict:
        line = self.replies.readline()
        assert line.endswith(b"\n"), f"the control socket closed instead: {line!r}"
        return json.loads(line)

    def ask(self, request) -> dict:
        self.send(json.dumps(request).encode() + b"\n")
        return self.reply()

    def close(self) -> None:
        self.replies.close()
        self.sock.close()


@pytest.fixture
def dedicated_broker(broker_factory):
    started = broker_factory()
    with RunningBystander(started):
        yield started
    assert started.process.poll() is None


@pytest.fixture
def control(dedicated_broker):
    connection = ControlConnection(dedicated_broker.control_socket)
    yield connection
    connection.close()


def test_the_socket_is_for_the_brokers_os_user_only(dedicated_broker):
    mode = os.stat(dedicated_broker.control_socket).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


BAD_REQUESTS = [
    (b"{not json", USAGE),
    (b"\xff\xfe\x00", USAGE),
    (b"[1, 2]", USAGE),
    (b'"add_vhost"', USAGE),
    (b"null", USAGE),
    (b'{"args": {"name": "v"}}', USAGE),
    (b'{"op": "drop_everything"}', "unknown operation 'drop_everything'"),
    (b'{"op": "_record", "args": {"entry": 1}}', "unknown operation '_record'"),
    (b'{"op": "broker"}', "unknown operation 'broker'"),
    (b'{"op": 5}', "unknown operation 5"),
    (b'{"op": "add_vhost", "args": ["v"]}', '"args" of add_vhost must be a JSON object'),
    (b'{"op": "add_vhost", "args": null}', '"args" of add_vhost must be a JSON object'),
    (b'{"op": "add_vhost", "args": {}}',
     "bad arguments for add_vhost: missing a required argument: 'name'"),
    (b'{"op": "add_vhost", "args": {"name": "v", "owner": "me"}}',
     "bad arguments for add_vhost: got an unexpected keyword argument 'owner'"),
    (b'{"op": "add_vhost", "args": {"name": 5}}',
     "bad arguments for add_vhost: 'name' must be a string, not an integer"),
    (b'{"op": "add_user", "args": {"name": "u", "password": true}}',
     "'password' must be a string or null, not true or false"),
    (b'{"op": "add_user", "args": {"name": "u", "tags": [1]}}', "tags must be a list"),
    (b'{"op": "set_vhost_limits", "args": {"vhost": "/", "limits": [1]}}',
     'vhost limits must be a JSON object such as {"max-connections": 10}, not [1]'),
    (b'{"op": "set_vhost_limits", "args": {"vhost": "/", "limits": {"max-queues": "1"}}}',
     "max-queues must be an integer"),
    (b'{"op": "set_permissions", "args": {"user": "guest", "vhost": "/", '
     b'"configure": "(", "write": "", "read": ""}}', "invalid configure regular expression"),
    (b'{"op": "delete_user", "args": {"name": "nobody"}}', "no user 'nobody'"),
]


def test_bad_requests_get_an_error_each_and_the_connection_serves_on(dedicated_broker, control):
    for number, (line, error) in enumerate(BAD_REQUESTS):
        control.send(line + b"\n")
        reply = control.reply()
        assert reply["ok"] is False and error in reply["error"], (line, reply)
        assert control.ask({"op": "add_vhost", "args": {"name": f"after-{number}"}}) \
            == {"ok": True}, line
    assert control.ask({"op": "set_permissions", "args": {
        "user": "guest", "vhost": "after-0", "configure": ".*", "write": ".*",
        "read": ".*"}}) == {"ok": True}
    open_as(dedicated_broker, "guest", "guest", "after-0").close()
    for name in ("u", "v", "5"):          # what the refused requests named is not there
        assert control.ask({"op": "delete_user", "args": {"name": name}})["ok"] is False
        assert control.ask({"op": "delete_vhost", "args": {"name": name}})["ok"] is False


def test_requests_on_one_line_each_are_answered_in_order(control):
    control.send(b'{"op": "add_vhost", "args": {"name": "a"}}\n'
                 b'{"op": "add_vhost", "args": {"name": "a"}}\n'
                 b'{"op": "delete_vhost", "args": {"name": "a"}}\n')
    assert [control.reply() for _ in range(3)] == [
        {"ok": True}, {"ok": False, "error": "vhost 'a' already exists"}, {"ok": True}]


def test_a_request_longer_than_a_mebibyte_ends_that_connection_only(dedicated_broker, control):
    control.send(b'{"op": "add_vhost", "args": {"name": "' + b"x" * (1 << 20))
    reply = control.reply()
    assert reply["ok"] is False and "longer than" in reply["error"]
    assert control.replies.readline() == b""           # that connection is closed
    fresh = ControlConnection(dedicated_broker.control_socket)
    assert fresh.ask({"op": "add_vhost", "args": {"name": "v"}}) == {"ok": True}
    fresh.close()


def test_a_client_that_leaves_mid_request_changes_nothing(dedicated_broker, control):
    control.send(b'{"op": "add_vhost", "args": {"name": "half"')
    control.close()
    fresh = ControlConnection(dedicated_broker.control_socket)
    assert fresh.ask({"op": "add_vhost", "args": {"name": "half"}}) == {"ok": True}
    fresh.close()
