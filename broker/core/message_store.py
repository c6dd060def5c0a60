"""The store of queues whose messages live only in memory (non-durable queues, and
durable ones on a broker without a data directory): nothing survives a restart. The
store port it implements, and the adapters over storage, are in ports.py and
broker/server (durable_store.py, stream_store.py)."""

from .ports import QueueStore


class MemoryQueueStore(QueueStore):
    """Keeps messages only in the queue's memory: nothing survives a restart."""

    __slots__ = ()
    store_id: str | None = None
    last_seq = 0

    def append(self, entry) -> None:
        pass

    def settle(self, entry) -> None:
        pass

    def delivered(self, entry) -> None:
        pass

    def page_out(self, entry) -> None:
        pass

    def read_bodies(self, entries: list, on_read) -> None:
        raise RuntimeError("a memory store never pages messages out")

    def drop(self) -> None:
        pass

    def synced(self) -> None:
        pass    # never called: nothing of its is committed


MEMORY_STORE = MemoryQueueStore()
