"""The arguments of stream queues: the checks of their values at declaration (as
RabbitMQ words them; what else a stream refuses is its kind's, in queue_types.py) and
the consumer arguments that choose where a stream consumer starts and stops."""

import datetime
import re
from dataclasses import dataclass

from amqp_codec.field_table import text_value

from .errors import precondition_failed

DURATION_UNITS = {"Y": 365 * 86400, "M": 30 * 86400, "D": 86400, "h": 3600, "m": 60,
                  "s": 1}
_DURATION = re.compile(r"^([0-9]+)([YMDhms])$")
OFFSET_WORDS = ("first", "last", "next")
TRACKING_ARGUMENT = "x-stream-automatic-offset-tracking"
END_ARGUMENT = "x-stream-end-offset"


def parse_duration(value) -> float | None:
    """Seconds in a RabbitMQ duration such as '7D', '12h', '30m', '10s'; None if
    malformed or zero, as RabbitMQ refuses '0s' (Y is 365 days, M is 30 days)."""
    match = (_DURATION.match(text_value(value)) if isinstance(value, (str, bytes, bytearray))
             else None)
    if match is None or int(match.group(1)) == 0:
        return None
    return int(match.group(1)) * DURATION_UNITS[match.group(2)]


def validate_stream_arguments(arguments: dict, queue: str, vhost: str) -> None:
    """406 for an x-max-age that is not a duration, an x-stream-max-segment-size-bytes
    that is not a positive integer."""
    if "x-max-age" in arguments:
        age = arguments["x-max-age"]
        if not isinstance(age, (str, bytes, bytearray)):
            raise precondition_failed(
                f"invalid arg 'x-max-age' for queue '{queue}' in vhost '{vhost}': "
                f"{{unacceptable_type,{type(age).__name__}}}")
        if parse_duration(age) is None:
            raise precondition_failed(
                f"invalid arg 'x-max-age' for queue '{queue}' in vhost '{vhost}': "
                "invalid_max_age (expected a number and a unit Y, M, D, h, m or s, "
                "such as '7D')")
    segment = arguments.get("x-stream-max-segment-size-bytes")
    if segment is not None and (isinstance(segment, bool) or not isinstance(segment, int)
                                or segment <= 0):
        raise precondition_failed(
            f"invalid arg 'x-stream-max-segment-size-bytes' for queue '{queue}' in "
            f"vhost '{vhost}': expected a positive integer, got {segment!r}")


@dataclass(frozen=True)
class StreamRetention:
    """How much of a stream is kept, from its declaration arguments."""

    max_bytes: int | None
    max_age_seconds: float | None
    max_segment_bytes: int | None

    @classmethod
    def from_arguments(cls, arguments: dict) -> "StreamRetention":
        age = arguments.get("x-max-age")
        return cls(arguments.get("x-max-length-bytes"),
                   None if age is None else parse_duration(age),
                   arguments.get("x-stream-max-segment-size-bytes"))


@dataclass(frozen=True)
class StreamStart:
    """Where a stream consumer starts: `kind` is first/last/next/offset/timestamp/
    interval, `value` the number, datetime or seconds that goes with it."""

    kind: str
    value: int | float | datetime.datetime | None = None


@dataclass(frozen=True)
class StreamConsumerOptions:
    start: StreamStart
    tracking: bool          # the broker stores the consumer's acked offset by its tag
    end: int | None         # exclusive end offset: cancel once everything below is sent


def stream_consumer_options(arguments: dict, queue: str) -> StreamConsumerOptions:
    """Read x-stream-offset, x-stream-automatic-offset-tracking and x-stream-end-offset;
    406 when one is malformed."""
    arguments = arguments or {}
    tracking = arguments.get(TRACKING_ARGUMENT, False)
    if not isinstance(tracking, bool):
        raise _bad_argument(TRACKING_ARGUMENT, tracking, queue, "true or false")
    if "x-stream-offset" in arguments and arguments["x-stream-offset"] is None:
        start, tracking = StreamStart("first"), True   # LavinMQ's way to ask for tracking
    else:
        start = _start(arguments.get("x-stream-offset", "next"), queue)
    end = arguments.get(END_ARGUMENT)
    if end is not None and (isinstance(end, bool) or not isinstance(end, int) or end < 0):
        raise _bad_argument(END_ARGUMENT, end, queue, "a non-negative integer offset")
    return StreamConsumerOptions(start, tracking, end)


def _start(value, queue: str) -> StreamStart:
    if isinstance(value, bool):
        raise _bad_argument("x-stream-offset", value, queue, _OFFSET_HELP)
    if isinstance(value, int):
        return StreamStart("offset", max(value, 0))
    if isinstance(value, datetime.datetime):
        return StreamStart("timestamp", value)
    if isinstance(value, (str, bytes, bytearray)):
        text = text_value(value)
        if text in OFFSET_WORDS:
            return StreamStart(text)
        seconds = parse_duration(text)
        if seconds is not None:
            return StreamStart("interval", seconds)
    raise _bad_argument("x-stream-offset", value, queue, _OFFSET_HELP)


_OFFSET_HELP = ("'first', 'last', 'next', an offset, a timestamp or an interval such as "
                "'1h'")


def _bad_argument(name: str, value, queue: str, expected: str):
    return precondition_failed(
        f"invalid arg '{name}' for consumer on queue '{queue}': expected {expected}, "
        f"got {value!r}")
