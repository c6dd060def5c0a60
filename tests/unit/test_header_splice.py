"""with_long_header: raw properties plus one signed 64-bit header, checked against pamqp."""

import struct

import pytest
from hypothesis import assume, given, settings, strategies as st
from pamqp import commands
from pamqp import encode as pamqp_encode

from amqp_codec import MalformedProperties, decode_properties, encode_properties, with_long_header
from amqp_codec import header_splice
from test_fast_path import properties, shortstrs, table_values

NAME = b"x-stream-offset"
longs = st.integers(-2**63, 2**63 - 1)
names = st.one_of(st.just(NAME), shortstrs.map(str.encode))


def _entry(name: bytes, value: int) -> bytes:
    return bytes((len(name),)) + name + b"l" + struct.pack(">q", value)


def _expected(raw: bytes, name: bytes, value: int) -> commands.Basic.Properties:
    """What pamqp decodes from ``raw``, with headers[name] = value."""
    expected = decode_properties(raw)
    expected.headers = {**(expected.headers or {}), name.decode(): value}
    return expected


def _fail(raw):
    raise AssertionError("took the slow path")


@pytest.fixture
def no_slow_path(monkeypatch):
    monkeypatch.setattr(header_splice, "headers_entries", _fail)


@st.composite
def properties_and_names(draw):
    """Properties whose headers, when present, may already hold the name or hold it as a
    string value (the encoded name then appears in the table without being a key)."""
    name = draw(names)
    props = draw(properties)
    if props.headers is not None:
        extra = draw(st.sampled_from(["none", "key", "value"]))
        if extra == "key":
            props.headers[name.decode()] = draw(table_values)
        elif extra == "value":
            props.headers["look-alike"] = name.decode()
    return props, name


@settings(max_examples=500)
@given(properties_and_names(), longs)
def test_pamqp_decodes_the_original_properties_plus_the_header(props_and_name, value):
    props, name = props_and_name
    raw = encode_properties(props)
    result = with_long_header(raw, name, value)
    decoded = decode_properties(result)
    assert decoded == _expected(raw, name, value)
    assert decoded.headers[name.decode()] == value
    assert _entry(name, value) in result        # always type 'l', whatever the magnitude


@given(properties, longs)
def test_without_the_key_the_table_is_spliced_in_place(props, value):
    """Fast path (no pamqp decode): the bytes around the headers table are copied as they
    are, the entry goes at the end of the table (or in a new table)."""
    headers = props.headers
    if headers is not None:
        headers.pop(NAME.decode(), None)
    props.headers = None
    raw_without = encode_properties(props)      # pamqp: flags, strings before, the rest
    before = 2 + sum(1 + len(s.encode()) for s in (props.content_type, props.content_encoding)
                     if s)
    table = b"" if headers is None else pamqp_encode.field_table(headers)[4:]
    assume(bytes([len(NAME)]) + NAME not in table)   # (the name inside a value: slow path)
    expected = (struct.pack(">H", struct.unpack_from(">H", raw_without)[0] | 0x2000)
                + raw_without[2:before] + struct.pack(">I", len(table) + 25) + table
                + _entry(NAME, value) + raw_without[before:])
    props.headers = headers
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(header_splice, "headers_entries", _fail)
        assert with_long_header(encode_properties(props), NAME, value) == expected


def test_no_properties_at_all(no_slow_path):
    result = with_long_header(b"\x00\x00", NAME, 42)
    assert result == b"\x20\x00" + struct.pack(">I", 25) + _entry(NAME, 42)
    assert decode_properties(result).headers == {"x-stream-offset": 42}


def test_table_inserted_after_content_type_and_encoding(no_slow_path):
    props = commands.Basic.Properties(content_type="text/plain", content_encoding="gzip",
                                      delivery_mode=2, priority=5, message_id="m1")
    raw = encode_properties(props)
    result = with_long_header(raw, NAME, -1)
    after = 2 + len(b"\ntext/plain\x04gzip")
    assert result == (b"\xf8\x80" + raw[2:after] + struct.pack(">I", 25) + _entry(NAME, -1)
                      + raw[after:])
    props.headers = {"x-stream-offset": -1}
    assert decode_properties(result) == props


def test_typical_block_content_type_and_delivery_mode(no_slow_path):
    raw = encode_properties(commands.Basic.Properties(content_type="application/json",
                                                      delivery_mode=2))
    result = with_long_header(raw, NAME, 2**40)
    assert decode_properties(result) == commands.Basic.Properties(
        content_type="application/json", delivery_mode=2,
        headers={"x-stream-offset": 2**40})


def test_appended_to_present_headers(no_slow_path):
    props = commands.Basic.Properties(content_type="t", headers={"a": 1, "b": "two"},
                                      delivery_mode=1, app_id="app")
    raw = encode_properties(props)
    result = with_long_header(raw, NAME, 7)
    table_at = 2 + 2                                    # flags, content_type "t"
    old_length = struct.unpack_from(">I", raw, table_at)[0]
    table_end = table_at + 4 + old_length
    assert result == (raw[:table_at] + struct.pack(">I", old_length + 25)
                      + raw[table_at + 4:table_end] + _entry(NAME, 7) + raw[table_end:])
    decoded = decode_properties(result)
    assert decoded.headers == {"a": 1, "b": "two", "x-stream-offset": 7}
    assert list(decoded.headers) == ["a", "b", "x-stream-offset"]
    assert (decoded.content_type, decoded.delivery_mode, decoded.app_id) == ("t", 1, "app")


def test_empty_headers_table(no_slow_path):
    raw = encode_properties(commands.Basic.Properties(headers={}, delivery_mode=2))
    assert raw == b"\x30\x00\x00\x00\x00\x00\x02"
    result = with_long_header(raw, NAME, 0)
    assert result == b"\x30\x00" + struct.pack(">I", 25) + _entry(NAME, 0) + b"\x02"
    assert decode_properties(result) == commands.Basic.Properties(
        headers={"x-stream-offset": 0}, delivery_mode=2)


def test_key_already_present_is_overwritten():
    props = commands.Basic.Properties(
        content_type="t", delivery_mode=2,
        headers={"x-stream-offset": "old", "b": 2, "c": {"x-stream-offset": 1}})
    result = with_long_header(encode_properties(props), NAME, 5)
    decoded = decode_properties(result)
    assert decoded.headers == {"b": 2, "c": {"x-stream-offset": 1}, "x-stream-offset": 5}
    assert _entry(NAME, 5) in result                    # 'l', not pamqp's 'b' for 5
    assert result.count(b"\x0fx-stream-offset") == 2    # the nested one stays
    assert (decoded.content_type, decoded.delivery_mode) == ("t", 2)


def test_name_inside_a_value_is_not_a_key():
    props = commands.Basic.Properties(headers={"a": "x-stream-offset"})
    decoded = decode_properties(with_long_header(encode_properties(props), NAME, 3))
    assert decoded.headers == {"a": "x-stream-offset", "x-stream-offset": 3}


def test_second_flags_word_takes_the_slow_path():
    raw = b"\x10\x01\x00\x00\x02"       # delivery_mode, continuation, empty second word
    assert decode_properties(with_long_header(raw, NAME, 9)) == commands.Basic.Properties(
        delivery_mode=2, headers={"x-stream-offset": 9})


@pytest.mark.parametrize("raw", [
    b"", b"\x00", b"\xc0\x00\x01a", b"\x20\x00\x00\x00", b"\x20\x00\x00\x00\x00\x09",
])
def test_malformed_properties_are_refused(raw):
    with pytest.raises(MalformedProperties):
        with_long_header(raw, NAME, 1)


@pytest.mark.parametrize("value", [-2**63, -1, 0, 1, 127, 128, 2**31, 2**63 - 1])
def test_any_signed_64_bit_value(value):
    result = with_long_header(b"\x00\x00", NAME, value)
    assert decode_properties(result).headers == {"x-stream-offset": value}


@pytest.mark.parametrize("value", [2**63, -2**63 - 1, 1.5, "1"])
def test_value_outside_64_signed_bits_is_a_value_error(value):
    with pytest.raises(ValueError):
        with_long_header(b"\x00\x00", NAME, value)


def test_name_over_255_bytes_is_a_value_error():
    with pytest.raises(ValueError):
        with_long_header(b"\x00\x00", b"x" * 256, 1)
    assert decode_properties(with_long_header(b"\x00\x00", b"x" * 255, 1)).headers == {
        "x" * 255: 1}
