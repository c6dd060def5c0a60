"""The numbers AMQP 0-9-1 uses on the wire to name classes, methods and content
properties, in one table: every other module (codec and broker) names them from here.
tests/unit/test_wire_ids.py checks each one against pamqp's copy of the specification.
"""

from typing import NamedTuple


class MethodId(NamedTuple):
    """A method's (class_id, method_id), as a connection or channel close names the
    method that caused it."""

    class_id: int
    method_id: int

    @property
    def frame_index(self) -> int:
        """The first four bytes of a method frame's payload read as one unsigned 32-bit
        integer (pamqp's ``index``)."""
        return self.class_id << 16 | self.method_id

    @classmethod
    def from_frame_index(cls, index: int) -> "MethodId":
        """The ids a frame index (pamqp's ``index`` of a method class) stands for."""
        return cls(index >> 16, index & 0xFFFF)


CONNECTION_CLASS = 10
CHANNEL_CLASS = 20
QUEUE_CLASS = 50
BASIC_CLASS = 60
TX_CLASS = 90

CONNECTION_START = MethodId(CONNECTION_CLASS, 10)
CONNECTION_TUNE_OK = MethodId(CONNECTION_CLASS, 31)
CONNECTION_OPEN = MethodId(CONNECTION_CLASS, 40)
CHANNEL_OPEN = MethodId(CHANNEL_CLASS, 10)
CHANNEL_FLOW = MethodId(CHANNEL_CLASS, 20)
QUEUE_DECLARE_OK = MethodId(QUEUE_CLASS, 11)
QUEUE_PURGE = MethodId(QUEUE_CLASS, 30)
BASIC_QOS = MethodId(BASIC_CLASS, 10)
BASIC_CONSUME = MethodId(BASIC_CLASS, 20)
BASIC_PUBLISH = MethodId(BASIC_CLASS, 40)
BASIC_RETURN = MethodId(BASIC_CLASS, 50)
BASIC_DELIVER = MethodId(BASIC_CLASS, 60)
BASIC_GET = MethodId(BASIC_CLASS, 70)
BASIC_GET_OK = MethodId(BASIC_CLASS, 71)
BASIC_ACK = MethodId(BASIC_CLASS, 80)
BASIC_RECOVER = MethodId(BASIC_CLASS, 110)
BASIC_NACK = MethodId(BASIC_CLASS, 120)
TX_COMMIT = MethodId(TX_CLASS, 20)

# The decoder reads a method frame's ids with one 32-bit unpack and compares these.
PUBLISH_INDEX = BASIC_PUBLISH.frame_index
ACK_INDEX = BASIC_ACK.frame_index
GET_INDEX = BASIC_GET.frame_index

# Content property flags of class Basic (the first flag word), in the order the
# property values follow the flags; the lowest bit says another flag word follows.
CONTENT_TYPE_FLAG = 0x8000
CONTENT_ENCODING_FLAG = 0x4000
HEADERS_FLAG = 0x2000
DELIVERY_MODE_FLAG = 0x1000
PRIORITY_FLAG = 0x0800
CORRELATION_ID_FLAG = 0x0400
REPLY_TO_FLAG = 0x0200
EXPIRATION_FLAG = 0x0100
MESSAGE_ID_FLAG = 0x0080
TIMESTAMP_FLAG = 0x0040
MESSAGE_TYPE_FLAG = 0x0020
USER_ID_FLAG = 0x0010
APP_ID_FLAG = 0x0008
CLUSTER_ID_FLAG = 0x0004
CONTINUATION_FLAG = 0x0001
