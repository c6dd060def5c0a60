"""Before login, a client cannot make the broker hold sockets forever or run it out of
file descriptors, and password guessing is slowed down and logged in aggregate.

Every attack runs on its own connections against a dedicated broker while a
RunningBystander publishes and consumes beside it; the bystander is checked afterwards
and the broker process must still be running.
"""

import re
import signal
import socket
import time

import pika
import pika.exceptions
import pytest
from pamqp import commands, frame

from tests.support.broker_process import BrokerProcess
from tests.support.bystander import RunningBystander, assert_broker_serves
from tests.support.raw_amqp import (PROTOCOL_HEADER, RawAmqpClient, connect, plain_response,
                                    read_socket_until_closed, start_ok_frame)

pytestmark = pytest.mark.warren_only(
    "attacks a Warren broker of its own (BrokerProcess) and reads its admission limits and log")

DEADLINE = 30.0   # the longest any single wait below may take on a loaded machine
FLOOD = 100       # sockets past connection_max that handshake at once
# Protocol header, Start-Ok, Tune-Ok and Open in one write, as a flood would send them.
PIPELINED_HANDSHAKE = (
    PROTOCOL_HEADER
    + start_ok_frame("PLAIN", plain_response("guest", "guest"), {"capabilities": {}})
    + frame.marshal(commands.Connection.TuneOk(channel_max=2047, frame_max=131072,
                                               heartbeat=0), 0)
    + frame.marshal(commands.Connection.Open(virtual_host="/"), 0))


def _start(tmp_path, limits: str, command_prefix: tuple = ()) -> BrokerProcess:
    config = tmp_path / "warren.toml"
    config.write_text(f"[limits]\n{limits}\n")
    return BrokerProcess(data_dir=str(tmp_path / "data"), command_prefix=command_prefix,
                         extra_args=("--config", str(config))).start()


@pytest.fixture
def start_broker(tmp_path):
    started = []

    def start(limits: str, command_prefix: tuple = ()) -> BrokerProcess:
        broker = _start(tmp_path, limits, command_prefix)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.kill()


def _socket(broker) -> socket.socket:
    sock = socket.create_connection((broker.host, broker.port), timeout=DEADLINE)
    return sock


def _wait_closed_by_broker(sock: socket.socket) -> bytes:
    """Read until the broker closes the socket; returns what it sent before closing."""
    return read_socket_until_closed(sock, DEADLINE)


def test_silent_socket_is_dropped_after_the_handshake_timeout(start_broker):
    broker = start_broker("handshake_timeout = 0.5")
    with RunningBystander(broker):
        silent = _socket(broker)
        stalled = _socket(broker)
        stalled.sendall(PROTOCOL_HEADER)     # gets Connection.Start, never answers it
        with RawAmqpClient(broker.host, broker.port, timeout=DEADLINE) as tuned:
            tuned.start_handshake()
            tuned.send_start_ok()
            tuned.tune = tuned.expect(commands.Connection.Tune, channel=0)
            tuned.send_tune_ok(heartbeat=0)  # ... and never sends Connection.Open
            assert tuned.read_until_closed() == []
        assert _wait_closed_by_broker(silent) == b""
        assert _wait_closed_by_broker(stalled).startswith(b"\x01\x00\x00")  # the Start
        silent.close()
        stalled.close()
    assert broker.process.poll() is None


def test_a_connection_that_opened_in_time_is_not_dropped(start_broker):
    broker = start_broker("handshake_timeout = 0.5")
    with connect(broker.host, broker.port) as client:   # heartbeats off
        # A silent socket opened after the client: once the broker drops it, the
        # client's handshake timeout has passed too.
        witness = _socket(broker)
        assert _wait_closed_by_broker(witness) == b""
        witness.close()
        client.open_channel(1)
        client.send_method(1, commands.Queue.Declare(exclusive=True))
        client.expect(commands.Queue.DeclareOk, channel=1, timeout=DEADLINE)


def test_sockets_past_the_unauthenticated_cap_are_closed_at_once(start_broker):
    broker = start_broker("unauthenticated_connection_max = 5\nhandshake_timeout = 3600")
    with RunningBystander(broker):
        idle = [_socket(broker) for _ in range(5)]
        # The broker has admitted all five once each answers the protocol header.
        for sock in idle:
            sock.sendall(PROTOCOL_HEADER)
            assert sock.recv(1) == b"\x01"
        refused = _socket(broker)
        refused.sendall(PROTOCOL_HEADER)
        assert _wait_closed_by_broker(refused) == b""
        refused.close()
        for sock in idle:
            sock.close()
        # Once the idle sockets are gone, new clients get in again.
        _wait_until_admitted(broker)
    assert broker.process.poll() is None


def _wait_until_admitted(broker) -> None:
    """Retry until a fresh socket gets Connection.Start (the broker notices the closed
    idle sockets asynchronously); fails after DEADLINE."""
    deadline = time.monotonic() + DEADLINE
    while True:
        with _socket(broker) as sock:
            sock.sendall(PROTOCOL_HEADER)
            if _wait_closed_or_start(sock):
                return
        assert time.monotonic() < deadline, "the broker kept refusing new sockets"


def _wait_closed_or_start(sock: socket.socket) -> bool:
    sock.settimeout(DEADLINE)
    try:
        return sock.recv(1) == b"\x01"
    except ConnectionResetError:
        return False


def test_a_flood_past_connection_max_is_refused_cleanly_while_clients_are_served(
        start_broker):
    """With connection_max = 4 held by the bystander and three clients, 100 sockets do
    the whole handshake at once: each gets Connection.Close 530 at Connection.Open (as
    RabbitMQ versions after 3.10 do, rabbitmq-server#7753; 3.10 stops accepting sockets
    and leaves them unanswered) and, once it answers Close-Ok, its socket is closed. The
    bystander works throughout, and a freed slot takes a new client (its final check)."""
    broker = start_broker("connection_max = 4")
    with RunningBystander(broker):
        held = [pika.BlockingConnection(_params(broker)) for _ in range(3)]
        flood = [RawAmqpClient(broker.host, broker.port, timeout=DEADLINE)
                 for _ in range(FLOOD)]
        try:
            for client in flood:
                client.send_raw(PIPELINED_HANDSHAKE)
            for client in flood:
                close = client.wait_for_connection_close()       # answers Close-Ok
                assert (close.reply_code, close.reply_text, close.class_id,
                        close.method_id) == (530, "NOT_ALLOWED - connection refused: "
                                             "node connection limit (4) is reached", 10, 40)
                assert client.read_until_closed() == []
        finally:
            for client in flood:
                client.close()
        held.pop().close()                   # the bystander's final check needs a slot
    for connection in held:
        connection.close()
    assert broker.process.poll() is None


def test_a_flood_of_sockets_past_the_file_limit_does_not_stop_the_broker(start_broker):
    """With only 200 file descriptors (hard limit), 400 sockets that never speak are
    refused or dropped; the broker keeps serving the bystander and new clients."""
    broker = start_broker("handshake_timeout = 2",
                          command_prefix=("prlimit", "--nofile=200:200"))
    with RunningBystander(broker):
        flood = []
        for _ in range(400):
            try:
                flood.append(_socket(broker))
            except OSError:
                break   # the listen backlog is full: the broker is not accepting faster
        for sock in flood:
            sock.close()
        assert_broker_serves(broker)
    assert broker.process.poll() is None


def test_wrong_passwords_are_refused_and_logged_in_aggregate(start_broker):
    broker = start_broker("")
    attempts = 6
    with RunningBystander(broker):
        for _ in range(attempts):
            with pytest.raises(pika.exceptions.ProbableAuthenticationError):
                pika.BlockingConnection(_params(broker, password="Guess-7Qz"))
    assert broker.stop(signal.SIGTERM) == 0
    # \b403\b: the listening line's ephemeral port (say 44033) must not count as a refusal
    refused = [line for line in broker.log_lines if "refused" in line.lower()
               or re.search(r"\b403\b", line)]
    assert len(refused) == 1, refused        # one aggregate line, not one per attempt
    assert f"event=logins_refused count={attempts} addresses=1" in refused[0]
    assert "Guess-7Qz" not in "".join(broker.log_lines)   # no password in the log


def _params(broker, password: str = "guest") -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        broker.host, broker.port, credentials=pika.PlainCredentials("guest", password),
        connection_attempts=1, heartbeat=0, socket_timeout=DEADLINE,
        stack_timeout=DEADLINE, blocked_connection_timeout=DEADLINE)


def test_unexpected_socket_errors_at_accept_do_not_stop_the_broker(start_broker):
    """A client that resets its socket right after connecting (SO_LINGER 0) races the
    broker's accept: whatever the broker sees, only that socket is affected."""
    broker = start_broker("")
    with RunningBystander(broker):
        for _ in range(200):
            sock = _socket(broker)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00"
                            b"\x00\x00\x00\x00")
            sock.close()
    assert broker.process.poll() is None
