"""The kinds of queue, one record each: the table of what a queue of each kind is, may
be and takes.

Adding a queue kind touches this file (its record) and one class file (its class); a
kind with a new kind of store also needs the storage that recovers it.

A record (`QueueKind`) gives, for its kind:
- its name: the `x-queue-type` that asks for it, the management API's `type`, and the
  `rabbit_<name>_queue` of RabbitMQ's refusals;
- its class, and the store a new queue of it keeps its messages in;
- the declarations RabbitMQ refuses for it, in RabbitMQ's order and words (406): a name
  left to the broker, properties (exclusive, auto-delete, transient), arguments of
  other kinds, argument values only this kind checks;
- the declaration arguments it takes (a redeclaration compares only those), and the
  consumer arguments it takes;
- the policy keys it does not support (a policy with one does not apply to it);
- whether it honours a channel-wide prefetch limit (Basic.Qos global=true).

The virtual host looks a declaration's kind up once (`kind_of`); a queue reaches its
record as `queue.kind`. The rules are RabbitMQ 3.10's. Records are frozen: another
RabbitMQ line's rules are a `dataclasses.replace` of a record, as PRIORITY is CLASSIC
with another class. The arguments a kind takes under a line (`ArgumentRules`,
`argument_rules(line)`) are the table's with the line's additions: stream filtering's
(RabbitMQ 3.13 and later).
"""

from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol

from amqp_codec.field_table import text_value
from amqp_codec.reply_codes import ReplyCode

from .errors import ConnectionFailure, precondition_failed
from .message_store import MEMORY_STORE
from .persistence import Persistence
from .priority_queue import PriorityQueue, max_priority
from .queue import Queue
from .queue_arguments import queue_type_of, validate_queue_arguments
from .queue_base import KindRecord, QueueBase
from .quorum_queue import QuorumQueue
from .rabbitmq_lines import (LINES, QUEUE_MASTER_LOCATOR, TRANSIENT_NONEXCL_QUEUES, Profile,
                             RabbitMQLine)
from .stream_arguments import StreamRetention, validate_stream_arguments
from .stream_filter import (FILTER_ARGUMENT, FILTER_SIZE_ARGUMENT, MATCH_UNFILTERED_ARGUMENT,
                            check_filter_size)
from .stream_queue import StreamQueue


class DeprecatedFeatures(Protocol):
    """Where a declaration asks whether a deprecated feature may be used: the vhost,
    which notes the use for the upgrade lint."""

    profile: Profile

    def permits(self, feature: str) -> bool: ...


@dataclass(frozen=True)
class QueueDeclaration:
    """A Queue.Declare of a new queue, as the checks of its kind see it."""

    queue: str
    vhost: str
    server_named: bool   # the client left the name to the broker
    durable: bool
    exclusive: bool
    auto_delete: bool
    arguments: dict
    features: DeprecatedFeatures


@dataclass(frozen=True)
class QueueKind:
    """One kind of queue (see the module's docstring)."""

    name: str
    cls: type[QueueBase]
    # The store of a new queue: (persistence, vhost, queue, arguments, persisted) -> a
    # QueueStore or StreamStore; `persisted` is durable and not exclusive.
    make_store: Callable[[Persistence, str, str, dict, bool], Any]
    # Whether a client may leave the name to the broker.
    server_named: bool
    # The properties a queue of this kind cannot have, in the order RabbitMQ refuses
    # them: "non-durable", "exclusive-owner", "auto-delete".
    refused_properties: tuple[str, ...]
    # What a new queue's declaration must pass after the name, in RabbitMQ's order;
    # each check raises the 406 RabbitMQ would.
    declaration_checks: tuple[Callable[["QueueKind", QueueDeclaration], None], ...]
    # The declaration arguments it takes, in the order RabbitMQ compares them on a
    # redeclaration; a new queue given a known argument of another kind is refused.
    queue_arguments: tuple[str, ...]
    # The Basic.Consume arguments it takes; the others known are refused.
    consumer_arguments: tuple[str, ...]
    # RabbitMQ's `unsupported_policies`: a policy with one of these keys does not apply.
    unsupported_policy_keys: frozenset[str]
    # Whether a channel-wide prefetch limit (Basic.Qos global=true) applies to its
    # consumers; a kind that does not refuses a consumer on a limited channel.
    honours_global_qos: bool
    # The deprecated features a declaration of this kind may use, each with the test
    # of whether it does, checked last (RabbitMQ checks them when it creates the queue).
    deprecated_uses: tuple[tuple[str, Callable[[QueueDeclaration], bool]], ...] = ()

    def validate_declaration(self, declaration: QueueDeclaration) -> None:
        """406 for a new queue of this kind that RabbitMQ would not create, in its order
        and words; then for an argument value RabbitMQ refuses (queue_arguments.py), and
        for an x-queue-type that names no kind (kind_of took it as classic)."""
        if declaration.server_named and not self.server_named:
            raise precondition_failed(
                f"Cannot declare a server-named queue for type rabbit_{self.name}_queue")
        for check in self.declaration_checks:
            check(self, declaration)
        validate_queue_arguments(declaration.arguments, declaration.queue,
                                 declaration.vhost)
        queue_type = queue_type_of(declaration.arguments)
        if queue_type not in QUEUE_TYPES:
            raise precondition_failed(
                f"invalid arg 'x-queue-type' for queue '{declaration.queue}' in vhost "
                f"'{declaration.vhost}': Warren implements classic, quorum (one replica) "
                f"and stream queues, not '{queue_type}'")
        features = declaration.features
        for feature, uses in self.deprecated_uses:
            if uses(declaration) and not features.permits(feature):
                raise ConnectionFailure(ReplyCode.INTERNAL_ERROR,
                                        features.profile.denial_text(feature))


# -- the checks a declaration goes through ---------------------------------------------

def refuse_properties(kind: QueueKind, declaration: QueueDeclaration) -> None:
    """406 naming the first of the kind's refused properties the declaration has."""
    has = {"non-durable": not declaration.durable,
           "exclusive-owner": declaration.exclusive,
           "auto-delete": declaration.auto_delete}
    for name in kind.refused_properties:
        if has[name]:
            raise precondition_failed(
                f"invalid property '{name}' for queue '{declaration.queue}' in vhost "
                f"'{declaration.vhost}'")


def refuse_other_kinds_arguments(kind: QueueKind, declaration: QueueDeclaration) -> None:
    """406 naming the first argument given that RabbitMQ (of the vhost's line) knows but
    `kind` does not take (x-max-age on a classic queue, x-max-priority on a quorum
    queue...)."""
    rules = argument_rules(declaration.features.profile.line)
    _refuse_others(declaration.arguments, rules.known_arguments,
                   rules.queue_arguments(kind), kind.name, declaration.queue,
                   declaration.vhost)


def check_stream_argument_values(kind: QueueKind, declaration: QueueDeclaration) -> None:
    """406 for a stream argument whose value a stream cannot use (stream_arguments.py;
    the filter size under a line with stream filtering, stream_filter.py)."""
    validate_stream_arguments(declaration.arguments, declaration.queue, declaration.vhost)
    line = declaration.features.profile.line
    if line.stream_filtering:
        check_filter_size(declaration.arguments, declaration.queue, declaration.vhost, line)


def refuse_other_types_consumer_arguments(arguments: dict, queue_arguments: dict,
                                          queue: str, vhost: str,
                                          line: RabbitMQLine) -> None:
    """basic.consume as RabbitMQ checks it: 406 for a consumer argument the kind of the
    queue (declared with `queue_arguments`) does not take under `line` (x-stream-offset
    on a classic queue, x-priority on a stream...); the values are the channel's to
    check."""
    kind = kind_of(queue_arguments)
    rules = argument_rules(line)
    _refuse_others(arguments, rules.known_consumer_arguments,
                   rules.consumer_arguments(kind), kind.name, queue, vhost)


def _refuse_others(arguments: dict, known: frozenset, taken: tuple, queue_type: str,
                   queue: str, vhost: str) -> None:
    for name in arguments:
        if name in known and name not in taken:
            raise precondition_failed(
                f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}' of queue "
                f"type rabbit_{queue_type}_queue")


def is_transient_non_exclusive(declaration: QueueDeclaration) -> bool:
    return not declaration.durable and not declaration.exclusive


def has_master_locator(declaration: QueueDeclaration) -> bool:
    return "x-queue-master-locator" in declaration.arguments


# -- the stores ------------------------------------------------------------------------

def queue_file_or_memory(persistence: Persistence, vhost: str, queue: str,
                         arguments: dict, persisted: bool):
    """A queue that outlives a restart keeps its messages in a queue file, one that
    does not in memory."""
    return persistence.store_factory(vhost, queue) if persisted else MEMORY_STORE


def stream_log(persistence: Persistence, vhost: str, queue: str, arguments: dict,
               persisted: bool):
    return persistence.stream_factory(vhost, queue, StreamRetention.from_arguments(arguments))


# -- the kinds -------------------------------------------------------------------------

CLASSIC = QueueKind(
    name="classic", cls=Queue, make_store=queue_file_or_memory, server_named=True,
    refused_properties=(),
    declaration_checks=(refuse_other_kinds_arguments,),
    queue_arguments=("x-expires", "x-message-ttl", "x-dead-letter-exchange",
                     "x-dead-letter-routing-key", "x-max-length", "x-max-length-bytes",
                     "x-max-priority", "x-overflow", "x-queue-mode", "x-queue-version",
                     "x-single-active-consumer", "x-queue-master-locator"),
    consumer_arguments=("x-priority", "x-cancel-on-ha-failover"),
    unsupported_policy_keys=frozenset([
        "max-age", "stream-max-segment-size-bytes", "queue-leader-locator",
        "initial-cluster-size", "delivery-limit", "dead-letter-strategy"]),
    honours_global_qos=True,
    deprecated_uses=((TRANSIENT_NONEXCL_QUEUES, is_transient_non_exclusive),
                     (QUEUE_MASTER_LOCATOR, has_master_locator)))

# A classic queue with an x-max-priority of 1 or more: another class (whose code a plain
# classic queue does not run), the same rules.
PRIORITY = replace(CLASSIC, cls=PriorityQueue)

QUORUM = QueueKind(
    name="quorum", cls=QuorumQueue, make_store=queue_file_or_memory, server_named=False,
    refused_properties=("auto-delete", "exclusive-owner", "non-durable"),
    declaration_checks=(refuse_other_kinds_arguments, refuse_properties),
    queue_arguments=("x-expires", "x-message-ttl", "x-dead-letter-exchange",
                     "x-dead-letter-routing-key", "x-dead-letter-strategy", "x-max-length",
                     "x-max-length-bytes", "x-max-in-memory-length",
                     "x-max-in-memory-bytes", "x-overflow", "x-single-active-consumer",
                     "x-quorum-initial-group-size", "x-delivery-limit",
                     "x-queue-leader-locator"),
    consumer_arguments=("x-priority",),
    unsupported_policy_keys=frozenset([
        "max-priority", "queue-mode", "single-active-consumer", "ha-mode", "ha-params",
        "ha-sync-mode", "ha-promote-on-shutdown", "ha-promote-on-failure",
        "queue-master-locator", "max-age", "stream-max-segment-size-bytes",
        "queue-leader-locator", "initial-cluster-size"]),
    honours_global_qos=False)

STREAM = QueueKind(
    name="stream", cls=StreamQueue, make_store=stream_log, server_named=True,
    refused_properties=("non-durable", "exclusive-owner", "auto-delete"),
    declaration_checks=(refuse_properties, refuse_other_kinds_arguments,
                        check_stream_argument_values),
    queue_arguments=("x-max-length-bytes", "x-max-age", "x-stream-max-segment-size-bytes",
                     "x-initial-cluster-size", "x-queue-leader-locator"),
    consumer_arguments=("x-stream-offset",),
    unsupported_policy_keys=frozenset([
        "expires", "message-ttl", "dead-letter-exchange", "dead-letter-routing-key",
        "max-length", "max-in-memory-length", "max-in-memory-bytes", "max-priority",
        "overflow", "queue-mode", "single-active-consumer", "delivery-limit", "ha-mode",
        "ha-params", "ha-sync-mode", "ha-promote-on-shutdown", "ha-promote-on-failure",
        "queue-master-locator", "dead-letter-strategy"]),
    honours_global_qos=False)

# The kinds by x-queue-type, in the order RabbitMQ lists them.
QUEUE_TYPES = {kind.name: kind for kind in (CLASSIC, QUORUM, STREAM)}
KNOWN_ARGUMENTS = frozenset(name for kind in QUEUE_TYPES.values()
                            for name in kind.queue_arguments)
KNOWN_CONSUMER_ARGUMENTS = frozenset(name for kind in QUEUE_TYPES.values()
                                     for name in kind.consumer_arguments)


@dataclass(frozen=True)
class ArgumentRules:
    """The arguments each kind takes under one RabbitMQ line: the table's, except where
    the line's differ (by kind name), and the arguments some kind of the line takes."""

    line_queue_arguments: dict[str, tuple[str, ...]]
    line_consumer_arguments: dict[str, tuple[str, ...]]
    known_arguments: frozenset[str]
    known_consumer_arguments: frozenset[str]

    def queue_arguments(self, kind: KindRecord) -> tuple[str, ...]:
        """The declaration arguments `kind` takes, in the order a redeclaration
        compares them."""
        return self.line_queue_arguments.get(kind.name, kind.queue_arguments)

    def consumer_arguments(self, kind: QueueKind) -> tuple[str, ...]:
        return self.line_consumer_arguments.get(kind.name, kind.consumer_arguments)


def _argument_rules(line: RabbitMQLine) -> ArgumentRules:
    queue_arguments: dict[str, tuple[str, ...]] = {}
    consumer_arguments: dict[str, tuple[str, ...]] = {}
    if line.stream_filtering:
        consumer_arguments[STREAM.name] = STREAM.consumer_arguments + (
            FILTER_ARGUMENT, MATCH_UNFILTERED_ARGUMENT)
    if line.stream_filter_size_is_stream_argument:
        # where RabbitMQ 4.3 lists it: after the segment size
        names = STREAM.queue_arguments
        at = names.index("x-stream-max-segment-size-bytes") + 1
        queue_arguments[STREAM.name] = names[:at] + (FILTER_SIZE_ARGUMENT,) + names[at:]
    return ArgumentRules(
        queue_arguments, consumer_arguments,
        KNOWN_ARGUMENTS.union(*queue_arguments.values()),
        KNOWN_CONSUMER_ARGUMENTS.union(*consumer_arguments.values()))


ARGUMENT_RULES = {name: _argument_rules(line) for name, line in LINES.items()}


def argument_rules(line: RabbitMQLine) -> ArgumentRules:
    return ARGUMENT_RULES[line.name]


def kind_of(arguments: dict) -> QueueKind:
    """The kind a queue's declaration arguments ask for: the one its x-queue-type
    names; classic without one, and for one that names no kind (a new queue's
    validate_declaration refuses it after the classic checks). A classic queue with an
    x-max-priority of 1 or more is of kind PRIORITY."""
    queue_type = queue_type_of(arguments)
    kind = QUEUE_TYPES.get(queue_type, CLASSIC) if isinstance(queue_type, str) else CLASSIC
    if kind is CLASSIC and max_priority(arguments):
        return PRIORITY
    return kind


def _give_classes_their_kinds(kinds: tuple[QueueKind, ...]) -> None:
    """Each class answers `queue.kind` with its record. The capability a delivery reads
    (under a global prefetch limit) is a class attribute too, so that it costs one
    attribute read as before."""
    for kind in kinds:
        kind.cls.kind = kind
        kind.cls.honours_global_qos = kind.honours_global_qos


_give_classes_their_kinds((CLASSIC, PRIORITY, QUORUM, STREAM))
