"""A stream queue's store: its StreamLog, with the same commit protocol as the queue-file
store (appends touch memory only; the group committer syncs them off the event loop and
then calls `synced`, which lets consumers read what became durable)."""

import time

from broker.core.persistence import Persistence
from broker.core.ports import DropStoreFiles
from storage.stream_log import StreamLog


class DurableStreamStore:
    """Every message of a stream goes to its log, whatever its delivery mode."""

    __slots__ = ("log", "persistence", "store_id", "dropped", "clock", "queue")

    def __init__(self, log: StreamLog, persistence: Persistence, store_id: str,
                 clock=time.time):
        self.log = log
        self.persistence = persistence
        self.store_id = store_id
        self.dropped = False
        self.clock = clock            # wall clock, seconds: interval starts count from it
        self.queue = None             # the StreamQueue, told when appends become durable

    def append(self, message) -> int:
        offset = self.log.append(message.exchange, message.routing_key,
                                 message.properties, message.body)
        self.persistence.store_written(self)
        return offset

    def store_consumer_offset(self, name: str, offset: int) -> None:
        self.log.store_consumer_offset(name, offset)
        self.persistence.store_touched(self)

    def offset_for_age(self, seconds: float) -> int:
        """The first offset published at most `seconds` ago."""
        return self.log.offset_for_timestamp(self.clock() - seconds)

    def synced(self) -> None:
        """Called on the event loop after a commit that synced this store."""
        if self.queue is not None and not self.dropped:
            self.queue.dispatch()

    def drop(self) -> None:
        """The stream is deleted: its files go once the deletion is committed."""
        self.dropped = True
        self.persistence.record(DropStoreFiles(self))

    # -- blocking, in the committer's worker thread -----------------------------------

    @property
    def written_bytes(self) -> int:
        """Bytes ever written to its files (the disk alarm's accounting)."""
        return self.log.written_bytes

    def sync(self) -> int:
        return self.log.sync()

    def maintain(self) -> bool:
        """Retention: delete whole old segments beyond x-max-length-bytes/x-max-age.
        True with an age limit: segments age without writes, so look again next pass."""
        self.log.apply_retention()
        return self.log.max_age_seconds is not None

    def drop_files(self) -> None:
        self.log.drop()

    def close(self) -> None:
        self.log.close()
