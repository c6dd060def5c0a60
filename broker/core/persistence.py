"""What the core asks of durable storage, without doing any I/O itself.

Durable queues get their QueueStore from `store_factory`. Changes to durable metadata
(exchanges, queues, bindings) are recorded as `MetadataChange`s. Both count as writes:
the server commits them (SQL, fsync) off the event loop, and only then sends the replies
that promise durability (confirms, Tx.CommitOk, Declare-Ok of durable entities).
"""

from dataclasses import dataclass, field
from typing import Callable

from storage.message_store import MEMORY_STORE, QueueStore


@dataclass(frozen=True)
class MetadataChange:
    """One call to make on the metadata store, e.g. ("save_queue", {...})."""

    operation: str
    fields: dict = field(default_factory=dict)


def _memory_store(vhost: str, queue: str) -> QueueStore:
    return MEMORY_STORE


class Persistence:
    """The journal of pending durable writes, shared by the whole broker."""

    def __init__(self, store_factory: Callable[[str, str], QueueStore] = _memory_store):
        self.store_factory = store_factory
        self.writes = 0                  # ever-increasing count of pending-or-done writes
        self._changes: list[MetadataChange] = []
        self._dirty_stores: dict = {}

    def record(self, operation: str, **fields) -> None:
        self._changes.append(MetadataChange(operation, fields))
        self.writes += 1

    def store_written(self, store) -> None:
        """A store buffered a message whose confirm must wait for the next commit."""
        self._dirty_stores[store] = None
        self.writes += 1

    def store_touched(self, store) -> None:
        """A store buffered an ack or marker: flushed by the next commit, which nothing
        waits for."""
        self._dirty_stores[store] = None

    def has_pending(self) -> bool:
        return bool(self._changes or self._dirty_stores)

    def take_pending(self) -> tuple[list[MetadataChange], list, int]:
        """Everything written so far, for one commit: (changes, stores, writes)."""
        changes, self._changes = self._changes, []
        stores, self._dirty_stores = list(self._dirty_stores), {}
        return changes, stores, self.writes
