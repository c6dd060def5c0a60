"""RabbitMQ's definitions JSON: what a broker holds besides messages (users, vhosts,
permissions, topic permissions, limits, policies, durable queues, exchanges, bindings),
built from the live broker and applied to it through Administration.

`export` gives the whole-broker form, or the per-vhost form (no users, vhosts or
permissions; items without a "vhost" field). `apply` checks the whole document first
(shapes, password hashing algorithms, patterns, policy definitions, limits) and raises
DefinitionsError naming the first problem before changing anything; the topology is
declared as the operator, so a queue or exchange that exists with other properties is
the one refusal that can come after earlier items were applied.
"""

import base64
import binascii
import re

from .access_control import compile_pattern
from .admin import Administration, AdminError, checked_vhost_metadata
from .limits import USER_LIMITS, VHOST_LIMITS
from .passwords import SHA256_ALGORITHM
from .policy import OPERATOR_POLICY, POLICY, PolicyError, make_policy

VHOST_LIMITS_COMPONENT = "vhost-limits"   # how RabbitMQ stores vhost limits: a parameter


class DefinitionsError(ValueError):
    """Definitions that cannot be applied (the text says which item and why)."""


# -- export ----------------------------------------------------------------------------

def export(broker, vhost: str | None = None) -> dict:
    """The broker's definitions; only `vhost`'s, in RabbitMQ's per-vhost form, when
    given (the caller checks that it exists)."""
    names = [vhost] if vhost is not None else list(broker.vhosts)
    topology = {
        "parameters": _limit_parameters(broker, names),
        "policies": [_policy(policy) for name in names
                     for policy in broker.vhosts[name].policies.by_kind[POLICY].values()],
        "queues": [_queue(name, queue) for name in names
                   for queue in broker.vhosts[name].queues.values() if _kept_queue(queue)],
        "exchanges": [_exchange(name, exchange) for name in names
                      for exchange in broker.vhosts[name].exchanges.values()
                      if _kept_exchange(exchange)],
        "bindings": [binding for name in names
                     for binding in _bindings(name, broker.vhosts[name])],
    }
    if vhost is not None:
        for items in topology.values():
            for item in items:
                item.pop("vhost", None)
        return {"rabbit_version": broker.version, **topology}
    access = broker.access
    return {
        "rabbit_version": broker.version, "rabbitmq_version": broker.version,
        "product_name": "Warren", "product_version": broker.version,
        "users": [{"name": user.name, "password_hash": user.password_hash,
                   "hashing_algorithm": user.algorithm or SHA256_ALGORITHM,
                   "tags": list(user.tags),
                   "limits": dict(broker.limits.users.get(user.name, {}))}
                  for user in access.users.values()],
        "vhosts": [{"name": name, "limits": [],
                    "metadata": vhost_metadata_json(broker.vhosts[name].metadata)}
                   for name in names],
        "permissions": [{"user": user, "vhost": host, "configure": p.configure,
                         "write": p.write, "read": p.read}
                        for (user, host), p in access.permissions.items()],
        "topic_permissions": [{"user": user, "vhost": host, "exchange": p.exchange,
                               "write": p.write, "read": p.read}
                              for (user, host), by_exchange
                              in access.topic_permissions.items()
                              for p in by_exchange.values()],
        "global_parameters": [{"name": "cluster_name",
                               "value": broker.server_properties()["cluster_name"]}],
        **topology,
    }


def _limit_parameters(broker, names: list[str]) -> list[dict]:
    return [{"value": dict(limits), "vhost": name, "component": VHOST_LIMITS_COMPONENT,
             "name": "limits"}
            for name in names if (limits := broker.limits.vhosts.get(name))]


def _policy(policy) -> dict:
    return {"vhost": policy.vhost, "name": policy.name, "pattern": policy.pattern,
            "apply-to": policy.apply_to, "definition": dict(policy.definition),
            "priority": policy.priority}


def _kept_queue(queue) -> bool:
    return queue.durable and queue.exclusive_owner is None


def vhost_metadata_json(metadata) -> dict:
    """RabbitMQ's vhost "metadata" (definitions, the management API): default_queue_type
    only when one is set."""
    shown = {"description": metadata.description, "tags": list(metadata.tags)}
    if metadata.default_queue_type is not None:
        shown["default_queue_type"] = metadata.default_queue_type
    return shown


def _queue(vhost: str, queue) -> dict:
    return {"name": queue.name, "vhost": vhost, "durable": True,
            "auto_delete": queue.auto_delete, "arguments": dict(queue.arguments)}


def _kept_exchange(exchange) -> bool:
    return bool(exchange.durable and exchange.name
                and not exchange.name.startswith("amq."))


def _exchange(vhost: str, exchange) -> dict:
    return {"name": exchange.name, "vhost": vhost, "type": exchange.kind,
            "durable": True, "auto_delete": exchange.auto_delete,
            "internal": exchange.internal, "arguments": dict(exchange.arguments)}


def _bindings(vhost_name: str, vhost) -> list[dict]:
    return [{"source": exchange.name, "vhost": vhost_name,
             "destination": destination.name,
             "destination_type": "queue" if destination.is_queue else "exchange",
             "routing_key": routing_key, "arguments": dict(arguments)}
            for exchange in vhost.exchanges.values()
            if exchange.name and exchange.durable
            for (destination, routing_key, _frozen), arguments in exchange.bindings.items()
            if destination.durable and getattr(destination, "exclusive_owner", None) is None]


# -- apply -----------------------------------------------------------------------------

def apply(admin: Administration, definitions, vhost: str | None = None) -> None:
    """Create or replace everything `definitions` lists (into `vhost` for the per-vhost
    form). DefinitionsError before any change when the document is invalid."""
    if not isinstance(definitions, dict):
        raise DefinitionsError("definitions must be a JSON object")
    document = _Document(definitions, vhost)
    document.check(admin.broker)
    try:
        document.apply(admin)
    except AdminError as error:
        raise DefinitionsError(str(error)) from None


class _Document:
    """The sections of one definitions document, each a list of objects."""

    def __init__(self, definitions: dict, vhost: str | None):
        self.vhost = vhost

        def section(name: str) -> list[dict]:
            items = definitions.get(name, [])
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise DefinitionsError(f"'{name}' must be a list of objects")
            return items if vhost is None else [{**item, "vhost": vhost} for item in items]

        self.users, self.vhosts = section("users"), section("vhosts")
        self.permissions = section("permissions")
        self.topic_permissions = section("topic_permissions")
        self.parameters, self.policies = section("parameters"), section("policies")
        self.queues, self.exchanges = section("queues"), section("exchanges")
        self.bindings = section("bindings")
        if vhost is not None and (self.users or self.vhosts or self.permissions):
            raise DefinitionsError("definitions for one vhost hold no users, vhosts or "
                                   "permissions: import those with /api/definitions")

    # -- checks ------------------------------------------------------------------------

    def check(self, broker) -> None:
        known_vhosts = set(broker.vhosts) | {_text(v, "name", "vhost") for v in self.vhosts}
        known_users = set(broker.access.users) | {self._checked_user(u) for u in self.users}
        for item in self.vhosts:
            _vhost_fields(item)
        for item in self.permissions + self.topic_permissions:
            _require(item, ("user", "vhost", "write", "read"), "permission")
            if item["user"] not in known_users or item["vhost"] not in known_vhosts:
                raise DefinitionsError(f"permission of user {item['user']!r} in vhost "
                                       f"{item['vhost']!r}: no such user or vhost")
            for access in ("configure", "write", "read"):
                if access in item:
                    _check_pattern(item, access)
        for item in self.parameters:
            self._check_parameter(item)
        for item in self.policies + self.queues + self.exchanges + self.bindings:
            if item.get("vhost") not in known_vhosts:
                raise DefinitionsError(f"{item.get('name') or item.get('source')!r} is in "
                                       f"vhost {item.get('vhost')!r}, which does not exist "
                                       "and is not in the definitions")
        for item in self.policies:
            _check_policy(item)

    @staticmethod
    def _checked_user(item: dict) -> str:
        name = _text(item, "name", "user")
        algorithm = item.get("hashing_algorithm", SHA256_ALGORITHM)
        if algorithm != SHA256_ALGORITHM:
            raise DefinitionsError(
                f"user {name!r}: hashing_algorithm {algorithm!r} is not supported; "
                f"Warren takes {SHA256_ALGORITHM} hashes only (re-export from RabbitMQ "
                "with that algorithm, or set the user's password after the import)")
        _check_hash(name, item.get("password_hash", ""))
        if not isinstance(item.get("limits", {}), dict) or \
                not set(item.get("limits", {})) <= set(USER_LIMITS):
            raise DefinitionsError(f"user {name!r}: limits are an object with "
                                   f"{' and '.join(USER_LIMITS)}")
        return name

    @staticmethod
    def _check_parameter(item: dict) -> None:
        if item.get("component") != VHOST_LIMITS_COMPONENT:
            raise DefinitionsError(
                f"parameter {item.get('name')!r} of component {item.get('component')!r}: "
                f"Warren has no such component (it takes {VHOST_LIMITS_COMPONENT} only)")
        value = item.get("value")
        if not isinstance(value, dict) or not set(value) <= set(VHOST_LIMITS):
            raise DefinitionsError(f"vhost limits of {item.get('vhost')!r} must be an "
                                   f"object with {' and '.join(VHOST_LIMITS)}")

    # -- changes -----------------------------------------------------------------------

    def apply(self, admin: Administration) -> None:
        for item in self.vhosts:
            _apply_vhost(admin, item)
        for item in self.users:
            _apply_user(admin, item)
        for item in self.permissions:
            admin.set_permissions(item["user"], item["vhost"], item.get("configure", ""),
                                  item["write"], item["read"])
        for item in self.parameters:
            admin.set_vhost_limits(item["vhost"], item["value"])
        for item in self.policies:
            admin.set_policy(item["vhost"], item["name"], item["pattern"],
                             item["definition"], item.get("priority", 0),
                             item.get("apply-to", "all"))
        self._apply_topology(admin)
        # after the exchanges they name, which RabbitMQ 4.3 requires (and imports first)
        for item in self.topic_permissions:
            admin.set_topic_permissions(item["user"], item["vhost"],
                                        item.get("exchange", ""), item["write"],
                                        item["read"])

    def _apply_topology(self, admin: Administration) -> None:
        for item in self.exchanges:
            if not item["name"].startswith("amq."):
                admin.declare_exchange(item["vhost"], item["name"],
                                       item.get("type", "direct"), item.get("durable", True),
                                       item.get("auto_delete", False),
                                       item.get("internal", False), item.get("arguments"))
        for item in self.queues:
            admin.declare_queue(item["vhost"], item["name"], item.get("durable", True),
                                item.get("auto_delete", False), item.get("arguments"))
        for item in self.bindings:
            admin.bind(item["vhost"], item["source"], item.get("destination_type", "queue"),
                       item["destination"], item.get("routing_key", ""),
                       item.get("arguments"))


def _apply_vhost(admin: Administration, item: dict) -> None:
    """A vhost's description, tags and default queue type, from its "metadata" (RabbitMQ
    3.10's export) or from the item itself (its import takes both). As in RabbitMQ, an
    existing vhost gets the description and tags listed and keeps its default queue
    type unless one is listed."""
    fields = _vhost_fields(item)
    description, tags = fields.get("description", ""), fields.get("tags", [])
    existing = admin.broker.vhosts.get(item["name"])
    if existing is None:
        admin.add_vhost(item["name"], description, tags, fields.get("default_queue_type"))
    else:
        admin.update_vhost(item["name"], description, tags,
                           fields.get("default_queue_type",
                                      existing.metadata.default_queue_type))


def _vhost_fields(item: dict) -> dict:
    """Where the vhost's description, tags and default queue type are, once checked."""
    fields = item.get("metadata", item)
    if not isinstance(fields, dict):
        raise DefinitionsError(f"vhost {item['name']!r}: metadata must be an object")
    try:
        checked_vhost_metadata(fields.get("description", ""), fields.get("tags", []),
                               fields.get("default_queue_type"))
    except AdminError as error:
        raise DefinitionsError(f"vhost {item['name']!r}: {error}") from None
    return fields


def _apply_user(admin: Administration, item: dict) -> None:
    name, password_hash = item["name"], item.get("password_hash", "")
    tags = item.get("tags", [])
    if name not in admin.broker.access.users:
        admin.add_user(name, password_hash=password_hash or None, tags=tags)
    else:
        if password_hash:
            admin.set_password_hash(name, password_hash)
        else:
            admin.clear_password(name)
        admin.set_user_tags(name, tags)
    admin.clear_user_limits(name)
    if item.get("limits"):
        admin.set_user_limits(name, item["limits"])


def _check_hash(user: str, password_hash) -> None:
    """RabbitMQ's sha256 hashes: base64 of a 4-byte salt and a 32-byte digest."""
    try:
        valid = password_hash == "" or len(base64.b64decode(password_hash,
                                                            validate=True)) == 36
    except (binascii.Error, TypeError, ValueError):
        valid = False
    if not valid:
        raise DefinitionsError(f"user {user!r}: password_hash is not a "
                               f"{SHA256_ALGORITHM} hash (base64 of 36 bytes)")


def _check_policy(item: dict) -> None:
    kind = OPERATOR_POLICY if item.get("component") == "operator_policy" else POLICY
    try:
        make_policy(item["vhost"], kind, item.get("name", ""), item.get("pattern", ""),
                    item.get("definition"), item.get("priority", 0),
                    item.get("apply-to", "all"))
    except PolicyError as error:
        raise DefinitionsError(f"policy {item.get('name')!r} in vhost "
                               f"{item['vhost']!r}: {error}") from None


def _check_pattern(item: dict, access: str) -> None:
    try:
        compile_pattern(item[access])
    except (re.error, TypeError) as error:
        raise DefinitionsError(f"{access} pattern {item[access]!r} of user "
                               f"{item['user']!r}: {error}") from None


def _require(item: dict, keys: tuple[str, ...], what: str) -> None:
    missing = [key for key in keys if key not in item]
    if missing:
        raise DefinitionsError(f"a {what} lacks {', '.join(missing)}: {item!r}")


def _text(item: dict, key: str, what: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise DefinitionsError(f"a {what} needs a non-empty '{key}': {item!r}")
    return value
