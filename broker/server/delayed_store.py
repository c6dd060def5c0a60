"""An x-delayed-message exchange's store: its held messages in a queue file of their
own, each record's exchange field holding the due time (wall-clock milliseconds, as
decimal text; the exchange is the store's own). The exchange keeps only an index in
memory; bodies are read back from the file, in a ReadPool worker, when they are due.

Persistent messages of a durable exchange are written as persistent records, in the
group commit like any queue's, so a confirm means the message is on disk. The others
are written for paging only (recovery discards them) and their confirm does not wait.
The tombstone of a released persistent message waits for two commits to end
(`synced`): the first may have started before the message was routed, the second made
its routed copies durable. A crash before the tombstone delivers it again rather than
losing it.
"""

import logging
from functools import partial
from typing import Callable

from broker.core.message import Message
from broker.core.persistence import Persistence
from storage.names import MAX_NAME_BYTES, decode_name
from storage.queue_file import QueueFile, RecoveredMessage
from storage.record import MessageFields

from .durable_store import QueueFileStore
from .read_pool import ReadPool
from .store_ports import DelayedStorePort

log = logging.getLogger("warren.storage")


class DurableDelayedStore(QueueFileStore, DelayedStorePort):
    """DelayedStore over a QueueFile (see broker/core/delayed_exchange.py)."""

    __slots__ = ("exchange", "durable", "releasing", "released")

    def __init__(self, queue_file: QueueFile, persistence: Persistence, store_id: str,
                 reads: ReadPool, exchange: str, durable: bool):
        super().__init__(queue_file, persistence, store_id, reads)
        self.exchange = exchange        # the name read-back messages carry
        self.durable = durable          # persistent messages survive a restart
        self.releasing: list[int] = []  # seqs routed since the last commit ended
        self.released: list[int] = []   # seqs whose routed copies the next commit syncs

    def append(self, seq: int, due_ms: int, message: Message) -> bool:
        persistent = self.durable and message.persistent
        self.queue_file.append(seq, self._due_field(due_ms, message.exchange),
                               message.routing_key, message.properties, message.body,
                               persistent=persistent)
        if persistent:
            self.persistence.store_written(self)
        else:
            self.persistence.store_touched(self)
        return persistent

    def _due_field(self, due_ms: int, exchange: str) -> str:
        """The record's exchange field: the due time, then the exchange the message was
        published to when it came through another one (if the field has room)."""
        field = f"{due_ms} {exchange}"
        if exchange == self.exchange or len(field.encode()) > MAX_NAME_BYTES:
            return str(due_ms)
        return field

    def read(self, seqs: list[int],
             on_read: Callable[[list[Message | None]], None]) -> None:
        self.reads.submit(partial(self._read_messages, seqs), on_read)

    def _read_messages(self, seqs: list[int]) -> list[Message | None]:
        """(worker thread) The messages `seqs`; None for one that cannot be read."""
        found: list[MessageFields | Exception]
        try:
            found = self.queue_file.read_many(seqs, whole=True)
        except Exception as error:      # e.g. too many open files: all of them failed
            found = [error] * len(seqs)
        messages: list[Message | None] = []
        for seq, fields in zip(seqs, found):
            if isinstance(fields, Exception):
                log.error("event=delayed_read_failed store=%s seq=%d error=%r",
                          self.store_id, seq, fields)
                messages.append(None)
            else:
                _due, _space, exchange = decode_name(fields.exchange).partition(" ")
                messages.append(Message(exchange or self.exchange,
                                        decode_name(fields.routing_key),
                                        fields.properties, fields.body))
        return messages

    def remove(self, seq: int, persistent: bool) -> None:
        if persistent:
            self.releasing.append(seq)
        else:
            self.queue_file.ack(seq)
        self.persistence.store_touched(self)

    def synced(self) -> None:
        if self.dropped:
            return
        for seq in self.released:
            self.queue_file.ack(seq)
        self.released, self.releasing = self.releasing, []
        if self.released:
            self.persistence.store_touched(self)


def held_index(record: RecoveredMessage) -> tuple[int, int]:
    """(seq, due ms) of a record recovered from a delayed store."""
    return record.seq, int(record.exchange.partition(" ")[0])
