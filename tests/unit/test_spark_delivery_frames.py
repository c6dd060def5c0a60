"""The source's own parsing of deliveries (DeliveryFrames) against pika: frames made by
pika's marshal must come out as pika's decoder reads them, whatever the read sizes, and
every frame that is not a delivery of a routed channel must reach pika whole and in
order."""

import datetime
import decimal
import struct

import pika.frame
import pika.spec
import pytest

from amqp_codec.header_splice import with_long_header
from spark.amqp.delivery_frames import PROPERTY_NAMES, DeliveryFrames, decode_properties

CHANNEL = 1
FRAME_MAX = 4096
BODY_MAX = FRAME_MAX - 8

ALL_PROPERTIES = pika.BasicProperties(
    content_type="application/json", content_encoding="gzip",
    headers={"text": "acme", "int": 3, "long": 2 ** 40, "negative": -7, "bool": True,
             "false": False, "none": None, "bytes": b"\xffA",
             "decimal": decimal.Decimal("3.14"),
             "time": datetime.datetime(2026, 1, 1, 12, 30),
             "table": {"nested": "yes", "n": 1}, "array": [1, "two", {"three": 3}]},
    delivery_mode=2, priority=5, correlation_id="c-1", reply_to="replies",
    expiration="60000", message_id="m-1", timestamp=1767225600, type="order",
    user_id="guest", app_id="shop", cluster_id="c")


def deliver_frames(channel: int, tag: int, body: bytes, properties, redelivered=False,
                   exchange="amq.direct", routing_key="orders.new") -> bytes:
    """One delivery as pika marshals it: method, content header, body frames."""
    method = pika.spec.Basic.Deliver(consumer_tag="ctag-1", delivery_tag=tag,
                                     redelivered=redelivered, exchange=exchange,
                                     routing_key=routing_key)
    parts = [pika.frame.Method(channel, method).marshal(),
             pika.frame.Header(channel, len(body), properties).marshal()]
    parts += [pika.frame.Body(channel, body[at:at + BODY_MAX]).marshal()
              for at in range(0, len(body), BODY_MAX)]
    return b"".join(parts)


def pika_deliveries(data: bytes) -> list:
    """What pika's own frame decoder makes of `data`: (tag, redelivered, exchange,
    routing_key, properties, body) per delivery."""
    deliveries = []
    while data:
        consumed, frame = pika.frame.decode_frame(data)
        data = data[consumed:]
        if isinstance(frame, pika.frame.Method):
            m = frame.method
            deliveries.append([m.delivery_tag, m.redelivered, m.exchange, m.routing_key,
                               None, b""])
        elif isinstance(frame, pika.frame.Header):
            deliveries[-1][4] = frame.properties
        else:
            deliveries[-1][5] += frame.fragment
    return [tuple(d) for d in deliveries]


class FakeConnection:
    """The parts of pika's Connection that DeliveryFrames uses; what reaches pika is
    recorded in `events`, beside the deliveries, to check the order."""

    def __init__(self, events: list):
        self.events = events
        self.bytes_received = 0
        self.frames_received = 0

    def _on_data_available(self, data: bytes) -> None:
        self.bytes_received += len(data)
        self.events.append(("pika", data))


def fields(properties) -> dict:
    return {name: getattr(properties, name) for name in PROPERTY_NAMES}


def comparable(delivery) -> tuple:
    tag, redelivered, exchange, routing_key, properties, body = delivery
    return tag, redelivered, exchange, routing_key, fields(properties), body


def parse(data: bytes, chunk: int, channels=(CHANNEL,)) -> tuple:
    """Feed `data` in pieces of `chunk` bytes; returns (events, connection)."""
    events = []
    connection = FakeConnection(events)
    frames = DeliveryFrames(connection)
    for channel in channels:
        frames.route(channel, lambda *delivery: events.append(("delivery", delivery)))
    for at in range(0, len(data), chunk):
        connection._on_data_available(data[at:at + chunk])
    return events, connection


MESSAGES = b"".join([
    deliver_frames(CHANNEL, 1, b"first", ALL_PROPERTIES),
    deliver_frames(CHANNEL, 2, b"", pika.BasicProperties()),  # no body frame
    deliver_frames(CHANNEL, 3, bytes(range(256)) * 40, ALL_PROPERTIES,  # 3 body frames
                   redelivered=True, exchange="", routing_key="q"),
    deliver_frames(CHANNEL, 4, b"x" * BODY_MAX, pika.BasicProperties(message_id="4")),
    deliver_frames(CHANNEL, 5, b"last", pika.BasicProperties(message_id="5"),
                   routing_key=b"\xff\xfe".decode("latin-1")),
])


@pytest.mark.parametrize("chunk", [1, 7, 100, 4096, len(MESSAGES)])
def test_deliveries_come_out_as_pika_decodes_them(chunk):
    events, connection = parse(MESSAGES, chunk)
    assert all(kind == "delivery" for kind, _ in events)
    got = [comparable(delivery) for _, delivery in events]
    assert got == [comparable(delivery) for delivery in pika_deliveries(MESSAGES)]
    assert connection.bytes_received == len(MESSAGES)
    assert connection.frames_received == 3 + 2 + 5 + 3 + 3


def test_properties_of_every_type_are_pikas():
    events, _ = parse(deliver_frames(CHANNEL, 9, b"b", ALL_PROPERTIES), 4096)
    properties = events[0][1][4]
    assert fields(properties) == vars(pika_deliveries(
        deliver_frames(CHANNEL, 9, b"b", ALL_PROPERTIES))[0][4])
    assert set(PROPERTY_NAMES) == set(vars(ALL_PROPERTIES))
    assert properties.headers["bytes"] == b"\xffA"
    assert properties.headers["array"] == [1, "two", {"three": 3}]
    assert properties.timestamp == 1767225600


@pytest.mark.parametrize("name", [n for n in vars(ALL_PROPERTIES)])
def test_each_property_alone_decodes_as_pika_decodes_it(name):
    properties = pika.BasicProperties(**{name: getattr(ALL_PROPERTIES, name)})
    raw = b"".join(properties.encode())
    assert fields(decode_properties(raw)) == vars(pika.spec.BasicProperties().decode(raw))


def stream_properties(offset: int, **properties) -> bytes:
    """Raw properties as a stream queue delivers them: Warren splices x-stream-offset
    into the publisher's properties as a signed long long."""
    raw = b"".join(pika.BasicProperties(**properties).encode())
    return with_long_header(raw, b"x-stream-offset", offset)


@pytest.mark.parametrize("offset", [0, 1, 2 ** 31, 2 ** 63 - 1, -1])
@pytest.mark.parametrize("properties", [
    {}, {"message_id": "m-1", "content_type": "text/plain", "timestamp": 1767225600},
    {"headers": {"trace": "t-1", "n": 2}, "message_id": "m-2"},  # the offset comes last
    {"headers": {"x-stream-offset": "old"}},  # replaced by the broker's
])
def test_a_streams_offset_header_decodes_as_pika_decodes_it(offset, properties):
    raw = stream_properties(offset, **properties)
    decoded = decode_properties(raw)
    assert fields(decoded) == vars(pika.spec.BasicProperties().decode(raw))
    assert decoded.headers["x-stream-offset"] == offset


def test_an_offset_header_of_another_type_decodes_as_pika_decodes_it():
    raw = b"".join(pika.BasicProperties(headers={"x-stream-offset": 7}).encode())  # "I"
    assert fields(decode_properties(raw)) == vars(pika.spec.BasicProperties().decode(raw))
    assert decode_properties(raw).headers == {"x-stream-offset": 7}


def test_a_streams_properties_cut_short_fail_as_with_pika():
    raw = stream_properties(5)[:-1]
    with pytest.raises(struct.error):
        pika.spec.BasicProperties().decode(raw)
    with pytest.raises(struct.error):
        decode_properties(raw)


def test_text_that_is_not_utf8_stays_bytes_as_with_pika():
    raw = b"".join(pika.BasicProperties(message_id="m", app_id="a").encode())
    raw = raw.replace(b"\x01m", b"\x01\xff")
    assert decode_properties(raw).message_id == b"\xff"
    assert pika.spec.BasicProperties().decode(raw).message_id == b"\xff"


def test_a_routing_key_that_is_not_utf8_stays_bytes_as_with_pika():
    raw = deliver_frames(CHANNEL, 1, b"b", pika.BasicProperties(), routing_key="k")
    raw = raw.replace(b"\x01k", b"\x01\xff")  # the routing key's shortstr
    events, _ = parse(raw, 4096)
    assert events[0][1][3] == b"\xff" == pika_deliveries(raw)[0][3]


def test_other_frames_reach_pika_whole_and_in_order():
    heartbeat = pika.frame.Heartbeat().marshal()
    ack = pika.frame.Method(CHANNEL, pika.spec.Basic.QosOk()).marshal()
    other_channel = deliver_frames(2, 1, b"not routed", pika.BasicProperties())
    get_ok = b"".join([
        pika.frame.Method(CHANNEL, pika.spec.Basic.GetOk(delivery_tag=7, exchange="",
                                                         routing_key="q", message_count=0)).marshal(),
        pika.frame.Header(CHANNEL, 3, pika.BasicProperties()).marshal(),
        pika.frame.Body(CHANNEL, b"get").marshal()])
    first = deliver_frames(CHANNEL, 1, b"one", pika.BasicProperties())
    second = deliver_frames(CHANNEL, 2, b"two", pika.BasicProperties())
    data = first + heartbeat + ack + other_channel + get_ok + second
    for chunk in (1, 13, len(data)):
        events, connection = parse(data, chunk)
        kinds = [(kind, value if kind == "pika" else value[0]) for kind, value in events]
        # Every frame pika gets is one whole frame; the deliveries keep their place.
        assert kinds == ([("delivery", 1), ("pika", heartbeat), ("pika", ack)]
                         + [("pika", frame) for frame in split_frames(other_channel)]
                         + [("pika", frame) for frame in split_frames(get_ok)]
                         + [("delivery", 2)])
        assert connection.bytes_received == len(data)


def test_an_unrouted_channel_goes_back_to_pika():
    events = []
    connection = FakeConnection(events)
    frames = DeliveryFrames(connection)
    frames.route(CHANNEL, lambda *delivery: events.append(("delivery", delivery)))
    frames.unroute(CHANNEL)
    data = deliver_frames(CHANNEL, 1, b"b", pika.BasicProperties())
    connection._on_data_available(data)
    assert [kind for kind, _ in events] == ["pika"] * 3


def test_a_bad_frame_end_is_left_to_pika():
    data = bytearray(deliver_frames(CHANNEL, 1, b"b", pika.BasicProperties()))
    method_end = 7 + int.from_bytes(data[3:7], "big")
    data[method_end] = 0
    events, _ = parse(bytes(data), 4096)
    assert events[0] == ("pika", bytes(data[:method_end + 1]))
    with pytest.raises(pika.exceptions.InvalidFrameError):
        pika.frame.decode_frame(events[0][1])


def frame_starts(data: bytes) -> list:
    starts, at = [], 0
    while at < len(data):
        starts.append(at)
        at += 8 + int.from_bytes(data[at + 3:at + 7], "big")
    return starts


def split_frames(data: bytes) -> list:
    starts = frame_starts(data)
    return [data[a:b] for a, b in zip(starts, starts[1:] + [len(data)])]
