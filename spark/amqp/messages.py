"""AMQP messages <-> Spark rows: the source's schema and the writer's columns.

Read side: each delivered message becomes one row of ``SCHEMA`` (schema.py). Rows are handed to Spark
as ``pyarrow.RecordBatch`` objects built column by column (Spark passes record batches
through without converting row by row), so ``ARROW_SCHEMA`` must equal what Spark derives
from ``SCHEMA``.

Write side: ``MessageEncoder`` turns the Arrow record batches of a DataFrame with a ``body``
column (binary or string) and optional property columns into publish arguments, and
``PublishFrames`` marshals them as AMQP frames.
"""

import functools
import itertools
import json
import struct
import threading
from collections import namedtuple
from datetime import date, datetime
from decimal import Decimal

import pika
import pika.frame
import pika.spec
import pyarrow as pa
from pyspark.sql.types import StructType

from .schema import WRITER_COLUMNS

ARROW_SCHEMA = pa.schema([
    ("body", pa.binary()),
    ("routing_key", pa.string()),
    ("exchange", pa.string()),
    ("content_type", pa.string()),
    ("headers", pa.map_(pa.string(), pa.string())),
    ("message_id", pa.string()),
    ("correlation_id", pa.string()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("delivery_mode", pa.int32()),
    ("redelivered", pa.bool_()),
    ("queue", pa.string()),
    ("offset", pa.int64()),
])

# Rows per RecordBatch handed to Spark.
ARROW_BATCH_ROWS = 10_000

# One delivered message, as received (Basic.Deliver fields, properties, body; for stream
# queues the offset from the x-stream-offset header, None for plain queues).
Delivery = namedtuple("Delivery", "tag exchange routing_key redelivered properties body offset",
                      defaults=(None,))


def _json_default(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return str(value)


def header_text(value):
    """An AMQP header value as the string stored in the ``headers`` map.

    Strings stay as they are, byte strings are decoded as UTF-8 (invalid bytes as
    backslash escapes), booleans become ``true``/``false``, numbers their decimal text,
    timestamps ISO 8601, nested tables and arrays (such as ``x-death``) JSON.
    """
    if value is None or isinstance(value, str):
        return value
    if type(value) is int:  # a stream's x-stream-offset in every row (not bool)
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, Decimal)):
        return str(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return json.dumps(value, default=_json_default, separators=(",", ":"))


def _record_batch(deliveries, queue: str) -> pa.RecordBatch:
    bodies, keys, exchanges, types, headers = [], [], [], [], []
    ids, correlations, stamps, modes, redelivered = [], [], [], [], []
    offsets = []
    for delivery in deliveries:
        props = delivery.properties
        bodies.append(delivery.body)
        keys.append(delivery.routing_key)
        exchanges.append(delivery.exchange)
        types.append(props.content_type)
        raw = props.headers
        headers.append(None if raw is None else
                       [(str(k), header_text(v)) for k, v in raw.items()])
        ids.append(props.message_id)
        correlations.append(props.correlation_id)
        stamps.append(None if props.timestamp is None else int(props.timestamp) * 1_000_000)
        modes.append(props.delivery_mode)
        redelivered.append(bool(delivery.redelivered))
        offsets.append(delivery.offset)
    columns = [bodies, keys, exchanges, types, headers, ids, correlations, stamps, modes,
               redelivered, [queue] * len(offsets), offsets]
    arrays = [pa.array(column, type=field.type) for column, field in zip(columns, ARROW_SCHEMA)]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def warm_up_arrow_in_background() -> None:
    """Make pyarrow's first ``pa.array`` call now, in a thread of its own: that call
    imports pandas (0.2-0.4 s), which would otherwise delay a query's first batch. A
    reader starts it when it connects, so that it overlaps with the connection's round
    trips and Spark's planning."""
    threading.Thread(target=pa.array, args=([],), kwargs={"type": pa.binary()},
                     daemon=True, name="warren-spark arrow warm-up").start()


def to_record_batches(deliveries, queue: str) -> list:
    """The deliveries (read from `queue`) as RecordBatches of ARROW_SCHEMA (at most
    ARROW_BATCH_ROWS rows each)."""
    return [_record_batch(deliveries[i:i + ARROW_BATCH_ROWS], queue)
            for i in range(0, len(deliveries), ARROW_BATCH_ROWS)]


# ---------------------------------------------------------------------------------------
# Write side

# AMQP 0-9-1 framing (section 2.3.5, 4.2.3): type, channel, payload size, payload, end.
FRAME_HEADER, FRAME_BODY = 2, 3
FRAME_END = b"\xce"
FRAME_OVERHEAD = 8  # type (1) + channel (2) + size (4) + frame end (1)
BASIC_CLASS = 60
HEADER_PREFIX_SIZE = 12  # content header: class (2) + weight (2) + body size (8)
_FRAME_START = struct.Struct(">BHI")
_HEADER_START = struct.Struct(">BHIHHQ")


class MessageEncoder:
    """Arrow record batches of a DataFrame with `schema` -> publish arguments.

    ``encode(batch)`` yields ``(routing_key, body, properties)`` per row, where
    properties is the tuple ``PROPERTY_COLUMNS`` order (content_type, headers,
    delivery_mode, message_id, correlation_id, timestamp) with the writer's defaults
    applied: rows that publish the same properties give equal tuples, so the frames
    can encode them once (``PublishFrames``). The columns are converted to Python
    lists one at a time, not row by row.
    """

    def __init__(self, schema: StructType, default_routing_key):
        names = schema.fieldNames()
        self.columns = [name for name in WRITER_COLUMNS if name in names]
        self.default_routing_key = default_routing_key

    def _column(self, batch, name):
        if name not in self.columns:
            return itertools.repeat(None, batch.num_rows)
        return batch.column(name).to_pylist()

    def encode(self, batch):
        column = functools.partial(self._column, batch)
        properties = zip(column("content_type"), column("headers"), column("delivery_mode"),
                         column("message_id"), column("correlation_id"), column("timestamp"))
        for body, routing_key, row_properties in zip(column("body"), column("routing_key"),
                                                     properties):
            yield (self._routing_key(routing_key), _body_bytes(body),
                   _publish_properties(*row_properties))

    def _routing_key(self, routing_key):
        if routing_key is None:
            routing_key = self.default_routing_key
        if routing_key is None:
            raise ValueError("a row has a null routing_key and option routingKey is not set")
        return routing_key


def _body_bytes(body) -> bytes:
    if body is None:
        raise ValueError("a row has a null body; every published message needs a body")
    return body.encode("utf-8") if isinstance(body, str) else body


def _publish_properties(content_type, headers, delivery_mode, message_id, correlation_id,
                        timestamp) -> tuple:
    if delivery_mode is None:
        delivery_mode = 2
    elif delivery_mode not in (1, 2):
        raise ValueError(f"delivery_mode must be 1 or 2, got {delivery_mode}")
    if isinstance(timestamp, datetime):
        timestamp = int(timestamp.timestamp())
    if headers is not None:
        headers = dict(headers)  # Arrow gives a map as a list of (key, value) pairs
    return content_type, headers, delivery_mode, message_id, correlation_id, timestamp


class PublishFrames:
    """Basic.Publish messages marshalled as AMQP frames (method, content header, body
    frames of at most frame_max bytes) for one channel, appended to a list of byte
    strings that a publisher sends in one write.

    A message costs a few ``struct.pack`` calls and appends: the method frame is
    marshalled once per routing key, and the properties once per run of rows that carry
    equal ones (``MessageEncoder``'s tuples), with pika's own marshalling.
    """

    ROUTING_KEYS_CACHED = 1024

    def __init__(self, channel_number: int, frame_max: int, exchange: str, mandatory: bool):
        self.channel_number = channel_number
        self.body_max = frame_max - FRAME_OVERHEAD
        self.exchange = exchange
        self.mandatory = mandatory
        self._method_frames = {}  # routing key -> marshalled Basic.Publish frame
        self._properties = None  # the last properties tuple and its marshalled form
        self._encoded_properties = b""

    def _method_frame(self, routing_key: str) -> bytes:
        frame = self._method_frames.get(routing_key)
        if frame is None:
            if len(self._method_frames) >= self.ROUTING_KEYS_CACHED:
                self._method_frames.clear()
            method = pika.spec.Basic.Publish(exchange=self.exchange, routing_key=routing_key,
                                             mandatory=self.mandatory)
            frame = pika.frame.Method(self.channel_number, method).marshal()
            self._method_frames[routing_key] = frame
        return frame

    def _encode_properties(self, properties: tuple) -> bytes:
        if properties != self._properties:
            content_type, headers, delivery_mode, message_id, correlation_id, stamp = properties
            self._encoded_properties = b"".join(pika.BasicProperties(
                content_type=content_type, headers=headers, delivery_mode=delivery_mode,
                message_id=message_id, correlation_id=correlation_id, timestamp=stamp,
            ).encode())
            self._properties = properties
        return self._encoded_properties

    def append(self, out: list, routing_key: str, body: bytes, properties: tuple) -> None:
        """Append the frames of one message to `out`."""
        channel = self.channel_number
        encoded = self._encode_properties(properties)
        out.append(self._method_frame(routing_key))
        out.append(_HEADER_START.pack(FRAME_HEADER, channel, HEADER_PREFIX_SIZE + len(encoded),
                                      BASIC_CLASS, 0, len(body)))
        out.append(encoded)
        out.append(FRAME_END)
        for start in range(0, len(body), self.body_max):
            chunk = body[start:start + self.body_max]
            out.append(_FRAME_START.pack(FRAME_BODY, channel, len(chunk)))
            out.append(chunk)
            out.append(FRAME_END)
