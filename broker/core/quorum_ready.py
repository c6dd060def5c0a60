"""The ready messages of a quorum queue in RabbitMQ's delivery order (rabbit_fifo's
`returns` and `messages`): first the messages handed back, in the order they came
back, then the others by priority level as the queue's RabbitMQ line orders them
(QuorumPriorities: none in 3.10, two weighted levels in 4.0, 32 strict ones in 4.3),
in publication order within a level.

`QuorumReady` offers the operations a priority queue's `ready` offers (PriorityReady),
so that a quorum queue pages, expires and limits its messages with the priority
queue's code. Peeking (`ready[0]`) never changes the weighted order's turn; taking the
head (`popleft`) does, as RabbitMQ's dequeue does, and taking a handed-back message
does not.
"""

from collections import deque
from itertools import islice
from typing import Iterator

from amqp_codec import MalformedProperties
from amqp_codec.properties import PRIORITY_FLAG, priority

from .message import QueueEntry
from .rabbitmq_lines import QuorumPriorities


def message_priority(entry: QueueEntry) -> int | None:
    """The entry's priority property; None when it has none (or its properties cannot
    be read: RabbitMQ refuses those on publish, so the order never depends on them)."""
    properties = entry.message.properties
    if len(properties) < 2 or not int.from_bytes(properties[:2], "big") & PRIORITY_FLAG:
        return None
    try:
        return priority(properties)
    except MalformedProperties:
        return None


class QuorumReady:
    """Handed-back messages, then the levels (see the module's docstring)."""

    __slots__ = ("returns", "levels", "priorities", "turn", "count")

    def __init__(self, priorities: QuorumPriorities | None):
        self.returns: deque[QueueEntry] = deque()
        self.priorities = priorities
        count = priorities.levels if priorities is not None else 1
        self.levels: list[deque[QueueEntry]] = [deque() for _ in range(count)]
        self.turn = 0      # messages taken from the levels since the older head's turn
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[QueueEntry]:
        yield from self.returns
        yield from self._from_levels()

    def __getitem__(self, index: int) -> QueueEntry:
        if index < 0:
            index += self.count
        if 0 <= index < len(self.returns):
            return self.returns[index]
        for entry in islice(self, index, index + 1):
            return entry
        raise IndexError(index)

    def _level(self, entry: QueueEntry) -> deque[QueueEntry]:
        priorities = self.priorities
        if priorities is None:
            return self.levels[0]
        return self.levels[priorities.level_of(message_priority(entry))]

    def _next_level(self, levels: list[deque[QueueEntry]], turn: int) -> int:
        """The level whose head goes next (some level has one); `turn` as `self.turn`."""
        highest = next(index for index in range(len(levels) - 1, -1, -1) if levels[index])
        priorities = self.priorities
        if (priorities is not None and priorities.weight is not None
                and turn == priorities.weight and levels[0] and highest):
            return highest if levels[highest][0].seq < levels[0][0].seq else 0
        return highest

    def _advance(self, turn: int) -> int:
        priorities = self.priorities
        if priorities is None or priorities.weight is None:
            return 0
        return 0 if turn == priorities.weight else turn + 1

    def _from_levels(self) -> Iterator[QueueEntry]:
        """The levels' messages in the order they will be taken."""
        levels = [deque(level) for level in self.levels]
        turn = self.turn
        left = self.count - len(self.returns)
        while left:
            yield levels[self._next_level(levels, turn)].popleft()
            turn = self._advance(turn)
            left -= 1

    def append(self, entry: QueueEntry) -> None:
        """A newly published entry, or one handed back to the back (RabbitMQ 3.10)."""
        self._level(entry).append(entry)
        self.count += 1

    def appendleft(self, entry: QueueEntry) -> None:
        """The entry just taken from the head comes back (a delivery failed)."""
        self.returns.appendleft(entry)
        self.count += 1

    def put_back(self, entry: QueueEntry) -> None:
        """A message handed back: after those handed back before it."""
        self.returns.append(entry)
        self.count += 1

    def popleft(self) -> QueueEntry:
        if not self.count:
            raise IndexError("pop from an empty QuorumReady")
        self.count -= 1
        if self.returns:
            return self.returns.popleft()
        levels = self.levels
        level = self._next_level(levels, self.turn)
        self.turn = self._advance(self.turn)
        return levels[level].popleft()

    def remove(self, entry: QueueEntry) -> None:
        for place in (self.returns, self._level(entry)):
            if any(other is entry for other in place):
                place.remove(entry)
                self.count -= 1
                return
        raise ValueError("entry not in QuorumReady")

    def clear(self) -> None:
        self.returns.clear()
        for level in self.levels:
            level.clear()
        self.count = 0

    def within(self, entry: QueueEntry, limit: int) -> bool:
        """Whether at most `limit` entries come before `entry` (which is here)."""
        return any(other is entry for other in islice(self, limit + 1))
