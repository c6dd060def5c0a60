"""What a test vhost's traffic did, kept for inspection and waits: installed on each
sandbox vhost (sandbox.py) as the vhost's Observer (broker/core/observation.py).

Counts are cumulative for the vhost's life; of each kind of record (settlements of a
queue, dead-lettered and returned messages) only the last KEPT are held."""

from collections import Counter, deque
from dataclasses import dataclass

from amqp_codec import MalformedProperties, decode_properties

from broker.core.message import Message

KEPT = 1000   # records of each kind held; counts go on past it


@dataclass(frozen=True)
class Settlement:
    """A client's ack, nack or reject of one message taken from a queue."""

    message_id: str | None
    outcome: str
    requeue: bool


@dataclass(frozen=True)
class DeadLetter:
    """A message a queue dead-lettered, as republished (with its x-death)."""

    queue: str
    reason: str
    message: Message


class QueueSettlements:
    """The settlements of one queue: counted by outcome, the last KEPT held."""

    def __init__(self):
        self.counts: Counter[str] = Counter()
        self.records: deque[Settlement] = deque(maxlen=KEPT)

    def add(self, settlement: Settlement) -> None:
        self.counts[settlement.outcome] += 1
        self.records.append(settlement)

    def message_ids(self, outcome: str) -> list[str | None]:
        return [record.message_id for record in self.records if record.outcome == outcome]


class Recorder:
    """Publishes, settlements, dead letters, returns and confirms of one vhost: a
    broker.core.observation.Observer, not a subclass of it (a Python class cannot
    subclass a class, protocol or not, of the compiled core)."""

    def __init__(self):
        self.published_counts: Counter[tuple[str, str]] = Counter()  # (exchange, key)
        self.settlements: dict[str, QueueSettlements] = {}
        self.dead_letters: deque[DeadLetter] = deque(maxlen=KEPT)
        self.dead_letter_counts: Counter[str] = Counter()   # by source queue
        self.returns: deque[Message] = deque(maxlen=KEPT)
        self.returned_count = 0
        self.dropped_count = 0
        self.confirms: dict[tuple[str, int], list[int]] = {}   # -> [acks, nacks]

    # -- Observer ------------------------------------------------------------------

    def published(self, exchange, message, queues) -> None:
        self.published_counts[exchange.name, message.routing_key] += 1

    def returned(self, message) -> None:
        self.returned_count += 1
        self.returns.append(message)

    def dropped(self, message) -> None:
        self.dropped_count += 1

    def settled(self, deliveries, outcome, requeue) -> None:
        for delivery in deliveries:
            message = getattr(delivery.entry, "message", None)   # none for streams
            queue = self.settlements.get(delivery.queue.name)
            if queue is None:
                queue = self.settlements[delivery.queue.name] = QueueSettlements()
            queue.add(Settlement(message_id(message), outcome, requeue))

    def dead_lettered(self, queue, reason, message) -> None:
        self.dead_letter_counts[queue.name] += 1
        self.dead_letters.append(DeadLetter(queue.name, reason, message))

    def confirming(self, channel, acks, nacks) -> None:
        key = (connection_name(channel.connection), channel.number)
        counts = self.confirms.setdefault(key, [0, 0])
        counts[0] += acks
        counts[1] += nacks

    # -- reading -------------------------------------------------------------------

    def queue_settlements(self, queue: str) -> QueueSettlements:
        return self.settlements.get(queue) or QueueSettlements()


def message_id(message: Message | None) -> str | None:
    """The message_id property, decoded here (not cached on the message)."""
    if message is None:
        return None
    try:
        return decode_properties(message.properties).message_id
    except (MalformedProperties, ValueError):
        return None


def connection_name(connection) -> str:
    """The client's connection_name property, or its peer address."""
    name = connection.client_properties.get("connection_name")
    return name if isinstance(name, str) else str(connection.peer)
