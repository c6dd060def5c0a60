"""Classic queues: FIFO delivery, round-robin dispatch, requeue."""

import datetime
import logging
from array import array
from collections import deque
from typing import TYPE_CHECKING

from .message_store import MEMORY_STORE
from .ports import QueueStore

from .dead_letter import dead_letter_message
from .message import (
    EXPIRATION_BIT, MADE_BY_OBJECT_NEW, Message, PagedOutPlaceholders, PublishedMessage,
    QueueEntry, body_size,
)
from .policy import classic_queue_settings
from .queue_base import Consumer, QueueBase

# Messages a MemoryRun can hold as parts and make again as a Message: a plain one, or one
# as the decoder made it (its channel and mandatory flag are done with once routed).
# Not a paged-out placeholder, nor one carrying CC/BCC routing keys.
KEPT_IN_PARTS = (Message, PublishedMessage)

if TYPE_CHECKING:
    from .channel import Channel
    from .connection import Connection
    from .scheduler import Timer
    from .vhost import VirtualHost

log = logging.getLogger("warren.queue")

PAGE_WINDOW = 10_000   # ready messages beyond this keep their bodies only on disk
# Ready messages beyond this many are kept in the queue's tail, as runs of arrays and
# lists rather than a QueueEntry each (whether their bodies are paged out or not).
ENTRY_WINDOW = 256
# Paged-out bodies are read back by the store, off the event loop, READ_BATCH at a time,
# while fewer than READ_AHEAD ready messages precede the first one still on disk.
READ_BATCH = 256
READ_AHEAD = 1024
# Publisher flow control: a queue with more ready messages than this, whose consumers
# all wait for their connections' sockets to drain, slows its publishers down.
FLOW_BACKLOG = 10_000
FLOW_RESUME = FLOW_BACKLOG // 2   # ... until the backlog is back under this
# The memory alarm's accounting charges each message a queue holds (ready or unacked) its
# body, while in memory, plus this much for its bookkeeping: its Message, QueueEntry,
# property block, seq and deque slot (220 bytes, bench/queued_memory.py) ...
ENTRY_COST = 220
# ... or this much for a paged-out message kept in a TailRun behind the page window: its
# seq, placeholder reference and queue file index entry (42 bytes,
# bench/queued_memory.py). A run's message kept in memory is charged ENTRY_COST (its
# Message object, about 100 bytes with the run's share, is overcharged).
RUN_ENTRY_COST = 42
# ... or this much for a message kept in memory in a MemoryRun: its seq and three
# references (route, property block, body), its share of a route, and a property block
# of its own (about 32 bytes with a shared block, 80 with a distinct 12-byte one,
# bench/queued_memory.py).
MEMORY_RUN_COST = 64
_RUN_SAVING = ENTRY_COST - RUN_ENTRY_COST
_MEMORY_RUN_SAVING = ENTRY_COST - MEMORY_RUN_COST


class HeadOnDisk(Exception):
    """Basic.Get found the head message's body still on disk. The queue is reading it;
    `queue.wake_when_read(callback)` calls back once a read finished, to try again."""

    def __init__(self, queue: "Queue"):
        super().__init__(queue.name)
        self.queue = queue


RUN_LENGTH = 4096   # paged-out messages one TailRun holds at most


class TailRun:
    """Consecutive messages queued behind the page window, kept as a seq and a message
    each rather than a QueueEntry and its seq int (16 bytes a message instead of 104):
    mostly paged-out ones, whose message is a placeholder shared by alike neighbours.
    They become QueueEntry objects when the read-ahead moves them into `ready`
    (`popleft`), from the head; a run's messages are never redelivered nor expire."""

    __slots__ = ("seqs", "messages", "first")

    def __init__(self):
        self.seqs = array("q")
        self.messages: list[Message] = []
        self.first = 0      # the messages before this one left the run

    def __len__(self) -> int:
        return len(self.seqs) - self.first

    def full(self) -> bool:
        return len(self.seqs) >= RUN_LENGTH

    def append(self, entry: QueueEntry) -> None:
        self.seqs.append(entry.seq)
        self.messages.append(entry.message)

    def popleft(self) -> QueueEntry:
        first = self.first
        self.first = first + 1
        return QueueEntry(self.messages[first], self.seqs[first])

    def entries(self):
        """The messages left, as QueueEntry objects made for the occasion (peek)."""
        for index in range(self.first, len(self.seqs)):
            yield QueueEntry(self.messages[index], self.seqs[index])


_NONES = [None] * RUN_LENGTH     # to let go of a run's bodies by the slice


class MemoryRun:
    """Consecutive messages queued behind the entry window with their bodies in memory,
    kept as their parts rather than a Message and a QueueEntry each: a seq in an array
    and references to the body, the property block and the route (exchange, routing key
    and persistence: a tuple shared by alike neighbours), 32 bytes a message instead of
    the Message's 80 and the entry's 104. `popleft` makes the Message and its entry
    again; a run's messages are never redelivered nor expire."""

    __slots__ = ("seqs", "bodies", "properties", "routes", "first")

    def __init__(self):
        self.seqs = array("q")
        self.bodies: list[bytes | None] = []
        self.properties: list[bytes] = []
        self.routes: list[tuple] = []
        self.first = 0      # the messages before this one left the run

    def __len__(self) -> int:
        return len(self.seqs) - self.first

    def popleft(self) -> QueueEntry:
        first = self.first
        self.first = first + 1
        entry = QueueEntry(self._message(first), self.seqs[first])
        self.bodies[first] = None       # the run lets go of the body at once
        return entry

    def move_to(self, ready: deque, count: int) -> int:
        """Make entries of the first `count` messages left (or all), append them to
        `ready` and let go of their bodies; how many moved. One loop with locals for
        the read-ahead's batch, rather than a popleft call each; the Message and the
        QueueEntry are made with object.__new__ and their slots set here, which costs
        about 800 instructions less a message than their __init__ calls (callgrind,
        bench/core_hot_path.py --backlog). Every slot must be set (message.py). The
        classes of a compiled build are made by their constructors, a native call."""
        first = self.first
        end = min(first + count, len(self.seqs))
        bodies = self.bodies
        append = ready.append
        if MADE_BY_OBJECT_NEW:
            new = object.__new__
            for seq, body, properties, (exchange, routing_key, persistent) in zip(
                    self.seqs[first:end], bodies[first:end], self.properties[first:end],
                    self.routes[first:end]):
                message = new(Message)
                message.exchange = exchange
                message.routing_key = routing_key
                message.properties = properties
                message.body = body
                message.decoded_cache = None
                message.persistent_cache = persistent
                entry = new(QueueEntry)
                entry.message = message
                entry.seq = seq
                entry.redelivered = False
                entry.expires_at = None
                append(entry)
        else:       # compiled: object.__new__ cannot make a compiled class
            for seq, body, properties, (exchange, routing_key, persistent) in zip(
                    self.seqs[first:end], bodies[first:end], self.properties[first:end],
                    self.routes[first:end]):
                message = Message(exchange, routing_key, properties, body)
                message.persistent_cache = persistent
                append(QueueEntry(message, seq))
        bodies[first:end] = _NONES[:end - first]
        self.first = end
        return end - first

    def _message(self, index: int) -> Message:
        exchange, routing_key, persistent = self.routes[index]
        message = Message(exchange, routing_key, self.properties[index],
                          self.bodies[index])
        message.persistent_cache = persistent
        return message

    def entries(self):
        """The messages left, as QueueEntry objects made for the occasion (peek)."""
        for index in range(self.first, len(self.seqs)):
            yield QueueEntry(self._message(index), self.seqs[index])


class PagedOut:
    """A queue's ready messages queued behind the page window (the tail), and the reads
    of paged-out bodies.

    One attribute of the queue rather than several: CPython 3.11 looks attributes up
    more slowly on objects with more than about 30 of them, and a queue's are on the hot
    path.
    """

    __slots__ = ("tail", "tail_count", "saved_bytes", "reading", "waiters",
                 "dead_letters", "dead_letter_reads", "last_properties", "last_route",
                 "page_window", "read_ahead")

    def __init__(self, read_ahead: int):
        self.page_window = PAGE_WINDOW      # Queue.page_window
        self.read_ahead = read_ahead        # Queue._read_ahead
        # The tail: ready messages behind those in `Queue.ready` (beyond the entry
        # window), in order, as runs and, between them, QueueEntry objects (redelivered
        # messages, messages with an expiry). Once a message was queued here, every
        # later one is too, until the read-ahead moved them all.
        self.tail: deque[QueueEntry | TailRun | MemoryRun] = deque()
        self.tail_count = 0                      # the messages in the tail
        # What the runs save the memory alarm's estimate against ENTRY_COST a message.
        self.saved_bytes = 0
        self.reading: dict[int, QueueEntry] = {}    # ready, being read, by seq
        self.waiters: list = []                     # Basic.Get calls (HeadOnDisk)
        # Dead-lettering waits for the bodies of paged-out messages, in order:
        # (entry, reason, time), and the seqs of those being read.
        self.dead_letters: deque = deque()
        self.dead_letter_reads: dict[int, QueueEntry] = {}
        # The property block of the last message queued beyond the window, which the
        # next one shares when equal (Queue._queue_beyond_window).
        self.last_properties = b""
        # The route (exchange, routing key, persistence) of the last message put in a
        # MemoryRun, which the next one shares when equal.
        self.last_route: tuple = ("", "", None)

    def append(self, entry: QueueEntry) -> int:
        """Queue `entry` at the end of the tail; what that saves against ENTRY_COST
        (held_bytes charges a message in a run less)."""
        tail = self.tail
        if entry.redelivered or entry.expires_at is not None:
            self.tail_count += 1
            tail.append(entry)      # a message with more to remember than its seq
            return 0
        message = entry.message
        body = message.body
        if type(message) in KEPT_IN_PARTS and body is not None:
            # kept in parts: not a placeholder nor one carrying CC/BCC routing keys
            return self.append_parts(message, entry.seq)
        self.tail_count += 1
        last = tail[-1] if tail else None
        if type(last) is not TailRun or last.full():
            last = TailRun()
            tail.append(last)
        last.append(entry)
        if body is not None:
            return 0
        self.saved_bytes += _RUN_SAVING
        return _RUN_SAVING

    def append_parts(self, message: Message, seq: int) -> int:
        """Queue a plain message with its body at the end of the tail, in a MemoryRun:
        its property block and route shared with the message before when alike. What
        that saves against ENTRY_COST. Written out in one function (a call costs about
        600 instructions, callgrind): every transient message queued behind the entry
        window passes here (Queue.enqueue, without making its QueueEntry)."""
        properties = message.properties
        if properties == self.last_properties:
            properties = self.last_properties
        else:
            self.last_properties = properties
        route = self.last_route
        if (route[1] != message.routing_key or route[0] != message.exchange
                or route[2] is not message.persistent_cache):
            route = self.last_route = (message.exchange, message.routing_key,
                                       message.persistent_cache)
        tail = self.tail
        last = tail[-1] if tail else None
        if type(last) is not MemoryRun or len(last.seqs) >= RUN_LENGTH:
            last = MemoryRun()
            tail.append(last)
        last.seqs.append(seq)
        last.bodies.append(message.body)
        last.properties.append(properties)
        last.routes.append(route)
        self.tail_count += 1
        self.saved_bytes += _MEMORY_RUN_SAVING
        return _MEMORY_RUN_SAVING

    def popleft(self) -> tuple[QueueEntry, int]:
        """The tail's first message (made an entry), which leaves it, and what it had
        saved against ENTRY_COST."""
        tail = self.tail
        self.tail_count -= 1
        head = tail[0]
        if isinstance(head, QueueEntry):
            tail.popleft()
            return head, 0
        entry = head.popleft()
        if not head:
            tail.popleft()
        if type(head) is MemoryRun:
            saved = _MEMORY_RUN_SAVING
        elif entry.message.body is None:
            saved = _RUN_SAVING
        else:
            return entry, 0
        self.saved_bytes -= saved
        return entry, saved

    def entries(self):
        """The tail's messages in order, as entries (made for the occasion in runs)."""
        for chunk in self.tail:
            if isinstance(chunk, QueueEntry):
                yield chunk
            else:
                yield from chunk.entries()

    def clear(self) -> None:
        self.tail.clear()
        self.tail_count = 0
        self.saved_bytes = 0


class Queue(QueueBase[QueueEntry, Consumer]):
    """A classic queue: ready messages in a deque, delivered to consumers in turn.

    Dispatch is driven by events (enqueue, ack, new consumer, qos change, flow, writer
    drained): `dispatch()` hands out messages until no consumer can take more.
    """

    # Whether messages behind the entry window wait in the tail's runs (a priority
    # queue keeps every ready message in its `ready`).
    tail_in_parts = True

    def __init__(self, vhost: "VirtualHost", name: str, durable: bool = False,
                 exclusive_owner: "Connection | None" = None,
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
        self.dead_letter_exchange = settings.dead_letter_exchange
        self.dead_letter_routing_key = settings.dead_letter_routing_key
        self._may_expire = self.message_ttl is not None
        self._expiry_timer: Timer | None = None
        self.entry_window = ENTRY_WINDOW
        self.expires = settings.expires
        # Some consumer has an x-priority, or (x-single-active-consumer) only the first
        # one is served: either way not plain round-robin.
        self._prioritised = self.single_active
        # x-single-active-consumer: the active consumer that went while it still held
        # unacked messages; its successor waits until they are all settled or back.
        self._handing_over: Consumer | None = None
        self._last_used = 0.0
        self._idle_timer: Timer | None = None
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
        if limited and self.overflow != "drop-head" and self._would_overflow(size):
            if self.overflow == "reject-publish-dlx":
                self._dead_letter_refused(message)
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
                    and self.consumers_stalled():
                publisher.throttle(self)
            return True
        now = None
        expires_at = None
        # Message.has_expiration() inlined: the call cost ~1,200 instructions per message
        # and queue (callgrind, bench/core_hot_path.py).
        if self.message_ttl is not None or (properties and properties[0] & EXPIRATION_BIT):
            now = self.vhost.scheduler.clock()
            expires_at = self._expiry(message, now)
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
                if not consumer.no_ack:
                    self.held_bytes += size + ENTRY_COST
                else:
                    self.store.settle(entry)
                return True
        self.held_bytes += size + ENTRY_COST
        if len(ready) < self.entry_window and not self._paged.tail:
            ready.append(entry)
        else:
            self._queue_beyond_window(entry, size)
        if byte_limit is not None:
            self.ready_bytes += size
        if limited:
            self._drop_overflow()
        if self.consumers:
            self.dispatch(now)
        if entry.expires_at is not None:
            self._may_expire = True
            self._arm_expiry()
        if publisher is not None and self.backlog > FLOW_BACKLOG and self.consumers_stalled():
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
        # charged RUN_ENTRY_COST or MEMORY_RUN_COST while in a run (_to_tail inlined)
        self.held_bytes -= paged.append(entry)

    def _to_tail(self, entry: QueueEntry) -> None:
        # charged RUN_ENTRY_COST or MEMORY_RUN_COST while in a run
        self.held_bytes -= self._paged.append(entry)

    def _from_tail(self) -> QueueEntry:
        """The tail's first message, which leaves it (charged ENTRY_COST again)."""
        entry, saved = self._paged.popleft()
        self.held_bytes += saved
        return entry

    def _place_restored(self, entry: QueueEntry) -> None:
        """A recovered message, in seq order: a paged-out one goes to the tail (and
        every one after it)."""
        if entry.message.body is None or self._paged.tail:
            self._to_tail(entry)
        else:
            self.ready.append(entry)

    def restore(self, recovered) -> None:
        """Load messages recovered from the queue file (in seq order). A record without
        a body (recovered with load_bodies=False) is read back before it is delivered.
        Their TTL, if any, counts again from now: publish times are not stored."""
        now = self.vhost.scheduler.clock()
        placeholders = PagedOutPlaceholders()
        for record in recovered:
            message = (Message(record.exchange, record.routing_key, record.properties,
                               record.body) if record.body is not None else
                       placeholders.placeholder(record.exchange, record.routing_key,
                                                record.properties, record.body_size))
            entry = QueueEntry(message, record.seq, record.redelivered)
            message.persistent_cache = True
            self.held_bytes += _held_size(entry)
            if self.message_ttl is not None or message.has_expiration():
                entry.expires_at = self._expiry(message, now)
                self._may_expire = True
            self._place_restored(entry)
        # Seqs continue after the last one the store ever had, acked ones included (the
        # queue file refuses a seq it has seen).
        self._next_seq = self.store.last_seq
        self._count_ready_bytes()
        self._arm_expiry()

    def _expiry(self, message: Message, now: float) -> float | None:
        """When the message expires: the queue's TTL or the message's, whichever is
        shorter (milliseconds in AMQP, seconds on the clock)."""
        ttl = self.message_ttl
        message_ttl = message.expiration_ms()
        if message_ttl is not None:
            ttl = message_ttl if ttl is None else min(ttl, message_ttl)
        return None if ttl is None else now + ttl / 1000

    def _would_overflow(self, size: int) -> bool:
        """Whether one more message of `size` bytes would take the queue over a length
        limit (x-overflow reject-publish and reject-publish-dlx refuse it)."""
        limit = self.max_length
        byte_limit = self.max_length_bytes
        return ((limit is not None and self.backlog >= limit)
                or (byte_limit is not None and self.ready_bytes + size > byte_limit))

    def _drop_overflow(self) -> None:
        """x-overflow drop-head: discard the oldest ready messages while the queue is
        over max-length or max-length-bytes (the reject-publish modes drop none)."""
        if self.overflow != "drop-head":
            return
        ready = self.ready
        paged = self._paged
        limit = self.max_length
        byte_limit = self.max_length_bytes
        if limit is None:
            limit = self.backlog
        dropped = []
        while (ready or paged.tail) and (
                len(ready) + paged.tail_count > limit
                or (byte_limit is not None and self.ready_bytes > byte_limit)):
            entry = ready.popleft() if ready else self._from_tail()
            if byte_limit is not None:
                self.ready_bytes -= body_size(entry.message)
            dropped.append(entry)
        self.discard(dropped, "maxlen")

    def apply_policy(self, definition: dict) -> None:
        """The policy in force changed (broker/core/policy.py): take the settings it
        gives with the arguments, in the order RabbitMQ applies them. An unused queue's
        expiry counts again from now; a new message-ttl applies to messages published
        from now on (those queued keep the expiry they got); lower length limits drop,
        or dead-letter, the oldest messages at once when the overflow mode, before or
        after the change, is drop-head; clearing overflow restores drop-head."""
        settings = classic_queue_settings(self.arguments, definition)
        self._set_expires(settings.expires)
        self.dead_letter_exchange = settings.dead_letter_exchange
        self.dead_letter_routing_key = settings.dead_letter_routing_key
        self.message_ttl = settings.message_ttl
        self._may_expire = self._may_expire or settings.message_ttl is not None
        self.max_length = settings.max_length
        counted = self.max_length_bytes is not None
        self.max_length_bytes = settings.max_length_bytes
        if not counted:
            self._count_ready_bytes()
        self._drop_overflow()     # the new limits under the overflow mode so far ...
        self.overflow = settings.overflow
        self._drop_overflow()     # ... then under the new mode
        if self.consumers:
            self.dispatch()

    def _count_ready_bytes(self) -> None:
        """Under a byte limit, count the bodies of the ready messages from scratch."""
        self.ready_bytes = (0 if self.max_length_bytes is None else
                            sum(body_size(entry.message) for entry in self.ready)
                            + sum(body_size(entry.message) for entry in self._tail()))

    def _tail(self):
        """The ready messages behind those in `ready`, in order (entries made for the
        occasion where they are kept in runs)."""
        return self._paged.entries()

    def ready_entries(self):
        """Every ready message in order (the inspection's peek); those paged out have
        no body."""
        yield from self.ready
        yield from self._tail()

    def _set_expires(self, expires: int | None) -> None:
        """x-expires as a policy changed it: an unused queue's idle time counts from
        now (RabbitMQ restarts the timer whenever the queue's policy changes)."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self.expires = expires
        self.touch()

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
        if self.single_active:
            gone = self._handing_over
            if gone is not None:
                if gone.unacked:
                    return None     # its messages may come back ahead of the ready ones
                self._handing_over = None
            consumer = consumers[0]     # the active one
            return consumer if consumer.channel.can_deliver(consumer) else None
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
        """The head message for Basic.Get, or None when the queue is empty. Raises
        HeadOnDisk, before anything changed, while the head's body is being read."""
        self.touch()
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
        """While `ready` has at most `read_ahead` messages (in memory or being read),
        move the tail's next ones into it, asking the store for the bodies of those
        paged out. Whether that brought a message in memory to an empty `ready`."""
        paged = self._paged
        tail = paged.tail
        ready = self.ready
        reading = paged.reading
        limit = paged.read_ahead
        was_empty = not ready
        while tail and len(ready) <= limit:
            head = tail[0]
            if type(head) is MemoryRun:     # a batch in one call: bodies in memory
                moved = head.move_to(ready, READ_BATCH)
                if head.first == len(head.seqs):
                    tail.popleft()
                paged.tail_count -= moved
                paged.saved_bytes -= moved * _MEMORY_RUN_SAVING
                self.held_bytes += moved * _MEMORY_RUN_SAVING
                continue
            batch = []
            for _ in range(min(READ_BATCH, paged.tail_count)):
                entry = self._from_tail()
                ready.append(entry)
                if entry.message.body is None:
                    reading[entry.seq] = entry
                    batch.append(entry)
            if batch:
                self.store.read_bodies(batch, self._bodies_read)
        return was_empty and bool(ready) and ready[0].message.body is not None

    def _bodies_read(self, entries: list[QueueEntry], bodies: list) -> None:
        """The store read paged-out bodies (on the event loop). Entries that left the
        queue meanwhile (purged, expired, deleted) are skipped; then waiting Basic.Get
        calls go first, dead-letters next, consumers last."""
        paged = self._paged
        reading = paged.reading
        dead_letter_reads = paged.dead_letter_reads
        unreadable = []
        for entry, body in zip(entries, bodies):
            seq = entry.seq
            if reading.get(seq) is entry:
                del reading[seq]
                if body is None:
                    unreadable.append(entry)
                    continue
            elif dead_letter_reads.get(seq) is entry:
                del dead_letter_reads[seq]
                if body is None:
                    continue    # _send_dead_letters drops it
            else:
                continue
            entry.message = entry.message.with_body(body)
            self.held_bytes += len(body)
        if unreadable:
            self._forget_unreadable(unreadable)
        if paged.dead_letters:
            self._send_dead_letters()
        waiters, paged.waiters = paged.waiters, []
        for callback in waiters:
            callback()
        if not self.deleted:
            self.dispatch()

    def _forget_unreadable(self, entries: list[QueueEntry]) -> None:
        """Bodies the store could not read (it logged why): the messages leave the
        queue but stay in its file, so a restart finds them again if they are sound."""
        for entry in entries:
            self.ready.remove(entry)
            self.held_bytes -= ENTRY_COST
        self._count_ready_bytes()
        log.error("event=paged_messages_unreadable vhost=%r queue=%r count=%d hint=%r",
                  self.vhost.name, self.name, len(entries),
                  "they stay in the queue file; restart the broker to recover them")

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
            self._expire_tail(now, expired)
        if expired:
            if self.max_length_bytes is not None:
                self.ready_bytes -= sum(body_size(entry.message) for entry in expired)
            self.discard(expired, "expired")

    def _expire_tail(self, now: float, expired: list[QueueEntry]) -> None:
        """`ready` is empty (just recovered, or all expired): the expired messages at
        the head of the tail join `expired`."""
        head = self._head()
        while head is not None and head.expires_at is not None and head.expires_at < now:
            expired.append(self._from_tail())
            head = self._head()

    def _arm_expiry(self) -> None:
        """Make sure a timer fires when the head message expires."""
        head = self._head()
        if head is None or head.expires_at is None or self.deleted:
            return
        when = head.expires_at
        timer = self._expiry_timer
        if timer is not None and not timer.cancelled and timer.when <= when:
            return
        if timer is not None:
            timer.cancel()
        self._expiry_timer = self.vhost.scheduler.call_at(when, self._expiry_due)

    def _head(self) -> QueueEntry | None:
        """The first ready message, in `ready` or else the tail's when it is an entry
        (a run's messages have no expiry)."""
        if self.ready:
            return self.ready[0]
        tail = self._paged.tail
        return tail[0] if tail and isinstance(tail[0], QueueEntry) else None

    def _expiry_due(self) -> None:
        self._expiry_timer = None
        if not self.deleted:
            self.expire(self.vhost.scheduler.clock())
            if not self.ready and self._paged.tail:
                self._read_ahead()      # what follows the expired ones, into `ready`
            self._arm_expiry()

    def discard(self, entries: list[QueueEntry], reason: str) -> None:
        """Messages leave the queue for good without being acked: rejected, expired or
        over the length limit. They go to the dead-letter exchange when there is one,
        in order: those whose bodies are on disk once the store has read them back
        (until then they stay in the store, and so do those behind them)."""
        paged_out = [entry for entry in entries if entry.message.body is None]
        unread = [entry for entry in paged_out if not self._leaves_ready(entry)]
        if self._dead_letter_exchange() is None or not entries:
            for entry in entries:
                self.held_bytes -= _held_size(entry)
                self.store.settle(entry)
            return
        now = datetime.datetime.now(datetime.timezone.utc)
        paged = self._paged
        paged.dead_letters.extend((entry, reason, now) for entry in entries)
        reads = paged.dead_letter_reads
        for entry in paged_out:
            reads[entry.seq] = entry    # a read in flight for delivery serves too
        if unread:
            self.store.read_bodies(unread, self._bodies_read)
        self._send_dead_letters()

    def _send_dead_letters(self) -> None:
        """Dead-letter the waiting messages whose bodies are in memory, in order,
        up to the first one still being read. One that could not be read is dropped
        (it stays in the queue file; the store logged why)."""
        paged = self._paged
        waiting = paged.dead_letters
        reads = paged.dead_letter_reads
        exchange = None
        while waiting:
            entry, reason, now = waiting[0]
            if entry.message.body is None and entry.seq in reads:
                return
            waiting.popleft()
            self.held_bytes -= _held_size(entry)
            if entry.message.body is None:
                log.error("event=dead_letter_unreadable vhost=%r queue=%r seq=%d",
                          self.vhost.name, self.name, entry.seq)
                continue
            self.store.settle(entry)
            if exchange is None:
                exchange = self._dead_letter_exchange()
            if exchange is not None:
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
                observer = self.vhost.observer
                if observer is not None:
                    observer.dead_lettered(self, reason, dead)
                for queue in self.vhost.route(exchange, dead):
                    queue.enqueue(dead)
        except Exception as error:
            log.error("event=dead_letter_failed vhost=%r queue=%r reason=%s", self.vhost.name,
                      self.name, reason, exc_info=error)

    def requeue(self, entries: list[QueueEntry]) -> None:
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
            self._drop_overflow()     # as RabbitMQ, which checks the limits on requeue
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
            if self._paged.tail:
                for entry in entries:
                    self._to_tail(entry)
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
        count = self.backlog
        for entry in self.ready:
            self.held_bytes -= _held_size(entry)
            self.store.settle(entry)
        for entry in self._tail():
            self.held_bytes -= _held_size(entry)
            self.store.settle(entry)
        self.held_bytes += self._paged.saved_bytes
        self.ready.clear()
        self.ready_bytes = 0
        self._paged.clear()
        self._paged.reading.clear()    # reads in flight are dropped when they come back
        return count

    def make_consumer(self, tag: str, channel: "Channel", no_ack: bool, exclusive: bool,
                      prefetch: int, arguments: dict) -> Consumer:
        return Consumer(tag, channel, self, no_ack, exclusive, prefetch, arguments)

    def drop_messages(self) -> int:
        """The queue is deleted: let go of its messages; how many were ready.
        Dead-letters still waiting for their bodies are dropped with it."""
        self._paged.dead_letters.clear()
        self._paged.dead_letter_reads.clear()
        return self.purge()

    def add_consumer(self, consumer: Consumer) -> None:
        if self.single_active:
            self.consumers.append(consumer)    # waits, in order, unless the first
            self.dispatch()
            return
        if consumer.priority:
            self._prioritised = True
        self._insert_by_priority(consumer)
        self.dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        """x-single-active-consumer: when the active consumer goes, the waiting one
        with the highest x-priority (the first registered among equals) takes over,
        as in RabbitMQ 3.10's classic queues. While the one gone still has unacked
        messages, which may come back ahead of the ready ones, the new one is served
        nothing: from the moment the last of them is acked, rejected or requeued on.
        (Its Basic.Cancel and its channel's close are two round trips apart, and a
        dispatch in between, for another reason, must not hand it the ready ones.)"""
        consumers = self.consumers
        was_active = self.single_active and consumers and consumers[0] is consumer
        super().remove_consumer(consumer)
        if was_active and consumers and not self.deleted:
            self._promote(self._successor())
            if consumer.unacked:
                self._handing_over = consumer
            else:
                self.dispatch()

    def _successor(self) -> Consumer:
        return max(self.consumers, key=_priority)   # the first of the highest

    def _promote(self, consumer: Consumer) -> None:
        self.consumers.remove(consumer)
        self.consumers.appendleft(consumer)

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


def _priority(consumer: Consumer) -> int:
    return consumer.priority


def _by_seq(entry: QueueEntry) -> int:
    return entry.seq


def _insertion_point(ready: deque, seq: int) -> int:
    for index, entry in enumerate(ready):
        if entry.seq > seq:
            return index
    return len(ready)
