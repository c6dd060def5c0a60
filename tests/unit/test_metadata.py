"""The metadata store (storage/metadata.py), its schema and migrations, on SQLite.

`TestMetadataStore` works on whatever database the `target` fixture names;
tests/integration/test_metadata_postgres.py runs the same class on SQLite and PostgreSQL.
"""

import base64
import datetime
import decimal
import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import inspect, select, text

from broker.core import passwords
from storage import migrations, schema
from storage.metadata import (
    AlreadyExists, BindingRecord, ExchangeRecord, MetadataStore, NotFound, PasswordHash,
    PermissionRecord, QueueRecord, UserRecord, VhostRecord, create_metadata_engine,
)

EVERY_FIELD_TYPE = {
    "str": "text ✓", "int": -(2 ** 63), "big": 2 ** 64, "float": 1.5,
    "negative_zero": -0.0,
    "true": True, "false": False, "none": None, "bytes": b"\x00\xff",
    "decimal": decimal.Decimal("1.50"),
    "timestamp": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC),
    "table": {"nested": [1, "two", {"three": 3.0}]}, "array": [[], {}, b""],
}


@dataclass(frozen=True)
class StoreTarget:
    """Where a test's store lives: url None is SQLite in data_dir."""
    url: str | None
    data_dir: str

    def open(self) -> MetadataStore:
        return MetadataStore.open(self.url, self.data_dir, hashed("guest"))


def hashed(password: str) -> PasswordHash:
    """`password` hashed as the broker hashes it (the store only keeps hashes)."""
    return PasswordHash(passwords.hash_password(password), passwords.SHA256_ALGORITHM)


def logs_in(store: MetadataStore, name: str, password: str) -> bool:
    """Whether the broker, loading the store's credentials, lets `name` log in with
    `password`."""
    return any(passwords.verify_password(password, credential.password_hash,
                                         credential.hashing_algorithm)
               for credential in store.credentials() if credential.name == name)


def typed(value):
    """`value` as nested tuples that tell types apart (1 vs 1.0 vs True, -0.0 vs 0.0,
    Decimal exponents, datetime offsets): equal only when the round trip is lossless."""
    if isinstance(value, dict):
        return ("table", sorted((key, typed(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return ("array", [typed(item) for item in value])
    if isinstance(value, (bytes, bytearray)):
        return ("bytes", bytes(value))
    if isinstance(value, (float, decimal.Decimal)):
        return (type(value).__name__, repr(value))
    if isinstance(value, datetime.datetime):
        return ("datetime", value.isoformat())
    return (type(value).__name__, value)


class TestMetadataStore:
    """Every MetadataStore method, migrations and persistence, on the `target` database."""

    @pytest.fixture
    def target(self, tmp_path):
        return StoreTarget(url=None, data_dir=str(tmp_path))

    @pytest.fixture
    def store(self, target):
        with target.open() as store:
            yield store

    # --- opening, defaults, persistence --------------------------------------------------

    def test_fresh_database_has_rabbitmq_defaults(self, store):
        assert store.list_vhosts() == [VhostRecord("/")]
        assert store.list_users() == [UserRecord("guest", ("administrator",))]
        assert logs_in(store, "guest", "guest")
        assert store.permissions("guest", "/") == PermissionRecord("guest", "/", ".*", ".*",
                                                                   ".*")
        assert store.schema_version() == migrations.LATEST_VERSION

    def test_reopened_store_sees_persisted_data(self, target):
        with target.open() as store:
            store.add_vhost("v")
            store.add_user("alice", hashed("secret"), ["monitoring"])
            store.set_permissions("alice", "v", "^a", "^b", "^c")
            store.save_exchange("v", "x", "topic", False, True, {"alternate-exchange": "ae"})
            queue_id = store.save_queue("v", "q", False, {"x-max-length": 10})
            store.save_binding("v", "x", "queue", "q", "a.#", {"k": b"v"})
        with target.open() as store:
            assert store.list_vhosts() == [VhostRecord("/"), VhostRecord("v")]
            assert logs_in(store, "alice", "secret")
            assert store.permissions("alice", "v") == PermissionRecord("alice", "v", "^a",
                                                                       "^b", "^c")
            assert store.list_exchanges("v") == [
                ExchangeRecord("v", "x", "topic", False, True, {"alternate-exchange": "ae"})]
            assert store.list_queues("v") == [
                QueueRecord("v", "q", queue_id, False, {"x-max-length": 10})]
            assert store.list_bindings("v") == [
                BindingRecord("v", "x", "queue", "q", "a.#", {"k": b"v"})]

    def test_reopening_does_not_seed_defaults_again(self, target):
        with target.open() as store:
            store.delete_user("guest")
            store.delete_vhost("/")
        with target.open() as store:
            assert store.list_users() == []
            assert store.list_vhosts() == []

    def test_store_is_usable_from_a_worker_thread(self, store):
        with ThreadPoolExecutor(max_workers=1) as worker:
            worker.submit(store.add_vhost, "from-thread").result()
            vhosts = worker.submit(store.list_vhosts).result()
        assert VhostRecord("from-thread") in vhosts
        assert threading.current_thread() is threading.main_thread()
        assert VhostRecord("from-thread") in store.list_vhosts()

    # --- vhosts --------------------------------------------------------------------------

    def test_add_and_list_vhosts(self, store):
        store.add_vhost("b")
        store.add_vhost("a")
        assert store.list_vhosts() == [VhostRecord("/"), VhostRecord("a"), VhostRecord("b")]

    def test_adding_an_existing_vhost_raises(self, store):
        with pytest.raises(AlreadyExists):
            store.add_vhost("/")

    def test_delete_vhost_cascades_to_its_entities(self, store):
        store.add_vhost("v")
        store.set_permissions("guest", "v")
        store.save_exchange("v", "x", "direct", False, False, {})
        store.save_queue("v", "q", False, {})
        store.save_binding("v", "x", "queue", "q", "k", {})
        assert store.delete_vhost("v") is True
        assert store.list_vhosts() == [VhostRecord("/")]
        assert store.permissions("guest", "v") is None
        store.add_vhost("v")
        assert (store.list_exchanges("v"), store.list_queues("v"),
                store.list_bindings("v")) == ([], [], [])
        assert store.permissions("guest", "v") is None

    def test_deleting_an_unknown_vhost_returns_false(self, store):
        assert store.delete_vhost("missing") is False

    # --- users and permissions -----------------------------------------------------------

    def test_added_user_logs_in_with_its_password(self, store):
        store.add_user("alice", hashed("s3cret ünïcode"), ("management", "policymaker"))
        assert logs_in(store, "alice", "s3cret ünïcode")
        assert not logs_in(store, "alice", "wrong")
        assert not logs_in(store, "alice", "")
        assert not logs_in(store, "nobody", "s3cret ünïcode")
        assert UserRecord("alice", ("management", "policymaker")) in store.list_users()

    def test_user_without_password_cannot_log_in_with_one(self, store):
        store.add_user("certificate-only", None)
        assert not logs_in(store, "certificate-only", "")
        assert UserRecord("certificate-only", ()) in store.list_users()

    def test_user_tags_are_a_collection_of_strings(self, store):
        with pytest.raises(TypeError):
            store.add_user("bob", hashed("pw"), "administrator")
        assert [user.name for user in store.list_users()] == ["guest"]

    def test_adding_an_existing_user_raises(self, store):
        with pytest.raises(AlreadyExists):
            store.add_user("guest", hashed("other"))
        assert logs_in(store, "guest", "guest")

    def test_passwords_are_stored_as_salted_rabbitmq_hashes(self, store, target):
        store.add_user("alice", hashed("secret"))
        store.add_user("bob", hashed("secret"))
        engine = create_metadata_engine(target.url, target.data_dir)
        try:
            with engine.connect() as connection:
                rows = connection.execute(
                    select(schema.users).where(schema.users.c.name.in_(["alice", "bob"])))
                stored = {row.name: row for row in rows}
        finally:
            engine.dispose()
        assert stored["alice"].password_hash != stored["bob"].password_hash  # salted
        for row in stored.values():
            assert "secret" not in row.password_hash
            assert row.hashing_algorithm == "rabbit_password_hashing_sha256"
            raw = base64.b64decode(row.password_hash)
            assert raw[4:] == hashlib.sha256(raw[:4] + b"secret").digest()

    def test_listed_users_carry_no_password_hash(self, store):
        store.add_user("alice", hashed("secret"))
        assert [field.name for field in fields(UserRecord)] == ["name", "tags"]
        assert "secret" not in repr(store.list_users())

    def test_delete_user_removes_its_permissions(self, store):
        store.add_user("alice", hashed("pw"))
        store.set_permissions("alice", "/")
        assert store.delete_user("alice") is True
        assert store.delete_user("alice") is False
        assert not logs_in(store, "alice", "pw")
        store.add_user("alice", hashed("pw"))
        assert store.permissions("alice", "/") is None

    def test_set_permissions_replaces_the_previous_ones(self, store):
        store.add_user("alice", hashed("pw"))
        assert store.permissions("alice", "/") is None
        store.set_permissions("alice", "/")
        assert store.permissions("alice", "/") == PermissionRecord("alice", "/", ".*", ".*",
                                                                   ".*")
        store.set_permissions("alice", "/", configure="", write="^amq\\.", read="x")
        assert store.permissions("alice", "/") == PermissionRecord("alice", "/", "",
                                                                   "^amq\\.", "x")

    def test_permissions_name_existing_users_and_vhosts(self, store):
        with pytest.raises(NotFound):
            store.set_permissions("nobody", "/")
        with pytest.raises(NotFound):
            store.set_permissions("guest", "missing")
        assert store.permissions("nobody", "/") is None
        assert store.permissions("guest", "missing") is None

    # --- exchanges -----------------------------------------------------------------------

    def test_save_and_list_exchanges(self, store):
        store.save_exchange("/", "logs", "fanout", True, False, {})
        store.save_exchange("/", "alerts", "headers", False, True, EVERY_FIELD_TYPE)
        assert store.list_exchanges("/") == [
            ExchangeRecord("/", "alerts", "headers", False, True, EVERY_FIELD_TYPE),
            ExchangeRecord("/", "logs", "fanout", True, False, {})]
        [alerts, _] = store.list_exchanges("/")
        assert typed(alerts.arguments) == typed(EVERY_FIELD_TYPE)

    def test_saving_an_existing_exchange_is_a_no_op(self, store):
        store.save_exchange("/", "x", "direct", False, False, {})
        store.save_exchange("/", "x", "direct", False, False, {})
        store.save_exchange("/", "x", "topic", True, True, {"a": 1})
        assert store.list_exchanges("/") == [
            ExchangeRecord("/", "x", "direct", False, False, {})]

    def test_exchanges_belong_to_their_vhost(self, store):
        store.add_vhost("other")
        store.save_exchange("/", "x", "direct", False, False, {})
        store.save_exchange("other", "x", "fanout", False, False, {})
        assert [exchange.type for exchange in store.list_exchanges("other")] == ["fanout"]
        with pytest.raises(NotFound):
            store.save_exchange("missing", "x", "direct", False, False, {})
        with pytest.raises(NotFound):
            store.list_exchanges("missing")

    def test_delete_exchange_removes_bindings_at_either_end(self, store):
        store.save_exchange("/", "x", "topic", False, False, {})
        store.save_exchange("/", "y", "fanout", False, False, {})
        store.save_queue("/", "q", False, {})
        store.save_binding("/", "x", "queue", "q", "a", {})
        store.save_binding("/", "y", "exchange", "x", "", {})
        store.save_binding("/", "y", "queue", "q", "", {})
        store.save_binding("/", "amq.direct", "queue", "x", "", {})  # a queue named x
        assert store.delete_exchange("/", "x") is True
        assert store.delete_exchange("/", "x") is False
        assert store.delete_exchange("missing", "x") is False
        assert [exchange.name for exchange in store.list_exchanges("/")] == ["y"]
        assert store.list_bindings("/") == [
            BindingRecord("/", "y", "queue", "q", "", {}),
            BindingRecord("/", "amq.direct", "queue", "x", "", {})]

    # --- queues --------------------------------------------------------------------------

    def test_save_and_list_queues(self, store):
        first = store.save_queue("/", "jobs", False, {"x-queue-mode": "lazy"})
        second = store.save_queue("/", "events", True, {})
        assert store.list_queues("/") == [
            QueueRecord("/", "events", second, True, {}),
            QueueRecord("/", "jobs", first, False, {"x-queue-mode": "lazy"})]

    def test_queue_id_is_stable_and_never_reused(self, store):
        queue_id = store.save_queue("/", "q", False, {})
        assert len(queue_id) == 32 and int(queue_id, 16) >= 0
        assert store.save_queue("/", "q", True, {"changed": 1}) == queue_id
        assert store.list_queues("/") == [QueueRecord("/", "q", queue_id, False, {})]
        assert store.save_queue("/", "other", False, {}) != queue_id
        store.delete_queue("/", "q")
        assert store.save_queue("/", "q", False, {}) != queue_id

    def test_credentials_carry_hashes_and_tags_and_permissions_list_grants(self, store):
        store.add_vhost("other")
        store.add_user("alice", hashed("secret"), ("monitoring",))
        store.set_permissions("alice", "other", "^c", "", ".*")
        store.add_user("nobody", None)
        by_name = {credential.name: credential for credential in store.credentials()}
        assert set(by_name) == {"guest", "alice", "nobody"}
        alice = by_name["alice"]
        assert alice.tags == ("monitoring",)
        assert "secret" not in alice.password_hash
        assert passwords.verify_password("secret", alice.password_hash,
                                         alice.hashing_algorithm)
        assert by_name["nobody"].password_hash == ""    # no password login
        assert store.list_permissions() == [
            PermissionRecord("alice", "other", "^c", "", ".*"),
            PermissionRecord("guest", "/", ".*", ".*", ".*")]

    def test_save_user_adds_or_replaces_hash_and_tags(self, store):
        store.save_user("alice", hashed("one"), ("management",))
        store.save_user("alice", hashed("two"), ("administrator",))
        assert logs_in(store, "alice", "two") and not logs_in(store, "alice", "one")
        assert UserRecord("alice", ("administrator",)) in store.list_users()

    def test_a_new_queue_can_be_given_its_id(self, store):
        chosen = "0123456789abcdef0123456789abcdef"
        assert store.save_queue("/", "q", False, {}, queue_id=chosen) == chosen
        assert store.save_queue("/", "q", False, {}, queue_id="f" * 32) == chosen
        assert [record.id for record in store.list_queues("/")] == [chosen]

    def test_queues_belong_to_their_vhost(self, store):
        store.add_vhost("other")
        mine = store.save_queue("/", "q", False, {})
        theirs = store.save_queue("other", "q", False, {})
        assert mine != theirs
        with pytest.raises(NotFound):
            store.save_queue("missing", "q", False, {})
        with pytest.raises(NotFound):
            store.list_queues("missing")

    def test_delete_queue_removes_bindings_to_it(self, store):
        store.save_queue("/", "q", False, {})
        store.save_queue("/", "kept", False, {})
        store.save_binding("/", "amq.topic", "queue", "q", "a.*", {})
        store.save_binding("/", "amq.topic", "queue", "kept", "a.*", {})
        store.save_binding("/", "q", "exchange", "amq.fanout", "", {})  # an exchange q
        assert store.delete_queue("/", "q") is True
        assert store.delete_queue("/", "q") is False
        assert store.delete_queue("missing", "q") is False
        assert [queue.name for queue in store.list_queues("/")] == ["kept"]
        assert store.list_bindings("/") == [
            BindingRecord("/", "amq.topic", "queue", "kept", "a.*", {}),
            BindingRecord("/", "q", "exchange", "amq.fanout", "", {})]

    # --- bindings ------------------------------------------------------------------------

    def test_save_and_list_bindings_in_saved_order(self, store):
        store.save_binding("/", "amq.topic", "queue", "q2", "b.#", {})
        store.save_binding("/", "amq.headers", "queue", "q1", "", {"x-match": "any"})
        store.save_binding("/", "amq.direct", "exchange", "amq.fanout", "k", None)
        assert store.list_bindings("/") == [
            BindingRecord("/", "amq.topic", "queue", "q2", "b.#", {}),
            BindingRecord("/", "amq.headers", "queue", "q1", "", {"x-match": "any"}),
            BindingRecord("/", "amq.direct", "exchange", "amq.fanout", "k", {})]

    def test_binding_identity_includes_arguments(self, store):
        store.save_binding("/", "h", "queue", "q", "", {"x-match": "all", "a": 1})
        store.save_binding("/", "h", "queue", "q", "", {"a": 1, "x-match": "all"})
        store.save_binding("/", "h", "queue", "q", "", {"x-match": "all", "a": 1.0})
        store.save_binding("/", "h", "queue", "q", "", {"x-match": "all", "a": True})
        store.save_binding("/", "h", "queue", "q", "", {})
        assert [typed(binding.arguments) for binding in store.list_bindings("/")] == [
            typed({"a": 1, "x-match": "all"}), typed({"a": 1.0, "x-match": "all"}),
            typed({"a": True, "x-match": "all"}), typed({})]

    def test_delete_binding_matches_the_whole_key(self, store):
        store.save_binding("/", "x", "queue", "q", "k", {"a": 1})
        store.save_binding("/", "x", "queue", "q", "k", {"a": 2})
        assert store.delete_binding("/", "x", "queue", "q", "k", {"a": 3}) is False
        assert store.delete_binding("/", "x", "exchange", "q", "k", {"a": 1}) is False
        assert store.delete_binding("/", "x", "queue", "q", "other", {"a": 1}) is False
        assert store.delete_binding("/", "x", "queue", "q", "k", {"a": 1}) is True
        assert store.delete_binding("/", "x", "queue", "q", "k", {"a": 1}) is False
        assert store.delete_binding("missing", "x", "queue", "q", "k", {}) is False
        assert store.list_bindings("/") == [
            BindingRecord("/", "x", "queue", "q", "k", {"a": 2})]

    def test_bindings_carry_every_field_table_type(self, store):
        store.save_binding("/", "amq.headers", "queue", "q", "", EVERY_FIELD_TYPE)
        [binding] = store.list_bindings("/")
        assert typed(binding.arguments) == typed(EVERY_FIELD_TYPE)
        assert store.delete_binding("/", "amq.headers", "queue", "q", "", EVERY_FIELD_TYPE)

    def test_binding_with_large_arguments(self, store):
        arguments = {f"header-{number}": "v" * 100 for number in range(100)}
        store.save_binding("/", "amq.headers", "queue", "q", "", arguments)
        store.save_binding("/", "amq.headers", "queue", "q", "", arguments)
        assert store.list_bindings("/") == [
            BindingRecord("/", "amq.headers", "queue", "q", "", arguments)]

    def test_binding_destination_kind_is_queue_or_exchange(self, store):
        with pytest.raises(ValueError):
            store.save_binding("/", "x", "topic", "q", "", {})
        with pytest.raises(ValueError):
            store.delete_binding("/", "x", "topic", "q", "", {})
        with pytest.raises(NotFound):
            store.save_binding("missing", "x", "queue", "q", "", {})
        with pytest.raises(NotFound):
            store.list_bindings("missing")

    # --- migrations ----------------------------------------------------------------------

    def test_version_1_database_is_upgraded_on_open(self, target):
        engine = create_metadata_engine(target.url, target.data_dir)
        try:
            assert migrations.upgrade(engine, target=1) == 0
            with engine.begin() as connection:
                assert migrations.current_version(connection) == 1
                assert not inspect(connection).has_table("queues")
                connection.execute(text("INSERT INTO vhosts (name) VALUES ('old')"))
                connection.execute(text(
                    "INSERT INTO users (name, password_hash, hashing_algorithm, tags_json)"
                    f" VALUES ('old-user', '{passwords.hash_password('pw')}',"
                    " 'rabbit_password_hashing_sha256', '[\"management\"]')"))
        finally:
            engine.dispose()
        with target.open() as store:
            assert store.schema_version() == migrations.LATEST_VERSION == 5
            assert store.list_vhosts() == [VhostRecord("old")]  # not seeded: not fresh
            assert store.list_users() == [UserRecord("old-user", ("management",))]
            assert logs_in(store, "old-user", "pw")
            queue_id = store.save_queue("old", "q", False, {})
            assert store.list_queues("old") == [QueueRecord("old", "q", queue_id, False, {})]

    def test_version_3_vhosts_get_empty_metadata_that_can_then_be_kept(self, target):
        engine = create_metadata_engine(target.url, target.data_dir)
        try:
            migrations.upgrade(engine, target=3)
            with engine.begin() as connection:
                connection.execute(text("INSERT INTO vhosts (name) VALUES ('old')"))
        finally:
            engine.dispose()
        with target.open() as store:
            assert store.schema_version() == 5
            assert store.list_vhosts() == [VhostRecord("old", "", (), None)]
            store.save_vhost("old", "described", ("t1", "t2"), "quorum")
        with target.open() as store:
            assert store.list_vhosts() == [VhostRecord("old", "described", ("t1", "t2"),
                                                       "quorum")]

    def test_version_4_vhosts_get_the_brokers_line_and_can_be_given_one(self, target):
        engine = create_metadata_engine(target.url, target.data_dir)
        try:
            migrations.upgrade(engine, target=4)
            with engine.begin() as connection:
                connection.execute(text("INSERT INTO vhosts (name, default_queue_type) "
                                        "VALUES ('old', 'quorum')"))
        finally:
            engine.dispose()
        with target.open() as store:
            assert store.list_vhosts() == [VhostRecord("old", "", (), "quorum", None)]
            store.save_vhost("old", "", (), "quorum", "3.10")
        with target.open() as store:
            assert store.list_vhosts() == [VhostRecord("old", "", (), "quorum", "3.10")]

    def test_save_vhost_adds_or_replaces_its_metadata(self, store):
        store.save_vhost("v", "first", ("a",), "stream")
        store.save_vhost("v", "second", ())
        assert store.list_vhosts() == [VhostRecord("/"), VhostRecord("v", "second")]
        with pytest.raises(TypeError, match="iterable of str"):
            store.save_vhost("v", "", "a,b")

    def test_failed_migration_leaves_the_previous_version(self, target, monkeypatch):
        create_topology = migrations.MIGRATIONS[1]

        def broken_migration(connection):
            create_topology(connection)
            raise RuntimeError("migration failed halfway")

        engine = create_metadata_engine(target.url, target.data_dir)
        try:
            migrations.upgrade(engine, target=1)
            monkeypatch.setattr(migrations, "MIGRATIONS",
                                [migrations.MIGRATIONS[0], broken_migration])
            with pytest.raises(RuntimeError, match="halfway"):
                migrations.upgrade(engine, target=2)
            with engine.connect() as connection:
                assert migrations.current_version(connection) == 1
                assert not inspect(connection).has_table("exchanges")  # DDL rolled back
        finally:
            engine.dispose()

    def test_schema_version_table_records_each_migration(self, store, target):
        engine = create_metadata_engine(target.url, target.data_dir)
        try:
            with engine.connect() as connection:
                rows = connection.execute(select(migrations.schema_version)
                                          .order_by(migrations.schema_version.c.version))
                recorded = [(row.version, row.description) for row in rows]
        finally:
            engine.dispose()
        assert recorded == [
            (1, "Vhosts, users with salted password hashes, per-vhost permissions."),
            (2, "Durable exchanges, durable queues with stable ids, bindings."),
            (3, "Topic permissions, policies and operator policies, vhost and user limits."),
            (4, "Vhost description, tags and default queue type."),
            (5, "The RabbitMQ line a vhost behaves as (NULL: the broker's).")]

    def test_database_from_a_newer_warren_is_refused(self, target):
        with target.open():
            pass
        engine = create_metadata_engine(target.url, target.data_dir)
        try:
            with engine.begin() as connection:
                connection.execute(migrations.schema_version.insert().values(
                    version=99, description="future",
                    applied_at=datetime.datetime.now(datetime.UTC)))
        finally:
            engine.dispose()
        with pytest.raises(migrations.SchemaTooNew, match="99"):
            target.open()

    def test_migrations_build_the_schema_module_tables(self, store, target):
        engine = create_metadata_engine(target.url, target.data_dir)
        try:
            with engine.connect() as connection:
                assert database_shape(connection) == metadata_shape(connection.dialect)
        finally:
            engine.dispose()


# --- comparing a migrated database with storage/schema.py -------------------------------

def database_shape(connection) -> dict:
    inspector = inspect(connection)
    names = sorted(set(inspector.get_table_names()) - {"schema_version"})
    return {name: {
        "columns": {column["name"]: (column["type"].compile(connection.dialect),
                                     column["nullable"])
                    for column in inspector.get_columns(name)},
        "primary_key": tuple(inspector.get_pk_constraint(name)["constrained_columns"]),
        "unique": {(unique["name"], tuple(unique["column_names"]))
                   for unique in inspector.get_unique_constraints(name)},
        "foreign_keys": {(fk["name"], tuple(fk["constrained_columns"]), fk["referred_table"],
                          tuple(fk["referred_columns"]), fk["options"].get("ondelete"))
                         for fk in inspector.get_foreign_keys(name)},
        "indexes": {(index["name"], tuple(index["column_names"]), index["unique"])
                    for index in inspector.get_indexes(name)
                    if "duplicates_constraint" not in index},
        "checks": {check["name"] for check in inspector.get_check_constraints(name)},
    } for name in names}


def metadata_shape(dialect) -> dict:
    return {table.name: {
        "columns": {column.name: (column.type.compile(dialect), column.nullable)
                    for column in table.columns},
        "primary_key": tuple(column.name for column in table.primary_key),
        "unique": {(constraint.name, tuple(column.name for column in constraint.columns))
                   for constraint in table.constraints
                   if type(constraint).__name__ == "UniqueConstraint"},
        "foreign_keys": {(fk.name, tuple(fk.column_keys), fk.referred_table.name,
                          tuple(element.column.name for element in fk.elements), fk.ondelete)
                         for fk in table.foreign_key_constraints},
        "indexes": {(index.name, tuple(column.name for column in index.columns),
                     bool(index.unique)) for index in table.indexes},
        "checks": {constraint.name for constraint in table.constraints
                   if type(constraint).__name__ == "CheckConstraint"},
    } for table in sorted(schema.metadata.tables.values(), key=lambda table: table.name)}


# --- SQLite specifics --------------------------------------------------------------------

def test_sqlite_database_lives_in_the_data_directory(tmp_path):
    with MetadataStore.open(None, str(tmp_path / "data"), hashed("guest")):
        pass
    assert (tmp_path / "data" / "metadata.sqlite3").is_file()


def test_sqlite_connections_get_the_pragmas(tmp_path):
    engine = create_metadata_engine(None, str(tmp_path))
    try:
        with engine.connect() as connection:
            pragma = {name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                      for name in ("journal_mode", "synchronous", "foreign_keys",
                                   "busy_timeout")}
    finally:
        engine.dispose()
    assert pragma == {"journal_mode": "wal", "synchronous": 1, "foreign_keys": 1,
                      "busy_timeout": 5000}


# --- passwords ---------------------------------------------------------------------------

def test_password_hash_is_rabbitmq_sha256_format():
    stored = passwords.hash_password("guest")
    raw = base64.b64decode(stored)
    assert len(raw) == 4 + 32
    assert raw[4:] == hashlib.sha256(raw[:4] + b"guest").digest()
    assert passwords.verify_password("guest", stored)
    assert not passwords.verify_password("Guest", stored)
    assert passwords.hash_password("guest") != stored


def test_password_verification_rejects_malformed_hashes():
    stored = passwords.hash_password("pw")
    assert not passwords.verify_password("pw", "")
    assert not passwords.verify_password("pw", "not base64!")
    assert not passwords.verify_password("pw", base64.b64encode(b"abc").decode())
    assert not passwords.verify_password("pw", stored, "rabbit_password_hashing_md5")


# --- AMQP field tables as JSON -----------------------------------------------------------

# Whole-minute UTC offsets: what ISO 8601 (and any real time zone) can express.
timezones = st.none() | st.integers(-23 * 60 - 59, 23 * 60 + 59).map(
    lambda minutes: datetime.timezone(datetime.timedelta(minutes=minutes)))
field_scalars = (st.none() | st.booleans() | st.integers() | st.floats() | st.text()
                 | st.binary() | st.decimals() | st.datetimes(timezones=timezones))
field_values = st.recursive(
    field_scalars,
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=20)
field_tables = st.dictionaries(st.text(max_size=12), field_values, max_size=6)


@given(field_tables)
def test_field_table_json_round_trip_is_lossless(table):
    assert typed(schema.decode_arguments(schema.encode_arguments(table))) == typed(table)


@given(field_tables)
def test_field_table_json_is_canonical(table):
    reordered = dict(reversed(list(table.items())))
    encoded = schema.encode_arguments(table)
    assert schema.encode_arguments(reordered) == encoded
    assert encoded.isascii()


def test_field_table_json_is_readable():
    assert schema.encode_arguments(None) == "{}"
    assert schema.encode_arguments({"x-match": "all", "n": 1, "b": b"\x01",
                                    "t": {"inner": float("inf")}}) == (
        '{"b":{"bytes":"AQ=="},"n":1,"t":{"table":{"inner":{"float":"inf"}}},'
        '"x-match":"all"}')


def test_field_table_json_refuses_what_amqp_cannot_carry():
    with pytest.raises(TypeError):
        schema.encode_arguments({"set": {1, 2}})
    with pytest.raises(TypeError):
        schema.encode_arguments({"table": {1: "integer key"}})
