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
from broker.core.ports import (
    DeleteBinding, DeleteExchange, DeletePermissions, DeletePolicy, DeleteQueue,
    DeleteTopicPermissions, DeleteUser, DeleteVhost, DropStoreFiles, JournalEntry,
    SaveBinding, SaveExchange, SavePermissions, SavePolicy, SaveQueue,
    SaveTopicPermissions, SaveUser, SaveUserLimits, SaveVhost, SaveVhostLimits)
from broker.server.durability import DurableStorage
from storage.metadata import (BindingRecord, Credential, ExchangeRecord, LimitsRecord,
                              PermissionRecord, PolicyRecord, QueueRecord,
                              TopicPermissionRecord, VhostRecord)

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


def user(name: str = "alice", tags=("management", "policymaker")) -> SaveUser:
    return SaveUser(name=name, password_hash="aGFzaA==", algorithm="sha256", tags=tags)


def save_user(journal: Journal) -> None:
    journal.apply(user(), user("alice", ("monitoring",)), user("bob", ()))
    with journal.reopened() as metadata:
        assert [credential for credential in metadata.credentials()
                if credential.name != "guest"] == [
            Credential("alice", "aGFzaA==", "sha256", ("monitoring",)),
            Credential("bob", "aGFzaA==", "sha256", ())]


def delete_user(journal: Journal) -> None:
    journal.apply(user(), permissions("alice"), topic_permissions("alice", "amq.topic"),
                  SaveUserLimits(user="alice", limits={"max-channels": 3}),
                  DeleteUser(name="alice"))
    with journal.reopened() as metadata:
        assert "alice" not in [credential.name for credential in metadata.credentials()]
        assert metadata.list_topic_permissions() == []
        assert metadata.list_user_limits() == []
        assert [grant.user for grant in metadata.list_permissions()] == ["guest"]


def save_vhost(journal: Journal) -> None:
    journal.apply(SaveVhost(name="v"), SaveVhost(name="v"),
                  SaveVhost(name="w", description="old", tags=("a",)),
                  SaveVhost(name="w", description="new", tags=("b", "c"),
                            default_queue_type="quorum"))
    with journal.reopened() as metadata:
        assert metadata.list_vhosts() == [
            VhostRecord("/"), VhostRecord("v"),
            VhostRecord("w", "new", ("b", "c"), "quorum")]   # the later entry replaces


def delete_vhost(journal: Journal) -> None:
    journal.apply(SaveVhost(name="v"), SavePermissions("guest", "v", ".*", "", "^r"),
                  policy("v", "p"), DeleteVhost(name="v"))
    with journal.reopened() as metadata:
        assert metadata.list_vhosts() == [VhostRecord("/")]
        assert [grant.vhost for grant in metadata.list_permissions()] == ["/"]
        assert metadata.list_policies() == []


def permissions(name: str) -> SavePermissions:
    return SavePermissions(user=name, vhost="/", configure="^c", write="", read="^r")


def save_permissions(journal: Journal) -> None:
    journal.apply(user(), permissions("alice"))
    with journal.reopened() as metadata:
        assert PermissionRecord("alice", "/", "^c", "", "^r") in (
            metadata.list_permissions())


def delete_permissions(journal: Journal) -> None:
    journal.apply(user(), permissions("alice"), DeletePermissions(user="alice", vhost="/"))
    with journal.reopened() as metadata:
        assert [grant.user for grant in metadata.list_permissions()] == ["guest"]


def topic_permissions(name: str, exchange: str) -> SaveTopicPermissions:
    return SaveTopicPermissions(user=name, vhost="/", exchange=exchange,
                                write="^{username}", read="")


def save_topic_permissions(journal: Journal) -> None:
    journal.apply(user(), topic_permissions("alice", "amq.topic"),
                  topic_permissions("alice", "t"))
    with journal.reopened() as metadata:
        assert metadata.list_topic_permissions() == [
            TopicPermissionRecord("alice", "/", "amq.topic", "^{username}", ""),
            TopicPermissionRecord("alice", "/", "t", "^{username}", "")]


def delete_topic_permissions(journal: Journal) -> None:
    journal.apply(user(), topic_permissions("alice", "a"), topic_permissions("alice", "b"),
                  topic_permissions("alice", "c"),
                  DeleteTopicPermissions(user="alice", vhost="/", exchange="b"))
    with journal.reopened() as metadata:
        assert [topic.exchange for topic in metadata.list_topic_permissions()] == [
            "a", "c"]
    journal.apply(DeleteTopicPermissions(user="alice", vhost="/", exchange=None))
    with journal.reopened() as metadata:
        assert metadata.list_topic_permissions() == []


def policy(vhost: str, name: str, kind: str = "policy",
           definition=None) -> SavePolicy:
    return SavePolicy(vhost=vhost, kind=kind, name=name, pattern="^q", apply_to="queues",
                      priority=3, definition=definition or {"max-length": 10})


def save_policy(journal: Journal) -> None:
    journal.apply(policy("/", "p"), policy("/", "p", definition={"message-ttl": 5}),
                  policy("/", "p", "operator_policy"))
    with journal.reopened() as metadata:
        assert metadata.list_policies() == [
            PolicyRecord("/", "operator_policy", "p", "^q", "queues", 3,
                         {"max-length": 10}),
            PolicyRecord("/", "policy", "p", "^q", "queues", 3, {"message-ttl": 5})]


def delete_policy(journal: Journal) -> None:
    journal.apply(policy("/", "p"), policy("/", "p", "operator_policy"),
                  DeletePolicy(vhost="/", kind="policy", name="p"))
    with journal.reopened() as metadata:
        assert [record.kind for record in metadata.list_policies()] == [
            "operator_policy"]


def save_vhost_limits(journal: Journal) -> None:
    journal.apply(SaveVhost(name="v"),
                  SaveVhostLimits(vhost="v", limits={"max-queues": 1}),
                  SaveVhostLimits(vhost="/", limits={"max-connections": 2}),
                  SaveVhostLimits(vhost="/", limits={}))
    with journal.reopened() as metadata:
        assert metadata.list_vhost_limits() == [LimitsRecord("v", {"max-queues": 1})]


def save_user_limits(journal: Journal) -> None:
    journal.apply(user(), SaveUserLimits(user="alice", limits={"max-channels": 3}),
                  SaveUserLimits(user="guest", limits={"max-connections": 1}))
    with journal.reopened() as metadata:
        assert metadata.list_user_limits() == [
            LimitsRecord("alice", {"max-channels": 3}),
            LimitsRecord("guest", {"max-connections": 1})]


ROUND_TRIPS = {
    SaveExchange: save_exchange, DeleteExchange: delete_exchange,
    SaveQueue: save_queue, DeleteQueue: delete_queue,
    SaveBinding: save_binding, DeleteBinding: delete_binding,
    DropStoreFiles: drop_store_files,
    SaveUser: save_user, DeleteUser: delete_user, SaveVhost: save_vhost,
    DeleteVhost: delete_vhost, SavePermissions: save_permissions,
    DeletePermissions: delete_permissions, SaveTopicPermissions: save_topic_permissions,
    DeleteTopicPermissions: delete_topic_permissions, SavePolicy: save_policy,
    DeletePolicy: delete_policy, SaveVhostLimits: save_vhost_limits,
    SaveUserLimits: save_user_limits,
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
