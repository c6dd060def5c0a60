"""Which declaration arguments each queue type takes, as RabbitMQ 3.10 has them: a new
queue given a known argument of another type is refused, and a redeclaration compares
only the arguments of the queue's own type (queue_arguments.check_arguments_equivalent).
"""

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


def refuse_other_types_arguments(arguments: dict, queue_type: str, queue: str,
                                 vhost: str) -> None:
    """406 naming the first argument given that RabbitMQ knows but `queue_type` does
    not take (x-max-age on a classic queue, x-max-priority on a quorum queue...)."""
    taken = QUEUE_TYPE_ARGUMENTS[queue_type]
    for name in arguments:
        if name in KNOWN_ARGUMENTS and name not in taken:
            raise precondition_failed(
                f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}' of queue "
                f"type rabbit_{queue_type}_queue")
