"""Sans-IO AMQP 0-9-1 codec for the Warren broker (server side). See INTERFACE.md."""

from .constants import (
    FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, PROTOCOL_HEADER,
)
from .decoder import Decoder, InboundHeartbeat, InboundMethod, InboundPublish, Publish
from .encoder import (
    HEARTBEAT_FRAME, encode_basic_ack, encode_basic_nack, encode_content, encode_deliver,
    encode_connection_start, encode_get_ok, encode_method, encode_properties,
    encode_queue_declare_ok, encode_return, fit_reply_text,
)
from .errors import ProtocolError, ProtocolHeaderMismatch
from .field_table import (
    EncodedValue, Long, array_elements, encode_table, with_table_entry,
)
from .framer import Framer
from .header_splice import with_long_header
from .properties import (
    MalformedProperties, decode_properties, headers_entries, replace_properties,
)
from .reply_codes import ReplyCode

__all__ = [
    "PROTOCOL_HEADER", "FRAME_METHOD", "FRAME_HEADER", "FRAME_BODY", "FRAME_HEARTBEAT",
    "FRAME_END", "Framer", "Decoder", "InboundMethod", "InboundPublish", "Publish", "InboundHeartbeat",
    "HEARTBEAT_FRAME", "encode_method", "encode_content", "encode_deliver", "encode_get_ok",
    "encode_basic_ack", "encode_basic_nack", "encode_return", "encode_properties",
    "decode_properties", "encode_connection_start", "encode_table", "with_long_header",
    "Long", "EncodedValue", "array_elements", "with_table_entry",
    "ProtocolError",
    "ProtocolHeaderMismatch", "ReplyCode", "MalformedProperties",
    "headers_entries", "replace_properties", "encode_queue_declare_ok", "fit_reply_text",
]
