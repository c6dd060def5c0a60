"""The amqp writer's encoding without Spark or a broker: Arrow record batches ->
publish arguments (MessageEncoder) -> AMQP frames (PublishFrames), read back with
pika's own frame decoder."""

import datetime

import pika
import pika.frame
import pika.spec
import pyarrow as pa
import pytest
from pyspark.sql.types import (
    BinaryType, IntegerType, MapType, StringType, StructField, StructType, TimestampType,
)

from spark.amqp.messages import MessageEncoder, PublishFrames

FRAME_MAX = 4096


def decode_all(data: bytes) -> list:
    frames = []
    while data:
        consumed, frame = pika.frame.decode_frame(data)
        assert consumed > 0, "an incomplete frame"
        frames.append(frame)
        data = data[consumed:]
    return frames


def read_messages(data: bytes, channel: int) -> list:
    """(method, properties, body) per message, from marshalled frames."""
    messages = []
    for frame in decode_all(data):
        assert frame.channel_number == channel
        assert len(frame.marshal()) <= FRAME_MAX
        if isinstance(frame, pika.frame.Method):
            messages.append([frame.method, None, b""])
        elif isinstance(frame, pika.frame.Header):
            messages[-1][1] = frame.properties
            messages[-1].append(frame.body_size)
        else:
            messages[-1][2] += frame.fragment
    for method, properties, body, body_size in messages:
        assert len(body) == body_size
    return [tuple(m[:3]) for m in messages]


def test_frames_carry_each_message_as_pika_reads_it():
    frames = PublishFrames(channel_number=3, frame_max=FRAME_MAX, exchange="amq.topic",
                           mandatory=True)
    big = bytes(range(256)) * 40  # 10,240 bytes: three body frames
    plain = ("text/plain", None, 2, None, None, None)
    tagged = ("application/json", {"tenant": "acme", "attempt": 3}, 1, "m-1", "c-1",
              1767225600)
    out = []
    frames.append(out, "a.b", b"first", plain)
    frames.append(out, "a.b", b"", plain)
    frames.append(out, "c", big, tagged)
    frames.append(out, "a.b", b"last", plain)

    messages = read_messages(b"".join(out), channel=3)

    assert [(m.exchange, m.routing_key, m.mandatory) for m, _, _ in messages] == [
        ("amq.topic", "a.b", True), ("amq.topic", "a.b", True), ("amq.topic", "c", True),
        ("amq.topic", "a.b", True)]
    assert all(isinstance(m, pika.spec.Basic.Publish) for m, _, _ in messages)
    assert [body for _, _, body in messages] == [b"first", b"", big, b"last"]
    first, empty, tagged_message, last = (p for _, p, _ in messages)
    for properties in (first, empty, last):
        assert (properties.content_type, properties.delivery_mode,
                properties.headers) == ("text/plain", 2, None)
    properties = tagged_message
    assert (properties.content_type, properties.headers, properties.delivery_mode,
            properties.message_id, properties.correlation_id, properties.timestamp) == (
        "application/json", {"tenant": "acme", "attempt": 3}, 1, "m-1", "c-1", 1767225600)


def batch(columns: dict) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def test_encoder_applies_the_writer_defaults_column_by_column():
    schema = StructType([StructField("body", StringType())])
    encoder = MessageEncoder(schema, default_routing_key="orders")
    got = list(encoder.encode(batch({"body": ["one", "two"]})))
    persistent = (None, None, 2, None, None, None)
    assert got == [("orders", b"one", persistent), ("orders", b"two", persistent)]


def test_encoder_reads_every_property_column():
    schema = StructType([
        StructField("body", BinaryType()), StructField("routing_key", StringType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("content_type", StringType()), StructField("message_id", StringType()),
        StructField("correlation_id", StringType()), StructField("timestamp", TimestampType()),
        StructField("delivery_mode", IntegerType()),
    ])
    stamp = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    record_batch = pa.RecordBatch.from_arrays([
        pa.array([b"x", b"y"]), pa.array(["k1", None]),
        pa.array([[("n", "1")], None], type=pa.map_(pa.string(), pa.string())),
        pa.array(["text/plain", None]), pa.array(["id-1", "id-2"]), pa.array(["c", None]),
        pa.array([stamp, None], type=pa.timestamp("us", tz="UTC")),
        pa.array([1, None], type=pa.int32()),
    ], names=schema.fieldNames())
    encoder = MessageEncoder(schema, default_routing_key="fallback")
    assert list(encoder.encode(record_batch)) == [
        ("k1", b"x", ("text/plain", {"n": "1"}, 1, "id-1", "c", 1767225600)),
        ("fallback", b"y", (None, None, 2, "id-2", None, None)),
    ]


@pytest.mark.parametrize("columns, message", [
    ({"body": [None]}, "null body"),
    ({"body": ["a"], "delivery_mode": [3]}, "delivery_mode must be 1 or 2"),
])
def test_encoder_rejects_rows_it_cannot_publish(columns, message):
    fields = [StructField("body", StringType())]
    if "delivery_mode" in columns:
        fields.append(StructField("delivery_mode", IntegerType()))
    encoder = MessageEncoder(StructType(fields), default_routing_key="q")
    with pytest.raises(ValueError, match=message):
        list(encoder.encode(batch(columns)))


def test_encoder_needs_a_routing_key_from_a_column_or_the_option():
    schema = StructType([StructField("body", StringType()),
                         StructField("routing_key", StringType())])
    encoder = MessageEncoder(schema, default_routing_key=None)
    with pytest.raises(ValueError, match="null routing_key"):
        list(encoder.encode(batch({"body": ["a"], "routing_key": [None]})))
