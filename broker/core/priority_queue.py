"""Priority queues (x-max-priority 1-255): classic queues that deliver the highest
message priority first, FIFO within a priority, as RabbitMQ 3.10's classic queues do.

A `PriorityQueue` is a classic `Queue` whose ready messages (and paged-out ones) are
kept in a `PriorityReady` instead of a deque: one deque per priority, read highest
first. Its paged-out messages stay QueueEntry objects in `ready` (their order needs
each one's priority), not in the classic queue's tail. `PriorityReady` offers the deque
operations the classic queue's code uses, so TTL, length limits, dead-lettering,
paging, Basic.Get and purge apply unchanged, in delivery order: expiry and drop-head
take the next message to be delivered, as RabbitMQ's priority queue does. Plain classic queues never see this module.
"""

from collections import deque
from typing import Iterator, Protocol

from amqp_codec import MalformedProperties
from amqp_codec.properties import priority

from .backlog import READ_AHEAD, READ_BATCH
from .message import QueueEntry
from .message_store import MEMORY_STORE
from .ports import QueueStore
from .queue import Queue
from .queue_base import ClientConnection, QueueHost

def max_priority(arguments: dict, least: int = 0) -> int:
    """The queue's highest message priority; 0 for a plain FIFO queue (no
    x-max-priority, or 0, which RabbitMQ 3.10 treats as a single priority). With
    `least` 1 (RabbitMQ 4.x) an x-max-priority of 0 is 1: two priorities."""
    value = arguments.get("x-max-priority")
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(least, min(value, 255))


def message_priority(entry: QueueEntry, highest: int) -> int:
    """The entry's priority property: 0 when absent, `highest` when above it. A block
    that cannot be read (RabbitMQ refuses it on publish) counts as 0 here, so that the
    queue's order never depends on a failure."""
    try:
        return min(priority(entry.message.properties), highest)
    except MalformedProperties:
        return 0


class OrderedReady(Protocol):
    """What `_read_ahead` needs of a queue's ordered structure of ready messages: a
    PriorityReady, or a quorum queue's QuorumReady (a Protocol: mypyc checks a class
    annotation at run time, and the two share no base)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> QueueEntry: ...

    def popleft(self) -> QueueEntry: ...

    def within(self, entry: QueueEntry, limit: int) -> bool: ...


class PriorityReady:
    """Queue entries in delivery order: highest priority first, by seq (publication
    order) within a priority. Supports the deque operations a classic queue uses."""

    __slots__ = ("highest", "levels", "used", "count")

    def __init__(self, highest: int):
        self.highest = highest
        self.levels: list[deque[QueueEntry]] = [deque() for _ in range(highest + 1)]
        self.used: list[int] = []    # priorities that ever held an entry, highest first
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[QueueEntry]:
        levels = self.levels
        for priority in self.used:
            yield from levels[priority]

    def __getitem__(self, index: int) -> QueueEntry:
        if index < 0:
            index += self.count
        for level in self._nonempty():
            if index < len(level):
                return level[index]
            index -= len(level)
        raise IndexError(index)

    def _nonempty(self) -> Iterator[deque[QueueEntry]]:
        levels = self.levels
        for priority in self.used:
            level = levels[priority]
            if level:
                yield level

    def _level(self, entry: QueueEntry) -> deque[QueueEntry]:
        priority = message_priority(entry, self.highest)
        level = self.levels[priority]
        if priority not in self.used:
            self.used.append(priority)
            self.used.sort(reverse=True)
        return level

    def append(self, entry: QueueEntry) -> None:
        """A newly published entry: last of its priority."""
        self._level(entry).append(entry)
        self.count += 1

    def appendleft(self, entry: QueueEntry) -> None:
        """The entry just taken from the head comes back (a delivery failed)."""
        self._level(entry).appendleft(entry)
        self.count += 1

    def put_back(self, entry: QueueEntry) -> None:
        """A requeued entry: back to its place among its priority, by seq."""
        level = self._level(entry)
        self.count += 1
        if not level or entry.seq < level[0].seq:
            level.appendleft(entry)
            return
        for index, other in enumerate(level):
            if other.seq > entry.seq:
                level.insert(index, entry)
                return
        level.append(entry)

    def popleft(self) -> QueueEntry:
        for level in self._nonempty():
            self.count -= 1
            return level.popleft()
        raise IndexError("pop from an empty PriorityReady")

    def remove(self, entry: QueueEntry) -> None:
        self._level(entry).remove(entry)
        self.count -= 1

    def clear(self) -> None:
        for level in self.levels:
            level.clear()
        self.count = 0

    def within(self, entry: QueueEntry, limit: int) -> bool:
        """Whether at most `limit` entries come before `entry` (which is here)."""
        levels = self.levels
        priority = message_priority(entry, self.highest)
        budget = limit
        for other in self.used:
            if other == priority:
                break
            budget -= len(levels[other])
            if budget < 0:
                return False
        level = levels[priority]
        return len(level) <= budget or level[budget].seq >= entry.seq


class PriorityQueue(Queue):
    """A classic queue with x-max-priority 1-255 (queue_types.kind_of picks this class
    then)."""

    tail_in_parts = False

    def __init__(self, vhost: QueueHost, name: str, durable: bool = False,
                 exclusive_owner: ClientConnection | None = None,
                 auto_delete: bool = False, arguments: dict | None = None,
                 store: QueueStore = MEMORY_STORE):
        super().__init__(vhost, name, durable, exclusive_owner, auto_delete, arguments,
                         store)
        self.ready = self._ordered_ready()
        self._paged.tail = self._ordered_ready()

    def _ordered_ready(self):
        """An empty structure of ready messages in this queue's delivery order (a
        quorum queue has its own)."""
        highest = max_priority(self.arguments, self.vhost.profile.line.least_max_priority)
        assert highest > 0, "x-max-priority 0 is a plain classic queue"
        return PriorityReady(highest)

    def _return_to_ready(self, entries: list[QueueEntry]) -> None:
        ready = self.ready
        for entry in entries:
            ready.put_back(entry)     # type: ignore[attr-defined]

    def _queue_beyond_window(self, entry: QueueEntry, size: int) -> None:
        """Every message goes to `ready`; one beyond the page window drops its body
        when the store can page it out (`tail` lists those, in delivery order)."""
        ready = self.ready
        ready.append(entry)
        if len(ready) > self.page_window:
            self.store.page_out(entry)
            if entry.message.body is None:
                self.held_bytes -= size
                self._paged.tail.append(entry)

    def _place_restored(self, entry: QueueEntry) -> None:
        self.ready.append(entry)
        if entry.message.body is None:
            self._paged.tail.append(entry)

    def _tail(self):
        return ()      # every ready message is in `ready`

    def _leaves_ready(self, entry: QueueEntry) -> bool:
        """As Queue._leaves_ready; one not asked for yet leaves `tail` too."""
        paged = self._paged
        if paged.reading.pop(entry.seq, None) is not None:
            return True
        paged.tail.remove(entry)
        return False

    def _read_ahead(self) -> bool:
        """As Queue._read_ahead, in delivery order: read the next paged-out bodies
        while at most READ_AHEAD ready messages come before the first on disk. Those
        are in `ready` already: never a message in memory brought to an empty one."""
        paged = self._paged
        tail: OrderedReady = paged.tail   # type: ignore[assignment]
        ready: OrderedReady = self.ready   # type: ignore[assignment]
        reading = paged.reading
        while tail and ready.within(tail[0], READ_AHEAD):
            batch = [tail.popleft() for _ in range(min(READ_BATCH, len(tail)))]
            for entry in batch:
                reading[entry.seq] = entry
            self.store.read_bodies(batch, self._bodies_read)
        return False
