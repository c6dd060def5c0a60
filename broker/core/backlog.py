"""A classic queue's backlog: the ready messages queued behind its entry window, kept as
runs of parts rather than a QueueEntry each (TailRun, MemoryRun, in a PagedOut), the reads
of paged-out bodies, and what the memory alarm charges a message in each form.

No back pointer to the queue: the queue hands in its `ready` deque and its store where a
method needs them, and adds what a method returns to its `held_bytes`.
"""

from array import array
from collections import deque
from typing import Callable, Protocol

from .message import MADE_BY_OBJECT_NEW, Message, PublishedMessage, QueueEntry
from .ports import QueueStore

# Messages a MemoryRun can hold as parts and make again as a Message: a plain one, or one
# as the decoder made it (its channel and mandatory flag are done with once routed).
# Not a paged-out placeholder, nor one carrying CC/BCC routing keys.
KEPT_IN_PARTS = (Message, PublishedMessage)

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


class ReadsBodies(Protocol):
    """What HeadOnDisk names: the queue whose head message is being read."""

    name: str

    def wake_when_read(self, callback: Callable[[], None]) -> None: ...


class HeadOnDisk(Exception):
    """Basic.Get found the head message's body still on disk. The queue is reading it;
    `queue.wake_when_read(callback)` calls back once a read finished, to try again."""

    def __init__(self, queue: ReadsBodies):
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
        self.read_ahead = read_ahead        # fill_ready keeps this many in `ready`
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

    def head(self, ready: deque[QueueEntry]) -> QueueEntry | None:
        """The first ready message, in `ready` or else the tail's when it is an entry
        (a run's messages have no expiry)."""
        if ready:
            return ready[0]
        tail = self.tail
        return tail[0] if tail and isinstance(tail[0], QueueEntry) else None

    def expired_head(self, now: float, expired: list[QueueEntry]) -> None:
        """`ready` is empty (just recovered, or all expired): the messages at the head
        of the tail that expired before `now` leave it and join `expired` (only entries
        there can expire; they saved nothing against ENTRY_COST)."""
        tail = self.tail
        while tail:
            head = tail[0]
            if not (isinstance(head, QueueEntry) and head.expires_at is not None
                    and head.expires_at < now):
                return
            tail.popleft()
            self.tail_count -= 1
            expired.append(head)

    def fill_ready(self, ready: deque[QueueEntry], store: QueueStore,
                   on_read: Callable[[list, list], None]) -> int:
        """While `ready` has at most `read_ahead` messages (in memory or being read),
        move the tail's next ones into it, asking `store` for the bodies of those paged
        out (`on_read` gets them). What the moved messages are charged more, as entries
        now, than they were in runs."""
        tail = self.tail
        reading = self.reading
        limit = self.read_ahead
        charged = 0
        while tail and len(ready) <= limit:
            head = tail[0]
            if type(head) is MemoryRun:     # a batch in one call: bodies in memory
                moved = head.move_to(ready, READ_BATCH)
                if head.first == len(head.seqs):
                    tail.popleft()
                self.tail_count -= moved
                self.saved_bytes -= moved * _MEMORY_RUN_SAVING
                charged += moved * _MEMORY_RUN_SAVING
                continue
            batch = []
            for _ in range(min(READ_BATCH, self.tail_count)):
                entry, saved = self.popleft()
                charged += saved
                ready.append(entry)
                if entry.message.body is None:
                    reading[entry.seq] = entry
                    batch.append(entry)
            if batch:
                store.read_bodies(batch, on_read)
        return charged

    def bodies_arrived(self, entries: list[QueueEntry],
                       bodies: list) -> tuple[list[QueueEntry], int]:
        """The store read paged-out bodies: the entries still waiting for them, to be
        delivered or dead-lettered, get them (those that left the queue meanwhile,
        purged, expired or deleted, are skipped). The ready ones whose bodies could not
        be read, and the bytes of the bodies now in memory."""
        reading = self.reading
        dead_letter_reads = self.dead_letter_reads
        unreadable = []
        loaded = 0
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
                    continue    # dead-lettering drops it
            else:
                continue
            entry.message = entry.message.with_body(body)
            loaded += len(body)
        return unreadable, loaded


def held_size(entry: QueueEntry) -> int:
    """What the memory alarm's accounting charges for a message while a queue holds it."""
    body = entry.message.body
    return ENTRY_COST if body is None else ENTRY_COST + len(body)
