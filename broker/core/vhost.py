"""A virtual host: its exchanges, queues and bindings, and routing between them."""

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from amqp_codec.field_table import text_value
from amqp_codec.reply_codes import ReplyCode

from .errors import (ConnectionFailure, access_refused, not_found, precondition_failed,
                     resource_locked)
from .exchange import ALTERNATE_EXCHANGE, EXCHANGE_TYPES, Exchange, field_type_name
from .delayed_exchange import DELAYED_KIND, DelayedExchange, delay_ms
from .hash_exchanges import HASH_EXCHANGE_TYPES
from .limits import Limits
from .message import Message
from .message_stats import MessageCounts
from .observation import Observer
from .policy import VhostPolicies, merged_definition
from .publish_faults import PublishFaults
from .queue import Queue
from .queue_base import ClientConnection, QueueBase
from .queue_arguments import check_arguments_equivalent
from .queue_types import QueueDeclaration, compared_arguments, kind_of
from .rabbitmq_lines import Profile, RabbitMQLine, line_named
from .upgrade_lint import UpgradeLint
from .persistence import Persistence
from .ports import (DeleteBinding, DeleteExchange, DeleteQueue, SaveBinding,
                    SaveExchange, SaveQueue)
from .scheduler import Scheduler
from .server_names import server_named

if TYPE_CHECKING:
    from .access_control import ChannelAccess

log = logging.getLogger("warren.vhost")

DEFAULT_EXCHANGES = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)
_KEYED_KINDS = ("direct", "topic")   # the exchange types that route by routing key
# The declarable exchange types (EXCHANGE_TYPES are those an x-delayed-message can be)
EXCHANGE_CLASSES = {**EXCHANGE_TYPES, DELAYED_KIND: DelayedExchange, **HASH_EXCHANGE_TYPES}


@dataclass(frozen=True)
class VhostMetadata:
    """What an operator says about a vhost: RabbitMQ's description, tags and default
    queue type (None: RabbitMQ's "undefined", queues are of the type clients ask)."""
    description: str = ""
    tags: tuple[str, ...] = ()
    default_queue_type: str | None = None
    # The RabbitMQ line the vhost behaves as (rabbitmq_lines.py); None: the broker's.
    rabbitmq_line: str | None = None


class VirtualHost:
    """Exchanges and queues of one vhost, with the checks RabbitMQ applies to them."""

    def __init__(self, name: str, scheduler: Scheduler,
                 persistence: Persistence | None = None, limits: Limits | None = None,
                 profile: Profile | None = None, lint: UpgradeLint | None = None):
        self.name = name
        self.lint = lint or UpgradeLint()   # the broker's: what the vhost did, noted
        # The broker's profile, and the vhost's: the broker's, or its line's (describe).
        self.broker_profile = profile or Profile()
        self.profile = self.broker_profile
        self.scheduler = scheduler
        self.persistence = persistence or Persistence()
        self.limits = limits or Limits()   # the broker's: max-queues is checked here
        self.retired_counts = MessageCounts()   # of its closed channels (message_stats.py)
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, QueueBase] = {}
        self.policies = VhostPolicies()
        self.metadata = VhostMetadata()
        self.faults: PublishFaults | None = None   # a test broker's (publish_faults.py)
        self.observer: Observer | None = None   # a test broker's recorder; None otherwise
        self.default_exchange = EXCHANGE_TYPES["direct"]("", durable=True)
        for exchange_name, kind in DEFAULT_EXCHANGES:
            self.exchanges[exchange_name] = EXCHANGE_TYPES[kind](exchange_name, durable=True)
        self.exchanges[""] = self.default_exchange

    def permits(self, feature: str) -> bool:
        """Whether the vhost's profile permits the deprecated feature a client is about
        to use; the use is noted for the upgrade lint either way."""
        permitted = self.profile.permits_feature(feature)
        self.lint.used(self.name, feature)
        note = self.profile.usage_note(feature, permitted)
        if note is not None:
            self.lint.note(self.name, feature, note)
        return permitted

    def describe(self, metadata: VhostMetadata) -> None:
        """Set what an operator says about the vhost, its RabbitMQ line with it."""
        self.metadata = metadata
        line = metadata.rabbitmq_line
        self.profile = (self.broker_profile.with_line(line_named(line)) if line
                        else self.broker_profile)

    # -- lookups -------------------------------------------------------------------

    def exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise not_found(f"no exchange '{name}' in vhost '{self.name}'")
        return exchange

    def queue(self, name: str, connection: ClientConnection | None) -> QueueBase:
        """The queue named `name`, if `connection` may use it (exclusive queues: 405;
        None is an operator, whom no exclusive queue belongs to)."""
        queue = self.queues.get(name)
        if queue is None:
            raise not_found(f"no queue '{name}' in vhost '{self.name}'")
        self.check_exclusive(queue, connection)
        return queue

    def check_exclusive(self, queue: QueueBase,
                        connection: ClientConnection | None) -> None:
        if queue.exclusive_owner is not None and queue.exclusive_owner is not connection:
            raise _locked(queue)

    # -- exchanges -----------------------------------------------------------------

    def declare_exchange(self, name: str, kind: str, passive: bool, durable: bool,
                         auto_delete: bool, internal: bool, arguments: dict,
                         access: "ChannelAccess") -> Exchange:
        """Checks in RabbitMQ's order: passive declares need no permission; otherwise
        the type (503), the default exchange (403), configure on the name (403), then
        for a new exchange the reserved prefix (403) and, with an alternate-exchange,
        read on the exchange and write on the alternate (403)."""
        if passive:
            if name == "":
                raise _default_exchange_refused()
            return self.exchange(name)
        exchange_class = _exchange_class(kind, self.profile.line)
        if name == "":
            raise _default_exchange_refused()
        access.configure("exchange", name)
        existing = self.exchanges.get(name)
        if existing is None:
            _check_new_exchange(name, arguments, access)
        if existing is not None:
            difference = existing.difference(kind, durable, auto_delete, internal,
                                             arguments)
            if difference:
                field, received, current = difference
                raise precondition_failed(
                    f"inequivalent arg '{field}' for exchange '{name}' in vhost "
                    f"'{self.name}': received {received} but current is {current}")
            return existing
        alternate = (arguments or {}).get(ALTERNATE_EXCHANGE)
        if alternate is not None and not isinstance(alternate, (str, bytes, bytearray)):
            raise precondition_failed(
                f"invalid type '{field_type_name(alternate)}' for arg "
                f"'{ALTERNATE_EXCHANGE}' in exchange '{name}' in vhost '{self.name}'")
        exchange = exchange_class(name, durable, auto_delete, internal, arguments)
        if isinstance(exchange, DelayedExchange):
            exchange.attach(self, self.persistence.delayed_store_factory(self.name, name,
                                                                         durable))
        self._apply_policy(exchange)
        self.exchanges[name] = exchange
        if durable:
            self.persistence.record(SaveExchange(
                vhost=self.name, name=name, type=kind, auto_delete=auto_delete,
                internal=internal, arguments=dict(arguments or {})))
        return exchange

    def delete_exchange(self, name: str, if_unused: bool, access: "ChannelAccess") -> None:
        if name == "":
            raise _default_exchange_refused()
        if name.startswith("amq."):
            raise access_refused(
                f"deletion of system exchange '{name}' in vhost '{self.name}' not allowed")
        access.configure("exchange", name)
        exchange = self.exchanges.get(name)
        if exchange is None:
            return   # deleting a missing exchange succeeds, as in RabbitMQ 3.x
        if if_unused and exchange.bindings:
            raise precondition_failed(f"exchange '{name}' in vhost '{self.name}' in use")
        self._remove_exchange(exchange)

    def _remove_exchange(self, exchange: Exchange) -> None:
        """Forget an exchange and every binding from or to it (the metadata store
        cascades the bindings of a durable exchange); an auto-delete source that so
        loses its last binding goes too."""
        for (destination, key, _), arguments in list(exchange.bindings.items()):
            exchange.unbind(destination, key, arguments)
        sources = [other for other in self.exchanges.values()
                   if other.unbind_destination(exchange)]
        del self.exchanges[exchange.name]
        exchange.deleted = True
        if isinstance(exchange, DelayedExchange):
            exchange.drop_pending()
        if exchange.durable:
            self.persistence.record(DeleteExchange(vhost=self.name, name=exchange.name))
        for source in sources:
            self._auto_delete(source)

    def _auto_delete(self, exchange: Exchange) -> None:
        """RabbitMQ's rule: an auto-delete exchange goes when a binding from it was just
        removed and it has none left (one never bound stays)."""
        if exchange.auto_delete and not exchange.bindings and not exchange.deleted:
            self._remove_exchange(exchange)

    def authorize_binding(self, access: "ChannelAccess", destination_kind: str,
                          destination: str, source: str, routing_key: str) -> None:
        """RabbitMQ's checks of a bind or unbind, made before either end is looked up:
        write on the destination, neither end the default exchange, read on the
        source, and, when the source is a topic exchange, the user's topic permission
        (read) on the binding key."""
        access.write(destination_kind, destination)
        if source == "" or (destination_kind == "exchange" and destination == ""):
            raise _default_exchange_refused()
        access.read("exchange", source)
        exchange = self.exchanges.get(source)
        if exchange is not None and exchange.kind == "topic":
            access.topic("read", source, routing_key)

    def bind(self, destination, exchange_name: str, routing_key: str,
             arguments: dict) -> None:
        """Bind (after `authorize_binding`)."""
        exchange = self.exchange(exchange_name)
        exchange.validate_binding(arguments)
        if exchange.bind(destination, routing_key, arguments):
            self._record_binding(SaveBinding, exchange, destination, routing_key,
                                 arguments)

    def _record_binding(self, entry_type: type, exchange: Exchange, destination,
                        routing_key: str, arguments: dict) -> None:
        """Durable bindings (durable source and destination) go to the metadata store,
        as an `entry_type` (SaveBinding or DeleteBinding) journal entry."""
        if not (exchange.durable and _persisted(destination)):
            return
        kind = "queue" if destination.is_queue else "exchange"
        self.persistence.record(entry_type(
            vhost=self.name, source=exchange.name, destination_kind=kind,
            destination=destination.name, routing_key=routing_key,
            arguments=dict(arguments or {})))

    def unbind(self, destination, exchange_name: str, routing_key: str,
               arguments: dict) -> None:
        """Unbind (after `authorize_binding`)."""
        exchange = self.exchanges.get(exchange_name)
        if exchange is None or not exchange.unbind(destination, routing_key, arguments):
            return   # unbinding what is not bound succeeds, as in RabbitMQ 3.x
        self._record_binding(DeleteBinding, exchange, destination, routing_key,
                             arguments)
        self._auto_delete(exchange)

    # -- queues --------------------------------------------------------------------

    def _with_default_type(self, arguments: dict, durable: bool, exclusive: bool,
                           auto_delete: bool) -> dict:
        """RabbitMQ 3.10 gives a durable, non-exclusive, non-auto-delete queue declared
        without x-queue-type the vhost's default queue type, in its arguments."""
        default = self.metadata.default_queue_type
        if default is None or "x-queue-type" in arguments or not durable or exclusive \
                or auto_delete:
            return arguments
        return {**arguments, "x-queue-type": default}

    def declare_queue(self, name: str, connection: ClientConnection | None, passive: bool,
                      durable: bool, exclusive: bool, auto_delete: bool, arguments: dict,
                      access: "ChannelAccess") -> QueueBase:
        """Checks in RabbitMQ's order: passive declares need no permission; otherwise
        the reserved prefix (403), configure on the name, the server-chosen one
        included (403), then for a new queue with an x-dead-letter-exchange read on the
        queue and write on that exchange (403), before the arguments are validated."""
        if passive:
            queue = self.queue(name, connection)
            queue.touch()   # RabbitMQ renews an x-expires lease on passive declares too
            return queue
        name_chosen_by_server = not name
        if name_chosen_by_server:
            name = server_named("amq.gen-")
        elif name.startswith("amq."):
            raise access_refused(
                f"queue name '{name}' contains reserved prefix 'amq.*'")
        access.configure("queue", name)
        arguments = self._with_default_type(arguments or {}, durable, exclusive, auto_delete)
        existing = self.queues.get(name)
        if existing is not None:   # a redeclaration is only compared, not validated
            self.check_exclusive(existing, connection)
            if exclusive != (existing.exclusive_owner is not None):
                raise _locked(existing)   # RabbitMQ's strict check, even for the owner
            self._check_queue_equivalent(existing, durable, auto_delete, arguments)
            existing.touch()
            return existing
        dead_letter_exchange = _name_argument(arguments, "x-dead-letter-exchange")
        if dead_letter_exchange is not None:
            access.read("queue", name)
            access.write("exchange", dead_letter_exchange)
        # the queue limit before the arguments (3.10) or after them (4.0 and later)
        limit_first = not self.profile.line.queue_limit_after_arguments
        if limit_first:
            self.limits.check_new_queue(self.name, name, len(self.queues))
        kind = kind_of(arguments, self.profile.line)
        kind.validate_declaration(QueueDeclaration(
            name, self.name, name_chosen_by_server, durable, exclusive, auto_delete,
            arguments, self))
        if not limit_first:
            self.limits.check_new_queue(self.name, name, len(self.queues))
        persisted = durable and not exclusive
        store = kind.make_store(self.persistence, self.name, name, arguments, persisted)
        queue = kind.cls(self, name, durable, connection if exclusive else None,
                         auto_delete, arguments, store)
        self._apply_policy(queue)
        self.queues[name] = queue
        self.default_exchange.bind(queue, name, None)
        queue.touch()
        if persisted:
            self.persistence.record(SaveQueue(
                vhost=self.name, name=name, auto_delete=auto_delete,
                arguments=dict(arguments), queue_id=store.store_id))
        return queue

    def _check_queue_equivalent(self, queue: QueueBase, durable: bool, auto_delete: bool,
                                arguments: dict) -> None:
        received: object      # a flag, then an argument's value
        current: object
        checks = (("durable", durable, queue.durable),
                  ("auto_delete", auto_delete, queue.auto_delete))
        for field, received, current in checks:
            if received != current:
                raise precondition_failed(
                    f"inequivalent arg '{field}' for queue '{queue.name}' in vhost "
                    f"'{self.name}': received '{_describe(received)}' but current is "
                    f"'{_describe(current)}'")
        check_arguments_equivalent(arguments, queue.arguments,
                                   compared_arguments(queue, self.profile.line), queue.name,
                                   self.name, self.profile.line)

    def delete_queue(self, queue: QueueBase, if_unused: bool = False,
                     if_empty: bool = False,
                     answer: Callable[[int], None] | None = None) -> int:
        """Deletes the queue; returns the count of messages it held. `answer(count)`,
        when given, is called before the queue's consumers are told that they are
        cancelled: RabbitMQ's Queue.DeleteOk comes before its Basic.Cancel, and a client
        waiting for the one (py-amqp, kombu) fails on the other first."""
        if if_unused and queue.consumers:
            raise precondition_failed(
                f"queue '{queue.name}' in vhost '{self.name}' in use")
        if if_empty and queue.message_count:
            raise precondition_failed(
                f"queue '{queue.name}' in vhost '{self.name}' not empty")
        queue.deleted = True
        self.queues.pop(queue.name, None)
        for exchange in list(self.exchanges.values()):
            if exchange.unbind_destination(queue):
                self._auto_delete(exchange)
        if _persisted(queue):
            self.persistence.record(DeleteQueue(vhost=self.name, name=queue.name))
        consumers = list(queue.consumers)
        queue.consumers.clear()
        count = queue.drop_messages()
        queue.store.drop()
        if answer is not None:
            answer(count)
        for consumer in consumers:
            consumer.channel.consumer_cancelled_by_broker(consumer)
        return count

    # -- recovery ------------------------------------------------------------------

    def restore_exchange(self, name: str, kind: str, auto_delete: bool, internal: bool,
                         arguments: dict) -> Exchange:
        """Recreate a durable exchange found in the metadata store at start-up (a
        delayed exchange gets its store and held messages from the caller)."""
        exchange_class = EXCHANGE_CLASSES[kind]
        exchange = exchange_class(name, True, auto_delete, internal, arguments)
        if isinstance(exchange, DelayedExchange):
            exchange.attach(self, None)
        self._apply_policy(exchange)
        self.exchanges[name] = exchange
        return exchange

    def restore_queue(self, name: str, auto_delete: bool, arguments: dict, store,
                      messages) -> Queue:
        """Recreate a durable queue and the messages recovered from its queue file."""
        queue = self._restored(name, auto_delete, arguments, store)
        assert isinstance(queue, Queue), "a stream is restored by restore_stream"
        queue.restore(messages)
        queue.touch()
        self._apply_policy(queue)
        return queue

    def restore_stream(self, name: str, arguments: dict, store) -> QueueBase:
        """Recreate a stream queue over its recovered log."""
        queue = self._restored(name, False, arguments, store)
        self._apply_policy(queue)
        return queue

    def _restored(self, name: str, auto_delete: bool, arguments: dict,
                  store) -> QueueBase:
        """A durable queue of the kind its arguments name, over its recovered store,
        in the vhost and bound to the default exchange."""
        cls = kind_of(arguments, self.profile.line).cls
        queue = cls(self, name, True, None, auto_delete, arguments, store)
        self.queues[name] = queue
        self.default_exchange.bind(queue, name, None)
        return queue

    def restore_binding(self, source: str, destination_kind: str, destination: str,
                        routing_key: str, arguments: dict) -> bool:
        """Recreate a durable binding; False when an end of it no longer exists."""
        exchange = self.exchanges.get(source)
        target = (self.queues if destination_kind == "queue"
                  else self.exchanges).get(destination)
        if exchange is None or target is None:
            return False
        exchange.bind(target, routing_key, arguments)
        return True

    # -- policies ------------------------------------------------------------------

    def apply_policies(self) -> None:
        """A policy or operator policy of the vhost was set or cleared: every exchange
        and queue whose policies in force change takes the new ones at once. One that
        fails to is logged and keeps what it had; the others carry on."""
        entities: list[Exchange | QueueBase] = [*self.exchanges.values(),
                                                *self.queues.values()]
        for entity in entities:
            try:
                self._apply_policy(entity)
            except Exception as error:
                log.error("event=policy_apply_failed vhost=%r name=%r", self.name,
                          entity.name, exc_info=error)

    def _apply_policy(self, entity) -> None:
        """Give a queue or exchange the policy and operator policy that match it now
        (nothing to do when they are those it has)."""
        if entity.is_queue:
            selected = self.policies.select("queue", entity.name,
                                            entity.kind.unsupported_policy_keys)
        else:
            selected = self.policies.select("exchange", entity.name)
        if selected != entity.applied_policies:
            entity.applied_policies = selected
            entity.apply_policy(merged_definition(*selected))

    # -- routing -------------------------------------------------------------------

    def route(self, exchange: Exchange, message: Message,
              holds: list | None = None) -> Sequence[QueueBase]:
        """Every queue the message reaches, following exchange-to-exchange bindings and
        alternate exchanges. With `holds`, a delayed exchange reached on the way that
        would delay the message is not followed: (exchange, delay) goes into `holds`
        for the caller to hold the message there (as the plugin delays it)."""
        destinations = (exchange.route(message) if not message.extra_routing_keys
                        else _destinations(exchange, message))
        if not destinations:
            if exchange.alternate is None:
                return ()
            return self._route_through(exchange, [], [], message, holds)
        if not exchange.exchange_bindings:
            return tuple(destinations)   # queues only (a copy: enqueueing may unbind)
        queues = []
        pending = None
        for destination in destinations:
            if destination.is_queue:
                queues.append(destination)
            else:
                pending = pending or []
                pending.append(destination)
        if pending:
            return self._route_through(exchange, pending, queues, message, holds)
        return queues

    def _route_through(self, source: Exchange, pending: list, queues: list,
                       message: Message, holds: list | None) -> list[QueueBase]:
        """Follow the exchanges in `pending` (`source` routed to them and to `queues`,
        or, both empty, nowhere). An exchange that routes the message nowhere hands it
        to its alternate exchange, as in RabbitMQ: one that does not exist is skipped,
        and every exchange is visited once, so chains end and cycles stop."""
        seen_exchanges = {id(source)}
        seen_queues = {id(queue) for queue in queues}
        if not pending and not queues:
            self._add_alternate(source, pending)
        while pending:
            exchange = pending.pop()
            if id(exchange) in seen_exchanges:
                continue
            seen_exchanges.add(id(exchange))
            if holds is not None and exchange.delays_messages:
                delay = delay_ms(message)
                if delay:
                    holds.append((exchange, delay))
                    continue
            destinations = _destinations(exchange, message)
            if not destinations:
                self._add_alternate(exchange, pending)
                continue
            for destination in destinations:
                if destination.is_queue:
                    if id(destination) not in seen_queues:
                        seen_queues.add(id(destination))
                        queues.append(destination)
                else:
                    pending.append(destination)
        return queues

    def _add_alternate(self, exchange: Exchange, pending: list) -> None:
        if exchange.alternate is not None:
            alternate = self.exchanges.get(exchange.alternate)
            if alternate is not None:
                pending.append(alternate)


def _destinations(exchange: Exchange, message: Message):
    """Where `exchange` routes the message, with its routing key and the ones its CC and
    BCC headers added (each destination once; fanout and headers exchanges do not look
    at routing keys; a delayed exchange routes as its x-delayed-type)."""
    kind = exchange.routing.kind if isinstance(exchange, DelayedExchange) else exchange.kind
    if kind not in _KEYED_KINDS:
        return exchange.route(message)
    found = dict.fromkeys(exchange.route(message))
    for routing_key in message.extra_routing_keys:
        found.update(dict.fromkeys(exchange.route(
            Message(message.exchange, routing_key, message.properties, message.body))))
    return found


def _check_new_exchange(name: str, arguments: dict, access: "ChannelAccess") -> None:
    """What RabbitMQ checks before it creates an exchange: the reserved prefix, then for
    an alternate-exchange read on the new exchange and write on the alternate."""
    if name.startswith("amq."):
        raise access_refused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
    alternate = _name_argument(arguments, "alternate-exchange")
    if alternate is not None:
        access.read("exchange", name)
        access.write("exchange", alternate)


def _name_argument(arguments: dict, key: str) -> str | None:
    """An exchange named by a string argument (alternate-exchange,
    x-dead-letter-exchange); None when absent or not a string (RabbitMQ checks
    permissions only on a long string)."""
    value = text_value((arguments or {}).get(key))
    return value if isinstance(value, str) else None


def _exchange_class(kind: str, line: RabbitMQLine) -> type[Exchange]:
    """The class of exchange type `kind` in `line`; an unknown type is refused as the
    line refuses it: 503 closing the connection up to 3.x, 406 closing the channel since
    RabbitMQ 4.0."""
    exchange_class = EXCHANGE_CLASSES.get(kind)
    if exchange_class is None or kind in line.missing_exchange_types:
        if line.unknown_exchange_type_closes_channel:
            raise precondition_failed(f"unknown exchange type '{kind}'")
        raise ConnectionFailure(ReplyCode.COMMAND_INVALID, f"unknown exchange type '{kind}'")
    return exchange_class


def _default_exchange_refused():
    return access_refused("operation not permitted on the default exchange")


def _persisted(destination) -> bool:
    """Whether a queue or exchange outlives a restart."""
    if destination.is_queue:
        return destination.durable and destination.exclusive_owner is None
    return destination.durable


def _locked(queue: QueueBase):
    return resource_locked(
        f"cannot obtain exclusive access to locked queue '{queue.name}' in vhost "
        f"'{queue.vhost.name}'. It could be originally declared on another connection or "
        "the exclusive property value does not match that of the original declaration.")


def _describe(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
