"""The metadata schema as it stands at the latest migration (SQLAlchemy Core tables),
and the JSON encoding of AMQP field tables stored in its `arguments_json` columns.

storage/migrations.py builds these tables step by step with its own frozen copies of
the definitions; a test checks that the migrated database matches these tables.
"""

import base64
import datetime
import decimal
import hashlib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import (
    Boolean, CheckConstraint, Column, ForeignKey, Index, Integer, MetaData, String, Table,
    Text, UniqueConstraint,
)

# Changing this renames constraints: it needs a migration of its own.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
AMQP_NAME = String(255)  # exchange, queue, vhost names and routing keys are shortstr
DESTINATION_KINDS = ("queue", "exchange")

metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _vhost_reference() -> Column:
    return Column("vhost_id", Integer, ForeignKey("vhosts.id", ondelete="CASCADE"),
                  nullable=False)


vhosts = Table(
    "vhosts", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", AMQP_NAME, nullable=False, unique=True),
    Column("description", Text, nullable=False, server_default=""),
    Column("tags_json", Text, nullable=False, server_default="[]"),  # JSON list of strings
    Column("default_queue_type", String(32), nullable=True),  # NULL: RabbitMQ's "undefined"
    Column("rabbitmq_line", String(8), nullable=True),  # NULL: the broker's line
)

users = Table(
    "users", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", Text, nullable=False, unique=True),
    Column("password_hash", Text, nullable=False),  # "" means: no password login
    Column("hashing_algorithm", String(64), nullable=False),
    Column("tags_json", Text, nullable=False),  # JSON list of strings
)

permissions = Table(
    "permissions", metadata,
    Column("user_id", Integer, ForeignKey("users.id", ondelete="CASCADE"),
           primary_key=True),
    Column("vhost_id", Integer, ForeignKey("vhosts.id", ondelete="CASCADE"),
           primary_key=True),
    Column("configure", Text, nullable=False),
    Column("write", Text, nullable=False),
    Column("read", Text, nullable=False),
)

topic_permissions = Table(
    "topic_permissions", metadata,
    Column("user_id", Integer, ForeignKey("users.id", ondelete="CASCADE"),
           primary_key=True),
    Column("vhost_id", Integer, ForeignKey("vhosts.id", ondelete="CASCADE"),
           primary_key=True),
    Column("exchange", AMQP_NAME, primary_key=True),
    Column("write", Text, nullable=False),
    Column("read", Text, nullable=False),
)

# Policies and operator policies (kind) of a vhost; definition_json is a JSON object.
policies = Table(
    "policies", metadata,
    Column("id", Integer, primary_key=True),
    _vhost_reference(),
    Column("kind", String(16), nullable=False),
    Column("name", Text, nullable=False),
    Column("pattern", Text, nullable=False),
    Column("apply_to", String(16), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("definition_json", Text, nullable=False),
    UniqueConstraint("vhost_id", "kind", "name"),
    CheckConstraint("kind IN ('policy', 'operator_policy')", name="kind"),
)

# Limits as JSON objects, e.g. {"max-connections": 10, "max-queues": 100}.
vhost_limits = Table(
    "vhost_limits", metadata,
    Column("vhost_id", Integer, ForeignKey("vhosts.id", ondelete="CASCADE"),
           primary_key=True),
    Column("limits_json", Text, nullable=False),
)

user_limits = Table(
    "user_limits", metadata,
    Column("user_id", Integer, ForeignKey("users.id", ondelete="CASCADE"),
           primary_key=True),
    Column("limits_json", Text, nullable=False),
)

exchanges = Table(
    "exchanges", metadata,
    Column("id", Integer, primary_key=True),
    _vhost_reference(),
    Column("name", AMQP_NAME, nullable=False),
    Column("type", AMQP_NAME, nullable=False),
    Column("auto_delete", Boolean, nullable=False),
    Column("internal", Boolean, nullable=False),
    Column("arguments_json", Text, nullable=False),
    UniqueConstraint("vhost_id", "name"),
)

queues = Table(
    "queues", metadata,
    Column("id", String(32), primary_key=True),  # uuid4 hex, never reused
    _vhost_reference(),
    Column("name", AMQP_NAME, nullable=False),
    Column("auto_delete", Boolean, nullable=False),
    Column("arguments_json", Text, nullable=False),
    UniqueConstraint("vhost_id", "name"),
)

# Source and destination are names, not foreign keys: the store deletes a binding with
# its exchange or queue itself (delete_exchange, delete_queue), and a binding may name
# an exchange the broker declares by itself (amq.*) that is never saved.
bindings = Table(
    "bindings", metadata,
    Column("id", Integer, primary_key=True),
    _vhost_reference(),
    Column("source", AMQP_NAME, nullable=False),
    Column("destination_kind", String(8), nullable=False),
    Column("destination", AMQP_NAME, nullable=False),
    Column("routing_key", AMQP_NAME, nullable=False),
    Column("arguments_json", Text, nullable=False),
    # SHA-256 of arguments_json: the identity of the arguments in a bounded-size key
    # (PostgreSQL cannot index text longer than ~2.7 kB).
    Column("arguments_digest", String(64), nullable=False),
    UniqueConstraint("vhost_id", "source", "destination_kind", "destination",
                     "routing_key", "arguments_digest", name="uq_bindings_identity"),
    CheckConstraint("destination_kind IN ('queue', 'exchange')", name="destination_kind"),
    Index("ix_bindings_destination", "vhost_id", "destination_kind", "destination"),
)


# --- AMQP field tables as JSON ----------------------------------------------------------
#
# JSON strings, integers, finite floats, booleans, null and arrays stand for themselves.
# Every JSON object in value position is a one-key type tag:
#   {"table": {...}} nested field table     {"bytes": "<base64>"} byte array
#   {"decimal": "1.50"} decimal.Decimal      {"datetime": "<ISO 8601>"} datetime
#   {"float": "nan" | "inf" | "-inf"} non-finite float
# The top level is the field table itself (an object of encoded values). Keys are
# sorted and separators fixed, so equal tables give equal text (the binding identity).

def encode_arguments(arguments: Mapping | None) -> str:
    """Canonical JSON text of an AMQP field table (None is the empty table)."""
    table = _encode_table(arguments or {})
    return json.dumps(table, sort_keys=True, separators=(",", ":"), allow_nan=False)


def decode_arguments(text: str) -> dict:
    """The field table that `encode_arguments` turned into `text`."""
    return {key: _decode_value(value) for key, value in json.loads(text).items()}


def arguments_digest(arguments_json: str) -> str:
    return hashlib.sha256(arguments_json.encode("ascii")).hexdigest()


def _encode_table(table: Mapping) -> dict:
    for key in table:
        if not isinstance(key, str):
            raise TypeError(f"field table keys must be str, not {type(key).__name__}")
    return {key: _encode_value(value) for key, value in table.items()}


def _encode_value(value):
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": str(value)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, datetime.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, Mapping):
        return {"table": _encode_table(value)}
    if isinstance(value, (list, tuple)):
        return [_encode_value(item) for item in value]
    raise TypeError(f"cannot store {type(value).__name__} in an AMQP field table")


_TAG_DECODERS: dict[str, Callable[[Any], Any]] = {
    "table": lambda table: {key: _decode_value(value) for key, value in table.items()},
    "bytes": base64.b64decode,
    "decimal": decimal.Decimal,
    "datetime": datetime.datetime.fromisoformat,
    "float": float,
}


def _decode_value(value):
    if isinstance(value, list):
        return [_decode_value(item) for item in value]
    if isinstance(value, dict):
        ((tag, payload),) = value.items()
        return _TAG_DECODERS[tag](payload)
    return value
