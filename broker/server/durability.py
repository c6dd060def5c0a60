"""Durable storage for a running broker: the metadata store and the queue files under
the data directory, opened and replayed at start-up."""

import hashlib
import logging
import os
import shutil
import time
import uuid
from typing import Callable

from broker.core.access_control import AccessControl, TopicPermission, User
from broker.core.broker import Broker
from broker.core.delayed_exchange import DelayedExchange
from broker.core.passwords import SHA256_ALGORITHM, hash_password
from broker.core.persistence import Persistence
from broker.core.policy import PolicyError, make_policy
from broker.core.ports import (
    DeleteBinding, DeleteExchange, DeletePermissions, DeletePolicy, DeleteQueue,
    DeleteTopicPermissions, DeleteUser, DeleteVhost, DropStoreFiles, JournalEntry,
    SaveBinding, SaveExchange, SavePermissions, SavePolicy, SaveQueue,
    SaveTopicPermissions, SaveUser, SaveUserLimits, SaveVhost, SaveVhostLimits)
from broker.core.queue_types import STREAM, kind_of
from broker.core.stream_arguments import StreamRetention
from broker.core.vhost import VhostMetadata
from storage.metadata import MetadataStore, PasswordHash, PolicyRecord
from storage.queue_file import QueueFile
from storage.stream_log import StreamLog

from .delayed_store import DurableDelayedStore, held_index
from .durable_store import DurableQueueStore
from .read_pool import ReadPool
from .store_ports import CommitStore
from .stream_store import DurableStreamStore, log_settings

log = logging.getLogger("warren.storage")

QUEUES_DIRECTORY = "queues"
DELAYED_DIRECTORY = "delayed"   # one queue file per durable x-delayed-message exchange
GUEST_PASSWORD = "guest"   # RabbitMQ's default user, guest/guest, in a new metadata store


def delayed_store_prefix(vhost: str, exchange: str) -> str:
    """The start of a delayed exchange's store directory name: a digest of its vhost
    and name, so that the store is found again at start-up without a metadata column."""
    return hashlib.sha256(f"{vhost}\0{exchange}".encode()).hexdigest()[:32]


def delayed_store_generation(name: str) -> int:
    """The generation in a store directory name `<prefix>.<generation>` (-1 if none)."""
    _prefix, _dot, generation = name.partition(".")
    return int(generation) if generation.isdigit() else -1


class DurableStorage:
    """Owns the MetadataStore and the queue-file directories of one data directory."""

    def __init__(self, data_dir: str, metadata_url: str | None = None,
                 wall_clock: Callable[[], float] = time.time):
        self.reads = ReadPool()     # paged-out bodies and stream records are read there
        # seconds since the epoch: streams stamp messages and judge max-age with it
        self.wall_clock = wall_clock
        self.queues_dir = os.path.join(data_dir, QUEUES_DIRECTORY)
        os.makedirs(self.queues_dir, exist_ok=True)
        self.delayed_dir = os.path.join(data_dir, DELAYED_DIRECTORY)
        os.makedirs(self.delayed_dir, exist_ok=True)
        # Each delayed store gets a directory of its own, with a generation above every
        # one on disk: a store redeclared before the old one's files are dropped never
        # shares them, and at start-up an exchange's store is its newest generation.
        self._delayed_generation = max(
            (delayed_store_generation(name) for name in os.listdir(self.delayed_dir)),
            default=0)
        guest_password = PasswordHash(hash_password(GUEST_PASSWORD), SHA256_ALGORITHM)
        self.metadata = MetadataStore.open(metadata_url, data_dir, guest_password)
        self.persistence = Persistence(self.new_queue_store, self.new_stream_store,
                                       self.new_delayed_store)

    def new_queue_store(self, vhost: str, queue: str) -> DurableQueueStore:
        store_id = uuid.uuid4().hex
        queue_file = QueueFile(os.path.join(self.queues_dir, store_id))
        return DurableQueueStore(queue_file, self.persistence, store_id, self.reads)

    def new_stream_store(self, vhost: str, queue: str,
                         retention: StreamRetention) -> DurableStreamStore:
        store_id = uuid.uuid4().hex
        log_ = StreamLog(os.path.join(self.queues_dir, store_id),
                         **log_settings(retention), clock=self.wall_clock)
        return DurableStreamStore(log_, self.persistence, store_id, self.reads,
                                  clock=self.wall_clock)

    def new_delayed_store(self, vhost: str, exchange: str,
                          durable: bool) -> DurableDelayedStore:
        self._delayed_generation += 1
        store_id = f"{delayed_store_prefix(vhost, exchange)}.{self._delayed_generation}"
        queue_file = QueueFile(os.path.join(self.delayed_dir, store_id))
        return DurableDelayedStore(queue_file, self.persistence, store_id, self.reads,
                                   exchange, durable)

    # -- committing (worker thread) ---------------------------------------------------

    def apply_changes(self, changes: list[JournalEntry]) -> None:
        """Apply `changes` in order, each in its own transaction, removing each from the
        list once applied: if one fails, the list holds it and those after it."""
        applied = 0
        try:
            for change in changes:
                self._apply(change)
                applied += 1
        finally:
            del changes[:applied]

    def _apply(self, entry: JournalEntry) -> None:
        metadata = self.metadata
        match entry:
            case SaveExchange():
                metadata.save_exchange(entry.vhost, entry.name, entry.type,
                                       entry.auto_delete, entry.internal, entry.arguments)
            case DeleteExchange():
                metadata.delete_exchange(entry.vhost, entry.name)
            case SaveQueue():
                metadata.save_queue(entry.vhost, entry.name, entry.auto_delete,
                                    entry.arguments, entry.queue_id)
            case DeleteQueue():
                metadata.delete_queue(entry.vhost, entry.name)
            case SaveBinding():
                metadata.save_binding(entry.vhost, entry.source, entry.destination_kind,
                                      entry.destination, entry.routing_key,
                                      entry.arguments)
            case DeleteBinding():
                metadata.delete_binding(entry.vhost, entry.source, entry.destination_kind,
                                        entry.destination, entry.routing_key,
                                        entry.arguments)
            case DropStoreFiles():
                entry.store.drop_files()
            case _:
                self._apply_access(entry)

    def _apply_access(self, entry: JournalEntry) -> None:
        """Users, vhosts, permissions, policies and limits."""
        metadata = self.metadata
        match entry:
            case SaveUser():
                metadata.save_user(entry.name, PasswordHash(entry.password_hash,
                                                            entry.algorithm), entry.tags)
            case DeleteUser():
                metadata.delete_user(entry.name)
            case SaveVhost():
                metadata.save_vhost(entry.name, entry.description, entry.tags,
                                    entry.default_queue_type, entry.rabbitmq_line)
            case DeleteVhost():
                metadata.delete_vhost(entry.name)
            case SavePermissions():
                metadata.set_permissions(entry.user, entry.vhost, entry.configure,
                                         entry.write, entry.read)
            case DeletePermissions():
                metadata.clear_permissions(entry.user, entry.vhost)
            case SaveTopicPermissions():
                metadata.set_topic_permissions(entry.user, entry.vhost, entry.exchange,
                                               entry.write, entry.read)
            case DeleteTopicPermissions():
                metadata.clear_topic_permissions(entry.user, entry.vhost, entry.exchange)
            case SavePolicy():
                metadata.save_policy(PolicyRecord(
                    entry.vhost, entry.kind, entry.name, entry.pattern, entry.apply_to,
                    entry.priority, entry.definition))
            case DeletePolicy():
                metadata.delete_policy(entry.vhost, entry.kind, entry.name)
            case SaveVhostLimits():
                metadata.set_vhost_limits(entry.vhost, entry.limits)
            case SaveUserLimits():
                metadata.set_user_limits(entry.user, entry.limits)
            case _:
                raise TypeError(
                    f"no case for journal entry {entry!r} in DurableStorage._apply: "
                    "every entry type of broker/core/ports.py needs one")

    @staticmethod
    def sync_stores(stores: list[CommitStore]) -> int:
        """Write and fsync every store; returns the bytes written to their segments."""
        written = 0
        for store in stores:
            if not store.dropped:
                before = store.written_bytes
                store.sync()
                written += store.written_bytes - before
        return written

    @staticmethod
    def maintain_stores(stores: list[CommitStore]) -> list[CommitStore]:
        """Compaction of queue files (one segment per queue per pass) and retention of
        streams, off the confirm path: the periodic flush runs it. Returns the stores
        that have more to do (the next pass visits them again)."""
        return [store for store in stores if not store.dropped and store.maintain()]

    # -- start-up and shutdown --------------------------------------------------------

    def restore(self, broker: Broker) -> None:
        """Load users, vhosts, limits, durable exchanges, queues (with their messages)
        and bindings into a fresh broker."""
        self._restore_access(broker)
        self._restore_limits(broker)
        known_stores = set()
        known_delayed = set()
        policies = self.metadata.list_policies()
        for vhost_record in self.metadata.list_vhosts():
            vhost = broker.add_vhost(vhost_record.name)
            vhost.describe(VhostMetadata(vhost_record.description, vhost_record.tags,
                                         vhost_record.default_queue_type,
                                         vhost_record.rabbitmq_line))
            self._restore_policies(vhost, policies)
            for exchange in self.metadata.list_exchanges(vhost.name):
                restored = vhost.restore_exchange(exchange.name, exchange.type,
                                                  exchange.auto_delete, exchange.internal,
                                                  exchange.arguments)
                if isinstance(restored, DelayedExchange):
                    known_delayed.add(self._restore_delayed(vhost.name, restored))
            for queue in self.metadata.list_queues(vhost.name):
                known_stores.add(queue.id)
                self._restore_queue(vhost, queue)
            for binding in self.metadata.list_bindings(vhost.name):
                vhost.restore_binding(binding.source, binding.destination_kind,
                                      binding.destination, binding.routing_key,
                                      binding.arguments)
        self._remove_orphans(known_stores)
        self._remove_orphan_delayed(known_delayed)

    def _restore_delayed(self, vhost: str, exchange) -> str | None:
        """A delayed exchange's held messages, from the newest generation of its store
        (a newer one is written only after the metadata commit that declared the
        exchange it belongs to, see docs/delayed-messages.md); returns its id."""
        prefix = delayed_store_prefix(vhost, exchange.name) + "."
        generations = [name for name in os.listdir(self.delayed_dir)
                       if name.startswith(prefix)]
        if not generations:
            exchange.attach(exchange.vhost, self.new_delayed_store(vhost, exchange.name,
                                                                   True))
            return None
        store_id = max(generations, key=delayed_store_generation)
        queue_file, records, problems = QueueFile.recover(
            os.path.join(self.delayed_dir, store_id), load_bodies=False)
        store = DurableDelayedStore(queue_file, self.persistence, store_id, self.reads,
                                    exchange.name, True)
        exchange.restore_pending(store, [held_index(record) for record in records])
        log.info("event=delayed_recovered vhost=%s exchange=%s messages=%d problems=%d",
                 vhost, exchange.name, len(records), len(problems))
        return store_id

    def _remove_orphan_delayed(self, known: set) -> None:
        """Delayed stores of exchanges deleted (or transient) before their files were
        removed, and older generations of a redeclared exchange's store."""
        for name in os.listdir(self.delayed_dir):
            if name not in known:
                shutil.rmtree(os.path.join(self.delayed_dir, name), ignore_errors=True)
                log.info("event=orphan_delayed_files_removed store=%s", name)

    def _restore_access(self, broker: Broker) -> None:
        access = broker.access = AccessControl()
        metadata = self.metadata
        for credential in metadata.credentials():
            access.put_user(User(credential.name, credential.password_hash,
                                 credential.hashing_algorithm, credential.tags))
        for grant in metadata.list_permissions():
            access.set_permissions(grant.user, grant.vhost, grant.configure, grant.write,
                                   grant.read)
        for topic in metadata.list_topic_permissions():
            access.set_topic_permission(topic.user, topic.vhost, TopicPermission(
                topic.exchange, topic.write, topic.read))

    def _restore_limits(self, broker: Broker) -> None:
        for record in self.metadata.list_vhost_limits():
            broker.limits.set_vhost_limits(record.owner, record.limits)
        for record in self.metadata.list_user_limits():
            broker.limits.set_user_limits(record.owner, record.limits)

    @staticmethod
    def _restore_policies(vhost, policies: list[PolicyRecord]) -> None:
        """The vhost's policies, before its exchanges and queues, which take them as
        they are restored. One that is no longer valid is logged and left out."""
        for record in policies:
            if record.vhost != vhost.name:
                continue
            try:
                vhost.policies.put(make_policy(record.vhost, record.kind, record.name,
                                               record.pattern, record.definition,
                                               record.priority, record.apply_to))
            except PolicyError as error:
                log.error("event=policy_not_restored vhost=%s kind=%s name=%s error=%r",
                          record.vhost, record.kind, record.name, str(error))

    def _restore_queue(self, vhost, record) -> None:
        directory = os.path.join(self.queues_dir, record.id)
        if kind_of(record.arguments) is STREAM:
            self._restore_stream(vhost, record, directory)
            return
        queue_file, messages, problems = QueueFile.recover(directory, load_bodies=False)
        store = DurableQueueStore(queue_file, self.persistence, record.id, self.reads)
        vhost.restore_queue(record.name, record.auto_delete, record.arguments, store,
                            messages)
        log.info("event=queue_recovered vhost=%s queue=%s messages=%d problems=%d",
                 vhost.name, record.name, len(messages), len(problems))

    def _restore_stream(self, vhost, record, directory: str) -> None:
        retention = StreamRetention.from_arguments(record.arguments)
        log_, problems = StreamLog.recover(directory, **log_settings(retention),
                                           clock=self.wall_clock)
        store = DurableStreamStore(log_, self.persistence, record.id, self.reads,
                                   clock=self.wall_clock)
        vhost.restore_stream(record.name, record.arguments, store)
        log.info("event=stream_recovered vhost=%s queue=%s first_offset=%d "
                 "next_offset=%d problems=%d", vhost.name, record.name,
                 log_.first_offset, log_.next_offset, len(problems))

    def _remove_orphans(self, known_stores: set) -> None:
        """Queue directories no durable queue refers to: deleted queues whose files
        were not removed before a crash."""
        for name in os.listdir(self.queues_dir):
            if name not in known_stores:
                shutil.rmtree(os.path.join(self.queues_dir, name), ignore_errors=True)
                log.info("event=orphan_queue_files_removed store=%s", name)

    def close(self, broker: Broker) -> None:
        for vhost in broker.vhosts.values():
            for queue in vhost.queues.values():
                if isinstance(queue.store, (DurableQueueStore, DurableStreamStore)):
                    try:
                        queue.store.close()
                    except OSError as error:    # e.g. still no space: nothing confirmed
                        log.error("event=queue_close_failed vhost=%s queue=%s error=%r",
                                  vhost.name, queue.name, error)
            for exchange in vhost.exchanges.values():
                if (isinstance(exchange, DelayedExchange)
                        and isinstance(exchange.store, DurableDelayedStore)):
                    try:
                        exchange.store.close()
                    except OSError as error:
                        log.error("event=delayed_close_failed vhost=%s exchange=%s "
                                  "error=%r", vhost.name, exchange.name, error)
        self.metadata.close()

