"""The bounded field-table decoder and the raw property reader/rewriter."""

import datetime
import struct

import pytest
from hypothesis import given, strategies as st
from pamqp import decode as pamqp_decode
from pamqp import encode as pamqp_encode

from amqp_codec import MalformedProperties, decode_properties, replace_properties
from amqp_codec.field_table import (MAX_DEPTH, EncodedValue, Long, TableError, array_elements,
                                    decode_table, encode_table, with_table_entry)
from test_fast_path import properties, tables

# Values of every type a decoded table holds, and some pamqp cannot write (bytes, integers
# beyond 64 bits, floats beyond single precision, decimals out of range, NaN decimals).
_any_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**64, 2**64), st.floats(width=64),
              st.text(max_size=20), st.binary(max_size=8), st.binary(max_size=8).map(bytearray),
              st.decimals(), st.datetimes(min_value=datetime.datetime(1970, 1, 2),
                                          timezones=st.just(datetime.UTC))),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=20), children, max_size=4)),
    max_leaves=12,
)
# Keys up to 200 characters: pamqp cuts those over 128 bytes of UTF-8.
_any_tables = st.dictionaries(st.text(max_size=200), _any_values, max_size=6)


def pamqp_java_safe(encode, *args):
    """(result, None) or (None, exception) of a pamqp encoding function, run with pamqp's
    Java-safe integer switch on, then set back as it was."""
    before = pamqp_encode.DEPRECATED_RABBITMQ_SUPPORT
    pamqp_encode.support_deprecated_rabbitmq(True)
    try:
        return encode(*args), None
    except Exception as error:
        return None, error
    finally:
        pamqp_encode.support_deprecated_rabbitmq(before)


def _nested(depth: int) -> bytes:
    table = b"\x00\x00\x00\x00"
    for _ in range(depth):
        table = struct.pack(">I", len(table) + 3) + b"\x01kF" + table
    return table


@given(tables)
def test_decodes_what_pamqp_decodes(table):
    raw = pamqp_encode.field_table(table)
    assert decode_table(raw) == (pamqp_decode.field_table(raw)[1], len(raw))


@given(_any_tables)
def test_encode_table_writes_what_pamqp_writes_for_the_java_client(table):
    expected, error = pamqp_java_safe(pamqp_encode.field_table, table)
    if error is None:
        assert encode_table(table) == expected
    else:
        with pytest.raises(type(error)):
            encode_table(table)


def test_encode_table_refuses_what_pamqp_refuses():
    for table in ({"n": 2**63}, {"b": b"raw"}, {"f": [1e300]}):
        _expected, error = pamqp_java_safe(pamqp_encode.field_table, table)
        assert error is not None
        with pytest.raises(type(error)):
            encode_table(table)


def test_nesting_up_to_the_limit_is_read_and_deeper_is_refused():
    assert decode_table(_nested(MAX_DEPTH))[1] == len(_nested(MAX_DEPTH))
    for depth in (MAX_DEPTH + 1, 3000):
        with pytest.raises(TableError):
            decode_table(_nested(depth))


@pytest.mark.parametrize("raw", [
    b"\x00\x00\x00", b"\x00\x00\x00\x05\x01hZabc", b"\x00\x00\x00\x32\x01ht\x01",
    b"\x00\x00\x00\x03\x01ht", b"\x00\x00\x00\x08\x01hS\x00\x00\x00\x09",
    b"\x00\x00\x00\x04\x05abcd",
])
def test_malformed_tables_are_a_table_error(raw):
    with pytest.raises(TableError):
        decode_table(raw)


def test_values_pamqp_cannot_decode():
    raw = (b"\x00\x00\x00\x13" + b"\x01tT" + b"\xff" * 8          # timestamp 2**64 - 1
           + b"\x01\xffS\x00\x00\x00\x01\xff")                    # key and value not UTF-8
    table, _end = decode_table(raw)
    assert table["\udcff"] == b"\xff"
    assert table["t"].year == 9999


@given(properties, st.binary(max_size=40))
def test_replace_properties_changes_only_the_named_field(props, reply_to):
    raw = props.marshal()
    changed = replace_properties(raw, reply_to=reply_to, expiration=None)
    expected = decode_properties(raw)
    expected.reply_to = reply_to.decode("utf-8", "surrogateescape")
    expected.expiration = None
    assert decode_properties(changed) == expected


@pytest.mark.parametrize("raw", [b"\x10\x00", b"\x00\x10", b"\x00\x00z",
                                 b"\x00\x01\x80\x00", b"\x20\x00\x00\x00\x00\x05\x01hZabc"])
def test_malformed_property_blocks(raw):
    with pytest.raises(MalformedProperties):
        decode_properties(raw)


def test_any_timestamp_is_read():
    assert decode_properties(b"\x00\x40" + b"\xff" * 8).timestamp.year == 9999


def test_a_long_is_written_as_a_long_long_whatever_its_size():
    assert encode_table({"count": Long(1)}) == b"\x00\x00\x00\x0f\x05countl" + struct.pack(">q", 1)
    with pytest.raises(TypeError):
        encode_table({"count": Long(2 ** 63)})


def test_array_elements_keep_their_encoding_through_a_new_table():
    """An x-death history written by another broker (integers as 'I') is copied with
    its types, and one entry set keeps the others' bytes."""
    element = b"F" + struct.pack(">I", 11) + b"\x05countI" + struct.pack(">i", 3)
    array = struct.pack(">I", len(element)) + element
    [(value, encoded)] = array_elements(array)
    assert value == {"count": 3} and encoded == element
    assert encode_table({"a": [encoded]}) == encode_table({"a": [EncodedValue(element)]})
    assert encode_table({"a": [encoded]})[4:].endswith(element)
    changed = with_table_entry(encoded, "n", 1)
    assert changed.endswith(element[5:])
    assert decode_table(encode_table({"a": changed}))[0] == {"a": {"n": 1, "count": 3}}
    replaced = with_table_entry(encoded, "count", Long(4))
    assert replaced == b"F" + struct.pack(">I", 15) + b"\x05countl" + struct.pack(">q", 4)
