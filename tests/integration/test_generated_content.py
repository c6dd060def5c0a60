"""Generated property blocks, header tables and names, end to end through a running
broker (hypothesis; deadline=None because every example is a network round trip).

- Any property block, headers table included (every type tag, any 64-bit timestamp,
  strings that are not UTF-8, unknown tags, truncated tables, deep nesting), published
  to the default exchange comes back from Basic.Get byte for byte: the broker does not
  read what it does not need.
- Any queue name of up to 255 bytes of UTF-8, CR and LF included, is declared under
  the name without CR and LF and Queue.DeclareOk carries that name (RabbitMQ's rule).

One dedicated broker serves the module, with a RunningBystander beside it throughout.
"""

import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support.broker_process import BrokerProcess
from tests.support.bystander import RunningBystander
from tests.support.raw_amqp import connect
from test_hostile_content import (
    declared_name, get_properties, method_frame, publish, queue_declare, read_method,
    shortstr,
)

pytestmark = pytest.mark.warren_only(
    "hostile generated content on a Warren broker of its own (BrokerProcess)")

SETTINGS = settings(deadline=None, max_examples=60,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(broker, raw client with channel 1 open); the broker must outlive the module."""
    broker = BrokerProcess(data_dir=str(tmp_path_factory.mktemp("generated"))).start()
    try:
        with RunningBystander(broker):
            client = connect(broker.host, broker.port)
            client.open_channel(1)
            yield broker, client
            client.close()
        assert broker.process.poll() is None, "the broker process exited"
    finally:
        broker.kill()


def _long(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _fixed(tag: bytes, fmt: str, low: int, high: int):
    return st.integers(low, high).map(lambda value: tag + struct.pack(fmt, value))


_scalars = st.one_of(
    st.booleans().map(lambda value: b"t" + bytes([value])),
    _fixed(b"b", ">b", -128, 127), _fixed(b"B", ">B", 0, 255),
    _fixed(b"s", ">h", -2**15, 2**15 - 1), _fixed(b"u", ">H", 0, 2**16 - 1),
    _fixed(b"I", ">i", -2**31, 2**31 - 1), _fixed(b"i", ">I", 0, 2**32 - 1),
    _fixed(b"l", ">q", -2**63, 2**63 - 1), _fixed(b"L", ">q", -2**63, 2**63 - 1),
    _fixed(b"T", ">Q", 0, 2**64 - 1),
    st.binary(min_size=4, max_size=4).map(lambda raw: b"f" + raw),
    st.binary(min_size=8, max_size=8).map(lambda raw: b"d" + raw),
    st.binary(min_size=5, max_size=5).map(lambda raw: b"D" + raw),
    st.binary(max_size=30).map(lambda raw: b"S" + _long(raw)),
    st.text(max_size=20).map(lambda text: b"S" + _long(text.encode())),
    st.binary(max_size=30).map(lambda raw: b"x" + _long(raw)),
    st.just(b"V"),
)
_keys = st.one_of(st.binary(max_size=20), st.text(max_size=10).map(str.encode)).filter(
    lambda key: len(key) <= 255).map(shortstr)


def _containers(children):
    entries = st.lists(st.tuples(_keys, children), max_size=4).map(
        lambda pairs: b"".join(key + value for key, value in pairs))
    return st.one_of(entries.map(lambda data: b"F" + _long(data)),
                     st.lists(children, max_size=4).map(lambda values: b"A" + _long(
                         b"".join(values))))


_values = st.recursive(_scalars, _containers, max_leaves=15)
_well_formed_tables = st.lists(st.tuples(_keys, _values), max_size=6).map(
    lambda pairs: _long(b"".join(key + value for key, value in pairs)))


def _deep(depth: int) -> bytes:
    table = _long(b"")
    for _ in range(depth):
        table = _long(shortstr(b"k") + b"F" + table)
    return table


_odd_tables = st.one_of(
    st.tuples(_keys, st.sampled_from(b"aceghjkmnopqrvwyzACEGHJKMNOPQRUWXYZ"),
              st.binary(max_size=8)).map(
        lambda parts: _long(parts[0] + bytes([parts[1]]) + parts[2])),      # unknown tag
    _well_formed_tables.filter(lambda raw: len(raw) > 4).map(
        lambda raw: raw[:4] + raw[4:-1]),        # cut short, the length left as it was
    st.integers(101, 3000).map(_deep),           # deeper than the broker would read
)
_shortstrs = st.one_of(st.binary(max_size=255), st.text(max_size=60).map(
    lambda text: text.encode()[:255]))


@st.composite
def property_blocks(draw) -> bytes:
    """A block with a random subset of Basic's 14 properties, any values."""
    flags, values = 0, []
    layout = [(0x8000, _shortstrs), (0x4000, _shortstrs),
              (0x2000, st.one_of(_well_formed_tables, _odd_tables)),
              (0x1000, st.sampled_from([b"\x01", b"\x02"])),
              (0x0800, st.binary(min_size=1, max_size=1)),
              (0x0400, _shortstrs), (0x0200, st.nothing()), (0x0100, st.nothing()),
              (0x0080, _shortstrs),
              (0x0040, st.binary(min_size=8, max_size=8)),
              (0x0020, _shortstrs), (0x0010, st.nothing()), (0x0008, _shortstrs),
              (0x0004, _shortstrs)]
    for flag, strategy in layout:
        if strategy.is_empty or not draw(st.booleans()):
            continue     # reply_to, expiration, user_id are read by the broker
        flags |= flag
        value = draw(strategy)
        values.append(shortstr(value) if strategy is _shortstrs else value)
    return struct.pack(">H", flags) + b"".join(values)


# A block with "CC" anywhere in it may carry a CC or BCC header, which the broker reads
# (sender-selected routing): such blocks are not among those it leaves unread.
_unread_property_blocks = property_blocks().filter(lambda block: b"CC" not in block)


@SETTINGS
@given(_unread_property_blocks, st.binary(max_size=100))
def test_properties_the_broker_does_not_read_come_back_byte_identical(served, properties,
                                                                      body):
    _broker, client = served
    queue = declared_name(client, queue_declare(b"generated-properties"))
    client.send_raw(publish(properties, queue, body=body))
    assert get_properties(client, queue) == properties


_names = st.one_of(
    st.text(max_size=80), st.text(alphabet=st.characters(codec="utf-8"), max_size=255),
    st.lists(st.sampled_from(["\r", "\n", "é", "q", "日", "🐇", " "]), max_size=120).map(
        "".join),
).map(lambda text: text.encode()[:255].decode("utf-8", "ignore"))


@SETTINGS
@given(_names)
def test_any_utf8_queue_name_is_declared_without_cr_and_lf(served, name):
    _broker, client = served
    expected = name.replace("\r", "").replace("\n", "")
    if not expected or expected.startswith("amq."):
        return           # server-named, or refused with 403: covered elsewhere
    assert declared_name(client, queue_declare(name.encode())).decode() == expected
    client.send_raw(method_frame(1, 50, 40, b"\x00\x00" + shortstr(name.encode()) + b"\x00"))
    assert read_method(client)[0] == (50, 41)          # Queue.DeleteOk (delete strips too)
