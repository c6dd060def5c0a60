"""The bounded field-table decoder and the raw property reader/rewriter."""

import struct

import pytest
from hypothesis import given, strategies as st
from pamqp import decode as pamqp_decode
from pamqp import encode as pamqp_encode

from amqp_codec import MalformedProperties, decode_properties, replace_properties
from amqp_codec.field_table import MAX_DEPTH, TableError, decode_table
from test_fast_path import properties, tables


def _nested(depth: int) -> bytes:
    table = b"\x00\x00\x00\x00"
    for _ in range(depth):
        table = struct.pack(">I", len(table) + 3) + b"\x01kF" + table
    return table


@given(tables)
def test_decodes_what_pamqp_decodes(table):
    raw = pamqp_encode.field_table(table)
    assert decode_table(raw) == (pamqp_decode.field_table(raw)[1], len(raw))


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
