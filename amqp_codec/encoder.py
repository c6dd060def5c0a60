"""Outbound (server side): commands to bytes ready to write.

Every function returns one ``bytes`` object. ``frame_max`` is the negotiated frame_max
(0 = no limit); bodies are cut so that each body frame is at most frame_max bytes.

Field tables: the only method the broker sends with a table is Connection.Start, and
``encode_connection_start`` writes its server-properties with field_table's
``encode_table``, which uses only the integer types the RabbitMQ Java client 5.x reads
(pamqp's own choice includes ``u`` and ``i``, which it rejects). Nothing here changes
pamqp's process-wide settings.
"""

from struct import Struct

from pamqp import commands
from pamqp import frame

from .constants import FRAME_END_BYTE, FRAME_METHOD
from .fast_path import (  # noqa: F401  (re-exported: the struct fast paths)
    encode_basic_ack, encode_basic_nack, encode_deliver, encode_get_ok,
    encode_queue_declare_ok, encode_return, join_with_content,
)
from .field_table import encode_table
from .properties import decode_properties  # noqa: F401  (re-exported)
from .wire_ids import CONNECTION_START

HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"
_START_PREFIX = Struct(">BHIHHBB")   # frame type, channel, size, ids, protocol version
_LONG_STRING_LENGTH = Struct(">I")


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


def encode_connection_start(server_properties: dict, mechanisms: str, locales: str) -> bytes:
    """Connection.Start for protocol 0-9, as pamqp writes it, but with server-properties
    written by ``encode_table`` (Java-safe integer types)."""
    arguments = b"".join((encode_table(server_properties), _long_string(mechanisms),
                          _long_string(locales)))
    return b"".join((_START_PREFIX.pack(FRAME_METHOD, 0, 6 + len(arguments),
                                        *CONNECTION_START, 0, 9),
                     arguments, FRAME_END_BYTE))


def _long_string(text: str) -> bytes:
    data = text.encode()
    return _LONG_STRING_LENGTH.pack(len(data)) + data
