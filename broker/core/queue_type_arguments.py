"""Which declaration arguments each queue type takes, as RabbitMQ 3.10 has them: a new
queue given a known argument of another type is refused, and a redeclaration compares
only the arguments of the queue's own type (queue_arguments.check_arguments_equivalent).
"""

from amqp_codec.field_table import text_value

from .errors import precondition_failed

# The declaration arguments each queue type of RabbitMQ 3.10 takes (its
# `queue_arguments` capability), in the order RabbitMQ compares them on redeclaration.
QUEUE_TYPE_ARGUMENTS = {
    "classic": ("x-expires", "x-message-ttl", "x-dead-letter-exchange",
                "x-dead-letter-routing-key", "x-max-length", "x-max-length-bytes",
                "x-max-priority", "x-overflow", "x-queue-mode", "x-queue-version",
                "x-single-active-consumer", "x-queue-master-locator"),
    "quorum": ("x-expires", "x-message-ttl", "x-dead-letter-exchange",
               "x-dead-letter-routing-key", "x-dead-letter-strategy", "x-max-length",
               "x-max-length-bytes", "x-max-in-memory-length", "x-max-in-memory-bytes",
               "x-overflow", "x-single-active-consumer", "x-quorum-initial-group-size",
               "x-delivery-limit", "x-queue-leader-locator"),
    "stream": ("x-max-length-bytes", "x-max-age", "x-stream-max-segment-size-bytes",
               "x-initial-cluster-size", "x-queue-leader-locator"),
}
KNOWN_ARGUMENTS = frozenset(name for names in QUEUE_TYPE_ARGUMENTS.values()
                            for name in names)
# The basic.consume arguments each queue type takes; the others known are refused.
CONSUMER_ARGUMENTS = {
    "classic": ("x-priority", "x-cancel-on-ha-failover"),
    "quorum": ("x-priority",),
    "stream": ("x-stream-offset",),
}
KNOWN_CONSUMER_ARGUMENTS = frozenset(name for names in CONSUMER_ARGUMENTS.values()
                                     for name in names)


def queue_type_of(arguments: dict) -> str:
    return text_value((arguments or {}).get("x-queue-type", "classic"))


def refuse_other_types_arguments(arguments: dict, queue_type: str, queue: str,
                                 vhost: str) -> None:
    """406 naming the first argument given that RabbitMQ knows but `queue_type` does
    not take (x-max-age on a classic queue, x-max-priority on a quorum queue...)."""
    _refuse_others(arguments, KNOWN_ARGUMENTS, QUEUE_TYPE_ARGUMENTS[queue_type],
                   queue_type, queue, vhost)


def refuse_other_types_consumer_arguments(arguments: dict, queue_arguments: dict, queue: str,
                             vhost: str) -> None:
    """basic.consume as RabbitMQ 3.10 checks it: 406 for a consumer argument the queue's
    type does not take (x-stream-offset on a classic queue, x-priority on a stream...);
    the values are the channel's to check."""
    queue_type = queue_type_of(queue_arguments)
    _refuse_others(arguments, KNOWN_CONSUMER_ARGUMENTS,
                   CONSUMER_ARGUMENTS.get(queue_type, ()), queue_type, queue, vhost)


def _refuse_others(arguments: dict, known: frozenset, taken: tuple, queue_type: str,
                   queue: str, vhost: str) -> None:
    for name in arguments:
        if name in known and name not in taken:
            raise precondition_failed(
                f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}' of queue "
                f"type rabbit_{queue_type}_queue")
