"""AMQP 0-9-1 wire constants: protocol header, frame types and sizes (class, method and
property ids: wire_ids.py)."""

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

# The one-octet length prefix of a shortstr of each length (0-255), built once.
SHORTSTR_LENGTH = tuple(bytes((n,)) for n in range(256))
