"""Outbound (server side): commands to bytes ready to write.

Every function returns one ``bytes`` object. ``frame_max`` is the negotiated frame_max
(0 = no limit); bodies are cut so that each body frame is at most frame_max bytes.

Field tables: pamqp otherwise picks the smallest integer type, including ``u`` and
``i``, which the RabbitMQ Java client 5.x rejects ("Unrecognised type in table").
Importing this module switches pamqp to the types Java reads (b, s, I, l) for the whole
process, so ``encode_method(0, Connection.Start(server_properties=...))`` and any headers
table the broker builds are Java-safe.
"""

from pamqp import commands, common
from pamqp import encode as pamqp_encode
from pamqp import frame

from .fast_path import (  # noqa: F401  (re-exported: the struct fast paths)
    encode_basic_ack, encode_basic_nack, encode_deliver, encode_get_ok,
    encode_queue_declare_ok, encode_return, join_with_content,
)
from .properties import decode_properties  # noqa: F401  (re-exported)

pamqp_encode.support_deprecated_rabbitmq(True)

HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"


def encode_method(channel: int, method) -> bytes:
    """Any method frame, through pamqp (which validates the arguments)."""
    return frame.marshal(method, channel)


def encode_content(channel: int, method, properties: bytes, body,
                   frame_max: int) -> bytes | tuple:
    """A content-carrying method (pamqp), then the header and body frames for raw properties."""
    opened = frame.marshal(method, channel)[:-1]
    return join_with_content([opened], channel, properties, body, frame_max)


def encode_properties(props: commands.Basic.Properties) -> bytes:
    """Basic.Properties to the raw form: property flags, then property values."""
    return props.marshal()


def fit_reply_text(text: str) -> str:
    """A reply text that fits a shortstr: at most 255 bytes of UTF-8. A longer text is
    cut to 252 bytes (at a character boundary) and ends in "...", as RabbitMQ cuts
    it; characters that cannot be encoded (text that was not UTF-8) become "?"."""
    data = text.encode("utf-8", "replace")
    if len(data) <= 255:
        return data.decode()
    return data[:252].decode("utf-8", "ignore") + "..."


def encode_server_properties(properties: common.FieldTable) -> bytes:
    """A field table (e.g. Connection.Start server-properties) using only Java-safe types."""
    return pamqp_encode.field_table(properties)
