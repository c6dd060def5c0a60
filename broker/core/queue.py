"""Queues and their consumers: FIFO delivery, round-robin dispatch, requeue."""

from collections import deque

from storage.message_store import MEMORY_STORE, QueueStore

from .message import Message, QueueEntry


class Consumer:
    """A Basic.Consume subscription of one channel to one queue."""

    __slots__ = ("tag", "channel", "queue", "no_ack", "exclusive", "prefetch",
                 "unacked", "arguments")

    def __init__(self, tag: str, channel, queue: "Queue", no_ack: bool, exclusive: bool,
                 prefetch: int, arguments: dict | None = None):
        self.tag = tag
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.unacked = 0
        self.arguments = arguments or {}


class Queue:
    """Ready messages in a deque, delivered to consumers in turn.

    Dispatch is driven by events (enqueue, ack, new consumer, qos change, flow, writer
    drained): `dispatch()` hands out messages until no consumer can take more.
    """

    def __init__(self, vhost, name: str, durable: bool = False, exclusive_owner=None,
                 auto_delete: bool = False, arguments: dict | None = None,
                 store: QueueStore = MEMORY_STORE):
        self.vhost = vhost
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = dict(arguments or {})
        self.store = store
        self.max_length = self.arguments.get("x-max-length")
        self.overflow = self.arguments.get("x-overflow", "drop-head")
        self.ready: deque[QueueEntry] = deque()
        self.consumers: deque[Consumer] = deque()
        self.unacked = 0
        self.had_consumer = False
        self.deleted = False
        self._next_seq = 0

    def __repr__(self) -> str:
        return f"<Queue {self.name!r}>"

    @property
    def message_count(self) -> int:
        """Messages ready for delivery (unacked ones are not counted, as in RabbitMQ)."""
        return len(self.ready)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    def enqueue(self, message: Message) -> bool:
        """Accept a routed message; False when a length limit refuses it
        (x-overflow reject-publish), which the publisher sees as a confirm nack."""
        limit = self.max_length
        if limit is not None and len(self.ready) >= limit and self.overflow != "drop-head":
            return False
        self._next_seq += 1
        entry = QueueEntry(message, self._next_seq)
        self.store.append(entry)
        self.ready.append(entry)
        if limit is not None:
            self._drop_overflow(limit)
        if self.consumers:
            self.dispatch()
        return True

    def _drop_overflow(self, limit: int) -> None:
        """x-overflow drop-head: discard the oldest ready messages beyond the limit."""
        ready = self.ready
        while len(ready) > limit:
            self.store.settle(ready.popleft())

    def dispatch(self) -> None:
        ready = self.ready
        consumers = self.consumers
        while ready and consumers:
            for _ in range(len(consumers)):
                consumer = consumers[0]
                consumers.rotate(-1)
                if consumer.channel.can_deliver(consumer):
                    break
            else:
                return
            consumer.channel.deliver(consumer, ready.popleft())

    def take(self) -> QueueEntry | None:
        """The head message for Basic.Get, or None when the queue is empty."""
        return self.ready.popleft() if self.ready else None

    def requeue(self, entries: list[QueueEntry]) -> None:
        """Put unacked messages back, redelivered, where they were in the queue.

        `ready` is always ordered by seq, so each entry goes before the first ready
        message published after it: usually the head.
        """
        if self.deleted:
            return
        ready = self.ready
        entries = sorted(entries, key=_by_seq)
        for entry in entries:
            entry.redelivered = True
        if not ready or entries[-1].seq < ready[0].seq:
            ready.extendleft(reversed(entries))
        else:
            for entry in entries:
                ready.insert(_insertion_point(ready, entry.seq), entry)
        self.dispatch()

    def settle(self, entry: QueueEntry) -> None:
        """A delivered message was acked or discarded."""
        self.store.settle(entry)

    def purge(self) -> int:
        count = len(self.ready)
        for entry in self.ready:
            self.store.settle(entry)
        self.ready.clear()
        return count

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.had_consumer = True
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        try:
            self.consumers.remove(consumer)
        except ValueError:
            return
        if self.auto_delete and not self.consumers and not self.deleted:
            self.vhost.delete_queue(self)

    def has_exclusive_consumer(self) -> bool:
        return any(consumer.exclusive for consumer in self.consumers)


def _by_seq(entry: QueueEntry) -> int:
    return entry.seq


def _insertion_point(ready: deque, seq: int) -> int:
    for index, entry in enumerate(ready):
        if entry.seq > seq:
            return index
    return len(ready)
