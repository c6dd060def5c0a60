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

The virtual host looks a declaration's kind up once (`kind_of`, under the vhost's
RabbitMQ line); a queue reaches its 3.10 record as `queue.kind`. The records below are
RabbitMQ 3.10's. Records are frozen: another RabbitMQ line's rules are a
`dataclasses.replace` of a record, as PRIORITY is CLASSIC with another class: the
arguments a line's kinds take differently are in its line record
(rabbitmq_lines.py), and KINDS_BY_LINE has each line's table.
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
from .queue_base import QueueBase
from .quorum_queue import QuorumQueue
from .rabbitmq_lines import (
    LINE_3_10, LINES, QUEUE_MASTER_LOCATOR, TRANSIENT_NONEXCL_QUEUES, Profile, RabbitMQLine,
)
from .stream_arguments import StreamRetention, validate_stream_arguments
from .stream_filter import check_filter_size
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
    # The RabbitMQ line whose rules these are, and the arguments its kinds know
    # together (a known argument of another kind is refused): set by kinds_under.
    line: RabbitMQLine = LINE_3_10
    known_arguments: frozenset[str] = frozenset()
    known_consumer_arguments: frozenset[str] = frozenset()

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
                                 declaration.vhost, self.line.unchecked_queue_arguments)
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
    """406 naming the first argument given that RabbitMQ knows but `kind` does not take
    (x-max-age on a classic queue, x-max-priority on a quorum queue...)."""
    _refuse_others(declaration.arguments, kind.known_arguments, kind.queue_arguments,
                   kind.name, declaration.queue, declaration.vhost)


def check_stream_argument_values(kind: QueueKind, declaration: QueueDeclaration) -> None:
    """406 for a stream argument whose value a stream cannot use (stream_arguments.py;
    the filter size under a line with stream filtering, stream_filter.py)."""
    validate_stream_arguments(declaration.arguments, declaration.queue, declaration.vhost)
    if kind.line.stream_filtering:
        check_filter_size(declaration.arguments, declaration.queue, declaration.vhost,
                          kind.line)


def refuse_other_types_consumer_arguments(arguments: dict, queue_arguments: dict,
                                          queue: str, vhost: str,
                                          line: RabbitMQLine) -> tuple[str, ...]:
    """basic.consume as RabbitMQ of `line` checks it: 406 for a consumer argument the
    kind of the queue (declared with `queue_arguments`) does not take (x-stream-offset
    on a classic queue, x-priority on a stream...); the values are the channel's to
    check. The consumer arguments the kind takes."""
    kind = kind_of(queue_arguments, line)
    _refuse_others(arguments, kind.known_consumer_arguments, kind.consumer_arguments,
                   kind.name, queue, vhost)
    return kind.consumer_arguments


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
# RabbitMQ 3.10's records, before the arguments the kinds know together are set
# (KINDS_BY_LINE below; CLASSIC, QUORUM, STREAM and PRIORITY are its 3.10 records).

_CLASSIC = QueueKind(
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

_QUORUM = QueueKind(
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

_STREAM = QueueKind(
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



@dataclass(frozen=True)
class LineKinds:
    """The table of kinds as one RabbitMQ line has it."""

    by_type: dict[str, QueueKind]   # by x-queue-type, in the order RabbitMQ lists them
    # A classic queue with an x-max-priority of 1 or more: another class (whose code a
    # plain classic queue does not run), the same rules.
    priority: QueueKind


def _line_kinds(line: RabbitMQLine) -> LineKinds:
    """The 3.10 records with the arguments `line` takes differently."""
    def taken(kind: QueueKind) -> QueueKind:
        consumer_arguments = tuple(
            name for name in kind.consumer_arguments
            if name not in line.consumer_arguments_dropped)
        return replace(kind, line=line,
                       queue_arguments=kind.queue_arguments
                       + line.queue_arguments_added.get(kind.name, ()),
                       consumer_arguments=consumer_arguments
                       + line.consumer_arguments_added.get(kind.name, ()))

    kinds = [taken(kind) for kind in (_CLASSIC, _QUORUM, _STREAM)]
    known = frozenset(name for kind in kinds for name in kind.queue_arguments)
    known_consumer = frozenset(name for kind in kinds for name in kind.consumer_arguments)
    by_type = {kind.name: replace(kind, known_arguments=known,
                                  known_consumer_arguments=known_consumer)
               for kind in kinds}
    return LineKinds(by_type, replace(by_type["classic"], cls=PriorityQueue))


KINDS_BY_LINE = {name: _line_kinds(line) for name, line in LINES.items()}
QUEUE_TYPES = KINDS_BY_LINE[LINE_3_10.name].by_type
CLASSIC, QUORUM, STREAM = QUEUE_TYPES["classic"], QUEUE_TYPES["quorum"], QUEUE_TYPES["stream"]
PRIORITY = KINDS_BY_LINE[LINE_3_10.name].priority


def kind_of(arguments: dict, line: RabbitMQLine = LINE_3_10) -> QueueKind:
    """The kind a queue's declaration arguments ask for, with `line`'s rules: the one
    its x-queue-type names; classic without one, and for one that names no kind (a new
    queue's validate_declaration refuses it after the classic checks). A classic queue
    with an x-max-priority of 1 or more is of kind PRIORITY (another class)."""
    kinds = KINDS_BY_LINE[line.name]
    queue_type = queue_type_of(arguments)
    kind = kinds.by_type.get(queue_type) if isinstance(queue_type, str) else None
    if kind is None:
        kind = kinds.by_type["classic"]
    if kind.name == "classic" and max_priority(arguments, line.least_max_priority):
        return kinds.priority
    return kind


def compared_arguments(queue: QueueBase, line: RabbitMQLine) -> tuple[str, ...]:
    """The arguments a redeclaration of `queue` compares under `line`."""
    return KINDS_BY_LINE[line.name].by_type[queue.kind.name].queue_arguments


def _give_classes_their_kinds(kinds: tuple[QueueKind, ...]) -> None:
    """Each class answers `queue.kind` with its (3.10) record, the same under every
    line for what is read through a queue (its name, the policy keys it does not
    support). The capability a delivery reads (under a global prefetch limit) is a
    class attribute too, so that it costs one attribute read as before."""
    for kind in kinds:
        kind.cls.kind = kind
        kind.cls.honours_global_qos = kind.honours_global_qos


_give_classes_their_kinds((CLASSIC, PRIORITY, QUORUM, STREAM))
