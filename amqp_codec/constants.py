"""AMQP 0-9-1 wire constants: protocol header, frame types and sizes, hot method ids."""

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_TYPES = frozenset({FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT})

FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"
FRAME_HEADER_SIZE = 7          # type(1) channel(2) size(4)
FRAME_OVERHEAD = 8             # frame header + end octet: payload <= frame_max - 8
FRAME_MIN_SIZE = 4096          # smallest frame_max a peer may negotiate
DEFAULT_FRAME_MAX = 131072

CONTENT_HEADER_PREFIX_SIZE = 12  # class_id(2) weight(2) body_size(8)

QUEUE_CLASS = 50
QUEUE_DECLARE_OK = 11

BASIC_CLASS = 60
BASIC_PUBLISH = 40
BASIC_RETURN = 50
BASIC_DELIVER = 60
BASIC_GET = 70
BASIC_GET_OK = 71
BASIC_ACK = 80
BASIC_NACK = 120

# class_id << 16 | method_id, as read with one 32-bit unpack of a method frame payload.
PUBLISH_INDEX = BASIC_CLASS << 16 | BASIC_PUBLISH
ACK_INDEX = BASIC_CLASS << 16 | BASIC_ACK
GET_INDEX = BASIC_CLASS << 16 | BASIC_GET
