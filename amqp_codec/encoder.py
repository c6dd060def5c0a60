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

from .constants import BASIC_CLASS
from .errors import ProtocolError
from .fast_path import (  # noqa: F401  (re-exported: the struct fast paths)
    encode_basic_ack, encode_basic_nack, encode_deliver, encode_get_ok, encode_return,
    join_with_content,
)
from .reply_codes import ReplyCode

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


def decode_properties(raw: bytes) -> commands.Basic.Properties:
    """The raw form (property flags, then values) to Basic.Properties.

    Raises ProtocolError(FRAME_ERROR) when pamqp cannot decode the bytes. Like pamqp, it
    does not notice a string cut short by the end of the data.
    """
    raw = bytes(raw)
    props = commands.Basic.Properties()
    try:
        flags, offset = _property_flags(raw)
        props.unmarshal(flags, raw[offset:])
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ProtocolError(ReplyCode.FRAME_ERROR, f"cannot decode content properties: {exc}",
                            class_id=BASIC_CLASS) from exc
    return props


def _property_flags(raw: bytes) -> tuple[int, int]:
    """Read the property flag words (bit 0 of each word = another word follows)."""
    flags, offset, word_index = 0, 0, 0
    while True:
        if len(raw) < offset + 2:
            raise ValueError("property flags are truncated")
        word = raw[offset] << 8 | raw[offset + 1]
        flags |= word << (16 * word_index)
        offset += 2
        if not word & 1:
            return flags, offset
        word_index += 1


def encode_server_properties(properties: common.FieldTable) -> bytes:
    """A field table (e.g. Connection.Start server-properties) using only Java-safe types."""
    return pamqp_encode.field_table(properties)
