"""A durable x-delayed-message exchange's store: its persistent held messages in a
queue file of their own, each record's exchange field holding the due time (wall-clock
milliseconds, as decimal text; the exchange is the store's own).

Appends go in the group commit like any queue's, so a confirm means the message is on
disk. The tombstone of a released message waits for two commits to end (`synced`): the
first may have started before the message was routed, the second made its routed copies
durable. A crash before the tombstone delivers it again rather than losing it.
"""

from broker.core.message import Message
from storage.queue_file import RecoveredMessage

from .durable_store import DurableQueueStore


class DurableDelayedStore(DurableQueueStore):
    """DelayedStore over a QueueFile (see broker/core/delayed_exchange.py)."""

    __slots__ = ("releasing", "released")

    def __init__(self, *args):
        super().__init__(*args)
        self.releasing: list[int] = []  # seqs routed since the last commit ended
        self.released: list[int] = []   # seqs whose routed copies the next commit syncs

    def append(self, seq: int, due_ms: int, message: Message) -> None:
        self.queue_file.append(seq, str(due_ms), message.routing_key, message.properties,
                               message.body)
        self.persistence.store_written(self)

    def remove(self, seq: int) -> None:
        self.releasing.append(seq)
        self.persistence.store_touched(self)

    def synced(self) -> None:
        if self.dropped:
            return
        for seq in self.released:
            self.queue_file.ack(seq)
        self.released, self.releasing = self.releasing, []
        if self.released:
            self.persistence.store_touched(self)


def held_message(exchange: str, record: RecoveredMessage) -> tuple[int, int, Message]:
    """(seq, due ms, message) of a record recovered from a delayed store."""
    message = Message(exchange, record.routing_key, record.properties, record.body)
    return record.seq, int(record.exchange), message
