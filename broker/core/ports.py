"""What the core needs from outside, declared here and supplied by broker/server.

- The journal: every change to durable metadata is one frozen entry below, recorded
  with `Persistence.record(entry)` on the event loop and applied later, in the commit's
  worker thread, by the server (`DurableStorage.apply_changes`), which has one case per
  entry type. Adding an entry means adding its case there and its round trip to
  tests/unit/test_journal.py (which fails for an entry without either).
- `Transport`: the socket side of one client connection.
- `QueueStore` and `StreamStore`: where a queue's messages are kept. The core never
  reads from disk: it asks its store for paged-out bodies (`read_bodies`) or stream
  records (`StreamStore.read`), and the store answers later, on the event loop, once a
  worker thread has read them; the queue then delivers what became available. The
  in-memory QueueStore is the core's own (message_store.py). A store's writes wait for
  the server's group commit, which calls its `synced()` (`BufferedStore`); the rest of
  what the commit calls on a store is the server's (broker/server/store_ports.py).
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from .stream_queue import StreamQueue


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
    # the store's id: names the queue's directory of files; None for a broker that keeps
    # its queues in memory (the metadata store then chooses one)
    queue_id: str | None


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


@dataclass(frozen=True)
class SaveUser(JournalEntry):
    """Adds the user or replaces its password hash and tags."""

    name: str
    password_hash: str      # "": no password login
    algorithm: str
    tags: tuple[str, ...]


@dataclass(frozen=True)
class DeleteUser(JournalEntry):
    """Also deletes the user's permissions, topic permissions and limits."""

    name: str


@dataclass(frozen=True)
class SaveVhost(JournalEntry):
    """Adds the vhost or replaces its description, tags, default queue type and
    RabbitMQ line."""

    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    default_queue_type: str | None = None
    rabbitmq_line: str | None = None


@dataclass(frozen=True)
class DeleteVhost(JournalEntry):
    """Also deletes everything in the vhost and every permission on it."""

    name: str


@dataclass(frozen=True)
class SavePermissions(JournalEntry):
    user: str
    vhost: str
    configure: str
    write: str
    read: str


@dataclass(frozen=True)
class DeletePermissions(JournalEntry):
    user: str
    vhost: str


@dataclass(frozen=True)
class SaveTopicPermissions(JournalEntry):
    user: str
    vhost: str
    exchange: str
    write: str
    read: str


@dataclass(frozen=True)
class DeleteTopicPermissions(JournalEntry):
    user: str
    vhost: str
    exchange: str | None    # None: on every exchange


@dataclass(frozen=True)
class SavePolicy(JournalEntry):
    """Adds or replaces a policy (kind "policy") or operator policy ("operator_policy")."""

    vhost: str
    kind: str
    name: str
    pattern: str
    apply_to: str           # "queues", "exchanges" or "all"
    priority: int
    definition: dict


@dataclass(frozen=True)
class DeletePolicy(JournalEntry):
    vhost: str
    kind: str
    name: str


@dataclass(frozen=True)
class SaveVhostLimits(JournalEntry):
    """Replaces the vhost's limits ({} clears them)."""

    vhost: str
    limits: dict


@dataclass(frozen=True)
class SaveUserLimits(JournalEntry):
    """Replaces the user's limits ({} clears them)."""

    user: str
    limits: dict


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

    def flush(self) -> None:
        """Send what was written now, if the socket takes it, rather than at the writer's
        next turn: output released by a commit (confirms) goes out without waiting."""

    def close(self) -> None:
        """Flush what was written, then close the socket."""

    def tuned(self, heartbeat: int) -> None:
        """Negotiation finished: start heartbeats (0: none)."""

    def login_refused(self) -> None:
        """The handshake refused the login (the connection closes): the server may
        slow the refusal down."""

    def opened(self) -> None:
        """The handshake is over: Connection.Open was accepted."""

    def close_sent(self) -> None:
        """The broker sent Connection.Close and waits for the client's Close-Ok (the
        server bounds that wait)."""

    def closed_by_client(self) -> None:
        """The client's Connection.Close was answered with Close-Ok: the client, not
        the server, closes the socket first."""

    def input_resumed(self) -> None:
        """Input the connection held back while a Basic.Get waited for a disk read is
        handled: read from the socket again (it is not read while input is held)."""


class BufferedStore(Protocol):
    """A store whose writes wait in memory for the server's group commit: it tells
    Persistence about them (`store_written`, `store_touched`), and the commit that made
    them durable tells it back."""

    def synced(self) -> None:
        """A commit that synced this store ended (on the event loop): it may let go of
        what is now durable, or have its queue deliver it."""


class QueueStore(BufferedStore, Protocol):
    """Per-queue message persistence. Entries carry `.seq` and `.message`."""

    @property
    def store_id(self) -> str | None:
        """Names the store's directory; None for memory-only stores."""

    @property
    def last_seq(self) -> int:
        """The highest seq it was ever given: the queue continues after it."""

    def append(self, entry) -> None:
        """A message entered the queue."""

    def settle(self, entry) -> None:
        """A message left the queue for good (acked, rejected without requeue, purged)."""

    def delivered(self, entry) -> None:
        """A message was handed to a consumer and awaits its ack (after a crash it comes
        back with redelivered=true)."""

    def page_out(self, entry) -> None:
        """Let go of the entry's body if it can be read back later (paging)."""

    def read_bodies(self, entries: list, on_read: Callable[[list, list], None]) -> None:
        """Read the bodies of paged-out `entries` off the event loop, then call
        `on_read(entries, bodies)` on the event loop: one item per entry, its body, or
        None when it could not be read (the failure is logged). Always answers, even
        after `drop`."""

    def drop(self) -> None:
        """The queue was deleted: forget everything."""


class StreamRecord(Protocol):
    """One message of a stream as a stream store reads it back."""

    offset: int
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes


class StreamStore(BufferedStore, Protocol):
    """A stream's log, as a stream queue sees it. Offsets count from 0 per stream."""

    @property
    def first_offset(self) -> int:
        """The oldest offset still kept (retention removes older ones)."""

    @property
    def next_offset(self) -> int:
        """The offset the next append gets."""

    @property
    def durable_offset(self) -> int:
        """The highest offset on disk (-1: none)."""

    # The stream queue over it (set by the queue), whose `dispatch()` the store calls
    # when records it read, or appends a commit made durable, can be delivered.
    queue: "StreamQueue | None"

    def append(self, message) -> int:
        """Append a message (written by the next commit); its offset."""

    def read(self, offset: int, count: int) -> list[StreamRecord]:
        """Up to `count` durable messages from `offset` on (from `first_offset` when
        `offset` is older), in offset order, that are in memory now: possibly none.
        When there are fewer than asked and more are durable, the store reads them off
        the event loop and then calls the queue's `dispatch()` on the event loop."""

    def consumer_offset(self, name: str) -> int | None:
        """The offset last stored for a tracking consumer, or None."""

    def store_consumer_offset(self, name: str, offset: int) -> None:
        """Remember a tracking consumer's offset (written by the next commit)."""

    def offset_for_timestamp(self, seconds: float) -> int:
        """The first offset published at or after `seconds` since the epoch."""

    def offset_for_age(self, seconds: float) -> int:
        """The first offset published at most `seconds` ago."""

    def set_retention(self, retention) -> None:
        """Keep the stream within a new StreamRetention (a policy changed): applied by
        the store's next maintenance; a new segment size applies to new segments."""

    def drop(self) -> None:
        """The stream is deleted: forget everything."""
