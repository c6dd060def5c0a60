"""The struct fast paths are byte-identical to pamqp on generated input.

The strategies here are shared with test_encoder.py and test_decoder.py.
"""

import datetime
import string

import pytest
from hypothesis import given, strategies as st
from pamqp import body as pamqp_body
from pamqp import commands, frame, header
from pamqp import encode as pamqp_encode

from amqp_codec import (
    decode_properties, encode_basic_ack, encode_basic_nack, encode_deliver, encode_get_ok,
    encode_properties, encode_return,
)
from amqp_codec.fast_path import (
    LARGE_BODY, decode_ack, decode_get, decode_publish, deliver_encoder, shortstr,
)
from amqp_codec.properties import delivery_mode


def _truncate_utf8(text: str, limit: int = 255) -> str:
    return text.encode()[:limit].decode("utf-8", "ignore")


shortstrs = st.one_of(
    st.text(max_size=255).map(_truncate_utf8),
    st.text(alphabet=string.printable, min_size=250, max_size=255),
)
nonempty_shortstrs = shortstrs.filter(bool)
# Queue and exchange names: any UTF-8 up to 255 bytes, CR and LF included, as RabbitMQ
# takes them (pamqp's ASCII-only validation is off in these tests: see conftest.py).
exchange_names = st.one_of(
    shortstrs,
    st.lists(st.sampled_from(["\r", "\n", "é", "日", "🐇", "a", "."]), max_size=80).map(
        lambda parts: _truncate_utf8("".join(parts))),
)
delivery_tags = st.integers(0, 2**63 - 1)   # pamqp encodes longlong as signed
channels = st.integers(0, 65535)
frame_maxes = st.one_of(st.just(0), st.integers(9, 64), st.sampled_from([4096, 131072]))

table_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
              st.text(max_size=40), st.binary(max_size=20).map(bytearray)),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=20), children, max_size=4)),
    max_leaves=12,
)
tables = st.dictionaries(st.text(max_size=30), table_values, max_size=6)
timestamps = st.integers(0, 2**32 - 1).map(
    lambda seconds: datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC))


def _optional(strategy):
    return st.none() | strategy


properties = st.builds(
    commands.Basic.Properties,
    content_type=_optional(nonempty_shortstrs),
    content_encoding=_optional(nonempty_shortstrs),
    headers=_optional(tables),
    delivery_mode=st.sampled_from([None, 1, 2]),
    priority=_optional(st.integers(0, 255)),
    correlation_id=_optional(nonempty_shortstrs),
    reply_to=_optional(nonempty_shortstrs),
    expiration=_optional(nonempty_shortstrs),
    message_id=_optional(nonempty_shortstrs),
    timestamp=_optional(timestamps),
    message_type=_optional(nonempty_shortstrs),
    user_id=_optional(nonempty_shortstrs),
    app_id=_optional(nonempty_shortstrs),
)
raw_properties = properties.map(encode_properties)


@st.composite
def bodies(draw, frame_max: int):
    """Bodies of 0..3*frame_max bytes (0..1000 when frame_max is 0)."""
    return draw(st.binary(max_size=3 * frame_max if frame_max else 1000))


def pamqp_content(channel: int, raw: bytes, body: bytes, frame_max: int) -> bytes:
    """What pamqp produces for a header built from decode_properties(raw) and body frames."""
    content_header = header.ContentHeader(0, len(body), decode_properties(raw))
    frames = [frame.marshal(content_header, channel)]
    step = frame_max - 8 if frame_max else max(len(body), 1)
    for start in range(0, len(body), step):
        frames.append(frame.marshal(pamqp_body.ContentBody(body[start:start + step]), channel))
    return b"".join(frames)


def joined(encoded) -> bytes:
    """Encoded content as bytes (large bodies come as a tuple of parts)."""
    return b"".join(encoded) if type(encoded) is tuple else encoded


@given(shortstrs)
def test_shortstr_matches_pamqp(value):
    assert shortstr(value) == pamqp_encode.short_string(value)


@pytest.mark.parametrize("value", ["x" * 256, "é" * 128, "€" * 86])
def test_shortstr_over_255_bytes_is_a_value_error(value):
    with pytest.raises(ValueError):
        shortstr(value)


def test_shortstr_at_255_bytes():
    assert shortstr("é" * 127 + "x") == b"\xff" + ("é" * 127 + "x").encode()


@given(channels, shortstrs, delivery_tags, st.booleans(), exchange_names, shortstrs,
       raw_properties, st.data())
def test_encode_deliver_matches_pamqp(channel, consumer_tag, delivery_tag, redelivered,
                                      exchange, routing_key, raw, data):
    frame_max = data.draw(frame_maxes)
    body = data.draw(bodies(frame_max))
    method = commands.Basic.Deliver(consumer_tag, delivery_tag, redelivered, exchange,
                                    routing_key)
    expected = frame.marshal(method, channel) + pamqp_content(channel, raw, body, frame_max)
    assert joined(encode_deliver(channel, consumer_tag, delivery_tag, redelivered,
                                 exchange, routing_key, raw, body, frame_max)) == expected


@given(st.sampled_from([0, 4096]),
       st.lists(st.tuples(st.sampled_from([1, 2]), st.sampled_from(["k", "other"]),
                          st.sampled_from([b"\x00\x00", b"\x10\x00\x02"]),
                          st.binary(max_size=3)), min_size=1, max_size=10))
def test_one_encoder_matches_pamqp_for_each_of_a_run_of_deliveries(frame_max, deliveries):
    """A connection's encoder reuses what consecutive deliveries share (the content
    header while channel, properties and body size repeat); each one is still exact."""
    encode = deliver_encoder(frame_max)
    for tag, (channel, routing_key, raw, body) in enumerate(deliveries, start=1):
        method = commands.Basic.Deliver("ctag", tag, False, "", routing_key)
        expected = (frame.marshal(method, channel)
                    + pamqp_content(channel, raw, body, frame_max))
        assert joined(encode(channel, "ctag", tag, False, "", routing_key, raw,
                             body)) == expected


@given(channels, delivery_tags, st.booleans(), exchange_names, shortstrs,
       st.integers(0, 2**32 - 1), raw_properties, st.data())
def test_encode_get_ok_matches_pamqp(channel, delivery_tag, redelivered, exchange,
                                     routing_key, message_count, raw, data):
    frame_max = data.draw(frame_maxes)
    body = data.draw(bodies(frame_max))
    method = commands.Basic.GetOk(delivery_tag, redelivered, exchange, routing_key,
                                  message_count)
    expected = frame.marshal(method, channel) + pamqp_content(channel, raw, body, frame_max)
    assert joined(encode_get_ok(channel, delivery_tag, redelivered, exchange, routing_key,
                                message_count, raw, body, frame_max)) == expected


@given(channels, st.integers(0, 65535), shortstrs, exchange_names, shortstrs,
       raw_properties, st.data())
def test_encode_return_matches_pamqp(channel, reply_code, reply_text, exchange, routing_key,
                                     raw, data):
    frame_max = data.draw(frame_maxes)
    body = data.draw(bodies(frame_max))
    method = commands.Basic.Return(reply_code, reply_text, exchange, routing_key)
    expected = frame.marshal(method, channel) + pamqp_content(channel, raw, body, frame_max)
    assert joined(encode_return(channel, reply_code, reply_text, exchange, routing_key,
                                raw, body, frame_max)) == expected


@given(channels, delivery_tags, st.booleans())
def test_encode_basic_ack_matches_pamqp(channel, delivery_tag, multiple):
    expected = frame.marshal(commands.Basic.Ack(delivery_tag, multiple), channel)
    assert encode_basic_ack(channel, delivery_tag, multiple) == expected


@given(channels, delivery_tags, st.booleans())
def test_encode_basic_nack_matches_pamqp(channel, delivery_tag, multiple):
    expected = frame.marshal(commands.Basic.Nack(delivery_tag, multiple), channel)
    assert encode_basic_nack(channel, delivery_tag, multiple) == expected


def test_deliver_accepts_memoryview_body():
    body = bytes(range(100))
    assert (encode_deliver(1, "c", 1, False, "", "k", b"\x00\x00", memoryview(body), 40)
            == encode_deliver(1, "c", 1, False, "", "k", b"\x00\x00", body, 40))


def test_raw_properties_pass_through_verbatim():
    raw = b"\x10\x00\x02"  # delivery_mode only, but any bytes are copied as they are
    encoded = encode_deliver(3, "c", 1, False, "", "k", raw, b"hi", 0)
    assert b"\x02\x00\x03\x00\x00\x00\x0f\x00\x3c\x00\x00" + (2).to_bytes(8, "big") + raw in encoded


def test_body_needs_frame_max_above_8():
    with pytest.raises(ValueError):
        encode_deliver(1, "c", 1, False, "", "k", b"\x00\x00", b"x", 8)


@given(exchange_names, shortstrs, st.booleans(), st.booleans())
def test_decode_publish_matches_pamqp(exchange, routing_key, mandatory, immediate):
    marshalled = frame.marshal(commands.Basic.Publish(0, exchange, routing_key, mandatory,
                                                      immediate), 1)
    _consumed, _channel, expected = frame.unmarshal(marshalled)
    decoded = decode_publish(marshalled, 11, len(marshalled) - 1)
    assert decoded == (expected.exchange, expected.routing_key, expected.mandatory,
                       expected.immediate)


@pytest.mark.parametrize("arguments", [
    b"", b"\x00", b"\x00\x00", b"\x00\x00\x05amq", b"\x00\x00\x00\x01q",
    b"\x00\x00\x00\x01q\x00XYZ", b"\x00\x00\x00\x02\xff\xfe\x00",
])
def test_decode_publish_rejects_malformed_arguments(arguments):
    payload = b"\x00\x3c\x00\x28" + arguments
    with pytest.raises((ValueError, IndexError)):
        decode_publish(payload + b"\xce" * 300, 4, len(payload))


@given(delivery_tags, st.booleans())
def test_decode_ack_matches_pamqp(delivery_tag, multiple):
    marshalled = frame.marshal(commands.Basic.Ack(delivery_tag, multiple), 1)
    _consumed, _channel, expected = frame.unmarshal(marshalled)
    decoded = decode_ack(marshalled, 11, len(marshalled) - 1)
    assert isinstance(decoded, commands.Basic.Ack)
    assert (decoded.delivery_tag, decoded.multiple) == (expected.delivery_tag, expected.multiple)


@given(st.from_regex(r"[a-zA-Z0-9\-_.:]{0,200}", fullmatch=True), st.booleans())
def test_decode_get_matches_pamqp(queue, no_ack):   # pamqp's queue-name domain
    marshalled = frame.marshal(commands.Basic.Get(0, queue, no_ack), 1)
    _consumed, _channel, expected = frame.unmarshal(marshalled)
    decoded = decode_get(marshalled, 11, len(marshalled) - 1)
    assert isinstance(decoded, commands.Basic.Get)
    assert (decoded.queue, decoded.no_ack) == (expected.queue, expected.no_ack)


def test_decode_get_rejects_trailing_bytes():
    marshalled = frame.marshal(commands.Basic.Get(0, "q", False), 1)
    with pytest.raises(ValueError):
        decode_get(marshalled[:-1] + b"\x00", 11, len(marshalled))


def test_decode_ack_rejects_wrong_length():
    with pytest.raises(ValueError):
        decode_ack(b"\x00" * 20, 0, 8)


@given(properties)
def test_delivery_mode_reads_the_same_value_as_pamqp(props):
    assert delivery_mode(encode_properties(props)) == (props.delivery_mode or 0)


@pytest.mark.parametrize("frame_max", [4096, 131072, 0])
@pytest.mark.parametrize("size", [LARGE_BODY, 65536, 300_000])
def test_large_bodies_are_encoded_as_parts_that_refer_to_the_body(frame_max, size):
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    raw = encode_properties(commands.Basic.Properties(content_type="application/json"))
    parts = encode_deliver(3, "ctag", 7, False, "ex", "rk", raw, body, frame_max)
    assert type(parts) is tuple
    method = commands.Basic.Deliver("ctag", 7, False, "ex", "rk")
    assert b"".join(parts) == (frame.marshal(method, 3)
                               + pamqp_content(3, raw, body, frame_max))
    # The body is referenced, not copied: whole (one body frame) or as memoryview slices.
    assert any(part is body or (isinstance(part, memoryview) and part.obj is body)
               for part in parts)
