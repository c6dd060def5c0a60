"""The durability journal: every entry type declared in broker/core/ports.py, recorded
through Persistence, is applied by the server's committer (DurableStorage.apply_changes)
and reads back through the metadata store's loaders, on SQLite and on PostgreSQL.

An entry type added to ports.py without a case in the committer, or without a round
trip here, fails these tests.
"""

import contextlib
import dataclasses
import os

import pytest

from broker.core import ports
from broker.core.ports import (DeleteBinding, DeleteExchange, DeleteQueue, DropStoreFiles,
                               JournalEntry, SaveBinding, SaveExchange, SaveQueue)
from broker.server.durability import DurableStorage
from storage.metadata import BindingRecord, ExchangeRecord, QueueRecord

ARGUMENTS = {"x-max-length": 10, "alternate-exchange": "ae", "x-flag": True,
             "x-table": {"nested": [1, "two"]}}
QUEUE_ID = "0123456789abcdef0123456789abcdef"


def journal_entry_types() -> list[type]:
    """Every dataclass defined in broker/core/ports.py."""
    return [value for value in vars(ports).values()
            if isinstance(value, type) and dataclasses.is_dataclass(value)
            and value.__module__ == ports.__name__]


class Journal:
    """A DurableStorage whose entries go through Persistence, as on a running broker."""

    def __init__(self, data_dir: str, url: str | None):
        self.data_dir = data_dir
        self.url = url
        self.storage = DurableStorage(data_dir, url)

    def apply(self, *entries: JournalEntry) -> None:
        """Record `entries` and apply what the next commit takes, as the committer does."""
        for entry in entries:
            self.storage.persistence.record(entry)
        changes, _, _ = self.storage.persistence.take_pending()
        assert changes == list(entries)
        self.storage.apply_changes(changes)
        assert changes == []      # every entry applied and removed from the list

    @contextlib.contextmanager
    def reopened(self):
        """The metadata store opened afresh: what the commits left in the database."""
        storage = DurableStorage(self.data_dir, self.url)
        try:
            yield storage.metadata
        finally:
            storage.metadata.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def journal(request, tmp_path):
    if request.param == "sqlite":
        database = contextlib.nullcontext(None)
    else:
        database = request.getfixturevalue("postgres_server").database()
    with database as url:
        journal = Journal(str(tmp_path), url)
        try:
            yield journal
        finally:
            journal.storage.metadata.close()


def exchange(name: str, auto_delete: bool = True) -> SaveExchange:
    # auto_delete differs from internal, so swapping the two would show
    return SaveExchange(vhost="/", name=name, type="topic", auto_delete=auto_delete,
                        internal=not auto_delete, arguments=ARGUMENTS)


def queue(name: str = "q", queue_id: str = QUEUE_ID) -> SaveQueue:
    return SaveQueue(vhost="/", name=name, auto_delete=True, arguments=ARGUMENTS,
                     queue_id=queue_id)


def binding(entry_type, source: str, kind: str, destination: str):
    return entry_type(vhost="/", source=source, destination_kind=kind,
                      destination=destination, routing_key="a.#", arguments=ARGUMENTS)


def save_exchange(journal: Journal) -> None:
    journal.apply(exchange("x"), exchange("y", auto_delete=False))
    with journal.reopened() as metadata:
        assert metadata.list_exchanges("/") == [
            ExchangeRecord("/", "x", "topic", True, False, ARGUMENTS),
            ExchangeRecord("/", "y", "topic", False, True, ARGUMENTS)]


def delete_exchange(journal: Journal) -> None:
    journal.apply(exchange("x"), exchange("y"), queue(),
                  binding(SaveBinding, "x", "queue", "q"),
                  binding(SaveBinding, "y", "exchange", "x"),
                  DeleteExchange(vhost="/", name="x"))
    with journal.reopened() as metadata:
        assert [record.name for record in metadata.list_exchanges("/")] == ["y"]
        assert metadata.list_bindings("/") == []    # from it and to it


def save_queue(journal: Journal) -> None:
    journal.apply(queue())
    with journal.reopened() as metadata:
        assert metadata.list_queues("/") == [
            QueueRecord("/", "q", QUEUE_ID, True, ARGUMENTS)]


def delete_queue(journal: Journal) -> None:
    other_id = "f" * 32
    journal.apply(exchange("x"), queue(), queue("other", other_id),
                  binding(SaveBinding, "x", "queue", "q"), DeleteQueue(vhost="/", name="q"))
    with journal.reopened() as metadata:
        assert metadata.list_queues("/") == [
            QueueRecord("/", "other", other_id, True, ARGUMENTS)]
        assert metadata.list_bindings("/") == []


def save_binding(journal: Journal) -> None:
    journal.apply(exchange("x"), exchange("y"), queue(),
                  binding(SaveBinding, "x", "queue", "q"),
                  binding(SaveBinding, "x", "exchange", "y"))
    with journal.reopened() as metadata:
        assert metadata.list_bindings("/") == [
            BindingRecord("/", "x", "queue", "q", "a.#", ARGUMENTS),
            BindingRecord("/", "x", "exchange", "y", "a.#", ARGUMENTS)]


def delete_binding(journal: Journal) -> None:
    journal.apply(exchange("x"), exchange("y"), queue(),
                  binding(SaveBinding, "x", "queue", "q"),
                  binding(SaveBinding, "x", "exchange", "y"),
                  binding(DeleteBinding, "x", "queue", "q"))
    with journal.reopened() as metadata:
        assert metadata.list_bindings("/") == [
            BindingRecord("/", "x", "exchange", "y", "a.#", ARGUMENTS)]


def drop_store_files(journal: Journal) -> None:
    store = journal.storage.new_queue_store("/", "q")
    journal.apply(queue(queue_id=store.store_id))
    store.queue_file.append(1, "", "q", b"", b"body")
    store.sync()
    directory = os.path.join(journal.storage.queues_dir, store.store_id)
    assert os.listdir(directory)
    journal.apply(DeleteQueue(vhost="/", name="q"), DropStoreFiles(store))
    assert not os.path.exists(directory)
    with journal.reopened() as metadata:
        assert metadata.list_queues("/") == []


ROUND_TRIPS = {
    SaveExchange: save_exchange, DeleteExchange: delete_exchange,
    SaveQueue: save_queue, DeleteQueue: delete_queue,
    SaveBinding: save_binding, DeleteBinding: delete_binding,
    DropStoreFiles: drop_store_files,
}


def test_every_journal_entry_is_a_frozen_dataclass_found_in_ports():
    entry_types = set(journal_entry_types())
    assert set(JournalEntry.__subclasses__()) == entry_types
    assert all(entry_type.__dataclass_params__.frozen for entry_type in entry_types)


@pytest.mark.parametrize("entry_type", journal_entry_types(),
                         ids=lambda entry_type: entry_type.__name__)
def test_every_journal_entry_is_applied_and_reads_back(journal, entry_type):
    round_trip = ROUND_TRIPS.get(entry_type)
    assert round_trip is not None, (
        f"{entry_type.__name__} has no round trip in tests/unit/test_journal.py: add one")
    round_trip(journal)


@dataclasses.dataclass(frozen=True)
class RenameQueue:
    """An entry the committer has no case for."""

    vhost: str
    name: str
    new_name: str


def test_an_entry_without_a_case_fails_the_commit_and_stays_pending(journal):
    changes = [queue(), RenameQueue("/", "q", "r"), queue("later", "f" * 32)]
    with pytest.raises(TypeError, match="no case for journal entry RenameQueue"):
        journal.storage.apply_changes(changes)
    assert changes[0] == RenameQueue("/", "q", "r")     # it and what follows it stay
    assert len(changes) == 2
    with journal.reopened() as metadata:
        assert [record.name for record in metadata.list_queues("/")] == ["q"]
