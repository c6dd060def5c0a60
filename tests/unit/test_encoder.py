"""Outbound encoding: pamqp methods, content splitting, properties, Java-safe tables."""

import os
import struct
import subprocess
import sys

import pytest
from hypothesis import given, strategies as st
from pamqp import commands, frame, heartbeat
from pamqp import encode as pamqp_encode

from amqp_codec import (
    HEARTBEAT_FRAME, MalformedProperties, decode_properties, encode_connection_start,
    encode_content, encode_deliver, encode_method, encode_properties, encode_table,
)
from test_fast_path import (
    bodies, channels, delivery_tags, exchange_names, frame_maxes, joined, pamqp_content,
    properties,
    raw_properties, shortstrs, tables,
)
from test_field_table import pamqp_java_safe

CAPABILITIES = {
    "publisher_confirms": True, "exchange_exchange_bindings": True, "basic.nack": True,
    "consumer_cancel_notify": True, "connection.blocked": True,
    "consumer_priorities": True, "authentication_failure_close": True,
    "per_consumer_qos": True, "direct_reply_to": False,
}


def test_heartbeat_frame_matches_pamqp():
    assert HEARTBEAT_FRAME == frame.marshal(heartbeat.Heartbeat(), 0)


def test_encode_method_is_pamqp_marshal():
    method = commands.Queue.DeclareOk("q", 3, 1)
    assert encode_method(5, method) == frame.marshal(method, 5)


@given(channels, shortstrs, delivery_tags, st.booleans(), exchange_names, shortstrs,
       raw_properties, st.data())
def test_encode_content_matches_pamqp_and_fast_path(channel, consumer_tag, delivery_tag,
                                                    redelivered, exchange, routing_key, raw,
                                                    data):
    frame_max = data.draw(frame_maxes)
    body = data.draw(bodies(frame_max))
    method = commands.Basic.Deliver(consumer_tag, delivery_tag, redelivered, exchange,
                                    routing_key)
    encoded = joined(encode_content(channel, method, raw, body, frame_max))
    assert encoded == frame.marshal(method, channel) + pamqp_content(channel, raw, body,
                                                                     frame_max)
    assert encoded == joined(encode_deliver(channel, consumer_tag, delivery_tag,
                                            redelivered, exchange, routing_key, raw, body,
                                            frame_max))


def _frames(data: bytes) -> list[tuple[int, int, bytes]]:
    frames, pos = [], 0
    while pos < len(data):
        frame_type, channel, size = struct.unpack_from(">BHI", data, pos)
        assert data[pos + 7 + size] == 0xCE
        frames.append((frame_type, channel, data[pos + 7:pos + 7 + size]))
        pos += 8 + size
    return frames


@pytest.mark.parametrize("frame_max, body_size, body_frames", [
    (4096, 0, 0), (4096, 1, 1), (4096, 4088, 1), (4096, 4089, 2), (4096, 3 * 4088, 3),
    (0, 200_000, 1), (131072, 300_000, 3),
])
def test_every_frame_fits_frame_max(frame_max, body_size, body_frames):
    body = bytes(i % 251 for i in range(body_size))
    encoded = joined(encode_content(1, commands.Basic.Deliver("c", 1, routing_key="k"),
                                    b"\x00\x00", body, frame_max))
    frames = _frames(encoded)
    assert [f[0] for f in frames] == [1, 2] + [3] * body_frames
    assert b"".join(f[2] for f in frames[2:]) == body
    if frame_max:
        assert all(len(f[2]) + 8 <= frame_max for f in frames)


@given(properties)
def test_properties_round_trip(props):
    raw = encode_properties(props)
    decoded = decode_properties(raw)
    assert decoded == props
    assert encode_properties(decoded) == raw


def test_decode_properties_accepts_memoryview_and_ignores_continuation_flag():
    raw = encode_properties(commands.Basic.Properties(content_type="a/b", priority=3))
    assert decode_properties(memoryview(raw)).content_type == "a/b"
    continued = bytes([raw[0], raw[1] | 1]) + b"\x00\x00" + raw[2:]
    assert decode_properties(continued) == decode_properties(raw)


@pytest.mark.parametrize("raw", [
    b"", b"\x80", b"\x80\x00", b"\x20\x00\x00\x00\x00\x09\x01Sab",
    b"\x20\x00\x00\x00\x00\x03\x01aZ", b"\x10\x00",
])
def test_decode_properties_rejects_malformed_bytes(raw):
    with pytest.raises(MalformedProperties):
        decode_properties(raw)


def _table_tags(data: bytes, pos: int, end: int, tags: list) -> None:
    """Collect the field-type tags of a field table, recursing into tables and arrays."""
    while pos < end:
        pos += 1 + data[pos]                       # field name
        pos = _value_tags(data, pos, tags)


def _value_tags(data: bytes, pos: int, tags: list) -> int:
    tag = chr(data[pos])
    tags.append(tag)
    pos += 1
    fixed = {"t": 1, "b": 1, "B": 1, "s": 2, "u": 2, "I": 4, "i": 4, "l": 8, "L": 8,
             "f": 4, "d": 8, "D": 5, "T": 8, "V": 0}
    if tag in fixed:
        return pos + fixed[tag]
    (length,) = struct.unpack_from(">I", data, pos)
    if tag == "F":
        _table_tags(data, pos + 4, pos + 4 + length, tags)
    elif tag == "A":
        inner = pos + 4
        while inner < pos + 4 + length:
            inner = _value_tags(data, inner, tags)
    return pos + 4 + length


def test_connection_start_tables_are_java_safe():
    server_properties = {
        "capabilities": CAPABILITIES, "product": "Warren", "version": "0.1.0",
        "small": 5, "short": 300, "ushort": 40_000, "int": 70_000, "uint": 3_000_000_000,
        "long": 2**40, "negative": -40_000, "nested": [1, 40_000, 3_000_000_000],
    }
    encoded = encode_connection_start(server_properties, "PLAIN AMQPLAIN", "en_US")
    payload = _frames(encoded)[0][2]
    (length,) = struct.unpack_from(">I", payload, 6)    # after class, method, versions
    tags = []
    _table_tags(payload, 10, 10 + length, tags)
    assert "u" not in tags and "i" not in tags
    assert set(tags) <= set("tbsIlSFA")
    assert tags.count("t") == len(CAPABILITIES)
    _consumed, _channel, start = frame.unmarshal(encoded)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.server_properties == server_properties
    assert (start.mechanisms, start.locales) == ("PLAIN AMQPLAIN", "en_US")


@given(tables, shortstrs, shortstrs)
def test_connection_start_is_what_pamqp_writes_for_the_java_client(server_properties,
                                                                   mechanisms, locales):
    start = commands.Connection.Start(server_properties=server_properties,
                                      mechanisms=mechanisms, locales=locales)
    expected, error = pamqp_java_safe(frame.marshal, start, 0)
    assert error is None
    assert encode_connection_start(server_properties, mechanisms, locales) == expected


def test_encode_table_is_java_safe():
    encoded = encode_table({"capabilities": CAPABILITIES, "count": 40_000,
                            "big": 3_000_000_000})
    tags = []
    _table_tags(encoded, 4, len(encoded), tags)
    assert "u" not in tags and "i" not in tags
    assert tags.count("I") == 1 and tags.count("l") == 1


_PAMQP_SETTING = """
import sys
from pamqp import encode
encode.support_deprecated_rabbitmq({before})
import amqp_codec, broker.core.connection, broker.server.transport
sys.exit(0 if encode.DEPRECATED_RABBITMQ_SUPPORT is {before} else 1)
"""


def test_importing_the_codec_and_the_broker_leaves_pamqps_setting_alone():
    """pamqp's table-integer switch is process-wide: an application that imports the
    codec (the test broker runs in-process too) keeps whatever it chose."""
    for before in (False, True):
        run = subprocess.run([sys.executable, "-c", _PAMQP_SETTING.format(before=before)],
                             env=dict(os.environ), capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 0, (before, run.stderr)
