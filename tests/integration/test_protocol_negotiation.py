"""Raw-socket tests of the AMQP 0-9-1 connection handshake and negotiation.

Expected values are what RabbitMQ 3.10 does (measured on 127.0.0.1:5673); run with
WARREN_TEST_BROKER=127.0.0.1:5673 to check them against it. The handshakes log in as
guest on `/` (tests/support/raw_amqp.py's defaults) to the session broker
(`warren_broker`), not to a `warren` vhost: what they test happens before, or apart
from, any vhost, and what they declare is exclusive.
"""

import select
import socket
import time
import uuid

import pytest
from pamqp import commands, frame

from broker.core.rabbitmq_lines import DEFAULT_LINE
from tests.support.raw_amqp import (
    FRAME_BODY,
    PROTOCOL_HEADER,
    PeerClosed,
    RawAmqpClient,
    connect,
    content_body_frame,
    content_header_frame,
    heartbeat_frame,
    plain_response,
    raw_frame,
    start_ok_frame,
    Timeout,
)


def _assert_closed_without_frames(client: RawAmqpClient, timeout: float = 10.0,
                                  allowed_close_codes: frozenset = frozenset()) -> None:
    """The peer closes the socket before `timeout`, sending no frame at all, except
    a Connection.Close whose code is in `allowed_close_codes`."""
    frames = client.read_until_closed(timeout)
    for received in frames:
        assert isinstance(received.value, commands.Connection.Close), received
        assert received.value.reply_code in allowed_close_codes, received.value.reply_text


def _bad_tune_client(warren_broker, **tune_ok) -> RawAmqpClient:
    client = RawAmqpClient(warren_broker.host, warren_broker.port)
    client.start_handshake()
    client.send_start_ok()
    client.tune = client.expect(commands.Connection.Tune, channel=0)
    client.send_tune_ok(**tune_ok)
    client.send_method(0, commands.Connection.Open(virtual_host="/"))
    return client


# -- Connection.Start ----------------------------------------------------------------


def test_connection_start_version_mechanisms_locales(warren_broker):
    with RawAmqpClient(warren_broker.host, warren_broker.port) as client:
        start = client.start_handshake()
        assert (start.version_major, start.version_minor) == (0, 9)
        assert {"PLAIN", "AMQPLAIN"} <= set(start.mechanisms.split())
        assert "en_US" in start.locales.split()


def test_connection_start_server_capabilities(warren_broker):
    with RawAmqpClient(warren_broker.host, warren_broker.port) as client:
        start = client.start_handshake()
    properties = start.server_properties
    assert isinstance(properties.get("product"), str) and properties["product"]
    capabilities = properties["capabilities"]
    assert isinstance(capabilities, dict)
    # pika's confirm_delivery() refuses to work without both of these.
    assert capabilities.get("publisher_confirms") is True
    assert capabilities.get("basic.nack") is True
    assert capabilities.get("consumer_cancel_notify") is True
    assert capabilities.get("authentication_failure_close") is True


# -- protocol header -----------------------------------------------------------------

def broker_line(broker) -> str:
    """The RabbitMQ line of the session's broker: a Warren test broker's, or the
    version another broker's Connection.Start gave."""
    if hasattr(broker, "rabbitmq_line"):
        return broker.rabbitmq_line or DEFAULT_LINE.name
    return ".".join(broker.version.split(".")[:2])


@pytest.mark.parametrize("header", [
    b"AMQP\x00\x00\x09\x00",             # wrong revision
    b"AMQP\x00\x00\x08\x00",             # 0-8 in the 0-9-1 layout
    b"AMQP\x00\x01\x00\x00",             # AMQP 1.0
    b"AMQP\x01\x01\x00\x0a",             # unknown legacy version
    b"amqp\x00\x00\x09\x01",             # wrong case
    b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32),   # TLS ClientHello
    b"\x01\x00\x00\x00\x00\x00\x00\xce",  # a frame instead of the header
], ids=["0-9-0", "0-8-0", "amqp-1.0", "legacy-1-1-0-10", "lowercase", "http-get",
        "http-response", "tls-hello", "frame"])
def test_wrong_protocol_header_gets_supported_header_then_close(warren_broker, header):
    """3.10 answers AMQP 0-9-1's header; 4.0 and later (which speak AMQP 1.0 too) only to
    another 0-9-x revision, AMQP 1.0's SASL header to the rest."""
    line = broker_line(warren_broker)
    answer = PROTOCOL_HEADER
    if line != "3.10" and not header.startswith(b"AMQP\x00\x00\x09"):
        answer = b"AMQP\x03\x01\x00\x00"
    with RawAmqpClient(warren_broker.host, warren_broker.port) as client:
        client.send_raw(header)
        assert client.read_exact(8) == answer
        with pytest.raises(PeerClosed) as closed:
            client.read_exact(1)
        assert closed.value.data == b""


def test_legacy_0_9_protocol_header_is_treated_as_0_9_1(warren_broker):
    """RabbitMQ accepts the pre-0-9-1 header AMQP 1 1 0 9: it answers Connection.Start
    with version 0-9 and then speaks 0-9-1 (rabbit_reader: 'safely treat as 0-9-1')."""
    with RawAmqpClient(warren_broker.host, warren_broker.port) as client:
        start = client.start_handshake(b"AMQP\x01\x01\x00\x09")
        assert (start.version_major, start.version_minor) == (0, 9)
        client.send_start_ok()
        client.tune = client.expect(commands.Connection.Tune, channel=0)
        client.send_tune_ok(heartbeat=0)
        client.send_method(0, commands.Connection.Open(virtual_host="/"))
        client.expect(commands.Connection.OpenOk, channel=0)
        client.open_channel(1)


# -- authentication ------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_login_mechanisms(warren_broker, mechanism):
    with connect(warren_broker.host, warren_broker.port, mechanism=mechanism) as client:
        client.open_channel(1)
        client.send_method(1, commands.Queue.Declare(exclusive=True))
        declare_ok = client.expect(commands.Queue.DeclareOk, channel=1)
        assert declare_ok.queue.startswith("amq.gen-")


@pytest.mark.parametrize("mechanism,user,password", [
    ("PLAIN", "guest", "wrong-password"),
    ("PLAIN", "no-such-user-" + uuid.uuid4().hex[:8], "guest"),
    ("AMQPLAIN", "guest", "wrong-password"),
], ids=["PLAIN-wrong-password", "PLAIN-unknown-user", "AMQPLAIN-wrong-password"])
def test_bad_credentials_with_authentication_failure_close_get_403(warren_broker, mechanism,
                                                                     user, password):
    with RawAmqpClient(warren_broker.host, warren_broker.port) as client:
        client.start_handshake()
        client.send_start_ok(user, password, mechanism)   # advertises the capability
        close = client.wait_for_connection_close(timeout=10)
        assert close.reply_code == 403
        assert close.reply_text.startswith("ACCESS_REFUSED - ")
        assert mechanism in close.reply_text
        _assert_closed_without_frames(client)


def _start_ok_client(warren_broker, start_ok: bytes) -> RawAmqpClient:
    client = RawAmqpClient(warren_broker.host, warren_broker.port)
    client.start_handshake()
    client.send_raw(start_ok)
    return client


def test_handshake_errors_close_the_socket_without_a_frame(warren_broker):
    """Errors before Connection.Open other than refused credentials for a client with
    authentication_failure_close: RabbitMQ 3.10 sends no frame and closes the socket
    after a 3 s delay (?SILENT_CLOSE_DELAY; it logs e.g. 'failed to negotiate connection
    parameters: negotiated frame_max = 4095 is lower than the minimum allowed value
    (4096)'). For refused TuneOk values newer RabbitMQ versions send Connection.Close
    530 first, which is tolerated. The clients run concurrently so that the test waits
    for the delay only once."""
    with RawAmqpClient(warren_broker.host, warren_broker.port) as probe:
        probe.start_handshake()
        probe.send_start_ok()
        tune = probe.expect(commands.Connection.Tune, channel=0)
    no_capability = {"product": "test", "capabilities": {}}
    cases = {
        "bad password, no authentication_failure_close capability": (_start_ok_client(
            warren_broker,
            start_ok_frame("PLAIN", plain_response("guest", "wrong"), no_capability)),
            frozenset()),
        "unknown mechanism": (_start_ok_client(
            warren_broker, start_ok_frame("CRAM-MD5", b"guest x", {"capabilities": {
                "authentication_failure_close": True}})), frozenset()),
    }
    for tune_ok in [{"frame_max": 4095}, {"frame_max": tune.frame_max + 1},
                    {"frame_max": 0}, {"channel_max": tune.channel_max + 1},
                    {"channel_max": 0}]:
        cases[f"TuneOk {tune_ok}"] = (
            _bad_tune_client(warren_broker, heartbeat=0, **tune_ok), frozenset({530}))
    failures = []
    try:
        for name, (client, allowed_close_codes) in cases.items():
            try:
                _assert_closed_without_frames(client, allowed_close_codes=allowed_close_codes)
            except (AssertionError, Timeout) as error:
                failures.append(f"{name}: {error!r}")
    finally:
        for client, _codes in cases.values():
            client.close()
    assert not failures, "\n".join(failures)


# -- Connection.Tune -----------------------------------------------------------------


def test_tune_proposes_rabbitmq_defaults(warren_broker):
    with RawAmqpClient(warren_broker.host, warren_broker.port) as client:
        client.start_handshake()
        client.send_start_ok()
        tune = client.expect(commands.Connection.Tune, channel=0)
    assert tune.channel_max == 2047
    assert tune.frame_max == 131072
    assert tune.heartbeat == 60


# The lowest frame_max every RabbitMQ line takes (4.1 and later refuse less than 8192):
# the tests below lower it from the default 131072 to that.
SMALL_FRAME_MAX = 8192


def _publish_frames(channel, routing_key, body, frame_max):
    publish = commands.Basic.Publish(exchange="", routing_key=routing_key)
    data = frame.marshal(publish, channel) + content_header_frame(channel, len(body))
    step = frame_max - 8
    for offset in range(0, len(body), step):
        data += content_body_frame(channel, body[offset:offset + step])
    return data


def test_lowered_frame_max_is_used_by_the_server_when_sending(warren_broker):
    """With frame_max 8192 negotiated, a 20000-byte message comes back in body frames
    of at most 8192 bytes each (payload <= 8184)."""
    with connect(warren_broker.host, warren_broker.port, frame_max=SMALL_FRAME_MAX) as client:
        client.open_channel(1)
        client.send_method(1, commands.Queue.Declare(exclusive=True))
        queue = client.expect(commands.Queue.DeclareOk, channel=1).queue
        body = bytes(range(256)) * 78 + b"01234567890123456789012345678901"   # 20000 bytes
        client.send_raw(_publish_frames(1, queue, body, SMALL_FRAME_MAX))
        client.send_method(1, commands.Basic.Get(queue=queue, no_ack=True))
        client.expect(commands.Basic.GetOk, channel=1)
        header = client.read_frame_skip_heartbeats()
        assert header.value.body_size == len(body)
        received = b""
        while len(received) < len(body):
            part = client.read_frame_skip_heartbeats()
            assert part.frame_type == FRAME_BODY and part.channel == 1
            assert len(part.payload) + 8 <= SMALL_FRAME_MAX
            received += part.payload
        assert received == body


def test_lowered_frame_max_accepts_frames_of_exactly_frame_max(warren_broker):
    with connect(warren_broker.host, warren_broker.port, frame_max=SMALL_FRAME_MAX) as client:
        client.open_channel(1)
        client.send_method(1, commands.Queue.Declare(exclusive=True))
        queue = client.expect(commands.Queue.DeclareOk, channel=1).queue
        body = b"x" * (SMALL_FRAME_MAX - 8)   # a body frame of exactly frame_max
        client.send_raw(_publish_frames(1, queue, body, SMALL_FRAME_MAX))
        client.send_method(1, commands.Basic.Get(queue=queue, no_ack=True))
        get_ok = client.expect(commands.Basic.GetOk, channel=1)
        assert get_ok.routing_key == queue


def test_lowered_frame_max_tolerates_rabbitmq_fudge_of_8_bytes(warren_broker):
    """RabbitMQ lets clients exceed frame_max by up to 8 bytes (?FRAME_SIZE_FUDGE in
    rabbit_reader: 'quite a few clients get it wrong'): a frame of 8200 bytes (payload
    8192) passes on an 8192 connection."""
    with connect(warren_broker.host, warren_broker.port, frame_max=SMALL_FRAME_MAX) as client:
        client.open_channel(1)
        client.send_method(1, commands.Queue.Declare(exclusive=True))
        queue = client.expect(commands.Queue.DeclareOk, channel=1).queue
        client.send_raw(_publish_frames(1, queue, b"y" * SMALL_FRAME_MAX, SMALL_FRAME_MAX + 8))
        client.send_method(1, commands.Basic.Get(queue=queue, no_ack=True))
        client.expect(commands.Basic.GetOk, channel=1)
        assert client.read_frame_skip_heartbeats().value.body_size == SMALL_FRAME_MAX


@pytest.mark.parametrize("frame_type", [1, FRAME_BODY])
def test_lowered_frame_max_is_enforced_with_rabbitmqs_501(warren_broker, frame_type):
    """A payload of 8193 bytes on an 8192 connection, announced by a method or a body
    frame: 501 with RabbitMQ 3.10's text, which names frame_max - 8."""
    with connect(warren_broker.host, warren_broker.port, frame_max=SMALL_FRAME_MAX) as client:
        client.open_channel(1)
        client.send_raw(raw_frame(frame_type, 1, b"z" * (SMALL_FRAME_MAX + 1)))
        close = client.wait_for_connection_close()
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        501, f"FRAME_ERROR - type {frame_type}, all octets = <<>>: "
             "{frame_too_large,8193,8184}", 0, 0)


# -- heartbeats ----------------------------------------------------------------------


def test_heartbeats(warren_broker):
    """heartbeat=1: the server sends heartbeat frames, and drops a client that sends
    nothing after about 2 intervals (RabbitMQ: ~3 s, socket closed without a frame),
    while a client that answers with heartbeats stays connected. A client that
    negotiated heartbeat=0 receives no heartbeat frames at all."""
    silent = connect(warren_broker.host, warren_broker.port, heartbeat=1)
    started = time.monotonic()
    talking = connect(warren_broker.host, warren_broker.port, heartbeat=1)
    no_heartbeat = connect(warren_broker.host, warren_broker.port, heartbeat=0)
    assert (silent.heartbeat, talking.heartbeat, no_heartbeat.heartbeat) == (1, 1, 0)
    try:
        deadline = started + 10
        silent_frames = []
        silent_closed_after = None
        sockets = {silent.sock: silent, talking.sock: talking}
        while silent_closed_after is None:
            remaining = deadline - time.monotonic()
            assert remaining > 0, "the silent client was not disconnected within 10 s"
            readable, _, _ = select.select(list(sockets), [], [], remaining)
            for sock in readable:
                client = sockets[sock]
                try:
                    received = client.read_frame(timeout=1)
                except PeerClosed:
                    assert client is silent, "the client sending heartbeats was dropped"
                    silent_closed_after = time.monotonic() - started
                    break
                if client is silent:
                    silent_frames.append(received)
                else:
                    assert received.is_heartbeat, received
                    client.send_raw(heartbeat_frame())
        assert silent_frames, "no heartbeat frame before the disconnection"
        assert all(received.is_heartbeat for received in silent_frames), silent_frames
        assert silent_closed_after >= 1.0
        assert talking.heartbeats_received >= 1
        # Both remaining connections still work; heartbeat=0 never got a heartbeat.
        for client in (talking, no_heartbeat):
            client.open_channel(1)
        assert no_heartbeat.heartbeats_received == 0
    finally:
        for client in (silent, talking, no_heartbeat):
            client.close()


# -- Connection.Open / Close ---------------------------------------------------------


def test_open_unknown_vhost_gets_530(warren_broker):
    with RawAmqpClient(warren_broker.host, warren_broker.port) as client:
        client.start_handshake()
        client.send_start_ok()
        client.tune = client.expect(commands.Connection.Tune, channel=0)
        client.send_tune_ok(heartbeat=0)
        vhost = "no-such-vhost-" + uuid.uuid4().hex[:8]
        client.send_method(0, commands.Connection.Open(virtual_host=vhost))
        close = client.wait_for_connection_close()
        assert close.reply_code == 530
        assert close.reply_text.startswith("NOT_ALLOWED - ")
        assert vhost in close.reply_text
        assert (close.class_id, close.method_id) == (10, 40)
        _assert_closed_without_frames(client)


@pytest.mark.warren_only("RabbitMQ drops the socket without a Connection.Close "
                         "(test_differential's frame_max_before_tune), and 3.10.8 reads "
                         "4096 octets there, not 8192")
def test_frames_above_8192_octets_are_refused_before_tune_ok(warren_broker):
    """Until Tune-Ok, no frame may exceed 8192 octets (RabbitMQ 4.1's frame-min-size;
    Warren reads that much in every line). A client whose Start-Ok is larger (a big
    client-properties table, a long token as the password) is refused; one of 6 KB, which
    RabbitMQ 4.3.6 reads, logs in."""
    with RawAmqpClient(warren_broker.host, warren_broker.port) as client:
        client.start_handshake()
        client.send_start_ok(client_properties={"padding": "p" * 9000})
        close = client.wait_for_connection_close()
        assert close.reply_code == 501
        assert "frame_too_large" in close.reply_text
    with RawAmqpClient(warren_broker.host, warren_broker.port) as client:
        client.start_handshake()
        client.send_start_ok(client_properties={"padding": "p" * 6000})
        client.expect(commands.Connection.Tune, channel=0)


def test_client_initiated_close_gets_close_ok(warren_broker):
    with connect(warren_broker.host, warren_broker.port) as client:
        client.open_channel(1)
        client.open_channel(2)
        client.send_method(0, commands.Connection.Close(reply_code=200, reply_text="bye",
                                                        class_id=0, method_id=0))
        client.expect(commands.Connection.CloseOk, channel=0)


def test_after_close_ok_the_socket_is_left_for_the_client_to_close(warren_broker):
    """As RabbitMQ: what a client still sends after its Connection.Close is read and
    dropped, and the broker closes the socket only after the client closed its end. A
    broker that closed first (Warren did) answered late bytes with a reset, which
    amqp091-go's Close, called from several goroutines, reported as an error."""
    with connect(warren_broker.host, warren_broker.port) as client:
        client.open_channel(1)
        client.send_method(0, commands.Connection.Close(reply_code=200, reply_text="bye",
                                                        class_id=0, method_id=0))
        client.expect(commands.Connection.CloseOk, channel=0)
        late = frame.marshal(commands.Basic.Publish(routing_key="nowhere"), 1)
        client.send_raw((late + content_header_frame(1, 1000)
                         + content_body_frame(1, b"x" * 1000)) * 100)
        # Nothing comes, neither an end nor a reset: a broker answers nothing after
        # Close-Ok, so a correct one passes this however long it waits.
        readable, _, _ = select.select([client.sock], [], [], 0.5)
        assert not readable
        client.sock.shutdown(socket.SHUT_WR)
        client.sock.settimeout(10.0)
        try:
            end = client.sock.recv(1)   # Warren closes with a FIN
        except ConnectionResetError:
            end = b""                   # RabbitMQ 3.10.8 with a reset, its input unread
        assert end == b""


# -- channels ------------------------------------------------------------------------


def test_opening_a_channel_twice_is_a_504_connection_error(warren_broker):
    with connect(warren_broker.host, warren_broker.port) as client:
        client.open_channel(1)
        client.send_method(1, commands.Channel.Open())
        close = client.wait_for_connection_close()
        assert close.channel == 0
        assert close.reply_code == 504
        assert close.reply_text == "CHANNEL_ERROR - second 'channel.open' seen"
        assert (close.class_id, close.method_id) == (20, 10)


def test_channel_max_limits_how_many_channels_are_open_with_530(warren_broker):
    """As RabbitMQ 3.10 (AMQP 0-9-1 would limit the numbers): with channel_max=3
    negotiated, channels of any number open while fewer than 3 are open; one more
    closes the connection with 530."""
    with connect(warren_broker.host, warren_broker.port, channel_max=3) as client:
        for number in (11, 65535, 2):
            client.open_channel(number)
        client.send_method(4, commands.Channel.Open())
        close = client.wait_for_connection_close()
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        530, "NOT_ALLOWED - number of channels opened (3) has reached the negotiated "
             "channel_max (3)", 0, 0)


def test_closed_channel_number_can_be_opened_again(warren_broker):
    with connect(warren_broker.host, warren_broker.port, channel_max=2) as client:
        client.open_channel(1)
        client.open_channel(2)
        client.send_method(2, commands.Channel.Close(reply_code=200, reply_text="",
                                                     class_id=0, method_id=0))
        client.expect(commands.Channel.CloseOk, channel=2)
        client.open_channel(2)
