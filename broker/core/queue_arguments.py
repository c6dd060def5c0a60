"""Validation of the optional queue arguments RabbitMQ understands (x-...).

Unknown arguments are accepted and kept, as RabbitMQ does. A known argument with an
unacceptable value is a 406, worded like RabbitMQ's.
"""

from amqp_codec.field_table import text_value

from .errors import precondition_failed
from .exchange import field_type_name

OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
ACCEPTED_QUEUE_TYPES = ("classic", "quorum", "stream")


def _non_negative_int(value):
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{{unacceptable_type,{type(value).__name__}}}"
    if value < 0:
        return f"{{value_negative,{value}}}"
    return None


def _positive_int(value):
    problem = _non_negative_int(value)
    if problem is None and value == 0:
        return f"{{value_zero,{value}}}"
    return problem


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
        return f"{{unacceptable_type,{type(value).__name__}}}"
    return None


def _boolean(value):
    if not isinstance(value, bool):
        return f"{{unacceptable_type,{field_type_name(value)}}}"
    return None


def _priority(value):
    problem = _non_negative_int(value)
    if problem is None and value > 255:
        return f"{{value_too_large,{value},255}}"
    return problem


VALIDATORS = {
    "x-max-length": _non_negative_int,
    "x-max-length-bytes": _non_negative_int,
    "x-message-ttl": _non_negative_int,
    "x-expires": _positive_int,
    "x-max-priority": _priority,
    "x-overflow": _overflow_mode,
    "x-dead-letter-exchange": _string,
    "x-dead-letter-routing-key": _string,
    "x-queue-type": _string,
    "x-single-active-consumer": _boolean,
    "x-consumer-timeout": _non_negative_int,   # RabbitMQ 3.12 and later
}


def validate_queue_arguments(arguments: dict, queue: str, vhost: str) -> None:
    for name, check in VALIDATORS.items():
        if name in arguments:
            problem = check(arguments[name])
            if problem:
                raise precondition_failed(
                    f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': "
                    f"{problem}")
    queue_type = text_value(arguments.get("x-queue-type", "classic"))
    if queue_type not in ACCEPTED_QUEUE_TYPES:
        raise precondition_failed(
            f"invalid arg 'x-queue-type' for queue '{queue}' in vhost '{vhost}': "
            f"Warren implements classic, quorum (one replica) and stream queues, "
            f"not '{queue_type}'")
