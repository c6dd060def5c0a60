"""Who may do what, in RabbitMQ's model: users with salted password hashes and tags,
their permissions per vhost (configure, write and read regular expressions matched
against resource names), and topic permissions (write and read patterns matched against
the routing keys of a topic exchange).

Every change bumps `generation`, so that whoever caches decisions (each channel's
`ChannelAccess`) knows to forget them: a change applies to the next operation of every
open connection.
"""

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import access_refused
from .passwords import SHA256_ALGORITHM, hash_password, verify_password

if TYPE_CHECKING:
    from .exchange import Exchange

ACCESS_KINDS = ("configure", "write", "read")
# The tag that lets a user publish messages whose user_id names another user.
IMPERSONATOR = "impersonator"
# The default exchange ("") as RabbitMQ names it in permission checks and their texts:
# a write pattern must match "amq.default" to let a user publish to it.
DEFAULT_EXCHANGE_RESOURCE = "amq.default"
# Decisions one channel keeps per access kind; past this many the cache starts over, so
# a channel declaring server-named queues in a loop holds a bounded set.
CACHED_DECISIONS = 512


@dataclass(frozen=True)
class User:
    name: str
    password_hash: str       # "": the user cannot log in with a password
    algorithm: str
    tags: tuple[str, ...] = ()


def compile_pattern(pattern: str) -> re.Pattern:
    """A permission pattern as RabbitMQ matches it: unanchored, and "" matches only the
    empty name (RabbitMQ reads "" as "^$"). Raises re.error for an invalid pattern."""
    return re.compile(pattern or "^$")


class Permissions:
    """One user's configure/write/read patterns on one vhost."""

    __slots__ = ("configure", "write", "read", "_compiled")

    def __init__(self, configure: str, write: str, read: str):
        self.configure = configure
        self.write = write
        self.read = read
        self._compiled = {access: compile_pattern(pattern) for access, pattern
                          in zip(ACCESS_KINDS, (configure, write, read))}

    def allows(self, access: str, name: str) -> bool:
        return self._compiled[access].search(name) is not None


@dataclass(frozen=True)
class TopicPermission:
    """Patterns for the routing keys a user may publish with (write) and bind with
    (read) on one topic exchange. "{username}" and "{vhost}" in a pattern stand for the
    user's and the vhost's names, inserted as they are (not escaped), as RabbitMQ 3.10
    does; it takes "{client_id}" only from MQTT connections, so over AMQP 0-9-1 it stays
    as written (PCRE and Python both read it as literal text)."""

    exchange: str
    write: str
    read: str

    def pattern(self, access: str, user: str, vhost: str) -> re.Pattern:
        """The compiled `access` ("write" or "read") pattern for `user` in `vhost`."""
        expanded = (getattr(self, access) or "^$").replace("{username}", user)
        return re.compile(expanded.replace("{vhost}", vhost))


class AccessControl:
    """Users, permissions and topic permissions, held in memory (loaded from the
    metadata store at start-up, changed by broker/core/admin.py)."""

    def __init__(self):
        self.users: dict[str, User] = {}
        self.permissions: dict[tuple[str, str], Permissions] = {}
        self.topic_permissions: dict[tuple[str, str], dict[str, TopicPermission]] = {}
        self.generation = 0

    def changed(self) -> None:
        self.generation += 1

    # -- changes -------------------------------------------------------------------

    def put_user(self, user: User) -> None:
        self.users[user.name] = user
        self.changed()

    def add_user(self, name: str, password: str, tags=()) -> User:
        """A user with a freshly hashed password (for brokers without a metadata store
        and for tests)."""
        user = User(name, hash_password(password), SHA256_ALGORITHM, tuple(tags))
        self.put_user(user)
        return user

    def remove_user(self, name: str) -> None:
        self.users.pop(name, None)
        for key in [key for key in self.permissions if key[0] == name]:
            del self.permissions[key]
        for key in [key for key in self.topic_permissions if key[0] == name]:
            del self.topic_permissions[key]
        self.changed()

    def set_permissions(self, user: str, vhost: str, configure: str, write: str,
                        read: str) -> None:
        self.permissions[(user, vhost)] = Permissions(configure, write, read)
        self.changed()

    def clear_permissions(self, user: str, vhost: str) -> None:
        self.permissions.pop((user, vhost), None)
        self.changed()

    def set_topic_permission(self, user: str, vhost: str,
                             permission: TopicPermission) -> None:
        self.topic_permissions.setdefault((user, vhost), {})[permission.exchange] = (
            permission)
        self.changed()

    def clear_topic_permissions(self, user: str, vhost: str,
                                exchange: str | None = None) -> None:
        if exchange is None:
            self.topic_permissions.pop((user, vhost), None)
        else:
            self.topic_permissions.get((user, vhost), {}).pop(exchange, None)
        self.changed()

    def forget_vhost(self, vhost: str) -> None:
        for table in (self.permissions, self.topic_permissions):
            for key in [key for key in table if key[1] == vhost]:
                del table[key]
        self.changed()

    # -- decisions -----------------------------------------------------------------

    def authenticate(self, name: str, password: str) -> User | None:
        """The user, when `password` is theirs."""
        user = self.users.get(name)
        if user is None or not user.password_hash:
            return None
        if not verify_password(password, user.password_hash, user.algorithm):
            return None
        return user

    def may_open(self, user: str, vhost: str) -> bool:
        """A user may open a vhost it has permissions on (any, even all empty)."""
        return (user, vhost) in self.permissions

    def permits(self, user: str, vhost: str, access: str, name: str) -> bool:
        """Whether `user` has `access` ("configure", "write" or "read") to the resource
        `name` in `vhost`."""
        permissions = self.permissions.get((user, vhost))
        return permissions is not None and permissions.allows(access, name)


class ChannelAccess:
    """What one channel's user may do in its vhost, checked as RabbitMQ's channel checks
    it: a refusal is a ChannelError 403 worded as RabbitMQ's. Allowed decisions are kept
    per access kind, by resource name (one set lookup on the publish path), and dropped
    as soon as the AccessControl's generation moves, so a change of permissions applies
    to the next operation of every channel. Refusals are not kept: they close the
    channel.

    Topic permissions are checked only for topic exchanges the user has a topic
    permission on (`topics` is None for a user without any in this vhost).

    `publish_targets` is the channel's publish cache, dropped with the decisions: the
    exchanges, by name, that passed every check a publish makes before routing (write
    permission, existence, not internal, no topic permission to match per routing key),
    so that a publish to one of them costs one dict lookup (broker/core/channel.py)."""

    __slots__ = ("access", "user", "vhost", "generation", "configurable", "writable",
                 "readable", "topics", "topic_patterns", "topic_keys", "publish_targets",
                 "refusal_prefix")

    def __init__(self, access: AccessControl, user: str, vhost: str,
                 names_permission: bool = False):
        self.access = access
        self.user = user
        self.vhost = vhost
        # RabbitMQ 4.0 and later say which permission was missing ("write access to
        # exchange ..."); 3.10 says "access to exchange ...".
        self.refusal_prefix = "{} access" if names_permission else "access"
        self.generation = -1
        self.configurable: set[str] = set()
        self.writable: set[str] = set()
        self.readable: set[str] = set()
        self.topics: dict[str, TopicPermission] | None = None
        self.topic_patterns: dict[tuple[str, str], re.Pattern | None] = {}
        self.topic_keys: set[tuple[str, str, str]] = set()
        self.publish_targets: dict[str, Exchange] = {}
        self.refresh()

    def refresh(self) -> None:
        """Forget every decision; take the user's topic permissions as they are now."""
        access = self.access
        self.generation = access.generation
        self.configurable.clear()
        self.writable.clear()
        self.readable.clear()
        self.topics = access.topic_permissions.get((self.user, self.vhost)) or None
        self.topic_patterns.clear()
        self.topic_keys.clear()
        self.publish_targets.clear()

    @property
    def current(self) -> bool:
        """Whether the cached decisions still hold (no change since they were made)."""
        return self.generation == self.access.generation

    def configure(self, kind: str, name: str) -> None:
        """Raise 403 unless the user may configure (declare, delete) the `kind`
        ("queue" or "exchange") named `name`."""
        if name not in self.configurable or not self.current:
            self._decide("configure", self.configurable, kind, name)

    def write(self, kind: str, name: str) -> None:
        """Raise 403 unless the user may write to (publish to, bind to) it."""
        if name not in self.writable or not self.current:
            self._decide("write", self.writable, kind, name)

    def read(self, kind: str, name: str) -> None:
        """Raise 403 unless the user may read from (consume, get, purge, bind from) it."""
        if name not in self.readable or not self.current:
            self._decide("read", self.readable, kind, name)

    def _decide(self, access: str, allowed: set[str], kind: str, name: str) -> None:
        if not self.current:
            self.refresh()
        resource = name or (DEFAULT_EXCHANGE_RESOURCE if kind == "exchange" else "")
        if not self.access.permits(self.user, self.vhost, access, resource):
            raise access_refused(f"{self.refusal_prefix.format(access)} to {kind} "
                                 f"'{resource}' in vhost '{self.vhost}' refused for user "
                                 f"'{self.user}'")
        if len(allowed) >= CACHED_DECISIONS:
            allowed.clear()
        if name or kind == "exchange":   # a name means one resource whatever its kind,
            allowed.add(name)            # but "" is kept only as the default exchange

    def topic(self, access: str, exchange: str, routing_key: str) -> None:
        """Raise 403 unless the user's topic permission on the topic exchange `exchange`
        lets it publish with (write) or bind with (read) `routing_key`; without one, it
        may."""
        if not self.current:
            self.refresh()
        topics = self.topics
        if topics is None or exchange not in topics:
            return
        decision = (access, exchange, routing_key)
        if decision in self.topic_keys:
            return
        pattern = self.topic_patterns.get((access, exchange))
        if pattern is None:
            pattern = self._topic_pattern(topics[exchange], access)
            self.topic_patterns[(access, exchange)] = pattern
        if pattern is None or pattern.search(routing_key) is None:
            raise access_refused(f"{self.refusal_prefix.format(access)} to topic "
                                 f"'{routing_key}' in exchange '{exchange}' in vhost "
                                 f"'{self.vhost}' refused for user '{self.user}'")
        if len(self.topic_keys) >= CACHED_DECISIONS:
            self.topic_keys.clear()
        self.topic_keys.add(decision)

    def _topic_pattern(self, permission: TopicPermission,
                       access: str) -> re.Pattern | None:
        """The expanded pattern, or None when the expansion is not a valid regular
        expression (a user or vhost name with regex syntax in it): nothing matches."""
        try:
            return permission.pattern(access, self.user, self.vhost)
        except re.error:
            return None
