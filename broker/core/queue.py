"""Classic queues: FIFO delivery, round-robin dispatch, requeue.

The queue keeps the hot path (enqueue, dispatch, _next_consumer, take, settle, requeue)
and the hooks a priority or quorum queue overrides. Its other concerns are
collaborators, by composition: the backlog behind the entry window and the reads of
paged-out bodies (backlog.py, no back pointer), its recovery, body reads and purge
(queue_paging.py), the TTL and x-expires timers (queue_expiry.py, no back pointer),
the length limits (queue_limits.py), dead-lettering (dead_letter.py) and the order of
prioritised or single active consumers (consumer_selection.py).
"""

from collections import deque

from . import queue_paging
from .backlog import (
    ENTRY_COST, ENTRY_WINDOW, FLOW_BACKLOG, KEPT_IN_PARTS, READ_AHEAD, HeadOnDisk,
    PagedOut,
)
from .consumer_selection import ConsumerSelection, all_stalled
from .dead_letter import DeadLettering
from .message import EXPIRATION_BIT, Message, QueueEntry, body_size
from .message_store import MEMORY_STORE
from .policy import classic_queue_settings
from .ports import QueueStore
from .queue_base import ClientConnection, Consumer, ConsumerChannel, QueueBase, QueueHost
from .queue_expiry import Expiry, expiry_time
from .queue_limits import count_ready_bytes, drop_overflow, would_overflow


class Queue(QueueBase[QueueEntry, Consumer]):
    """A classic queue: ready messages in a deque, delivered to consumers in turn.

    Dispatch is driven by events (enqueue, ack, new consumer, qos change, flow, writer
    drained): `dispatch()` hands out messages until no consumer can take more.
    """

    # Whether messages behind the entry window wait in the tail's runs (a priority
    # queue keeps every ready message in its `ready`).
    tail_in_parts = True

    def __init__(self, vhost: QueueHost, name: str, durable: bool = False,
                 exclusive_owner: ClientConnection | None = None,
                 auto_delete: bool = False, arguments: dict | None = None,
                 store: QueueStore = MEMORY_STORE):
        super().__init__(vhost, name, durable, exclusive_owner, auto_delete, arguments,
                         store)
        self.stores_messages = store is not MEMORY_STORE   # else store calls are no-ops
        # Until a policy applies (apply_policy), the settings are the arguments'.
        settings = classic_queue_settings(self.arguments, {})
        self.max_length = settings.max_length
        self.max_length_bytes = settings.max_length_bytes
        self.ready_bytes = 0    # bodies of the ready messages, counted under a byte limit
        self.overflow = settings.overflow
        self.message_ttl = settings.message_ttl
        self.dead_lettering = DeadLettering(self, settings.dead_letter_exchange,
                                           settings.dead_letter_routing_key)
        self._may_expire = self.message_ttl is not None
        self.expiry = Expiry(vhost.scheduler, settings.expires, self._expiry_due,
                             self._idle_timer_due)
        self.entry_window = ENTRY_WINDOW
        # Some consumer has an x-priority, or (x-single-active-consumer) only the first
        # one is served: either way not plain round-robin, but the selection's choice.
        self._prioritised = self.single_active
        self._selection = ConsumerSelection(self.consumers, self.single_active)
        self.ready: deque[QueueEntry] = deque()
        self._next_seq = 0
        # Ready messages the read-ahead keeps in `ready`: enough to hide a disk read
        # when the store pages bodies out, else the entry window.
        self._paged = PagedOut(READ_AHEAD if self.stores_messages else ENTRY_WINDOW)

    @property
    def page_window(self) -> int:
        """Ready messages beyond this many keep their bodies only on disk (when the
        store can page them out)."""
        return self._paged.page_window

    @page_window.setter
    def page_window(self, window: int) -> None:
        self._paged.page_window = window
        self.entry_window = min(window, ENTRY_WINDOW)

    @property
    def message_count(self) -> int:
        """Messages ready for delivery (unacked ones are not counted, as in RabbitMQ).
        Expired messages at the head are removed first."""
        if self._may_expire:
            self.expire(self.vhost.scheduler.clock())
        return self.backlog

    @property
    def bookkeeping_bytes(self) -> int:
        """What held_bytes charges the ready messages beyond their bodies in memory."""
        return ENTRY_COST * self.backlog - self._paged.saved_bytes

    @property
    def backlog(self) -> int:
        """The ready messages: in `ready` and behind the page window."""
        return len(self.ready) + self._paged.tail_count

    @property
    def published(self) -> int:
        """The last sequence number given (restored from the store on recovery)."""
        return self._next_seq

    def enqueue(self, message: Message, publisher=None) -> bool:
        """Accept a routed message; False when a length limit refuses it
        (x-overflow reject-publish), which the publisher sees as a confirm nack.
        A publisher feeding a long backlog that no consumer can take is throttled."""
        limit = self.max_length
        byte_limit = self.max_length_bytes
        limited = limit is not None or byte_limit is not None
        body = message.body
        assert body is not None, "a message is enqueued with its body"
        size = len(body)
        if limited and self.overflow != "drop-head" and would_overflow(self, size):
            if self.overflow == "reject-publish-dlx":
                self.dead_lettering.refused(message)
            return False
        seq = self._next_seq + 1
        self._next_seq = seq
        ready = self.ready
        properties = message.properties
        if (ready and not limited and self.tail_in_parts and not self.stores_messages
                and (self._paged.tail or len(ready) >= self.entry_window)
                and self.message_ttl is None
                and not (properties and properties[0] & EXPIRATION_BIT)
                and type(message) in KEPT_IN_PARTS):
            # Behind the entry window, in a queue without a store: kept in parts at
            # once, without making a QueueEntry (about 1,900 instructions, callgrind).
            self.held_bytes += size + ENTRY_COST - self._paged.append_parts(message, seq)
            if self.consumers:
                self.dispatch()
            if publisher is not None and self.backlog > FLOW_BACKLOG \
                    and all_stalled(self.consumers):
                publisher.throttle(self)
            return True
        now = None
        expires_at = None
        # Message.has_expiration() inlined: the call cost ~1,200 instructions per message
        # and queue (callgrind, bench/core_hot_path.py).
        if self.message_ttl is not None or (properties and properties[0] & EXPIRATION_BIT):
            now = self.vhost.scheduler.clock()
            expires_at = expiry_time(self.message_ttl, message, now)
        consumer = None
        if not ready and not limited and expires_at is None and self.consumers:
            consumer = self._next_consumer()    # hand over at once: no queueing needed
            if (consumer is not None and consumer.no_ack
                    and not self.stores_messages):
                # Nothing of it to keep: handed over without a QueueEntry (about
                # 2,200 instructions less, callgrind, bench/core_hot_path.py).
                try:
                    consumer.channel.deliver_at_once(consumer, message)
                except Exception as error:   # queued below instead
                    _delivery_failed(consumer, error)
                    consumer = None
                else:
                    return True
        entry = QueueEntry(message, seq, False, expires_at)
        if self.stores_messages:
            self.store.append(entry)
        if consumer is not None:
            try:
                consumer.channel.deliver(consumer, entry)
            except Exception as error:   # queued below instead
                _delivery_failed(consumer, error)
            else:
                # settle() inline: a no-ack delivery (to a queue with a store, here) is
                # done with at once, so its bytes are never counted as held.
                if consumer.no_ack:
                    self.store.settle(entry)
                else:
                    self.held_bytes += size + ENTRY_COST
                    if self.stores_messages:
                        self.store.delivered(entry)     # it awaits its ack
                return True
        self.held_bytes += size + ENTRY_COST
        if len(ready) < self.entry_window and not self._paged.tail:
            ready.append(entry)
        else:
            self._queue_beyond_window(entry, size)
        if byte_limit is not None:
            self.ready_bytes += size
        if limited:
            drop_overflow(self)
        if self.consumers:
            self.dispatch(now)
        if entry.expires_at is not None:
            self._may_expire = True
            self._arm_expiry()
        if (publisher is not None and self.backlog > FLOW_BACKLOG
                and all_stalled(self.consumers)):
            publisher.throttle(self)
        return True

    def _queue_beyond_window(self, entry: QueueEntry, size: int) -> None:
        """A message beyond the entry window goes to the tail; beyond the page window,
        its body stays only on disk when the store can page it out. A message kept in
        memory shares the property block of the one before when they are equal (36
        bytes less a message in a deep backlog of alike transient messages)."""
        message = entry.message
        paged = self._paged
        if message.properties == paged.last_properties:
            message.properties = paged.last_properties
        else:
            paged.last_properties = message.properties
        if len(self.ready) + paged.tail_count >= paged.page_window:
            self.store.page_out(entry)
            if entry.message.body is None:
                self.held_bytes -= size
        # charged RUN_ENTRY_COST or MEMORY_RUN_COST while in a run
        self.held_bytes -= paged.append(entry)

    def _place_restored(self, entry: QueueEntry) -> None:
        """A recovered message, in seq order: a paged-out one goes to the tail (and
        every one after it)."""
        if entry.message.body is None or self._paged.tail:
            self.held_bytes -= self._paged.append(entry)    # charged less in a run
        else:
            self.ready.append(entry)

    def restore(self, recovered) -> None:
        """Load messages recovered from the queue file (queue_paging.restore)."""
        queue_paging.restore(self, recovered)

    def apply_policy(self, definition: dict) -> None:
        """The policy in force changed (broker/core/policy.py): take the settings it
        gives with the arguments, in the order RabbitMQ applies them. An unused queue's
        expiry counts again from now; a new message-ttl applies to messages published
        from now on (those queued keep the expiry they got); lower length limits drop,
        or dead-letter, the oldest messages at once when the overflow mode, before or
        after the change, is drop-head; clearing overflow restores drop-head."""
        settings = classic_queue_settings(self.arguments, definition)
        self.expiry.set_expires(settings.expires)
        self.dead_lettering.exchange = settings.dead_letter_exchange
        self.dead_lettering.routing_key = settings.dead_letter_routing_key
        self.message_ttl = settings.message_ttl
        self._may_expire = self._may_expire or settings.message_ttl is not None
        self.max_length = settings.max_length
        counted = self.max_length_bytes is not None
        self.max_length_bytes = settings.max_length_bytes
        if not counted:
            count_ready_bytes(self)
        drop_overflow(self)     # the new limits under the overflow mode so far ...
        self.overflow = settings.overflow
        drop_overflow(self)     # ... then under the new mode
        if self.consumers:
            self.dispatch()

    def _tail(self):
        """The ready messages behind those in `ready`, in order (entries made for the
        occasion where they are kept in runs)."""
        return self._paged.entries()

    def ready_entries(self):
        """Every ready message in order (the inspection's peek); those paged out have
        no body."""
        yield from self.ready
        yield from self._tail()

    def dispatch(self, now: float | None = None) -> None:
        """Hand ready messages to consumers that can take them, in turn. `now` is the
        clock reading that expiry is judged by (a fresh one when None)."""
        ready = self.ready
        consumers = self.consumers
        counts_bytes = self.max_length_bytes is not None
        if self._may_expire:
            self.expire(self.vhost.scheduler.clock() if now is None else now)
        while True:
            while ready and consumers:
                if self._may_expire and ready[0].expires_at is not None:
                    self.expire(self.vhost.scheduler.clock() if now is None else now)
                    if not ready:
                        break
                if ready[0].message.body is None:
                    break       # being read: the store calls back when it is in memory
                consumer = self._next_consumer()
                if consumer is None:
                    break
                entry = ready.popleft()
                try:
                    consumer.channel.deliver(consumer, entry)
                except Exception as error:
                    ready.appendleft(entry)
                    _delivery_failed(consumer, error)
                    continue
                if consumer.no_ack:
                    self.settle(entry)
                elif self.stores_messages:
                    self.store.delivered(entry)     # it awaits its ack
                if counts_bytes:
                    self.ready_bytes -= body_size(entry.message)
            if not (self._paged.tail and self._read_ahead() and consumers):
                return

    def _next_consumer(self) -> Consumer | None:
        """The consumer to serve next: round-robin among those that can take a message,
        highest x-priority first (lower ones get messages only while every higher one
        is blocked, as in RabbitMQ); with x-single-active-consumer, the first or none."""
        consumers = self.consumers
        if not self._prioritised:
            # Each consumer is asked at most once. A countdown, not `for _ in range(...)`:
            # the range and its iterator cost about 1,200 instructions per message
            # (callgrind, bench/core_hot_path.py).
            untried = len(consumers)
            while untried:
                consumer = consumers[0]
                consumers.rotate(-1)
                if consumer.channel.can_deliver(consumer):
                    return consumer
                untried -= 1
            return None
        return self._selection.next()

    def take(self) -> QueueEntry | None:
        """The head message for Basic.Get, or None when the queue is empty. Raises
        HeadOnDisk, before anything changed, while the head's body is being read."""
        self.expiry.touch()
        if self._may_expire:
            self.expire(self.vhost.scheduler.clock())
        ready = self.ready
        if not ready:
            if not self._paged.tail:
                return None
            self._read_ahead()
        if ready[0].message.body is None:
            self._read_ahead()
            raise HeadOnDisk(self)
        entry = ready.popleft()
        if self.max_length_bytes is not None:
            self.ready_bytes -= body_size(entry.message)
        if self._paged.tail:
            self._read_ahead()
        return entry

    def wake_when_read(self, callback) -> None:
        """Call `callback()` when the next read of bodies finished (HeadOnDisk)."""
        self._paged.waiters.append(callback)

    def _read_ahead(self) -> bool:
        """Move the tail's next messages into `ready` (PagedOut.fill_ready). Whether
        that brought a message in memory to an empty `ready`."""
        ready = self.ready
        was_empty = not ready
        self.held_bytes += self._paged.fill_ready(ready, self.store, self._bodies_read)
        return was_empty and bool(ready) and ready[0].message.body is not None

    def _bodies_read(self, entries: list[QueueEntry], bodies: list) -> None:
        """The store read paged-out bodies (queue_paging.bodies_read)."""
        queue_paging.bodies_read(self, entries, bodies)

    def _leaves_ready(self, entry: QueueEntry) -> bool:
        """A paged-out entry left the ready queue from its head (expired, over the
        length limit): its body is no longer needed for a delivery. Whether a read of
        it is in flight (it is not when it came straight from the tail)."""
        return self._paged.reading.pop(entry.seq, None) is not None

    def expire(self, now: float) -> None:
        """Drop (or dead-letter) expired messages at the head, as RabbitMQ does:
        a message with its own shorter TTL behind a longer-lived one waits its turn."""
        ready = self.ready
        expired = []
        while ready and ready[0].expires_at is not None and ready[0].expires_at < now:
            expired.append(ready.popleft())
        if not ready and self._paged.tail:
            self._paged.expired_head(now, expired)
        if expired:
            if self.max_length_bytes is not None:
                self.ready_bytes -= sum(body_size(entry.message) for entry in expired)
            self.discard(expired, "expired")

    def _arm_expiry(self) -> None:
        """Make sure the expiry timer fires when the head message expires."""
        head = self._paged.head(self.ready)
        if head is not None and head.expires_at is not None and not self.deleted:
            self.expiry.arm(head.expires_at)

    def _expiry_due(self) -> None:
        if not self.deleted:
            self.expire(self.vhost.scheduler.clock())
            if not self.ready and self._paged.tail:
                self._read_ahead()      # what follows the expired ones, into `ready`
            self._arm_expiry()

    def discard(self, entries: list[QueueEntry], reason: str) -> None:
        """Messages leave the queue for good without being acked: rejected, expired or
        over the length limit (dead-lettered when the queue has a dead-letter
        exchange: DeadLettering.discard)."""
        self.dead_lettering.discard(entries, reason)

    def _republish(self, exchange, message: Message, reason: str, now) -> int | None:
        """Dead-letter one message (a quorum queue takes its delivery count off
        first): the number of queues it reached (DeadLettering.republish)."""
        return self.dead_lettering.republish(exchange, message, reason, now)

    def requeue(self, entries: list[QueueEntry], failed: bool = True) -> None:
        """Put unacked messages back, redelivered, where they were in the queue."""
        if self.deleted:
            return
        entries = sorted(entries, key=_by_seq)
        for entry in entries:
            entry.redelivered = True
        self._return_to_ready(entries)
        if self.max_length_bytes is not None:
            self.ready_bytes += sum(body_size(entry.message) for entry in entries)
        if self.max_length is not None or self.max_length_bytes is not None:
            drop_overflow(self)     # as RabbitMQ, which checks the limits on requeue
        self.dispatch()
        if self._may_expire:
            self._arm_expiry()

    def _return_to_ready(self, entries: list[QueueEntry]) -> None:
        """Requeued entries (in seq order) back into `ready`, which is always ordered
        by seq: each goes before the first ready message published after it, usually
        the head."""
        ready = self.ready
        if not ready or entries[-1].seq < ready[0].seq:
            ready.extendleft(reversed(entries))
        elif entries[0].seq > ready[-1].seq:    # queued anew (a quorum queue's returns)
            paged = self._paged
            if paged.tail:
                for entry in entries:
                    self.held_bytes -= paged.append(entry)    # charged less in a run
            else:
                ready.extend(entries)
        else:
            for entry in entries:
                ready.insert(_insertion_point(ready, entry.seq), entry)

    def settle(self, entry: QueueEntry) -> None:
        """A delivered message was acked or discarded (or delivered with no_ack)."""
        assert entry.message.body is not None, "delivered messages are in memory"
        self.held_bytes -= len(entry.message.body) + ENTRY_COST
        if self.stores_messages:
            self.store.settle(entry)

    def purge(self) -> int:
        return queue_paging.purge(self)

    def make_consumer(self, tag: str, channel: ConsumerChannel[ClientConnection],
                      no_ack: bool, exclusive: bool, prefetch: int,
                      arguments: dict) -> Consumer:
        return Consumer(tag, channel, self, no_ack, exclusive, prefetch, arguments)

    def drop_messages(self) -> int:
        return queue_paging.drop_messages(self)

    def add_consumer(self, consumer: Consumer) -> None:
        if consumer.priority:
            self._prioritised = True
        self._selection.add(consumer)
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        """x-single-active-consumer: when the active consumer goes, its successor
        takes over (ConsumerSelection.hand_over)."""
        consumers = self.consumers
        was_active = self.single_active and consumers and consumers[0] is consumer
        super().remove_consumer(consumer)
        if (was_active and consumers and not self.deleted
                and self._selection.hand_over(consumer, self._successor())):
            self.dispatch()

    def _successor(self) -> Consumer:
        """The waiting consumer with the highest x-priority, the first registered among
        equals, as in RabbitMQ 3.10's classic queues."""
        return max(self.consumers, key=_priority)

    def touch(self) -> None:
        """The queue was used (declared, read by Basic.Get, lost its last consumer):
        x-expires counts its idle time from now."""
        self.expiry.touch()

    def _idle_timer_due(self) -> None:
        """x-expires: delete the queue once it has had no consumer, no Basic.Get and no
        redeclaration for the whole period (as RabbitMQ does)."""
        if not (self.deleted or self.consumers) and self.expiry.unused_long_enough():
            self.vhost.delete_queue(self)



def _delivery_failed(consumer: Consumer, error: Exception) -> None:
    """The consumer's connection pays for a delivery that raised, not the connection
    whose publish or ack triggered it; the message stays in the queue."""
    consumer.channel.connection.fail(error)


def _priority(consumer: Consumer) -> int:
    return consumer.priority


def _by_seq(entry: QueueEntry) -> int:
    return entry.seq


def _insertion_point(ready: deque, seq: int) -> int:
    for index, entry in enumerate(ready):
        if entry.seq > seq:
            return index
    return len(ready)
