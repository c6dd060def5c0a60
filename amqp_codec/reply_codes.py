"""AMQP 0-9-1 reply codes, as RabbitMQ uses them.

Codes 311-313, 403-406 close a channel; 320, 402, 501-506, 530, 540 and 541 close the
connection.
"""

from enum import IntEnum


class ReplyCode(IntEnum):
    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541


CONNECTION_LEVEL = frozenset(
    {320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541}
)


def is_connection_level(code: int) -> bool:
    """True when an error with this reply code must close the whole connection."""
    return code in CONNECTION_LEVEL
