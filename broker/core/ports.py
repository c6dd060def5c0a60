"""What the core needs from outside, declared here and supplied by broker/server.

- The journal: every change to durable metadata is one frozen entry below, recorded
  with `Persistence.record(entry)` on the event loop and applied later, in the commit's
  worker thread, by the server (`DurableStorage.apply_changes`), which has one case per
  entry type. Adding an entry means adding its case there and its round trip to
  tests/unit/test_journal.py (which fails for an entry without either).
- `Transport`: the socket side of one client connection.

The message stores' port (`QueueStore`) is in message_store.py.
"""

from dataclasses import dataclass
from typing import Protocol


class JournalEntry:
    """One pending change to durable metadata (the base of the entries below)."""


@dataclass(frozen=True)
class SaveExchange(JournalEntry):
    vhost: str
    name: str
    type: str
    auto_delete: bool
    internal: bool
    arguments: dict


@dataclass(frozen=True)
class DeleteExchange(JournalEntry):
    """Also deletes the bindings the exchange is the source or destination of."""

    vhost: str
    name: str


@dataclass(frozen=True)
class SaveQueue(JournalEntry):
    vhost: str
    name: str
    auto_delete: bool
    arguments: dict
    queue_id: str       # the store's id: names the queue's directory of files


@dataclass(frozen=True)
class DeleteQueue(JournalEntry):
    """Also deletes the bindings to the queue."""

    vhost: str
    name: str


@dataclass(frozen=True)
class SaveBinding(JournalEntry):
    vhost: str
    source: str
    destination_kind: str   # "queue" or "exchange"
    destination: str
    routing_key: str
    arguments: dict


@dataclass(frozen=True)
class DeleteBinding(JournalEntry):
    vhost: str
    source: str
    destination_kind: str   # "queue" or "exchange"
    destination: str
    routing_key: str
    arguments: dict


class StoreFiles(Protocol):
    """A deleted queue's store, whose files go once the deletion is committed."""

    def drop_files(self) -> None:
        """Remove the store's files (blocking: runs in the commit's worker thread)."""


@dataclass(frozen=True)
class DropStoreFiles(JournalEntry):
    """Recorded after the DeleteQueue of the queue whose store it is."""

    store: StoreFiles


class Transport(Protocol):
    """What the core needs from the socket side."""

    writable: bool   # False while the outgoing buffer is above its high-water mark

    def write(self, data: bytes | tuple) -> None:
        """Send bytes, or a tuple of bytes-like parts in order (large message bodies,
        written without being copied)."""

    def close(self) -> None:
        """Flush what was written, then close the socket."""

    def tuned(self, heartbeat: int) -> None:
        """Negotiation finished: start heartbeats (0: none)."""
