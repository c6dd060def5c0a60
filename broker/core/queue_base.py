"""What every kind of queue shares. Classic queues (queue.py) and stream queues
(stream_queue.py) derive from QueueBase; channels, the virtual host and the server hold
every queue as a QueueBase, whatever its kind. What each kind is, may be and takes is in
its record (queue_types.py), which a queue reaches as `queue.kind`.

What a queue needs of the objects above it (its virtual host, its consumers' channels and
connections) is declared here: ConsumerChannel and ClientConnection, the base classes of
Channel and Connection, and the Protocol QueueHost, which VirtualHost meets without
naming it. The queues import nothing of the layers that hold them, not even for type
checking, so that the core's import graph has no cycle through them
(tests/unit/test_layers.py bounds it)."""

from abc import abstractmethod
from collections import deque
from typing import Callable, ClassVar, Generic, Mapping, Protocol, Sequence, TypeVar

from .exchange import Exchange
from .message import Message, QueueEntry
from .ports import Transport
from .rabbitmq_lines import Profile
from .scheduler import Scheduler
from .upgrade_lint import UpgradeLint

# What a delivery awaiting its ack refers to, handed back to the queue on settle, discard
# or requeue: a QueueEntry (classic) or a DeliveredOffset (stream).
Entry = TypeVar("Entry")


class Consumer:
    """A Basic.Consume subscription of one channel to one queue."""

    __slots__ = ("tag", "channel", "queue", "no_ack", "exclusive", "prefetch",
                 "unacked", "arguments", "priority")

    def __init__(self, tag: str, channel: "ConsumerChannel[ClientConnection]",
                 queue: "QueueBase", no_ack: bool, exclusive: bool, prefetch: int,
                 arguments: dict | None = None):
        self.tag = tag
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.unacked = 0
        self.arguments = arguments or {}
        self.priority = self.arguments.get("x-priority", 0)


ConsumerKind = TypeVar("ConsumerKind", bound=Consumer)   # what make_consumer makes
Subscriber = TypeVar("Subscriber", bound=Consumer)


class DeliveredOffset(Generic[Subscriber]):
    """A stream message handed to a consumer and not yet acked: what the channel hands
    back to the stream on ack, reject or requeue. Generic in the consumer's class (a
    stream's StreamConsumer), which stream_queue.py declares."""

    __slots__ = ("consumer", "offset")

    def __init__(self, consumer: Subscriber, offset: int):
        self.consumer = consumer
        self.offset = offset


# -- what a queue needs of the objects above it ----------------------------------------
#
# The channel and the connection derive from the plain classes below, not Protocols:
# compiled by mypyc, a call or attribute read through a Protocol is a generic Python
# call, through a base class a native one, and a queue calls its consumers' channels for
# every message. Not ABCs either, for the reason QueueBase is not. What is read off that
# path (the vhost) stays a Protocol.

class ClientConnection:
    """A client's connection, as a queue sees it: the owner of an exclusive queue and
    the connection of each consumer. Connection derives from it."""

    transport: Transport

    def fail(self, error: BaseException) -> None:
        """Close the connection with `error` (a ConnectionFailure, or a bug)."""
        raise NotImplementedError


# The connection a channel belongs to: Connection for a Channel, which reads the rest
# of its connection; a queue sees a ClientConnection.
ConnectionKind = TypeVar("ConnectionKind", bound=ClientConnection, covariant=True)


class ConsumerChannel(Generic[ConnectionKind]):
    """The channel of a consumer, as its queue delivers to it. Channel derives from
    it."""

    number: int
    connection: ConnectionKind

    def can_deliver(self, consumer: Consumer) -> bool:
        """Whether `consumer` may be sent a message now (socket, prefetch)."""
        raise NotImplementedError

    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        """Send a queued message to `consumer`."""
        raise NotImplementedError

    def deliver_at_once(self, consumer: Consumer, message: Message) -> None:
        """Send a message straight to a no-ack consumer, without queueing it."""
        raise NotImplementedError

    def deliver_record(self, consumer: Consumer, entry: DeliveredOffset, exchange: str,
                       routing_key: str, properties: bytes, body: bytes) -> None:
        """Send a message read from a stream; `entry` comes back on ack."""
        raise NotImplementedError

    def consumer_cancelled_by_broker(self, consumer: Consumer) -> None:
        """The consumer's queue went away."""
        raise NotImplementedError


class DeadLetterObserver(Protocol):
    """Of a vhost's observer (observation.py), what queues tell it."""

    def dead_lettered(self, queue: "QueueBase", reason: str,
                      message: Message) -> None: ...


class DurableWaiter(Protocol):
    """Told after each commit how many writes are durable (Persistence.wait_durable)."""

    def writes_durable(self, durable: int) -> bool: ...

    def writes_failed(self, writes: int, reason: str) -> bool: ...

    def fail(self, error: BaseException) -> None: ...


class CommitRequests(Protocol):
    """Of a vhost's persistence (persistence.py), what queues ask of it: a commit soon
    (stream queues), or to be told when the writes made so far are durable (a quorum
    queue's at-least-once dead-lettering)."""

    @property
    def writes(self) -> int: ...

    def request_commit(self) -> None: ...

    def wait_durable(self, waiter: DurableWaiter) -> None: ...


class QueueHost(Protocol):
    """The virtual host of a queue, as the queue and its collaborators use it (a
    VirtualHost). A Protocol: a queue reads its vhost only off the per-message path."""

    @property
    def name(self) -> str: ...

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def persistence(self) -> CommitRequests: ...

    @property
    def exchanges(self) -> Mapping[str, Exchange]: ...

    @property
    def observer(self) -> DeadLetterObserver | None: ...

    @property
    def profile(self) -> Profile:
        """The RabbitMQ line the vhost behaves as (rabbitmq_lines.py)."""

    @property
    def lint(self) -> UpgradeLint:
        """Where what the vhost did that another line treats otherwise is noted."""

    def route(self, exchange: Exchange, message: Message,
              holds: list | None = None) -> Sequence["QueueBase"]:
        """Every queue `message` reaches from `exchange`."""

    def delete_queue(self, queue: "QueueBase", if_unused: bool = False,
                     if_empty: bool = False,
                     answer: Callable[[int], None] | None = None) -> int:
        """Delete `queue` (an auto-delete queue that lost its last consumer, an
        exclusive queue whose connection closed)."""


class KindRecord(Protocol):
    """Of a queue's record in the table of kinds (queue_types.QueueKind), what is read
    through the queue."""

    @property
    def name(self) -> str: ...

    @property
    def queue_arguments(self) -> tuple[str, ...]: ...

    @property
    def unsupported_policy_keys(self) -> frozenset[str]: ...


class QueueBase(Generic[Entry, ConsumerKind]):
    """A named queue of one virtual host, with its consumers.

    The subclasses decide how messages are kept and handed out; the abstract methods
    below are what differs between kinds (mypy holds each kind to them). Not an ABC:
    compiled by mypyc, ABCMeta's isinstance cache is shared by the subclasses, and
    `isinstance(queue, StreamQueue)` on a classic queue made a later
    `isinstance(queue, QueueBase)` false; __init__ refuses the base class itself.
    """

    # A binding leads to a queue or to an exchange (Exchange.is_queue is False).
    is_queue = True

    # x-single-active-consumer: one consumer at a time gets messages (stream queues
    # refuse the argument). A class attribute that SAC queues override, so that other
    # queues keep fewer than 30 instance attributes (CPython 3.11 reads attributes of
    # larger instances more slowly: docs/architecture.md, "Queues").
    single_active = False

    # Whether the store hears of deliveries (store.delivered: the queue tells it on a
    # hand-over that awaits an ack, Channel.get on a Get): classic queues with a durable
    # store; a stream's consumers keep their own offsets.
    stores_messages = False

    # The record of the queue's kind, which queue_types.py, the table of kinds, sets on
    # each class it lists.
    kind: ClassVar[KindRecord]

    # kind.honours_global_qos, which a channel under a global prefetch limit reads per
    # delivery: set on the class with `kind`, to be read in one step.
    honours_global_qos: ClassVar[bool]

    def __init__(self, vhost: QueueHost, name: str, durable: bool,
                 exclusive_owner: ClientConnection | None, auto_delete: bool,
                 arguments: dict | None, store):
        if type(self) is QueueBase:
            raise TypeError("QueueBase is abstract: a queue is of one of its kinds")
        self.vhost = vhost
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner   # the owning connection, or None
        self.auto_delete = auto_delete
        self.arguments = dict(arguments or {})
        self.store = store
        self.consumers: deque[ConsumerKind] = deque()
        self.deleted = False
        self.held_bytes = 0   # what the memory alarm charges for the messages held
        self.applied_policies: tuple = (None, None)   # (policy, operator policy) in force
        if self.arguments.get("x-single-active-consumer") is True:
            self.single_active = True   # set only when true: see the class attribute

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def has_exclusive_consumer(self) -> bool:
        return any(consumer.exclusive for consumer in self.consumers)

    def remove_consumer(self, consumer: ConsumerKind) -> None:
        try:
            self.consumers.remove(consumer)
        except ValueError:
            return
        if self.consumers or self.deleted:
            return
        if self.auto_delete:
            self.vhost.delete_queue(self)
        else:
            self.touch()

    # -- what differs between kinds ----------------------------------------------------

    @property
    @abstractmethod
    def message_count(self) -> int:
        """The message count Queue.DeclareOk and Get-Ok report."""

    @property
    @abstractmethod
    def bookkeeping_bytes(self) -> int:
        """What held_bytes charges beyond the bodies of the messages held in memory."""

    @property
    @abstractmethod
    def published(self) -> int:
        """How many messages the queue has accepted, read from what it keeps anyway (no
        counter on the hot path): the management API's publish count."""

    @abstractmethod
    def enqueue(self, message, publisher=None) -> bool:
        """Accept a routed message; False when the queue refuses it (the publisher sees
        a confirm nack). `publisher` is the connection that published it, which the
        queue may slow down (Connection.throttle) when it cannot keep up."""

    @abstractmethod
    def make_consumer(self, tag: str, channel: ConsumerChannel[ClientConnection],
                      no_ack: bool, exclusive: bool, prefetch: int,
                      arguments: dict) -> ConsumerKind:
        """A consumer of this queue for Basic.Consume (not yet added)."""

    @abstractmethod
    def add_consumer(self, consumer: ConsumerKind) -> None:
        """Start delivering to `consumer`."""

    @abstractmethod
    def dispatch(self, now: float | None = None) -> None:
        """Deliver to the consumers that can take messages now."""

    @abstractmethod
    def take(self) -> Entry | None:
        """The next message for Basic.Get, or None when there is none."""

    @abstractmethod
    def settle(self, entry: Entry) -> None:
        """A delivered message was acked (or delivered with no_ack)."""

    @abstractmethod
    def discard(self, entries: list[Entry], reason: str) -> None:
        """Messages are done with without an ack (rejected, expired, over a limit)."""

    @abstractmethod
    def requeue(self, entries: list[Entry], failed: bool = True) -> None:
        """Unacked deliveries come back (reject with requeue, recover, channel closed);
        `failed`: the delivery failed (a reject, a closed channel), as opposed to a
        message handed back (a nack, a recover), which RabbitMQ 4.3's quorum queues do
        not count towards the delivery limit."""

    def requeue_abandoned(self, entries: list[Entry]) -> None:
        """The unacked deliveries of a channel that closed come back (a failed
        delivery; RabbitMQ 3.10's quorum queues deliver them first)."""
        self.requeue(entries)

    @abstractmethod
    def purge(self) -> int:
        """Queue.Purge: drop the ready messages; how many there were."""

    @abstractmethod
    def drop_messages(self) -> int:
        """The queue is deleted: let go of its messages; the count DeleteOk reports."""

    @abstractmethod
    def apply_policy(self, definition: dict) -> None:
        """The policy in force changed: `definition` is the merged definition of the
        policy and operator policy now in force ({} for none)."""

    @abstractmethod
    def touch(self) -> None:
        """The queue was used (declared, read by Basic.Get, lost its last consumer)."""
