"""Inbound decoding: any split of the stream, content assembly, and every error's reply code."""

import collections
import struct

import pytest
from hypothesis import given, settings, strategies as st
from pamqp import body as pamqp_body
from pamqp import commands, frame, header

from amqp_codec import (
    HEARTBEAT_FRAME, PROTOCOL_HEADER, Decoder, InboundHeartbeat, InboundMethod, InboundPublish,
    ProtocolError, ProtocolHeaderMismatch, ReplyCode, encode_properties,
)
from test_fast_path import exchange_names, properties, shortstrs, tables


def raw_frame(frame_type: int, channel: int, payload: bytes, end: bytes = b"\xce") -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + end


def method(channel: int, class_id: int, method_id: int, arguments: bytes = b"") -> bytes:
    return raw_frame(1, channel, struct.pack(">HH", class_id, method_id) + arguments)


def publish(channel: int = 1, exchange: str = "", routing_key: str = "q") -> bytes:
    return frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key),
                         channel)


def content_header(channel: int = 1, body_size: int = 5, class_id: int = 60,
                   raw_properties: bytes = b"\x00\x00") -> bytes:
    return raw_frame(2, channel, struct.pack(">HHQ", class_id, 0, body_size) + raw_properties)


def body(channel: int = 1, data: bytes = b"hello") -> bytes:
    return raw_frame(3, channel, data)


def feed_in_chunks(decoder: Decoder, stream: bytes, cuts) -> list:
    out, start = [], 0
    for cut in sorted(cuts) + [len(stream)]:
        out += decoder.feed(stream[start:cut])
        start = max(start, cut)
    return out


def summary(item):
    """A comparable form of a decoded command."""
    if isinstance(item, InboundPublish):
        assert type(item.properties) is bytes and type(item.body) is bytes
        return ("publish", item.channel, item.exchange, item.routing_key, item.mandatory,
                item.immediate, item.properties, item.body)
    if isinstance(item, InboundMethod):
        return ("method", item.channel, item.method.name, dict(item.method))
    assert isinstance(item, InboundHeartbeat)
    return ("heartbeat", item.channel)


# --- generated streams -------------------------------------------------------------------

@st.composite
def publish_command(draw, channel: int):
    """(frames, expected summary) for a Basic.Publish marshalled by pamqp."""
    args = commands.Basic.Publish(0, draw(exchange_names), draw(shortstrs), draw(st.booleans()),
                                  draw(st.booleans()))
    props = draw(properties)
    data = draw(st.binary(max_size=300))
    step = draw(st.integers(1, 301))
    frames = [frame.marshal(args, channel),
              frame.marshal(header.ContentHeader(0, len(data), props), channel)]
    frames += [frame.marshal(pamqp_body.ContentBody(data[i:i + step]), channel)
               for i in range(0, len(data), step)]
    expected = ("publish", channel, args.exchange, args.routing_key, args.mandatory,
                args.immediate, encode_properties(props), data)
    return frames, expected


@st.composite
def method_command(draw, channel: int):
    """(frames, expected summary) for a method without content, as pamqp decodes it."""
    if channel == 0:
        value = commands.Connection.TuneOk(draw(st.integers(0, 65535)),
                                           draw(st.integers(0, 2**32 - 1)),
                                           draw(st.integers(0, 65535)))
    else:
        value = draw(st.one_of(
            st.builds(commands.Basic.Ack, st.integers(0, 2**63 - 1), st.booleans()),
            st.builds(commands.Basic.Qos, st.just(0), st.integers(0, 65535), st.booleans()),
            st.builds(commands.Queue.Declare, queue=exchange_names, durable=st.booleans(),
                      arguments=tables),
        ))
    marshalled = frame.marshal(value, channel)
    decoded = frame.unmarshal(marshalled)[2]
    return [marshalled], ("method", channel, decoded.name, dict(decoded))


@st.composite
def command(draw, channel: int):
    if channel == 0:
        return draw(st.one_of(st.just(([HEARTBEAT_FRAME], ("heartbeat", 0))),
                              method_command(0)))
    return draw(st.one_of(publish_command(channel), method_command(channel)))


@st.composite
def interleaved_streams(draw, max_commands: int = 8):
    """A stream of commands on channels 0-3, frames of different channels interleaved.

    Returns (stream, expected summaries in completion order).
    """
    channels = draw(st.lists(st.integers(0, 3), max_size=max_commands))
    pending = collections.defaultdict(collections.deque)
    for channel in channels:
        frames, expected = draw(command(channel))
        for i, data in enumerate(frames):
            pending[channel].append((data, expected if i == len(frames) - 1 else None))
    stream, expected_out = bytearray(), []
    while pending:
        channel = draw(st.sampled_from(sorted(pending)))
        data, expected = pending[channel].popleft()
        if not pending[channel]:
            del pending[channel]
        stream += data
        if expected is not None:
            expected_out.append(expected)
    return bytes(stream), expected_out


@given(interleaved_streams(), st.data())
def test_any_split_decodes_the_same_commands(stream_and_expected, data):
    stream, expected = stream_and_expected
    stream = PROTOCOL_HEADER + stream
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=30))
    out = feed_in_chunks(Decoder(), stream, cuts)
    assert [summary(item) for item in out] == expected


@settings(max_examples=40)
@given(interleaved_streams(max_commands=4), st.sampled_from([bytes, bytearray, memoryview]))
def test_one_byte_at_a_time(stream_and_expected, chunk_type):
    stream, expected = stream_and_expected
    stream = PROTOCOL_HEADER + stream
    decoder, out = Decoder(), []
    for i in range(len(stream)):
        out += decoder.feed(chunk_type(stream[i:i + 1]))
    assert [summary(item) for item in out] == expected


# --- behaviour ---------------------------------------------------------------------------

def test_publish_fields_and_raw_properties():
    raw = encode_properties(commands.Basic.Properties(content_type="text/plain",
                                                      delivery_mode=2))
    stream = (PROTOCOL_HEADER
              + frame.marshal(commands.Basic.Publish(exchange="ex", routing_key="rk",
                                                     mandatory=True), 7)
              + content_header(7, 11, raw_properties=raw)
              + body(7, b"hello ") + body(7, b"") + body(7, b"world"))
    [item] = Decoder().feed(stream)
    assert summary(item) == ("publish", 7, "ex", "rk", True, False, raw, b"hello world")


class CallersPublish:
    """A caller's own publish class: InboundPublish's constructor and attributes."""

    __slots__ = ("channel", "exchange", "routing_key", "mandatory", "immediate",
                 "properties", "body", "decoded_cache", "persistent_cache")

    def __init__(self, channel, exchange, routing_key, mandatory, immediate,
                 properties=b"", body=b""):
        self.channel, self.exchange, self.routing_key = channel, exchange, routing_key
        self.mandatory, self.immediate = mandatory, immediate
        self.properties, self.body = properties, body
        self.decoded_cache = self.persistent_cache = None


def test_publishes_are_made_as_the_callers_publish_type():
    raw = encode_properties(commands.Basic.Properties(message_id="m1"))
    whole = publish(3, "ex", "rk") + content_header(3, 5, raw_properties=raw) + body(3)
    split = publish(3, "ex", "rk") + content_header(3, 5, raw_properties=raw) + body(
        3, b"he") + body(3, b"llo")
    for stream in (whole, split):
        decoder = Decoder(publish_type=CallersPublish)
        [item] = decoder.feed(PROTOCOL_HEADER + stream)
        assert type(item) is CallersPublish
        assert (item.channel, item.exchange, item.routing_key, item.mandatory,
                item.immediate, item.properties, item.body) == (
            3, "ex", "rk", False, False, raw, b"hello")
        # one byte at a time takes the general path, which makes the same
        decoder = Decoder(publish_type=CallersPublish)
        items = [item for byte in PROTOCOL_HEADER + stream
                 for item in decoder.feed(bytes([byte]))]
        assert [type(item) for item in items] == [CallersPublish]
        assert (items[0].properties, items[0].body) == (raw, b"hello")


def test_a_publish_comes_with_its_caches_empty_however_it_was_read():
    """Whole in one read (made without a constructor call) or frame by frame, a publish
    has every attribute set: the caches for what is learnt from its properties later
    start None, for InboundPublish and for a caller's publish_type."""
    stream = PROTOCOL_HEADER + publish(3, "ex", "rk") + content_header(3, 5) + body(3)
    for publish_type in (InboundPublish, CallersPublish):
        whole = Decoder(publish_type=publish_type).feed(stream)
        decoder = Decoder(publish_type=publish_type)
        split = [item for byte in stream for item in decoder.feed(bytes([byte]))]
        for [item] in (whole, split):
            assert type(item) is publish_type
            assert (item.decoded_cache, item.persistent_cache) == (None, None)


def test_a_dropped_body_comes_as_an_inbound_publish_whatever_the_publish_type():
    decoder = Decoder(max_body_size=4, publish_type=CallersPublish)
    [item] = decoder.feed(PROTOCOL_HEADER + publish(3, "ex", "rk") + content_header(3, 5)
                          + body(3))
    assert type(item) is InboundPublish
    assert (item.channel, item.exchange, item.routing_key, item.body, item.body_size) == (
        3, "ex", "rk", None, 5)


def test_zero_size_body_completes_at_the_header():
    out = Decoder().feed(PROTOCOL_HEADER + publish() + content_header(body_size=0))
    assert summary(out[0])[-1] == b""


def test_channel_expects_a_method_again_after_a_publish():
    stream = PROTOCOL_HEADER + (publish() + content_header() + body()) * 2 + method(1, 90, 10)
    out = Decoder().feed(stream)
    assert [type(item) for item in out] == [InboundPublish, InboundPublish, InboundMethod]


def test_header_alone_returns_nothing_until_frames_arrive():
    decoder = Decoder()
    assert decoder.feed(PROTOCOL_HEADER[:3]) == []
    assert not decoder.header_received
    assert decoder.feed(PROTOCOL_HEADER[3:]) == []
    assert decoder.header_received
    assert decoder.feed(HEARTBEAT_FRAME[:7]) == []
    assert [summary(i) for i in decoder.feed(HEARTBEAT_FRAME[7:])] == [("heartbeat", 0)]


def test_frame_max_zero_means_no_limit():
    big = bytes(300_000)
    stream = PROTOCOL_HEADER + publish() + content_header(body_size=len(big)) + body(1, big)
    [item] = Decoder(frame_max=0).feed(stream)
    assert item.body == big


def test_frame_of_exactly_frame_max_is_accepted():
    data = bytes(4088)
    stream = PROTOCOL_HEADER + publish() + content_header(body_size=4088) + body(1, data)
    [item] = Decoder(frame_max=4096).feed(stream)
    assert item.body == data


# --- errors ------------------------------------------------------------------------------

def _error(stream: bytes, frame_max: int = 131072, one_byte: bool = False) -> ProtocolError:
    decoder = Decoder(frame_max)
    decoder.feed(PROTOCOL_HEADER)
    with pytest.raises(ProtocolError) as caught:
        if one_byte:
            for i in range(len(stream)):
                decoder.feed(stream[i:i + 1])
        else:
            decoder.feed(stream)
    return caught.value


ERRORS = {
    # name: (stream after the protocol header, reply code, channel, class_id, method_id)
    "bad frame end": (method(1, 90, 10)[:-1] + b"\x00", 501, 1, 0, 0),
    "unknown frame type": (raw_frame(5, 1, b"abc"), 501, 1, 0, 0),
    "frame type 0": (raw_frame(0, 0, b""), 501, 0, 0, 0),
    "heartbeat with payload": (raw_frame(8, 0, b"xx"), 501, 0, 0, 0),
    "method frame under 4 bytes": (raw_frame(1, 1, b"\x00\x3c"), 501, 1, 0, 0),
    "unknown class": (method(1, 99, 10), 503, 1, 99, 10),
    "unknown method": (method(1, 60, 99), 503, 1, 60, 99),
    "unknown class on channel 0": (method(0, 99, 10), 503, 0, 99, 10),
    "truncated Basic.Publish": (method(1, 60, 40, b"\x00\x00\x05amq"), 501, 1, 60, 40),
    # the arguments' slice would start past their end (followed by content: the fast path)
    "Basic.Publish without its ticket": (method(1, 60, 40) + content_header(body_size=5)
                                         + body(1, b"hello"), 501, 1, 60, 40),
    "Basic.Publish with half its ticket": (method(1, 60, 40, b"\x00") + content_header(body_size=5)
                                           + body(1, b"hello"), 501, 1, 60, 40),
    "Basic.Publish with trailing bytes":
        (method(1, 60, 40, b"\x00\x00\x00\x01q\x00XYZ"), 501, 1, 60, 40),
    "Basic.Publish not UTF-8": (method(1, 60, 40, b"\x00\x00\x00\x02\xff\xfe\x00"),
                                501, 1, 60, 40),
    "truncated Queue.Declare": (method(1, 50, 10, b"\x00\x00\x05ab"), 501, 1, 50, 10),
    "Basic.Ack of wrong length": (method(1, 60, 80, b"\x00" * 8), 501, 1, 60, 80),
    "header without method": (content_header(), 505, 1, 0, 0),
    "body without header": (body(), 505, 1, 0, 0),
    "body where a header is expected": (publish() + body(), 505, 1, 60, 40),
    "method where a header is expected": (publish() + publish(), 505, 1, 60, 40),
    "method interleaved while expecting body":
        (publish() + content_header() + publish(), 505, 1, 60, 40),
    "header where a body is expected":
        (publish() + content_header() + content_header(), 505, 1, 60, 40),
    "body after a zero-size header": (publish() + content_header(body_size=0) + body(),
                                      505, 1, 0, 0),
    "header of another class": (publish() + content_header(class_id=50), 505, 1, 60, 40),
    "header shorter than 14 bytes": (publish() + raw_frame(2, 1, struct.pack(">HHQ", 60, 0, 5)),
                                     501, 1, 0, 0),
    "body longer than announced": (publish() + content_header(body_size=5) + body(1, b"hello!"),
                                   501, 1, 60, 40),
    "split body longer than announced":
        (publish() + content_header(body_size=5) + body(1, b"hel") + body(1, b"lo!"),
         501, 1, 60, 40),
    "content header on channel 0": (content_header(channel=0), 505, 0, 0, 0),
    "content body on channel 0": (body(channel=0), 505, 0, 0, 0),
    "Basic.Publish on channel 0": (publish(channel=0), 504, 0, 60, 40),
    "heartbeat on channel 1": (raw_frame(8, 1, b""), 505, 1, 0, 0),
    # RabbitMQ accepts a payload of up to frame_max bytes; one more is a frame error.
    "oversized frame": (body(1, bytes(4097)), 501, 1, 0, 0),
}


@pytest.mark.parametrize("one_byte", [False, True], ids=["whole", "one-byte"])
@pytest.mark.parametrize("name", list(ERRORS))
def test_protocol_errors(name, one_byte):
    stream, code, channel, class_id, method_id = ERRORS[name]
    error = _error(stream, frame_max=4096, one_byte=one_byte)
    assert (error.reply_code, error.channel, error.class_id, error.method_id) == (
        code, channel, class_id, method_id)
    assert error.reply_text.startswith(ReplyCode(code).name + " - ")


@pytest.mark.parametrize("prefix", [struct.pack(">BHI", 3, 1, 4097),
                                    struct.pack(">BHI", 1, 0, 2**32 - 1),
                                    struct.pack(">BHI", ord("G"), 0x4554, 0x202F2048)])
def test_bad_frame_prefix_fails_before_the_payload_arrives(prefix):
    assert _error(prefix, frame_max=4096).reply_code == ReplyCode.FRAME_ERROR


def test_legacy_0_9_header_is_accepted_as_rabbitmq_does():
    decoder = Decoder()
    assert decoder.feed(b"AMQP\x01\x01\x00\x09") == []
    assert decoder.header_received


def test_frame_payload_of_exactly_frame_max_is_accepted():
    decoder = Decoder(frame_max=4096)
    decoder.feed(PROTOCOL_HEADER + publish() + content_header(body_size=4096))
    (item,) = decoder.feed(body(1, bytes(4096)))
    assert len(item.body) == 4096


def test_commands_before_a_bad_frame_are_handed_over_with_the_error():
    decoder = Decoder()
    stream = PROTOCOL_HEADER + publish() + content_header(body_size=0) + raw_frame(9, 0, b"")
    with pytest.raises(ProtocolError) as caught:
        decoder.feed(stream)
    assert [type(item).__name__ for item in caught.value.decoded] == ["InboundPublish"]


def test_frame_max_can_be_lowered_after_tune():
    decoder = Decoder()
    decoder.feed(PROTOCOL_HEADER + publish() + content_header(body_size=5000))
    decoder.frame_max = 4096
    with pytest.raises(ProtocolError) as caught:
        decoder.feed(body(1, bytes(5000)))
    assert caught.value.reply_code == ReplyCode.FRAME_ERROR


# --- a publisher repeating its frames (recognised by comparison, not decoded again) -----

def whole_publish(routing_key: str = "q", raw_properties: bytes = b"\x00\x00",
                  data: bytes = b"hello", channel: int = 1) -> bytes:
    return (publish(channel, routing_key=routing_key)
            + content_header(channel, len(data), raw_properties=raw_properties)
            + (body(channel, data) if data else b""))    # no body frame for no body


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(["q", "r"]),
                          st.sampled_from([b"\x00\x00", b"\x10\x00\x02"]),
                          st.binary(min_size=0, max_size=4)), min_size=1, max_size=12),
       st.data())
def test_repeated_publishes_each_decode_to_their_own_fields_and_body(messages, data):
    """Publishes that repeat the previous one's key, properties and body size, or change
    one of them, in any split of the stream."""
    stream = PROTOCOL_HEADER + b"".join(whole_publish(key, raw, body_data)
                                        for key, raw, body_data in messages)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=4))
    out = feed_in_chunks(Decoder(), stream, cuts)
    assert [summary(item) for item in out] == [
        ("publish", 1, "", key, False, False, raw, body_data)
        for key, raw, body_data in messages]


def test_a_repeated_publish_with_a_bad_body_frame_end_is_a_frame_error():
    decoder = Decoder()
    decoder.feed(PROTOCOL_HEADER + whole_publish())
    with pytest.raises(ProtocolError) as caught:
        decoder.feed(whole_publish()[:-1] + b"\x00")
    assert caught.value.reply_code == ReplyCode.FRAME_ERROR


def test_a_repeated_publish_is_checked_against_a_lowered_frame_max():
    decoder = Decoder()
    large_properties = encode_properties(commands.Basic.Properties(
        headers={"padding": "x" * 5000}))
    decoder.feed(PROTOCOL_HEADER + whole_publish(raw_properties=large_properties))
    decoder.frame_max = 4096
    with pytest.raises(ProtocolError) as caught:
        decoder.feed(whole_publish(raw_properties=large_properties))
    assert caught.value.reply_code == ReplyCode.FRAME_ERROR


def test_a_repeated_publish_on_a_channel_awaiting_content_is_unexpected():
    decoder = Decoder()
    decoder.feed(PROTOCOL_HEADER + whole_publish() + publish())
    with pytest.raises(ProtocolError) as caught:
        decoder.feed(whole_publish())
    assert caught.value.reply_code == ReplyCode.UNEXPECTED_FRAME


@pytest.mark.parametrize("opening, fails_at", [
    (b"AMQP\x01\x01\x08\x00", 7), (b"GET / HTTP/1.1\r\n\r\n", 1),
    (b"AMQP\x00\x00\x09\x02", 8), (b"AMQP\x00\x00\x08\x00", 7),
])
def test_protocol_header_mismatch(opening, fails_at):
    with pytest.raises(ProtocolHeaderMismatch):
        Decoder().feed(opening)
    decoder = Decoder()
    for i in range(fails_at - 1):
        assert decoder.feed(opening[i:i + 1]) == []
    with pytest.raises(ProtocolHeaderMismatch):
        decoder.feed(opening[fails_at - 1:fails_at])
