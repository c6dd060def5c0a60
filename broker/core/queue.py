"""Classic queues: FIFO delivery, round-robin dispatch, requeue."""

import datetime
import logging
from collections import deque
from typing import TYPE_CHECKING

from amqp_codec.field_table import text_value

from .message_store import MEMORY_STORE, QueueStore

from .dead_letter import dead_letter_message
from .message import Message, QueueEntry
from .queue_base import Consumer, QueueBase

if TYPE_CHECKING:
    from .channel import Channel
    from .connection import Connection
    from .scheduler import Timer
    from .vhost import VirtualHost

log = logging.getLogger("warren.queue")

PAGE_WINDOW = 10_000   # ready messages beyond this keep their bodies only on disk
# Publisher flow control: a queue with more ready messages than this, whose consumers
# all wait for their connections' sockets to drain, slows its publishers down.
FLOW_BACKLOG = 10_000
FLOW_RESUME = FLOW_BACKLOG // 2   # ... until the backlog is back under this
# The memory alarm's accounting charges each message a queue holds (ready or unacked) its
# body, while in memory, plus this much for its bookkeeping (a queued 16-byte message
# measured about 370 bytes of resident memory: docs/benchmarks.md).
ENTRY_COST = 400


class Queue(QueueBase[QueueEntry, Consumer]):
    """A classic queue: ready messages in a deque, delivered to consumers in turn.

    Dispatch is driven by events (enqueue, ack, new consumer, qos change, flow, writer
    drained): `dispatch()` hands out messages until no consumer can take more.
    """

    def __init__(self, vhost: "VirtualHost", name: str, durable: bool = False,
                 exclusive_owner: "Connection | None" = None,
                 auto_delete: bool = False, arguments: dict | None = None,
                 store: QueueStore = MEMORY_STORE):
        super().__init__(vhost, name, durable, exclusive_owner, auto_delete, arguments,
                         store)
        self.stores_messages = store is not MEMORY_STORE   # else store calls are no-ops
        self.max_length = self.arguments.get("x-max-length")
        self.overflow = text_value(self.arguments.get("x-overflow", "drop-head"))
        self.message_ttl = self.arguments.get("x-message-ttl")
        self.dead_letter_exchange = text_value(self.arguments.get("x-dead-letter-exchange"))
        self.dead_letter_routing_key = text_value(
            self.arguments.get("x-dead-letter-routing-key"))
        self._may_expire = self.message_ttl is not None
        self._expiry_timer: Timer | None = None
        self.page_window = PAGE_WINDOW
        self.expires = self.arguments.get("x-expires")
        self._prioritised = False   # some consumer has an x-priority
        self._last_used = 0.0
        self._idle_timer: Timer | None = None
        self.ready: deque[QueueEntry] = deque()
        self._next_seq = 0

    @property
    def message_count(self) -> int:
        """Messages ready for delivery (unacked ones are not counted, as in RabbitMQ).
        Expired messages at the head are removed first."""
        if self._may_expire:
            self.expire(self.vhost.scheduler.clock())
        return len(self.ready)

    def enqueue(self, message: Message, publisher=None) -> bool:
        """Accept a routed message; False when a length limit refuses it
        (x-overflow reject-publish), which the publisher sees as a confirm nack.
        A publisher feeding a long backlog that no consumer can take is throttled."""
        limit = self.max_length
        if limit is not None and len(self.ready) >= limit and self.overflow != "drop-head":
            if self.overflow == "reject-publish-dlx":
                self._dead_letter_refused(message)
            return False
        self._next_seq += 1
        now = None
        entry = QueueEntry(message, self._next_seq)
        assert message.body is not None, "a message is enqueued with its body"
        body_size = len(message.body)
        self.held_bytes += body_size + ENTRY_COST
        if self.message_ttl is not None or message.has_expiration():
            now = self.vhost.scheduler.clock()
            entry.expires_at = self._expiry(message, now)
        if self.stores_messages:
            self.store.append(entry)
        ready = self.ready
        if not ready and self.consumers and limit is None and entry.expires_at is None:
            consumer = self._next_consumer()    # hand over at once: no queueing needed
            if consumer is not None:
                try:
                    consumer.channel.deliver(consumer, entry)
                    return True
                except Exception as error:   # queued below instead
                    _delivery_failed(consumer, error)
        ready.append(entry)
        if len(ready) > self.page_window:
            self.store.page_out(entry)
            if entry.message.body is None:
                self.held_bytes -= body_size
        if limit is not None:
            self._drop_overflow(limit)
        if self.consumers:
            self.dispatch(now)
        if entry.expires_at is not None:
            self._may_expire = True
            self._arm_expiry()
        if publisher is not None and len(ready) > FLOW_BACKLOG and self.consumers_stalled():
            publisher.throttle(self)
        return True

    def restore(self, recovered) -> None:
        """Load messages recovered from the queue file (in seq order). A record without
        a body (recovered with load_bodies=False) is paged in when delivered. Their TTL,
        if any, counts again from now: publish times are not stored."""
        now = self.vhost.scheduler.clock()
        for record in recovered:
            message = Message(record.exchange, record.routing_key, record.properties,
                              record.body)
            entry = QueueEntry(message, record.seq, record.redelivered)
            message._persistent = True
            self.held_bytes += _held_size(entry)
            if self.message_ttl is not None or message.has_expiration():
                entry.expires_at = self._expiry(message, now)
                self._may_expire = True
            self.ready.append(entry)
            self._next_seq = record.seq
        self._arm_expiry()

    def _expiry(self, message: Message, now: float) -> float | None:
        """When the message expires: the queue's TTL or the message's, whichever is
        shorter (milliseconds in AMQP, seconds on the clock)."""
        ttl = self.message_ttl
        message_ttl = message.expiration_ms()
        if message_ttl is not None:
            ttl = message_ttl if ttl is None else min(ttl, message_ttl)
        return None if ttl is None else now + ttl / 1000

    def _drop_overflow(self, limit: int) -> None:
        """x-overflow drop-head: discard the oldest ready messages beyond the limit."""
        ready = self.ready
        dropped = []
        while len(ready) > limit:
            dropped.append(ready.popleft())
        self.discard(dropped, "maxlen")

    def dispatch(self, now: float | None = None) -> None:
        """Hand ready messages to consumers that can take them, in turn. `now` is the
        clock reading that expiry is judged by (a fresh one when None)."""
        ready = self.ready
        consumers = self.consumers
        if self._may_expire:
            self.expire(self.vhost.scheduler.clock() if now is None else now)
        while ready and consumers:
            if self._may_expire and ready[0].expires_at is not None:
                self.expire(self.vhost.scheduler.clock() if now is None else now)
                if not ready:
                    return
            consumer = self._next_consumer()
            if consumer is None:
                return
            entry = ready.popleft()
            if entry.message.body is None:
                self._page_in(entry)
            try:
                consumer.channel.deliver(consumer, entry)
            except Exception as error:
                ready.appendleft(entry)
                _delivery_failed(consumer, error)

    def _next_consumer(self) -> Consumer | None:
        """The consumer to serve next: round-robin among those that can take a message,
        highest x-priority first (lower ones get messages only while every higher one
        is blocked, as in RabbitMQ)."""
        consumers = self.consumers
        if not self._prioritised:
            for _ in range(len(consumers)):
                consumer = consumers[0]
                consumers.rotate(-1)
                if consumer.channel.can_deliver(consumer):
                    return consumer
            return None
        for index, consumer in enumerate(consumers):
            if consumer.channel.can_deliver(consumer):
                del consumers[index]
                self._insert_by_priority(consumer)   # to the end of its priority group
                return consumer
        return None

    def _insert_by_priority(self, consumer: Consumer) -> None:
        consumers = self.consumers
        for index, other in enumerate(consumers):
            if other.priority < consumer.priority:
                consumers.insert(index, consumer)
                return
        consumers.append(consumer)

    def take(self) -> QueueEntry | None:
        """The head message for Basic.Get, or None when the queue is empty."""
        self.touch()
        if self._may_expire:
            self.expire(self.vhost.scheduler.clock())
        if not self.ready:
            return None
        entry = self.ready.popleft()
        if entry.message.body is None:
            self._page_in(entry)
        return entry

    def _page_in(self, entry: QueueEntry) -> None:
        self.store.page_in(entry)
        assert entry.message.body is not None, "page_in gives the body back"
        self.held_bytes += len(entry.message.body)

    def expire(self, now: float) -> None:
        """Drop (or dead-letter) expired messages at the head, as RabbitMQ does:
        a message with its own shorter TTL behind a longer-lived one waits its turn."""
        ready = self.ready
        expired = []
        while ready and ready[0].expires_at is not None and ready[0].expires_at < now:
            expired.append(ready.popleft())
        if expired:
            self.discard(expired, "expired")

    def _arm_expiry(self) -> None:
        """Make sure a timer fires when the head message expires."""
        ready = self.ready
        if not ready or ready[0].expires_at is None or self.deleted:
            return
        when = ready[0].expires_at
        timer = self._expiry_timer
        if timer is not None and not timer.cancelled and timer.when <= when:
            return
        if timer is not None:
            timer.cancel()
        self._expiry_timer = self.vhost.scheduler.call_at(when, self._expiry_due)

    def _expiry_due(self) -> None:
        self._expiry_timer = None
        if not self.deleted:
            self.expire(self.vhost.scheduler.clock())
            self._arm_expiry()

    def discard(self, entries: list[QueueEntry], reason: str) -> None:
        """Messages leave the queue for good without being acked: rejected, expired or
        over the length limit. They go to the dead-letter exchange when there is one."""
        for entry in entries:
            self.held_bytes -= _held_size(entry)
            self.store.settle(entry)
        exchange = self._dead_letter_exchange()
        if exchange is None or not entries:
            return
        now = datetime.datetime.now(datetime.timezone.utc)
        for entry in entries:
            if entry.message.body is None:
                self.store.page_in(entry)
            self._republish(exchange, entry.message, reason, now)

    def _dead_letter_refused(self, message: Message) -> None:
        exchange = self._dead_letter_exchange()
        if exchange is not None:
            self._republish(exchange, message, "maxlen",
                            datetime.datetime.now(datetime.timezone.utc))

    def _dead_letter_exchange(self):
        name = self.dead_letter_exchange
        return None if name is None else self.vhost.exchanges.get(name)

    def _republish(self, exchange, message: Message, reason: str, now) -> None:
        """Dead-letter one message. When that fails, the message is dropped, as if the
        queue had no dead-letter exchange, and the failure is logged: the queue and
        whoever triggered the dead-lettering carry on."""
        try:
            dead = dead_letter_message(message, self.name, reason, exchange.name,
                                       self.dead_letter_routing_key, now)
            if dead is not None:
                for queue in self.vhost.route(exchange, dead):
                    queue.enqueue(dead)
        except Exception as error:
            log.error("event=dead_letter_failed vhost=%r queue=%r reason=%s", self.vhost.name,
                      self.name, reason, exc_info=error)

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
        if self._may_expire:
            self._arm_expiry()

    def settle(self, entry: QueueEntry) -> None:
        """A delivered message was acked or discarded (or delivered with no_ack)."""
        assert entry.message.body is not None, "delivered messages are in memory"
        self.held_bytes -= len(entry.message.body) + ENTRY_COST
        if self.stores_messages:
            self.store.settle(entry)

    def purge(self) -> int:
        count = len(self.ready)
        for entry in self.ready:
            self.held_bytes -= _held_size(entry)
            self.store.settle(entry)
        self.ready.clear()
        return count

    def make_consumer(self, tag: str, channel: "Channel", no_ack: bool, exclusive: bool,
                      prefetch: int, arguments: dict) -> Consumer:
        return Consumer(tag, channel, self, no_ack, exclusive, prefetch, arguments)

    def drop_messages(self) -> int:
        """The queue is deleted: let go of its messages; how many were ready."""
        return self.purge()

    def add_consumer(self, consumer: Consumer) -> None:
        if consumer.priority:
            self._prioritised = True
        self._insert_by_priority(consumer)
        self.dispatch()

    def touch(self) -> None:
        """The queue was used (declared, read by Basic.Get, lost its last consumer):
        x-expires counts its idle time from now."""
        if self.expires is None:
            return
        self._last_used = self.vhost.scheduler.clock()
        if self._idle_timer is None:
            self._arm_idle_timer(self._last_used + self.expires / 1000)

    def _arm_idle_timer(self, when: float) -> None:
        self._idle_timer = self.vhost.scheduler.call_at(when, self._idle_timer_due)

    def _idle_timer_due(self) -> None:
        """x-expires: delete the queue once it has had no consumer, no Basic.Get and no
        redeclaration for the whole period (as RabbitMQ does)."""
        self._idle_timer = None
        if self.deleted or self.consumers:
            return
        assert self.expires is not None, "only queues with x-expires arm the timer"
        deadline = self._last_used + self.expires / 1000
        if self.vhost.scheduler.clock() >= deadline:
            self.vhost.delete_queue(self)
        else:
            self._arm_idle_timer(deadline)

    def consumers_stalled(self) -> bool:
        """Whether the queue has consumers and every one waits for its connection's
        socket (the clients read slower than the queue is fed)."""
        for consumer in self.consumers:     # a loop: called for every publish to a
            if consumer.channel.connection.transport.writable:     # long backlog
                return False
        return bool(self.consumers)


def _delivery_failed(consumer: Consumer, error: Exception) -> None:
    """The consumer's connection pays for a delivery that raised, not the connection
    whose publish or ack triggered it; the message stays in the queue."""
    consumer.channel.connection.fail(error)


def _held_size(entry: QueueEntry) -> int:
    """What the memory alarm's accounting charges for a message while a queue holds it."""
    body = entry.message.body
    return ENTRY_COST if body is None else ENTRY_COST + len(body)


def _by_seq(entry: QueueEntry) -> int:
    return entry.seq


def _insertion_point(ready: deque, seq: int) -> int:
    for index, entry in enumerate(ready):
        if entry.seq > seq:
            return index
    return len(ready)
