"""A small blocking raw AMQP 0-9-1 client, used by the protocol tests and to publish
volume cheaply (ConfirmedPublisher).

It speaks just enough of the protocol to drive a broker into corner cases: send the
protocol header (or any other bytes), perform the handshake with pamqp-encoded frames
(PLAIN or AMQPLAIN, chosen channel_max/frame_max/heartbeat in TuneOk), send arbitrary
frames or raw bytes, and read decoded frames. Every read takes a timeout which is used
as a deadline (socket timeouts only, never sleeps): when it passes, `Timeout` is raised.
When the peer closes the socket, `PeerClosed` is raised.
"""

import socket
import struct
import time
from dataclasses import dataclass

from pamqp import body, commands, encode, frame, header, heartbeat

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE

# What pika 1.4 advertises in its client_properties capabilities.
PIKA_CAPABILITIES = {
    "authentication_failure_close": True,
    "basic.nack": True,
    "connection.blocked": True,
    "consumer_cancel_notify": True,
    "exchange_exchange_bindings": True,
    "publisher_confirms": True,
}

DEFAULT_TIMEOUT = 5.0


class PeerClosed(Exception):
    """The peer closed the TCP connection (EOF or reset)."""

    def __init__(self, message: str = "peer closed the connection", data: bytes = b""):
        super().__init__(message)
        self.data = data  # bytes received before the close that did not form a frame


class Timeout(Exception):
    """The deadline passed before the expected data arrived."""


class UnexpectedFrame(Exception):
    """A frame other than the one waited for arrived."""


@dataclass
class Frame:
    """One decoded frame. `payload` holds the raw payload bytes (between size and end)."""

    frame_type: int
    channel: int
    payload: bytes
    value: object  # pamqp object: commands.*, header.ContentHeader, body.ContentBody, Heartbeat

    @property
    def is_heartbeat(self) -> bool:
        return self.frame_type == FRAME_HEARTBEAT

    def __repr__(self) -> str:
        return f"Frame(type={self.frame_type}, channel={self.channel}, value={self.value!r})"


@dataclass
class CloseInfo:
    """What a Connection.Close or Channel.Close carried."""

    channel: int
    reply_code: int
    reply_text: str
    class_id: int
    method_id: int


def read_socket_until_closed(sock: socket.socket, timeout: float) -> bytes:
    """Read a plain socket until the broker closes it (or resets it); what it sent
    before. Raises socket.timeout when the broker keeps it open past `timeout`."""
    sock.settimeout(timeout)
    received = b""
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return received
        if not data:
            return received
        received += data


def method_frame(channel: int, class_id: int, method_id: int, arguments: bytes = b"") -> bytes:
    """A method frame with arbitrary class/method ids and raw argument bytes."""
    payload = struct.pack(">HH", class_id, method_id) + arguments
    return raw_frame(FRAME_METHOD, channel, payload)


def raw_frame(frame_type: int, channel: int, payload: bytes, end: int = FRAME_END) -> bytes:
    """Any frame, with a chosen type and end octet."""
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + bytes([end])


def content_header_frame(channel: int, body_size: int, class_id: int = 60,
                         properties: commands.Basic.Properties | None = None) -> bytes:
    value = header.ContentHeader(0, body_size, properties or commands.Basic.Properties())
    encoded = frame.marshal(value, channel)
    if class_id != 60:
        encoded = encoded[:7] + struct.pack(">H", class_id) + encoded[9:]
    return encoded


def content_body_frame(channel: int, data: bytes) -> bytes:
    return frame.marshal(body.ContentBody(data), channel)


def heartbeat_frame(channel: int = 0) -> bytes:
    return raw_frame(FRAME_HEARTBEAT, channel, b"")


def start_ok_frame(mechanism: str, response: bytes, client_properties: dict,
                   locale: str = "en_US") -> bytes:
    """Connection.StartOk, encoded by hand so that `response` can be arbitrary bytes."""
    arguments = (encode.field_table(client_properties) + encode.short_string(mechanism)
                 + struct.pack(">I", len(response)) + response + encode.short_string(locale))
    return method_frame(0, 10, 11, arguments)


def plain_response(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


def amqplain_response(user: str, password: str) -> bytes:
    """AMQPLAIN: a field table without its 4-byte length prefix."""
    table = encode.field_table({"LOGIN": user, "PASSWORD": password})
    return table[4:]


class RawAmqpClient:
    """A blocking AMQP client that sends and reads frames one at a time."""

    def __init__(self, host: str, port: int, timeout: float = DEFAULT_TIMEOUT):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = bytearray()
        self.start: commands.Connection.Start | None = None
        self.tune: commands.Connection.Tune | None = None
        self.channel_max = 0
        self.frame_max = 0
        self.heartbeat = 0
        self.heartbeats_received = 0

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "RawAmqpClient":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- sending --------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_method(self, channel: int, method) -> None:
        self.send_raw(frame.marshal(method, channel))

    def send_protocol_header(self, data: bytes = PROTOCOL_HEADER) -> None:
        self.send_raw(data)

    def publish(self, channel: int, routing_key: str, data: bytes, exchange: str = "",
                properties: commands.Basic.Properties | None = None) -> None:
        """Basic.Publish + content header + one body frame (sent in one write)."""
        self.send_raw(frame.marshal(commands.Basic.Publish(exchange=exchange,
                                                           routing_key=routing_key), channel)
                      + content_header_frame(channel, len(data), properties=properties)
                      + content_body_frame(channel, data))

    # -- receiving ------------------------------------------------------------------

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    def _fill(self, count: int, deadline: float) -> None:
        """Read until the buffer holds at least `count` bytes."""
        while len(self._buffer) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(f"timed out waiting for {count} bytes, have "
                              f"{bytes(self._buffer)!r}")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue  # loop re-checks the deadline
            except (ConnectionResetError, BrokenPipeError) as error:
                raise PeerClosed(f"connection reset: {error}", bytes(self._buffer)) from error
            if not chunk:
                raise PeerClosed("peer closed the connection", bytes(self._buffer))
            self._buffer += chunk

    def read_exact(self, count: int, timeout: float | None = None) -> bytes:
        self._fill(count, self._deadline(timeout))
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    def read_frame(self, timeout: float | None = None) -> Frame:
        """Read and decode the next frame (heartbeats included)."""
        deadline = self._deadline(timeout)
        self._fill(7, deadline)
        frame_type, channel, size = struct.unpack(">BHI", self._buffer[:7])
        if self._buffer[:4] == b"AMQP":
            raise UnexpectedFrame(f"protocol header from server: {self.read_exact(8)!r}")
        self._fill(7 + size + 1, deadline)
        data = bytes(self._buffer[:7 + size + 1])
        del self._buffer[:7 + size + 1]
        if data[-1] != FRAME_END:
            raise UnexpectedFrame(f"bad frame end octet from server: {data!r}")
        payload = data[7:-1]
        if frame_type == FRAME_HEARTBEAT:
            self.heartbeats_received += 1
            value = heartbeat.Heartbeat()
        else:
            _consumed, _channel, value = frame.unmarshal(data)
        return Frame(frame_type, channel, payload, value)

    def read_frame_skip_heartbeats(self, timeout: float | None = None) -> Frame:
        deadline = self._deadline(timeout)
        while True:
            result = self.read_frame(max(deadline - time.monotonic(), 0.001))
            if not result.is_heartbeat:
                return result

    def expect(self, method_class, channel: int | None = None, timeout: float | None = None):
        """Read the next non-heartbeat frame, which must be a `method_class` method."""
        received = self.read_frame_skip_heartbeats(timeout)
        if not isinstance(received.value, method_class) or (
                channel is not None and received.channel != channel):
            raise UnexpectedFrame(f"expected {method_class.__name__} on channel {channel}, "
                                  f"got {received!r}")
        return received.value

    def read_until_closed(self, timeout: float | None = None) -> list[Frame]:
        """Read frames until the peer closes the socket; returns the frames read.

        Raises `Timeout` if the socket is still open at the deadline.
        """
        deadline = self._deadline(timeout)
        frames = []
        while True:
            try:
                frames.append(self.read_frame(max(deadline - time.monotonic(), 0.001)))
            except PeerClosed:
                return frames

    def wait_for_connection_close(self, timeout: float | None = None,
                                  send_close_ok: bool = True) -> CloseInfo:
        """Read until a Connection.Close arrives (skipping heartbeats and other frames).

        Answers it with Connection.CloseOk unless told not to.
        """
        deadline = self._deadline(timeout)
        while True:
            received = self.read_frame(max(deadline - time.monotonic(), 0.001))
            if isinstance(received.value, commands.Connection.Close):
                close = received.value
                if send_close_ok:
                    try:
                        self.send_method(0, commands.Connection.CloseOk())
                    except OSError:
                        pass
                return CloseInfo(received.channel, close.reply_code, close.reply_text,
                                 close.class_id, close.method_id)

    def wait_for_close_code(self, timeout: float | None = None) -> int:
        """The reply code of the next Connection.Close or Channel.Close."""
        deadline = self._deadline(timeout)
        while True:
            received = self.read_frame(max(deadline - time.monotonic(), 0.001))
            if isinstance(received.value, (commands.Connection.Close, commands.Channel.Close)):
                if isinstance(received.value, commands.Connection.Close):
                    try:
                        self.send_method(0, commands.Connection.CloseOk())
                    except OSError:
                        pass
                return received.value.reply_code

    # -- handshake ------------------------------------------------------------------

    def start_handshake(self, header_bytes: bytes = PROTOCOL_HEADER) -> commands.Connection.Start:
        self.send_protocol_header(header_bytes)
        self.start = self.expect(commands.Connection.Start, channel=0)
        return self.start

    def send_start_ok(self, user: str = "guest", password: str = "guest",
                      mechanism: str = "PLAIN", capabilities: dict | None = None,
                      client_properties: dict | None = None) -> None:
        """StartOk; `client_properties` adds entries to the client-properties table."""
        if mechanism == "PLAIN":
            response = plain_response(user, password)
        elif mechanism == "AMQPLAIN":
            response = amqplain_response(user, password)
        else:
            raise ValueError(mechanism)
        properties = {
            "product": "warren-raw-test-client",
            "capabilities": PIKA_CAPABILITIES if capabilities is None else capabilities,
            **(client_properties or {}),
        }
        self.send_raw(start_ok_frame(mechanism, response, properties))

    def send_tune_ok(self, channel_max: int | None = None, frame_max: int | None = None,
                     heartbeat: int | None = None) -> None:
        """TuneOk; values default to what the server proposed."""
        assert self.tune is not None
        self.channel_max = self.tune.channel_max if channel_max is None else channel_max
        self.frame_max = self.tune.frame_max if frame_max is None else frame_max
        self.heartbeat = self.tune.heartbeat if heartbeat is None else heartbeat
        self.send_method(0, commands.Connection.TuneOk(
            channel_max=self.channel_max, frame_max=self.frame_max, heartbeat=self.heartbeat))

    def handshake(self, user: str = "guest", password: str = "guest", vhost: str = "/",
                  mechanism: str = "PLAIN", channel_max: int | None = None,
                  frame_max: int | None = None, heartbeat: int | None = 0,
                  capabilities: dict | None = None,
                  client_properties: dict | None = None) -> commands.Connection.OpenOk:
        """Full handshake up to Connection.OpenOk. heartbeat=0 disables heartbeats;
        None for any tune value accepts the server's proposal."""
        self.start_handshake()
        self.send_start_ok(user, password, mechanism, capabilities, client_properties)
        self.tune = self.expect(commands.Connection.Tune, channel=0)
        self.send_tune_ok(channel_max, frame_max, heartbeat)
        self.send_method(0, commands.Connection.Open(virtual_host=vhost))
        return self.expect(commands.Connection.OpenOk, channel=0)

    def open_channel(self, channel: int = 1) -> None:
        self.send_method(channel, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk, channel=channel)


def connect(host: str, port: int, timeout: float = DEFAULT_TIMEOUT, **handshake) -> RawAmqpClient:
    """A client that completed the handshake."""
    client = RawAmqpClient(host, port, timeout)
    try:
        client.handshake(**handshake)
    except BaseException:
        client.close()
        raise
    return client


def connect_to(vhost, timeout: float = DEFAULT_TIMEOUT) -> RawAmqpClient:
    """A client logged in to a `warren` fixture's vhost (a TestVhost) as its user."""
    return connect(vhost.host, vhost.port, timeout, user=vhost.user,
                   password=vhost.password, vhost=vhost.vhost)


class ConfirmedPublisher:
    """Publishes on a channel of a connected RawAmqpClient in confirm mode, with frames
    encoded by hand a batch at a time, so that the publishing costs the test little next
    to the broker's work (pika's BlockingConnection spends tens of microseconds of CPU a
    message). At most `window` messages are unconfirmed; a Basic.Nack fails."""

    def __init__(self, client: RawAmqpClient, channel: int = 1, window: int = 20_000):
        self.client = client
        self.channel = channel
        self.window = window
        self.published = 0
        self.confirmed_through = 0   # every tag up to this one is confirmed
        self.confirmed_after = set()  # and these, confirmed one by one, above it
        client.open_channel(channel)
        client.send_method(channel, commands.Confirm.Select())
        client.expect(commands.Confirm.SelectOk, channel=channel)

    def publish_all(self, exchange: str, routing_key: str, bodies, batch: int = 5_000,
                    timeout: float = 60.0) -> None:
        """Publish every body of the iterable, in order, and wait for every confirm."""
        publish = frame.marshal(commands.Basic.Publish(exchange=exchange,
                                                       routing_key=routing_key), self.channel)
        headers: dict[int, bytes] = {}
        body_prefix = struct.Struct(">BHI")
        end = bytes([FRAME_END])
        frames, count = [], 0
        for data in bodies:
            size = len(data)
            header_frame = headers.get(size)
            if header_frame is None:
                header_frame = headers[size] = content_header_frame(self.channel, size)
            frames += (publish, header_frame,
                       body_prefix.pack(FRAME_BODY, self.channel, size), data, end)
            count += 1
            if count == batch:
                self._send(frames, count, timeout)
                frames, count = [], 0
        self._send(frames, count, timeout)
        self._confirm_down_to(0, timeout)

    def _send(self, frames: list, count: int, timeout: float) -> None:
        """Write `count` messages' frames at once, then wait until at most `window` are
        unconfirmed."""
        self.client.send_raw(b"".join(frames))
        self.published += count
        self._confirm_down_to(self.window, timeout)

    @property
    def unconfirmed(self) -> int:
        return self.published - self.confirmed_through - len(self.confirmed_after)

    def _confirm_down_to(self, unconfirmed: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.unconfirmed > unconfirmed:
            received = self.client.read_frame_skip_heartbeats(
                max(deadline - time.monotonic(), 0.001))
            if not isinstance(received.value, commands.Basic.Ack):
                raise UnexpectedFrame(f"expected Basic.Ack, got {received!r} with "
                                      f"{self.unconfirmed} of {self.published} unconfirmed")
            self._confirm(received.value.delivery_tag, received.value.multiple)

    def _confirm(self, tag: int, multiple: bool) -> None:
        if multiple:
            self.confirmed_through = max(self.confirmed_through, tag)
            self.confirmed_after = {t for t in self.confirmed_after if t > tag}
        elif tag > self.confirmed_through:
            self.confirmed_after.add(tag)
        while self.confirmed_through + 1 in self.confirmed_after:
            self.confirmed_through += 1
            self.confirmed_after.remove(self.confirmed_through)
