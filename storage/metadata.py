"""The metadata store: vhosts, users, permissions, topic permissions, policies, limits,
durable exchanges, queues, bindings.

Plain synchronous SQLAlchemy Core; every public method is one transaction and takes and
returns plain values and frozen dataclasses. The broker reads it at start-up, before it
serves, and writes it from the group committer's worker thread (broker/server/committer.py,
started with `trio.lowlevel.start_thread_soon`), one commit at a time, which also
serialises SQLite's one writer.

SQLite (the default, `<data_dir>/metadata.sqlite3`) or any SQLAlchemy URL, for example
postgresql+psycopg://user@host/db. Conventions: `add_*` raises AlreadyExists for a name
in use; naming a vhost or user that does not exist raises NotFound; `save_*` of
something already saved is a no-op; `delete_*` returns whether something was deleted.
Password hashes are made and checked by the broker (broker/core/passwords.py) and kept
here as given (`PasswordHash`).
"""

import json
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import (
    Connection, CursorResult, Engine, and_, create_engine, delete, event, insert, or_, select,
    update,
)
from sqlalchemy.engine import URL, make_url

from storage import migrations
from storage.schema import (
    DESTINATION_KINDS, arguments_digest, bindings, decode_arguments, encode_arguments,
    exchanges, policies, queues, topic_permissions, user_limits, users, vhost_limits,
    vhosts,
)
from storage.schema import permissions as permissions_table

SQLITE_FILE_NAME = "metadata.sqlite3"
SQLITE_PRAGMAS = ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON",
                  "busy_timeout=5000")
DEFAULT_VHOST = "/"
DEFAULT_USER = "guest"
FULL_ACCESS = ".*"
POLICY_KINDS = ("policy", "operator_policy")


class MetadataError(Exception):
    """A metadata operation that cannot be carried out as asked."""


class NotFound(MetadataError, LookupError):
    """A named vhost or user does not exist."""


class AlreadyExists(MetadataError):
    """A vhost or user of that name exists already."""


@dataclass(frozen=True)
class PasswordHash:
    """A salted password hash and the name of its algorithm, made by the broker: the
    store keeps it as given and never reads it."""
    text: str
    algorithm: str


NO_PASSWORD = PasswordHash("", "")   # stored for a user without one: no password login


@dataclass(frozen=True)
class VhostRecord:
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    default_queue_type: str | None = None   # None: queues are declared as the client says
    rabbitmq_line: str | None = None   # the RabbitMQ line it behaves as; None: the broker's


@dataclass(frozen=True)
class Credential:
    """What the broker needs to authenticate a user: the salted hash (never a plain
    password; "" for a user without one) and the user's tags."""
    name: str
    password_hash: str
    hashing_algorithm: str
    tags: tuple[str, ...]


@dataclass(frozen=True)
class UserRecord:
    """A user as listed: never the password hash."""
    name: str
    tags: tuple[str, ...]


@dataclass(frozen=True)
class PermissionRecord:
    user: str
    vhost: str
    configure: str
    write: str
    read: str


@dataclass(frozen=True)
class TopicPermissionRecord:
    user: str
    vhost: str
    exchange: str
    write: str
    read: str


@dataclass(frozen=True)
class PolicyRecord:
    vhost: str
    kind: str          # "policy" or "operator_policy"
    name: str
    pattern: str
    apply_to: str      # "queues", "exchanges" or "all"
    priority: int
    definition: dict


@dataclass(frozen=True)
class LimitsRecord:
    owner: str         # the vhost's or the user's name
    limits: dict       # e.g. {"max-connections": 10}


@dataclass(frozen=True)
class ExchangeRecord:
    vhost: str
    name: str
    type: str
    auto_delete: bool
    internal: bool
    arguments: dict


@dataclass(frozen=True)
class QueueRecord:
    vhost: str
    name: str
    id: str  # stable for the queue's life, never reused: names its queue-file directory
    auto_delete: bool
    arguments: dict


@dataclass(frozen=True)
class BindingRecord:
    vhost: str
    source: str
    destination_kind: str  # "queue" or "exchange"
    destination: str
    routing_key: str
    arguments: dict


def create_metadata_engine(url: str | None, data_dir: str) -> Engine:
    """An engine for `url`, or for the SQLite file in `data_dir` when url is None.

    hide_parameters keeps bound values (password hashes) out of errors and logs."""
    if url is None:
        os.makedirs(data_dir, exist_ok=True)
        address = URL.create("sqlite", database=os.path.join(data_dir, SQLITE_FILE_NAME))
    else:
        address = make_url(url)
    if address.get_backend_name() != "sqlite":
        return create_engine(address, pool_pre_ping=True, hide_parameters=True)
    engine = create_engine(address, hide_parameters=True,
                           connect_args={"check_same_thread": False})
    _configure_sqlite(engine)
    return engine


def _configure_sqlite(engine: Engine) -> None:
    """Pragmas on every new connection, and a real BEGIN for every transaction.

    sqlite3's legacy mode starts no transaction before DDL or SELECT; taking over BEGIN
    makes migrations transactional. IMMEDIATE takes the write lock up front, so a
    read-then-write transaction waits (busy_timeout) instead of failing halfway.
    """
    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")


class MetadataStore:
    """Durable broker metadata in a SQL database (see the module docstring)."""

    def __init__(self, engine: Engine):
        self._engine = engine

    @classmethod
    def open(cls, url: str | None, data_dir: str,
             guest_password: PasswordHash) -> "MetadataStore":
        """Open (creating or upgrading) the database; a new one gets RabbitMQ's
        defaults: vhost "/" and user guest (administrator) with full access, whose
        password is `guest_password` (the broker's hash of "guest")."""
        engine = create_metadata_engine(url, data_dir)
        try:
            with engine.begin() as connection:
                if migrations.upgrade_connection(connection) == 0:
                    _seed_defaults(connection, guest_password)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> "MetadataStore":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def schema_version(self) -> int:
        with self._engine.connect() as connection:
            return migrations.current_version(connection)

    # --- vhosts -------------------------------------------------------------------------

    def add_vhost(self, name: str) -> None:
        with self._engine.begin() as connection:
            _insert_vhost(connection, name)

    def delete_vhost(self, name: str) -> bool:
        """Delete the vhost with its permissions, exchanges, queues and bindings."""
        with self._engine.begin() as connection:
            return _deleted(connection.execute(delete(vhosts).where(vhosts.c.name == name)))

    def list_vhosts(self) -> list[VhostRecord]:
        with self._engine.begin() as connection:
            rows = connection.execute(
                select(vhosts.c.name, vhosts.c.description, vhosts.c.tags_json,
                       vhosts.c.default_queue_type, vhosts.c.rabbitmq_line)
                .order_by(vhosts.c.name))
            return [VhostRecord(row.name, row.description, tuple(json.loads(row.tags_json)),
                                row.default_queue_type, row.rabbitmq_line) for row in rows]

    # --- users and permissions ----------------------------------------------------------

    def add_user(self, name: str, password: PasswordHash | None,
                 tags: Iterable[str] = ()) -> None:
        """Add a user; password None means the user cannot log in with a password."""
        with self._engine.begin() as connection:
            _insert_user(connection, name, password, tags)

    def delete_user(self, name: str) -> bool:
        """Delete the user with its permissions."""
        with self._engine.begin() as connection:
            return _deleted(connection.execute(delete(users).where(users.c.name == name)))

    def list_users(self) -> list[UserRecord]:
        with self._engine.begin() as connection:
            rows = connection.execute(
                select(users.c.name, users.c.tags_json).order_by(users.c.name))
            return [UserRecord(row.name, tuple(json.loads(row.tags_json))) for row in rows]

    def set_permissions(self, user: str, vhost: str, configure: str = FULL_ACCESS,
                        write: str = FULL_ACCESS, read: str = FULL_ACCESS) -> None:
        """Set (replace) the user's permission patterns on the vhost."""
        with self._engine.begin() as connection:
            _set_permissions(connection, _user_id(connection, user),
                             _vhost_id(connection, vhost), configure, write, read)

    def save_user(self, name: str, password: PasswordHash | None,
                  tags: Iterable[str] = ()) -> None:
        """Add the user, or replace its password hash and tags."""
        if isinstance(tags, str):
            raise TypeError("tags must be an iterable of str, not one str")
        password = password or NO_PASSWORD
        values = {"password_hash": password.text, "hashing_algorithm": password.algorithm,
                  "tags_json": json.dumps(list(tags))}
        with self._engine.begin() as connection:
            user_id = connection.scalar(select(users.c.id).where(users.c.name == name))
            if user_id is None:
                connection.execute(insert(users).values(name=name, **values))
            else:
                connection.execute(update(users).where(users.c.id == user_id)
                                   .values(**values))

    def save_vhost(self, name: str, description: str = "", tags: Iterable[str] = (),
                   default_queue_type: str | None = None,
                   rabbitmq_line: str | None = None) -> None:
        """Add the vhost, or replace its description, tags, default queue type and
        RabbitMQ line."""
        if isinstance(tags, str):
            raise TypeError("tags must be an iterable of str, not one str")
        values = {"description": description, "tags_json": json.dumps(list(tags)),
                  "default_queue_type": default_queue_type, "rabbitmq_line": rabbitmq_line}
        with self._engine.begin() as connection:
            vhost_id = _vhost_id_or_none(connection, name)
            if vhost_id is None:
                connection.execute(insert(vhosts).values(name=name, **values))
            else:
                connection.execute(update(vhosts).where(vhosts.c.id == vhost_id)
                                   .values(**values))

    def clear_permissions(self, user: str, vhost: str) -> bool:
        with self._engine.begin() as connection:
            table = permissions_table
            return _deleted(connection.execute(delete(table).where(
                table.c.user_id == _user_id(connection, user),
                table.c.vhost_id == _vhost_id(connection, vhost))))

    def credentials(self) -> list[Credential]:
        """Every user, for the broker to check logins in memory."""
        with self._engine.begin() as connection:
            rows = connection.execute(
                select(users.c.name, users.c.password_hash, users.c.hashing_algorithm,
                       users.c.tags_json).order_by(users.c.name)).all()
        return [Credential(row.name, row.password_hash, row.hashing_algorithm,
                           tuple(json.loads(row.tags_json))) for row in rows]

    def list_permissions(self) -> list[PermissionRecord]:
        table = permissions_table
        with self._engine.begin() as connection:
            rows = connection.execute(
                select(users.c.name.label("user"), vhosts.c.name.label("vhost"),
                       table.c.configure, table.c.write, table.c.read)
                .join(users, users.c.id == table.c.user_id)
                .join(vhosts, vhosts.c.id == table.c.vhost_id)
                .order_by(users.c.name, vhosts.c.name)).all()
        return [PermissionRecord(row.user, row.vhost, row.configure, row.write, row.read)
                for row in rows]

    # --- topic permissions --------------------------------------------------------------

    def set_topic_permissions(self, user: str, vhost: str, exchange: str, write: str,
                              read: str) -> None:
        """Set (replace) the user's routing-key patterns for a topic exchange."""
        table = topic_permissions
        with self._engine.begin() as connection:
            key = {"user_id": _user_id(connection, user),
                   "vhost_id": _vhost_id(connection, vhost), "exchange": exchange}
            connection.execute(delete(table).where(
                *(table.c[column] == value for column, value in key.items())))
            connection.execute(insert(table).values(**key, write=write, read=read))

    def clear_topic_permissions(self, user: str, vhost: str,
                                exchange: str | None = None) -> bool:
        """Clear the user's topic permissions on one exchange, or on all of them."""
        table = topic_permissions
        with self._engine.begin() as connection:
            where = [table.c.user_id == _user_id(connection, user),
                     table.c.vhost_id == _vhost_id(connection, vhost)]
            if exchange is not None:
                where.append(table.c.exchange == exchange)
            return _deleted(connection.execute(delete(table).where(*where)))

    def list_topic_permissions(self) -> list[TopicPermissionRecord]:
        table = topic_permissions
        with self._engine.begin() as connection:
            rows = connection.execute(
                select(users.c.name.label("user"), vhosts.c.name.label("vhost"),
                       table.c.exchange, table.c.write, table.c.read)
                .join(users, users.c.id == table.c.user_id)
                .join(vhosts, vhosts.c.id == table.c.vhost_id)
                .order_by(users.c.name, vhosts.c.name, table.c.exchange)).all()
        return [TopicPermissionRecord(row.user, row.vhost, row.exchange, row.write,
                                      row.read) for row in rows]

    # --- policies -----------------------------------------------------------------------

    def save_policy(self, record: PolicyRecord) -> None:
        """Add the policy (or operator policy), or replace the one of that name."""
        if record.kind not in POLICY_KINDS:
            raise ValueError(f"kind must be one of {POLICY_KINDS}, not {record.kind!r}")
        with self._engine.begin() as connection:
            vhost_id = _vhost_id(connection, record.vhost)
            connection.execute(delete(policies).where(
                policies.c.vhost_id == vhost_id, policies.c.kind == record.kind,
                policies.c.name == record.name))
            connection.execute(insert(policies).values(
                vhost_id=vhost_id, kind=record.kind, name=record.name,
                pattern=record.pattern, apply_to=record.apply_to,
                priority=record.priority,
                definition_json=json.dumps(record.definition, sort_keys=True)))

    def delete_policy(self, vhost: str, kind: str, name: str) -> bool:
        with self._engine.begin() as connection:
            return _deleted(connection.execute(delete(policies).where(
                policies.c.vhost_id == _vhost_id(connection, vhost),
                policies.c.kind == kind, policies.c.name == name)))

    def list_policies(self) -> list[PolicyRecord]:
        with self._engine.begin() as connection:
            rows = connection.execute(
                select(policies, vhosts.c.name.label("vhost"))
                .join(vhosts, vhosts.c.id == policies.c.vhost_id)
                .order_by(vhosts.c.name, policies.c.kind, policies.c.name)).all()
        return [PolicyRecord(row.vhost, row.kind, row.name, row.pattern, row.apply_to,
                             row.priority, json.loads(row.definition_json))
                for row in rows]

    # --- limits -------------------------------------------------------------------------

    def set_vhost_limits(self, vhost: str, limits: Mapping) -> None:
        """Replace the vhost's limits ({} clears them)."""
        with self._engine.begin() as connection:
            _replace_limits(connection, vhost_limits, vhost_limits.c.vhost_id,
                            _vhost_id(connection, vhost), limits)

    def set_user_limits(self, user: str, limits: Mapping) -> None:
        """Replace the user's limits ({} clears them)."""
        with self._engine.begin() as connection:
            _replace_limits(connection, user_limits, user_limits.c.user_id,
                            _user_id(connection, user), limits)

    def list_vhost_limits(self) -> list[LimitsRecord]:
        return self._list_limits(vhost_limits, vhosts, vhost_limits.c.vhost_id)

    def list_user_limits(self) -> list[LimitsRecord]:
        return self._list_limits(user_limits, users, user_limits.c.user_id)

    def _list_limits(self, table, owners, owner_id) -> list[LimitsRecord]:
        with self._engine.begin() as connection:
            rows = connection.execute(
                select(owners.c.name, table.c.limits_json)
                .join(owners, owners.c.id == owner_id).order_by(owners.c.name)).all()
        return [LimitsRecord(row.name, json.loads(row.limits_json)) for row in rows]

    def permissions(self, user: str, vhost: str) -> PermissionRecord | None:
        """The user's permissions on the vhost; None when it has none."""
        table = permissions_table
        query = (select(table.c.configure, table.c.write, table.c.read)
                 .join(users, users.c.id == table.c.user_id)
                 .join(vhosts, vhosts.c.id == table.c.vhost_id)
                 .where(users.c.name == user, vhosts.c.name == vhost))
        with self._engine.begin() as connection:
            row = connection.execute(query).first()
        if row is None:
            return None
        return PermissionRecord(user, vhost, row.configure, row.write, row.read)

    # --- durable exchanges --------------------------------------------------------------

    def save_exchange(self, vhost: str, name: str, type: str, auto_delete: bool = False,
                      internal: bool = False, arguments: Mapping | None = None) -> None:
        """Persist a durable exchange; a no-op when the vhost has one of that name."""
        with self._engine.begin() as connection:
            vhost_id = _vhost_id(connection, vhost)
            if _exchange_exists(connection, vhost_id, name):
                return
            connection.execute(insert(exchanges).values(
                vhost_id=vhost_id, name=name, type=type, auto_delete=auto_delete,
                internal=internal, arguments_json=encode_arguments(arguments)))

    def delete_exchange(self, vhost: str, name: str) -> bool:
        """Delete the exchange and the bindings it is the source or destination of."""
        with self._engine.begin() as connection:
            vhost_id = _vhost_id_or_none(connection, vhost)
            if vhost_id is None:
                return False
            _delete_bindings_of(connection, vhost_id, "exchange", name)
            return _deleted(connection.execute(delete(exchanges).where(
                exchanges.c.vhost_id == vhost_id, exchanges.c.name == name)))

    def list_exchanges(self, vhost: str) -> list[ExchangeRecord]:
        with self._engine.begin() as connection:
            rows = connection.execute(
                select(exchanges).where(exchanges.c.vhost_id == _vhost_id(connection, vhost))
                .order_by(exchanges.c.name))
            return [ExchangeRecord(vhost, row.name, row.type, row.auto_delete, row.internal,
                                   decode_arguments(row.arguments_json)) for row in rows]

    # --- durable queues -----------------------------------------------------------------

    def save_queue(self, vhost: str, name: str, auto_delete: bool = False,
                   arguments: Mapping | None = None, queue_id: str | None = None) -> str:
        """Persist a durable queue; returns its stable id (the existing one when the
        vhost has a queue of that name already). `queue_id` chooses the id of a new
        queue (the broker names the queue's directory before the write commits)."""
        with self._engine.begin() as connection:
            vhost_id = _vhost_id(connection, vhost)
            existing = connection.scalar(select(queues.c.id).where(
                queues.c.vhost_id == vhost_id, queues.c.name == name))
            if existing is not None:
                return existing
            queue_id = queue_id or uuid.uuid4().hex
            connection.execute(insert(queues).values(
                id=queue_id, vhost_id=vhost_id, name=name, auto_delete=auto_delete,
                arguments_json=encode_arguments(arguments)))
            return queue_id

    def delete_queue(self, vhost: str, name: str) -> bool:
        """Delete the queue and the bindings to it."""
        with self._engine.begin() as connection:
            vhost_id = _vhost_id_or_none(connection, vhost)
            if vhost_id is None:
                return False
            _delete_bindings_of(connection, vhost_id, "queue", name)
            return _deleted(connection.execute(delete(queues).where(
                queues.c.vhost_id == vhost_id, queues.c.name == name)))

    def list_queues(self, vhost: str) -> list[QueueRecord]:
        with self._engine.begin() as connection:
            rows = connection.execute(
                select(queues).where(queues.c.vhost_id == _vhost_id(connection, vhost))
                .order_by(queues.c.name))
            return [QueueRecord(vhost, row.name, row.id, row.auto_delete,
                                decode_arguments(row.arguments_json)) for row in rows]

    # --- bindings -----------------------------------------------------------------------

    def save_binding(self, vhost: str, source: str, destination_kind: str,
                     destination: str, routing_key: str,
                     arguments: Mapping | None = None) -> None:
        """Persist a binding; a no-op when an identical one (arguments included) exists."""
        _check_destination_kind(destination_kind)
        arguments_json = encode_arguments(arguments)
        with self._engine.begin() as connection:
            vhost_id = _vhost_id(connection, vhost)
            key = _binding_key(vhost_id, source, destination_kind, destination,
                               routing_key, arguments_json)
            if connection.scalar(select(bindings.c.id).where(*key)) is not None:
                return
            connection.execute(insert(bindings).values(
                vhost_id=vhost_id, source=source, destination_kind=destination_kind,
                destination=destination, routing_key=routing_key,
                arguments_json=arguments_json,
                arguments_digest=arguments_digest(arguments_json)))

    def delete_binding(self, vhost: str, source: str, destination_kind: str,
                       destination: str, routing_key: str,
                       arguments: Mapping | None = None) -> bool:
        _check_destination_kind(destination_kind)
        arguments_json = encode_arguments(arguments)
        with self._engine.begin() as connection:
            vhost_id = _vhost_id_or_none(connection, vhost)
            if vhost_id is None:
                return False
            key = _binding_key(vhost_id, source, destination_kind, destination,
                               routing_key, arguments_json)
            return _deleted(connection.execute(delete(bindings).where(*key)))

    def list_bindings(self, vhost: str) -> list[BindingRecord]:
        """The vhost's bindings in the order they were saved."""
        with self._engine.begin() as connection:
            rows = connection.execute(
                select(bindings).where(bindings.c.vhost_id == _vhost_id(connection, vhost))
                .order_by(bindings.c.id))
            return [BindingRecord(vhost, row.source, row.destination_kind, row.destination,
                                  row.routing_key, decode_arguments(row.arguments_json))
                    for row in rows]


def _replace_limits(connection: Connection, table, owner_column, owner_id: int,
                    limits: Mapping) -> None:
    connection.execute(delete(table).where(owner_column == owner_id))
    if limits:
        connection.execute(insert(table).values(
            {owner_column.name: owner_id,
             "limits_json": json.dumps(dict(limits), sort_keys=True)}))


# --- statements shared by the methods (each runs inside the caller's transaction) ------

def _seed_defaults(connection: Connection, guest_password: PasswordHash) -> None:
    vhost_id = _insert_vhost(connection, DEFAULT_VHOST)
    user_id = _insert_user(connection, DEFAULT_USER, guest_password, ("administrator",))
    _set_permissions(connection, user_id, vhost_id, FULL_ACCESS, FULL_ACCESS, FULL_ACCESS)


def _insert_vhost(connection: Connection, name: str) -> int:
    if _vhost_id_or_none(connection, name) is not None:
        raise AlreadyExists(f"vhost '{name}' already exists")
    return _inserted_id(connection.execute(insert(vhosts).values(name=name)))


def _insert_user(connection: Connection, name: str, password: PasswordHash | None,
                 tags: Iterable[str]) -> int:
    if isinstance(tags, str):
        raise TypeError("tags must be an iterable of str, not one str")
    if connection.scalar(select(users.c.id).where(users.c.name == name)) is not None:
        raise AlreadyExists(f"user '{name}' already exists")
    if password is None:
        password = NO_PASSWORD
    return _inserted_id(connection.execute(insert(users).values(
        name=name, password_hash=password.text, hashing_algorithm=password.algorithm,
        tags_json=json.dumps(list(tags)))))


def _inserted_id(result: CursorResult) -> int:
    """The primary key of the row a single-row INSERT made."""
    key = result.inserted_primary_key
    assert key is not None, "an INSERT of one row"
    return key[0]


def _set_permissions(connection: Connection, user_id: int, vhost_id: int,
                     configure: str, write: str, read: str) -> None:
    connection.execute(delete(permissions_table).where(
        permissions_table.c.user_id == user_id, permissions_table.c.vhost_id == vhost_id))
    connection.execute(insert(permissions_table).values(
        user_id=user_id, vhost_id=vhost_id, configure=configure, write=write, read=read))


def _vhost_id_or_none(connection: Connection, name: str) -> int | None:
    return connection.scalar(select(vhosts.c.id).where(vhosts.c.name == name))


def _vhost_id(connection: Connection, name: str) -> int:
    vhost_id = _vhost_id_or_none(connection, name)
    if vhost_id is None:
        raise NotFound(f"no vhost '{name}'")
    return vhost_id


def _user_id(connection: Connection, name: str) -> int:
    user_id = connection.scalar(select(users.c.id).where(users.c.name == name))
    if user_id is None:
        raise NotFound(f"no user '{name}'")
    return user_id


def _exchange_exists(connection: Connection, vhost_id: int, name: str) -> bool:
    return connection.scalar(select(exchanges.c.id).where(
        exchanges.c.vhost_id == vhost_id, exchanges.c.name == name)) is not None


def _binding_key(vhost_id: int, source: str, destination_kind: str, destination: str,
                 routing_key: str, arguments_json: str) -> tuple:
    return (bindings.c.vhost_id == vhost_id, bindings.c.source == source,
            bindings.c.destination_kind == destination_kind,
            bindings.c.destination == destination, bindings.c.routing_key == routing_key,
            bindings.c.arguments_digest == arguments_digest(arguments_json),
            bindings.c.arguments_json == arguments_json)


def _delete_bindings_of(connection: Connection, vhost_id: int, kind: str,
                        name: str) -> None:
    """Delete the bindings that have the named queue or exchange at either end."""
    ends = and_(bindings.c.destination_kind == kind, bindings.c.destination == name)
    if kind == "exchange":
        ends = or_(ends, bindings.c.source == name)
    connection.execute(delete(bindings).where(bindings.c.vhost_id == vhost_id, ends))


def _check_destination_kind(kind: str) -> None:
    if kind not in DESTINATION_KINDS:
        raise ValueError(f"destination_kind must be 'queue' or 'exchange', not {kind!r}")


def _deleted(result) -> bool:
    return result.rowcount > 0
