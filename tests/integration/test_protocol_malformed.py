"""Raw-socket tests of malformed and out-of-order frames after a complete handshake.

Each case asserts the Connection.Close the broker sends (reply code, reply text, and
class/method ids) and that an independent pika client on the same broker keeps working
before and after. Expected values are what RabbitMQ 3.10 sends (measured on
127.0.0.1:5673); run with WARREN_TEST_BROKER=127.0.0.1:5673 to check them against it.
"""

import struct
import uuid
from dataclasses import dataclass

import pika
import pytest
from pamqp import commands, frame

from tests.support.raw_amqp import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    PeerClosed,
    connect_to,
    content_body_frame,
    content_header_frame,
    heartbeat_frame,
    method_frame,
    raw_frame,
)


class Bystander:
    """An ordinary pika client: declare a queue, publish with confirms, get it back."""

    def __init__(self, warren):
        self.connection = pika.BlockingConnection(warren.connection_parameters(
            heartbeat=0, blocked_connection_timeout=10, socket_timeout=10, stack_timeout=10))
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()
        self.queue = self.channel.queue_declare("", exclusive=True).method.queue

    def roundtrip(self) -> None:
        body = uuid.uuid4().bytes
        self.channel.basic_publish("", self.queue, body, mandatory=True)
        method, _properties, received = self.channel.basic_get(self.queue, auto_ack=True)
        assert method is not None, "the published message is not in the queue"
        assert received == body

    def close(self) -> None:
        if self.connection.is_open:
            self.connection.close()


@pytest.fixture
def bystander(warren):
    client = Bystander(warren)
    try:
        client.roundtrip()
        yield client
    finally:
        client.close()


def _after_check(warren, bystander: Bystander) -> None:
    bystander.roundtrip()
    fresh = Bystander(warren)
    try:
        fresh.roundtrip()
    finally:
        fresh.close()


def _publish(channel: int) -> bytes:
    return frame.marshal(commands.Basic.Publish(exchange="", routing_key="no-such-queue"),
                         channel)


def _method(channel: int, method) -> bytes:
    return frame.marshal(method, channel)


QOS = commands.Basic.Qos(prefetch_count=1)


@dataclass
class Case:
    id: str
    data: bytes
    reply_code: int
    reply_text: str          # the reply text starts with this
    class_id: int = 0
    method_id: int = 0
    open_channels: tuple = (1,)


EXPECTED_METHOD = "UNEXPECTED_FRAME - expected method frame, got non method frame instead"

CASES = [
    # -- framing: 501 FRAME_ERROR -------------------------------------------------------
    Case("bad-frame-end-method",
         raw_frame(FRAME_METHOD, 1, _method(1, QOS)[7:-1], end=0x00), 501, "FRAME_ERROR - "),
    Case("bad-frame-end-heartbeat", raw_frame(8, 0, b"", end=0x00), 501, "FRAME_ERROR - "),
    Case("frame-larger-than-frame-max", raw_frame(FRAME_BODY, 1, b"x" * 131073),
         501, "FRAME_ERROR - "),
    Case("unknown-frame-type-9-channel-0", raw_frame(9, 0, b"abc"), 501, "FRAME_ERROR - "),
    Case("unknown-frame-type-4-channel-1", raw_frame(4, 1, b""), 501, "FRAME_ERROR - "),
    Case("empty-method-frame", raw_frame(FRAME_METHOD, 1, b""), 501, "FRAME_ERROR - "),
    Case("method-frame-without-method-id", raw_frame(FRAME_METHOD, 1, b"\x00\x3c"),
         501, "FRAME_ERROR - "),
    Case("truncated-method-arguments", method_frame(1, 50, 10, b"\x00"),
         501, "FRAME_ERROR - cannot decode", 50, 10),
    Case("truncated-content-header", _publish(1) + raw_frame(FRAME_HEADER, 1, b"\x00\x3c"),
         501, "FRAME_ERROR - "),
    # -- content assembly: 505 UNEXPECTED_FRAME -------------------------------------------
    Case("content-header-without-publish", content_header_frame(1, 5), 505, EXPECTED_METHOD),
    Case("content-body-without-publish", content_body_frame(1, b"hello"), 505,
         EXPECTED_METHOD),
    Case("body-on-another-open-channel",
         _publish(1) + content_header_frame(1, 5) + content_body_frame(2, b"hello"),
         505, EXPECTED_METHOD, open_channels=(1, 2)),
    Case("body-on-another-unopened-channel",
         _publish(1) + content_header_frame(1, 5) + content_body_frame(2, b"hello"),
         505, EXPECTED_METHOD),
    Case("method-instead-of-content-header", _publish(1) + _method(1, QOS), 505,
         "UNEXPECTED_FRAME - expected content header for class 60, got non content header "
         "frame instead", 60, 40),
    Case("method-instead-of-content-body",
         _publish(1) + content_header_frame(1, 5) + _method(1, QOS), 505,
         "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
         60, 40),
    Case("content-header-of-wrong-class", _publish(1) + content_header_frame(1, 5, 50), 505,
         "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 "
         "instead", 60, 40),
    Case("content-header-on-channel-0", content_header_frame(0, 5), 505,
         "UNEXPECTED_FRAME - "),
    Case("content-body-on-channel-0", content_body_frame(0, b"x"), 505,
         "UNEXPECTED_FRAME - "),
    Case("heartbeat-on-open-channel", heartbeat_frame(1), 505, "UNEXPECTED_FRAME - "),
    Case("heartbeat-on-unopened-channel", heartbeat_frame(5), 505, "UNEXPECTED_FRAME - "),
    # -- channel state: 504 CHANNEL_ERROR, 503 COMMAND_INVALID ----------------------------
    Case("method-on-unopened-channel", _method(3, QOS), 504,
         "CHANNEL_ERROR - expected 'channel.open'", 60, 10),
    Case("queue-declare-on-unopened-channel", _method(3, commands.Queue.Declare(queue="q")),
         504, "CHANNEL_ERROR - expected 'channel.open'", 50, 10),
    Case("channel-open-on-channel-0", _method(0, commands.Channel.Open()), 504,
         "CHANNEL_ERROR - unexpected method in connection state running", 20, 10),
    Case("basic-method-on-channel-0", _method(0, QOS), 504,
         "CHANNEL_ERROR - unexpected method in connection state running", 60, 10),
    Case("connection-open-again", _method(0, commands.Connection.Open()), 504,
         "CHANNEL_ERROR - unexpected method in connection state running", 10, 40),
    Case("connection-method-on-channel-1", _method(1, commands.Connection.Open()), 503,
         "COMMAND_INVALID - unimplemented method", 10, 40),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_malformed_input_closes_connection(warren, bystander, case):
    with connect_to(warren) as client:
        for channel in case.open_channels:
            client.open_channel(channel)
        client.send_raw(case.data)
        close = client.wait_for_connection_close(timeout=10)
    assert close.channel == 0
    assert (close.reply_code, close.reply_text[:len(case.reply_text)]) == (
        case.reply_code, case.reply_text), close.reply_text
    assert (close.class_id, close.method_id) == (case.class_id, case.method_id)
    _after_check(warren, bystander)


@pytest.mark.parametrize("class_id,method_id,channel", [
    (99, 10, 1),
    (60, 999, 1),
    (99, 10, 0),
], ids=["unknown-class", "unknown-method", "unknown-class-channel-0"])
def test_unknown_method_id_closes_connection(warren, bystander, class_id, method_id,
                                             channel):
    """RabbitMQ 3.10 sends no Connection.Close here: the reader process crashes with
    {unknown_method_id, {Class, Method}} and the socket is closed at once. A
    Connection.Close with 503 COMMAND_INVALID or 540 NOT_IMPLEMENTED before the close is
    tolerated; any other frame is not, and the socket must be closed."""
    with connect_to(warren) as client:
        client.open_channel(1)
        client.send_raw(method_frame(channel, class_id, method_id, struct.pack(">H", 0)))
        frames = []
        while True:
            try:
                received = client.read_frame(timeout=10)
            except PeerClosed:
                break
            frames.append(received)
            assert isinstance(received.value, commands.Connection.Close), frames
            assert received.value.reply_code in (503, 540), received.value.reply_text
            client.send_method(0, commands.Connection.CloseOk())
    assert len(frames) <= 1, frames
    _after_check(warren, bystander)
