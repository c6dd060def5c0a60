"""Versioned schema migrations for the metadata database.

`MIGRATIONS` is the ordered history: migration N (1-based) takes the schema from
version N-1 to N. Each one carries frozen copies of the table definitions it creates or
changes, never storage/schema.py's current ones, so replaying history always builds the
same database. The `schema_version` table has one row per applied migration; the
current version is the highest. A new migration is appended, never inserted or edited.
"""

import datetime
from collections.abc import Callable

from sqlalchemy import (
    Boolean, CheckConstraint, Column, Connection, DateTime, Engine, ForeignKey, Index,
    Integer, MetaData, String, Table, Text, UniqueConstraint, func, inspect, select, text,
)
from sqlalchemy.schema import CreateColumn

from storage.schema import NAMING_CONVENTION

schema_version = Table(
    "schema_version", MetaData(naming_convention=NAMING_CONVENTION),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("description", Text, nullable=False),
    Column("applied_at", DateTime(timezone=True), nullable=False),
)


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer Warren than this one."""


def _create_access_control(connection: Connection) -> None:
    """Vhosts, users with salted password hashes, per-vhost permissions."""
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    Table("vhosts", metadata,
          Column("id", Integer, primary_key=True),
          Column("name", String(255), nullable=False, unique=True))
    Table("users", metadata,
          Column("id", Integer, primary_key=True),
          Column("name", Text, nullable=False, unique=True),
          Column("password_hash", Text, nullable=False),
          Column("hashing_algorithm", String(64), nullable=False),
          Column("tags_json", Text, nullable=False))
    Table("permissions", metadata,
          Column("user_id", Integer, ForeignKey("users.id", ondelete="CASCADE"),
                 primary_key=True),
          Column("vhost_id", Integer, ForeignKey("vhosts.id", ondelete="CASCADE"),
                 primary_key=True),
          Column("configure", Text, nullable=False),
          Column("write", Text, nullable=False),
          Column("read", Text, nullable=False))
    metadata.create_all(connection)


def _create_durable_topology(connection: Connection) -> None:
    """Durable exchanges, durable queues with stable ids, bindings."""
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    Table("vhosts", metadata, Column("id", Integer, primary_key=True))  # for the keys

    def vhost_id() -> Column:
        return Column("vhost_id", Integer, ForeignKey("vhosts.id", ondelete="CASCADE"),
                      nullable=False)

    exchanges = Table(
        "exchanges", metadata,
        Column("id", Integer, primary_key=True), vhost_id(),
        Column("name", String(255), nullable=False),
        Column("type", String(255), nullable=False),
        Column("auto_delete", Boolean, nullable=False),
        Column("internal", Boolean, nullable=False),
        Column("arguments_json", Text, nullable=False),
        UniqueConstraint("vhost_id", "name"))
    queues = Table(
        "queues", metadata,
        Column("id", String(32), primary_key=True), vhost_id(),
        Column("name", String(255), nullable=False),
        Column("auto_delete", Boolean, nullable=False),
        Column("arguments_json", Text, nullable=False),
        UniqueConstraint("vhost_id", "name"))
    bindings = Table(
        "bindings", metadata,
        Column("id", Integer, primary_key=True), vhost_id(),
        Column("source", String(255), nullable=False),
        Column("destination_kind", String(8), nullable=False),
        Column("destination", String(255), nullable=False),
        Column("routing_key", String(255), nullable=False),
        Column("arguments_json", Text, nullable=False),
        Column("arguments_digest", String(64), nullable=False),
        UniqueConstraint("vhost_id", "source", "destination_kind", "destination",
                         "routing_key", "arguments_digest", name="uq_bindings_identity"),
        CheckConstraint("destination_kind IN ('queue', 'exchange')",
                        name="destination_kind"),
        Index("ix_bindings_destination", "vhost_id", "destination_kind", "destination"))
    metadata.create_all(connection, tables=[exchanges, queues, bindings])


def _add_policies_and_limits(connection: Connection) -> None:
    """Topic permissions, policies and operator policies, vhost and user limits."""
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    Table("vhosts", metadata, Column("id", Integer, primary_key=True))  # for the keys
    Table("users", metadata, Column("id", Integer, primary_key=True))

    def reference(table: str, primary_key: bool) -> Column:
        return Column(f"{table[:-1]}_id", Integer,
                      ForeignKey(f"{table}.id", ondelete="CASCADE"),
                      primary_key=primary_key, nullable=False)

    created = [
        Table("topic_permissions", metadata,
              reference("users", True), reference("vhosts", True),
              Column("exchange", String(255), primary_key=True),
              Column("write", Text, nullable=False),
              Column("read", Text, nullable=False)),
        Table("policies", metadata,
              Column("id", Integer, primary_key=True), reference("vhosts", False),
              Column("kind", String(16), nullable=False),
              Column("name", Text, nullable=False),
              Column("pattern", Text, nullable=False),
              Column("apply_to", String(16), nullable=False),
              Column("priority", Integer, nullable=False),
              Column("definition_json", Text, nullable=False),
              UniqueConstraint("vhost_id", "kind", "name"),
              CheckConstraint("kind IN ('policy', 'operator_policy')", name="kind")),
        Table("vhost_limits", metadata, reference("vhosts", True),
              Column("limits_json", Text, nullable=False)),
        Table("user_limits", metadata, reference("users", True),
              Column("limits_json", Text, nullable=False)),
    ]
    metadata.create_all(connection, tables=created)


def _add_vhost_metadata(connection: Connection) -> None:
    """Vhost description, tags and default queue type."""
    added = [Column("description", Text, nullable=False, server_default=""),
             Column("tags_json", Text, nullable=False, server_default="[]"),
             Column("default_queue_type", String(32), nullable=True)]
    for column in added:
        connection.execute(text(f"ALTER TABLE vhosts ADD COLUMN "
                                f"{CreateColumn(column).compile(connection)}"))


def _add_vhost_rabbitmq_line(connection: Connection) -> None:
    """The RabbitMQ line a vhost behaves as (NULL: the broker's)."""
    column = Column("rabbitmq_line", String(8), nullable=True)
    connection.execute(text(f"ALTER TABLE vhosts ADD COLUMN "
                            f"{CreateColumn(column).compile(connection)}"))


MIGRATIONS: list[Callable[[Connection], None]] = [
    _create_access_control,
    _create_durable_topology,
    _add_policies_and_limits,
    _add_vhost_metadata,
    _add_vhost_rabbitmq_line,
]
LATEST_VERSION = len(MIGRATIONS)


def current_version(connection: Connection) -> int:
    """The schema version of the database; 0 for an empty database."""
    if not inspect(connection).has_table(schema_version.name):
        return 0
    return connection.scalar(select(func.max(schema_version.c.version))) or 0


def upgrade_connection(connection: Connection, target: int = LATEST_VERSION) -> int:
    """Apply the missing migrations up to `target` inside the caller's transaction.

    Returns the version the database had before (0: it was empty).
    """
    start = current_version(connection)
    if start > LATEST_VERSION:
        raise SchemaTooNew(
            f"the metadata database has schema version {start}, newer than the "
            f"{LATEST_VERSION} this Warren knows: upgrade Warren or use another database")
    schema_version.create(connection, checkfirst=True)
    for version in range(start + 1, target + 1):
        migration = MIGRATIONS[version - 1]
        migration(connection)
        connection.execute(schema_version.insert().values(
            version=version, description=_description(migration),
            applied_at=datetime.datetime.now(datetime.UTC)))
    return start


def upgrade(engine: Engine, target: int = LATEST_VERSION) -> int:
    """Apply the missing migrations up to `target` in one transaction.

    Returns the version the database had before (0: it was empty).
    """
    with engine.begin() as connection:
        return upgrade_connection(connection, target)


def _description(migration: Callable) -> str:
    return (migration.__doc__ or migration.__name__).strip().splitlines()[0]
