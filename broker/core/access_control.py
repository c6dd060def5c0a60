"""Who may do what, in RabbitMQ's model: users with salted password hashes and tags,
their permissions per vhost (configure, write and read regular expressions matched
against resource names), and topic permissions (write and read patterns matched against
the routing keys of a topic exchange).

Every change bumps `generation`, so that whoever caches decisions (channels cache them
per resource) knows to forget them: a change applies to the next operation of every
open connection, as in RabbitMQ.
"""

import re
from dataclasses import dataclass

from .passwords import SHA256_ALGORITHM, hash_password, verify_password

ACCESS_KINDS = ("configure", "write", "read")
# The tag that lets a user publish messages whose user_id names another user.
IMPERSONATOR = "impersonator"


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
    (read) on one topic exchange; {username}, {vhost} and {client_id} are expanded."""

    exchange: str
    write: str
    read: str


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
