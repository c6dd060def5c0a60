"""What the core asks of durable storage, without doing any I/O itself.

Durable queues get their QueueStore from `store_factory`. Changes to durable metadata
(exchanges, queues, bindings) are recorded as journal entries (ports.py). Both count as
writes: the server commits them (SQL, fsync) off the event loop, and only then sends the
replies that promise durability (confirms, Tx.CommitOk, Declare-Ok of durable entities).
"""

from typing import Callable, Iterable

from .errors import precondition_failed
from .message_store import MEMORY_STORE
from .ports import BufferedStore, JournalEntry, QueueStore


def _memory_store(vhost: str, queue: str) -> QueueStore:
    return MEMORY_STORE


def _no_delayed_store(vhost: str, exchange: str, durable: bool):
    return None   # without a data directory, delayed messages are kept in memory only


def _no_streams(vhost: str, queue: str, retention):
    raise precondition_failed(
        f"stream queue '{queue}' in vhost '{vhost}' needs durable storage: run the "
        "broker with a data directory")


class Persistence:
    """The journal of pending durable writes, shared by the whole broker."""

    def __init__(self, store_factory: Callable[[str, str], QueueStore] = _memory_store,
                 stream_factory: Callable = _no_streams,
                 delayed_store_factory: Callable = _no_delayed_store):
        self.store_factory = store_factory
        self.stream_factory = stream_factory   # (vhost, queue, StreamRetention) -> store
        # (vhost, exchange, durable) -> the DelayedStore of an x-delayed-message exchange
        self.delayed_store_factory = delayed_store_factory
        self.on_commit_request: Callable[[], None] = lambda: None
        self.writes = 0                  # ever-increasing count of pending-or-done writes
        self.durable = 0                 # how many of them are on disk
        self._waiting: dict = {}         # connections holding output for later writes
        self._changes: list[JournalEntry] = []
        self._dirty_stores: dict[BufferedStore, None] = {}

    def record(self, entry: JournalEntry) -> None:
        """A change to durable metadata, applied by the next commit."""
        self._changes.append(entry)
        self.writes += 1

    def store_written(self, store: BufferedStore) -> None:
        """A store buffered a message whose confirm must wait for the next commit."""
        self._dirty_stores[store] = None
        self.writes += 1

    def store_touched(self, store: BufferedStore) -> None:
        """A store buffered an ack or marker: flushed by the next commit, which nothing
        waits for."""
        self._dirty_stores[store] = None

    def barrier(self) -> None:
        """The next durable reply (Tx.CommitOk of acks) must wait until what stores
        buffered so far, acks included, is on disk."""
        if self._dirty_stores:
            self.writes += 1

    def request_commit(self) -> None:
        """Someone waits for data to become durable without a client waiting for it
        (stream consumers at the tail): commit soon rather than at the next period."""
        self.on_commit_request()

    def wait_durable(self, connection) -> None:
        """`connection` holds output until the writes made so far are durable: commit
        soon and call its `writes_durable(durable)` after each commit."""
        self._waiting[connection] = None
        self.on_commit_request()

    def committed(self, stores: Iterable[BufferedStore], writes: int) -> None:
        """A commit synced `stores` and made the first `writes` writes durable (called
        on the event loop): stores catch up, connections release their held output."""
        self.durable = writes
        for store in stores:
            store.synced()
        if self._waiting:
            waiting, self._waiting = self._waiting, {}
            for connection in waiting:
                try:
                    if connection.writes_durable(writes):
                        self._waiting[connection] = None
                except Exception as error:   # that connection fails, the commit stands
                    connection.fail(error)

    def failed(self, changes: list[JournalEntry], stores: Iterable[BufferedStore],
               writes: int, reason: str) -> None:
        """A commit of the first `writes` writes failed (called on the event loop):
        `changes` are the journal entries it did not apply, `stores` those it tried to
        sync. Both go back into the journal for the next commit (the stores buffered
        what they could not write again); connections waiting for these writes get
        their output released refused (nacks, channel errors)."""
        self._changes[:0] = changes
        for store in stores:
            self._dirty_stores[store] = None
        if self._waiting:
            waiting, self._waiting = self._waiting, {}
            for connection in waiting:
                try:
                    if connection.writes_failed(writes, reason):
                        self._waiting[connection] = None
                except Exception as error:   # that connection fails, no other
                    connection.fail(error)

    def has_pending(self) -> bool:
        return bool(self._changes or self._dirty_stores)

    def take_pending(self) -> tuple[list[JournalEntry], list[BufferedStore], int]:
        """Everything written so far, for one commit: (changes, stores, writes)."""
        changes, self._changes = self._changes, []
        stores, self._dirty_stores = list(self._dirty_stores), {}
        return changes, stores, self.writes
