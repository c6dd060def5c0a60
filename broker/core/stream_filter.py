"""Stream filtering (RabbitMQ 3.13 and later, under a line with `stream_filtering`): a
publisher tags a message with the `x-stream-filter-value` header; a stream consumer that
gives `x-stream-filter` (a string or an array of strings) gets only the messages tagged
with one of its values, and also the untagged ones with `x-stream-match-unfiltered`.

RabbitMQ selects whole chunks with a Bloom filter, so its consumers may also get
messages that do not match and must filter again themselves; Warren selects each
message exactly, which is a subset of what RabbitMQ delivers. The filter size
(`x-stream-filter-size-bytes`, the Bloom filter's bytes per chunk) is checked as
RabbitMQ checks it and changes nothing here: every size filters exactly.

Only a consumer with a filter reads a message's headers; the others pay nothing.
"""

from amqp_codec import MalformedProperties, headers_entries

from .errors import precondition_failed
from .exchange import field_type_name
from .rabbitmq_lines import (
    STREAM_FILTER_CONSUMER_ARGUMENTS, STREAM_FILTER_SIZE_ARGUMENT, RabbitMQLine,
)

FILTER_ARGUMENT, MATCH_UNFILTERED_ARGUMENT = STREAM_FILTER_CONSUMER_ARGUMENTS
FILTER_SIZE_ARGUMENT = STREAM_FILTER_SIZE_ARGUMENT
FILTER_VALUE_HEADER = "x-stream-filter-value"
# The header's name as it appears in a property block (its length octet first): a block
# without these bytes has no filter value, and is not decoded.
_HEADER_KEY = bytes([len(FILTER_VALUE_HEADER)]) + FILTER_VALUE_HEADER.encode()
FILTER_SIZE_MIN = 16
FILTER_SIZE_MAX = 255


class StreamFilter:
    """What one consumer's filter lets through. `values` are its filter values (str, or
    bytes for a long string that is not UTF-8); an empty value stands for the untagged
    messages, as in RabbitMQ, whose Bloom filter counts "" as no value."""

    __slots__ = ("values", "match_unfiltered")

    def __init__(self, values: frozenset[str | bytes], match_unfiltered: bool):
        self.values = values - {"", b""}
        self.match_unfiltered = match_unfiltered or len(self.values) < len(values)

    def matches(self, properties: bytes) -> bool:
        value = filter_value(properties)
        if value is None:
            return self.match_unfiltered
        return isinstance(value, (str, bytes)) and value in self.values


def filter_value(properties: bytes) -> object:
    """The message's x-stream-filter-value header: None when it has none (an empty
    string is none too, as RabbitMQ counts it; so are headers that cannot be read),
    otherwise the decoded value, which matches a filter only if it is a string."""
    if _HEADER_KEY not in properties:
        return None
    try:
        entries = headers_entries(properties)
    except MalformedProperties:
        return None
    for key, value, _raw in entries:
        if key == FILTER_VALUE_HEADER:
            return None if value in ("", b"") else value
    return None


def consumer_filter(arguments: dict, queue: str) -> StreamFilter | None:
    """The consumer's filter, read as RabbitMQ reads it: a string, or the strings of an
    array (other elements are left out); any other x-stream-filter is no filter, and
    x-stream-match-unfiltered is true only when it is the boolean true. An array without
    a string is a 406 here (RabbitMQ's stream reader crashes on it: 541)."""
    given = arguments.get(FILTER_ARGUMENT)
    if isinstance(given, (str, bytes)):
        values: frozenset[str | bytes] = frozenset([given])
    elif isinstance(given, list):
        values = frozenset(value for value in given if isinstance(value, (str, bytes)))
        if not values:
            raise precondition_failed(
                f"invalid arg '{FILTER_ARGUMENT}' for consumer on queue '{queue}': "
                f"expected a string or an array of strings, got {given!r}")
    else:
        return None
    return StreamFilter(values, arguments.get(MATCH_UNFILTERED_ARGUMENT) is True)


def check_filter_size(arguments: dict, queue: str, vhost: str,
                      line: RabbitMQLine) -> None:
    """406 for an x-stream-filter-size-bytes a stream of `line` refuses: where it is
    one of the stream's arguments (4.3) first one that is not a non-negative integer, in
    the words of RabbitMQ's argument checks; then one outside 16-255."""
    if FILTER_SIZE_ARGUMENT not in arguments:
        return
    size = arguments[FILTER_SIZE_ARGUMENT]
    is_integer = isinstance(size, int) and not isinstance(size, bool)
    if FILTER_SIZE_ARGUMENT in line.queue_arguments_added.get("stream", ()):
        problem = None
        if not is_integer:
            problem = f'"expected integer, got {field_type_name(size)}"'
        elif size < 0:
            problem = f"{{value_negative,{size}}}"
        if problem is not None:
            raise precondition_failed(
                f"invalid arg '{FILTER_SIZE_ARGUMENT}' for queue '{queue}' in vhost "
                f"'{vhost}': {problem}")
    if not is_integer or not FILTER_SIZE_MIN <= size <= FILTER_SIZE_MAX:
        raise precondition_failed(line.stream_filter_size_refusal)
