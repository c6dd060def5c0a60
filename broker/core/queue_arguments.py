"""Validation of the optional queue arguments RabbitMQ understands (x-...).

Unknown arguments are accepted and kept, as RabbitMQ does. A known argument with an
unacceptable value is a 406, worded like RabbitMQ's; so is, on a new queue, a known
argument its queue type does not take (queue_types.py). A redeclaration compares only
the arguments of the queue's type (its kind's queue_arguments under the vhost's
RabbitMQ line).
"""

from amqp_codec.field_table import text_value

from .errors import precondition_failed
from .exchange import field_type_name, freeze_arguments
from .rabbitmq_lines import RabbitMQLine
from .stream_arguments import parse_duration

OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
DEAD_LETTER_STRATEGIES = ("at-most-once", "at-least-once")
QUEUE_MODES = ("default", "lazy")
QUEUE_VERSIONS = (1, 2)
LEADER_LOCATORS = ("client-local", "balanced", "random", "least-leaders")


def _count(type_problem, zero_allowed: bool = True):
    """A check of a count: an integer (`type_problem` words the refusal), not negative,
    and not zero unless `zero_allowed`."""
    def check(value):
        problem = type_problem(value)
        if problem is None and value < 0:
            return f"{{value_negative,{value}}}"
        if problem is None and value == 0 and not zero_allowed:
            return f"{{value_zero,{value}}}"
        return problem
    return check


def _overflow_mode(value):
    text = text_value(value)
    if text not in OVERFLOW_MODES:
        return f"{{unknown_overflow_type,{text!r}}}"
    return None


def _string(value):
    """A string, or bytes that are UTF-8 (pamqp leaves undecodable long strings as
    bytes; the broker uses these values as names)."""
    if isinstance(value, bytes):
        try:
            value.decode()
        except UnicodeDecodeError:
            return "{unacceptable_type,not_utf8}"
        return None
    if not isinstance(value, str):
        return f"{{unacceptable_type,{field_type_name(value)}}}"
    return None


def _integer(value):
    """RabbitMQ's wording for a value that is not an integer (every line's, measured on
    3.10.8 and 4.3.6 for x-max-length, x-message-ttl, x-expires, x-max-priority)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f'"expected integer, got {field_type_name(value)}"'
    return None


_non_negative_integer = _count(_integer)
_positive_integer = _count(_integer, zero_allowed=False)


def _dead_letter_strategy(value):
    return None if text_value(value) in DEAD_LETTER_STRATEGIES else "invalid_dlx_strategy"


def _queue_mode(value):
    text = text_value(value)
    return None if text in QUEUE_MODES else f'"unsupported queue mode \'{text}\'"'


def _queue_version(value):
    if isinstance(value, int) and not isinstance(value, bool) and value in QUEUE_VERSIONS:
        return None
    return f'"unsupported queue version \'{_shown(value)}\'"'


def _leader_locator(value):
    return None if text_value(value) in LEADER_LOCATORS else "invalid_queue_locator_arg"


def _shown(value) -> str:
    """A value as RabbitMQ prints it in its texts."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode(errors="replace")
    return str(value)


def _boolean(value):
    if not isinstance(value, bool):
        return f"{{unacceptable_type,{field_type_name(value)}}}"
    return None


def _priority(value):
    problem = _non_negative_integer(value)
    if problem is None and value > 255:
        return f"{{value_too_large,{value},255}}"
    return problem


VALIDATORS = {
    "x-max-length": _non_negative_integer,
    "x-max-length-bytes": _non_negative_integer,
    "x-message-ttl": _non_negative_integer,
    "x-expires": _positive_integer,
    "x-max-priority": _priority,
    "x-overflow": _overflow_mode,
    "x-dead-letter-exchange": _string,
    "x-dead-letter-routing-key": _string,
    "x-queue-type": _string,
    "x-single-active-consumer": _boolean,
    "x-dead-letter-strategy": _dead_letter_strategy,
    "x-queue-mode": _queue_mode,
    "x-queue-version": _queue_version,
    "x-queue-leader-locator": _leader_locator,
    "x-max-in-memory-length": _non_negative_integer,
    "x-max-in-memory-bytes": _non_negative_integer,
    "x-quorum-initial-group-size": _positive_integer,
    "x-initial-cluster-size": _positive_integer,
    # RabbitMQ 3.12 and later (4.3: of quorum queues only; the other is 4.3's, and
    # Warren, with one node, has no consumers on disconnected nodes to keep)
    "x-consumer-timeout": _non_negative_integer,
    "x-consumer-disconnected-timeout": _non_negative_integer,
}


def validate_queue_arguments(arguments: dict, queue: str, vhost: str,
                             unchecked: frozenset[str] = frozenset()) -> None:
    """406 for the first known argument whose value RabbitMQ refuses (but those the
    line takes `unchecked`: 4.3 takes any x-queue-mode)."""
    for name, check in VALIDATORS.items():
        if name in arguments and name not in unchecked:
            problem = check(arguments[name])
            if problem:
                raise precondition_failed(
                    f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': "
                    f"{problem}")
    if "x-dead-letter-routing-key" in arguments and "x-dead-letter-exchange" not in arguments:
        raise precondition_failed(
            f"invalid arg 'x-dead-letter-routing-key' for queue '{queue}' in vhost "
            f"'{vhost}': routing_key_but_no_dlx_defined")


def queue_type_of(arguments: dict) -> object:
    """The x-queue-type the arguments name ("classic" when none), as text if it is."""
    return text_value((arguments or {}).get("x-queue-type", "classic"))


def check_arguments_equivalent(received: dict, current: dict, compared: tuple[str, ...],
                               queue: str, vhost: str, line: RabbitMQLine) -> None:
    """A redeclaration as RabbitMQ of `line` checks it: the same queue type, and the
    same value (or absence) of each argument that type takes (`compared`, in its
    order); other arguments are ignored. Since 4.0 a declaration without x-queue-type
    names the default type, classic, in the refusal; 4.3 compares x-max-age in
    milliseconds."""
    received = received or {}
    if queue_type_of(received) != queue_type_of(current):
        if line.declares_default_queue_type:
            received = {**received, "x-queue-type": queue_type_of(received)}
            current = {**current, "x-queue-type": queue_type_of(current)}
        _refuse_inequivalent("x-queue-type", received, current, queue, vhost)
    for name in compared:
        ours, theirs = received.get(name), current.get(name)
        if name == "x-max-age" and line.compares_max_age_in_milliseconds:
            ours, theirs = _in_milliseconds(ours), _in_milliseconds(theirs)
        if freeze_arguments({"v": ours}) != freeze_arguments({"v": theirs}):
            shown_received = received if ours is None else {**received, name: ours}
            shown_current = current if theirs is None else {**current, name: theirs}
            _refuse_inequivalent(name, shown_received, shown_current, queue, vhost)


def _in_milliseconds(max_age: object) -> object:
    """A stream's x-max-age as 4.3 stores it: its duration's milliseconds as text (a
    declared x-max-age is a valid duration)."""
    if max_age is None:
        return None
    seconds = parse_duration(max_age)
    return max_age if seconds is None else str(int(seconds * 1000))


def _refuse_inequivalent(name: str, received: dict, current: dict, queue: str,
                         vhost: str):
    if name in received and name in current:
        difference = (f"received '{_shown(received[name])}' but current is "
                      f"'{_shown(current[name])}'")
    elif name in current:
        difference = f"received none but current is {_typed(current[name])}"
    else:
        difference = f"received {_typed(received[name])} but current is none"
    raise precondition_failed(
        f"inequivalent arg '{name}' for queue '{queue}' in vhost '{vhost}': {difference}")


def _typed(value) -> str:
    return f"the value '{_shown(value)}' of type '{field_type_name(value)}'"
