"""Reading single fields of raw content properties without decoding all of them."""

from struct import Struct

from .encoder import decode_properties

_SHORT = Struct(">H")
_LONG = Struct(">I")
_CONTENT_TYPE, _CONTENT_ENCODING, _HEADERS, _DELIVERY_MODE = 0x8000, 0x4000, 0x2000, 0x1000
_CONTINUATION = 0x0001


def delivery_mode(properties: bytes) -> int:
    """The delivery_mode of raw content properties (0 when absent).

    Skips content_type, content_encoding and the headers table by their lengths: a few
    operations instead of a full pamqp decode on every publish.
    """
    if len(properties) < 2:
        return 0
    flags = _SHORT.unpack_from(properties)[0]
    if not flags & _DELIVERY_MODE:
        return 0
    if flags & _CONTINUATION:   # Basic never needs a second flag word; pamqp copes
        return decode_properties(properties).delivery_mode or 0
    offset = 2
    if flags & _CONTENT_TYPE:
        offset += 1 + properties[offset]
    if flags & _CONTENT_ENCODING:
        offset += 1 + properties[offset]
    if flags & _HEADERS:
        offset += 4 + _LONG.unpack_from(properties, offset)[0]
    return properties[offset]
