"""Operator actions on a running broker: users, vhosts, permissions, topic
permissions, limits, policies and operator policies, and the topology (exchanges, queues,
bindings, purges). Each changes the live broker at
once (a new user can log in, a permission applies to the next operation of open
connections) and records its journal entry, so the change is in the metadata store after
the next commit. The control socket
(broker/server/control.py) calls these; so will the management API and CLI.

Every method raises AdminError, naming what is wrong, for a request it cannot carry out
(and then changes nothing).

The topology operations act as a user (`user`, the management API's caller), with that
user's permissions checked as on a channel, or as the operator (`user=None`: the control
socket, definitions loaded at boot), who may do anything. Their AdminError carries the
AMQP reply code RabbitMQ's channel would have closed with (`reply_code`: 403 refused, 404
missing, 405 locked, 406 precondition failed).
"""

import base64
import binascii
import re
from contextlib import contextmanager
from typing import TYPE_CHECKING

from amqp_codec.reply_codes import ReplyCode

from .access_control import (ACCESS_KINDS, ChannelAccess, TopicPermission, User,
                             compile_pattern)
from .errors import ChannelError, ConnectionFailure
from .limits import USER_LIMITS, VHOST_LIMITS
from .passwords import SHA256_ALGORITHM, hash_password
from .policy import OPERATOR_POLICY, POLICY, Policy, PolicyError, make_policy
from .queue_types import QUEUE_TYPES
from .rabbitmq_lines import LINES
from .vhost import VhostMetadata
from .ports import (DeletePermissions, DeletePolicy, DeleteTopicPermissions, DeleteUser,
                    DeleteVhost, SavePermissions, SavePolicy, SaveTopicPermissions,
                    SaveUser, SaveUserLimits, SaveVhost, SaveVhostLimits)

if TYPE_CHECKING:
    from .broker import Broker


class AdminError(Exception):
    """An operator request that cannot be carried out as asked; `reply_code` is the AMQP
    reply code of the refusal where a channel operation would have given one."""

    def __init__(self, message: str, reply_code: int | None = None,
                 reason: list[str] | None = None):
        super().__init__(message)
        self.reply_code = reply_code
        self.reason = reason   # RabbitMQ's reason where it is a term, not a text


class OperatorAccess(ChannelAccess):
    """The rights of the operator (the control socket, definitions at boot): every
    check passes."""

    def configure(self, kind: str, name: str) -> None:
        pass

    def write(self, kind: str, name: str) -> None:
        pass

    def read(self, kind: str, name: str) -> None:
        pass

    def topic(self, access: str, exchange: str, routing_key: str) -> None:
        pass


class Administration:
    """The admin operations of one broker (see the module docstring)."""

    def __init__(self, broker: "Broker"):
        self.broker = broker

    # -- users ---------------------------------------------------------------------

    def add_user(self, name: str, password: str | None = None,
                 password_hash: str | None = None, tags=()) -> None:
        """A new user with a password, a password hash in RabbitMQ's format (base64 of
        salt + SHA-256), or neither (no password login: EXTERNAL only)."""
        if not name:
            raise AdminError("a user needs a non-empty name")
        if name in self.broker.access.users:
            raise AdminError(f"user '{name}' already exists")
        self._save_user(User(name, *_hashed(password, password_hash), _tags(tags)))

    def change_password(self, name: str, password: str) -> None:
        user = self._user(name)
        self._save_user(User(name, hash_password(password), SHA256_ALGORITHM, user.tags))

    def set_password_hash(self, name: str, password_hash: str) -> None:
        """Replace the user's password by a hash in RabbitMQ's format (definitions,
        the management API)."""
        user = self._user(name)
        self._save_user(User(name, *_hashed(None, password_hash), user.tags))

    def clear_password(self, name: str) -> None:
        user = self._user(name)
        self._save_user(User(name, "", "", user.tags))

    def set_user_tags(self, name: str, tags) -> None:
        user = self._user(name)
        self._save_user(User(name, user.password_hash, user.algorithm, _tags(tags)))

    def delete_user(self, name: str) -> None:
        """Delete the user; its open connections are closed, as RabbitMQ closes them."""
        self._user(name)
        self.broker.access.remove_user(name)
        self.broker.limits.set_user_limits(name, {})
        self._record(DeleteUser(name=name))
        self._close_connections(lambda connection: connection.user == name,
                                f"user '{name}' is deleted")

    def _save_user(self, user: User) -> None:
        self.broker.access.put_user(user)
        self._record(SaveUser(name=user.name, password_hash=user.password_hash,
                              algorithm=user.algorithm, tags=user.tags))

    def _user(self, name: str) -> User:
        user = self.broker.access.users.get(name)
        if user is None:
            raise AdminError(f"no user '{name}'")
        return user

    # -- vhosts --------------------------------------------------------------------

    def add_vhost(self, name: str, description: object = "", tags=(),
                  default_queue_type: object = None, rabbitmq_line: object = None) -> None:
        """A new vhost; tags as in add_user; default_queue_type is the type of the queues
        declared durable without x-queue-type (None: classic, as the client asks);
        rabbitmq_line the RabbitMQ line it behaves as (None: the broker's). The
        metadata is an operator's JSON: values of the wrong type are an AdminError."""
        if not name:
            raise AdminError("a vhost needs a non-empty name")
        if name in self.broker.vhosts:
            raise AdminError(f"vhost '{name}' already exists")
        metadata = checked_vhost_metadata(description, tags, default_queue_type,
                                          rabbitmq_line)
        self.broker.add_vhost(name).describe(metadata)
        self._record_vhost(name, metadata)

    def update_vhost(self, name: str, description: object = "", tags=(),
                     default_queue_type: object = None, rabbitmq_line: object = None) -> None:
        """Replace an existing vhost's description, tags, default queue type and line
        (the queues it has keep their types)."""
        vhost = self._vhost(name)
        vhost.describe(checked_vhost_metadata(description, tags, default_queue_type,
                                              rabbitmq_line))
        self._record_vhost(name, vhost.metadata)

    def _record_vhost(self, name: str, metadata: VhostMetadata) -> None:
        self._record(SaveVhost(name=name, description=metadata.description,
                               tags=metadata.tags,
                               default_queue_type=metadata.default_queue_type,
                               rabbitmq_line=metadata.rabbitmq_line))

    def delete_vhost(self, name: str) -> None:
        """Delete the vhost with its queues (and their messages), exchanges, bindings and
        the permissions on it; its connections are closed, as RabbitMQ closes them."""
        vhost = self._vhost(name)
        self._close_connections(lambda connection: connection.vhost is vhost,
                                f"vhost '{name}' is deleted")
        for queue in list(vhost.queues.values()):
            vhost.delete_queue(queue)
        del self.broker.vhosts[name]
        self.broker.lint.forget_vhost(name)
        self.broker.access.forget_vhost(name)
        self.broker.limits.set_vhost_limits(name, {})
        self._record(DeleteVhost(name=name))

    def _vhost(self, name: str):
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise AdminError(f"no vhost '{name}'")
        return vhost

    # -- permissions ---------------------------------------------------------------

    def set_permissions(self, user: str, vhost: str, configure: str, write: str,
                        read: str) -> None:
        self._user(user)
        self._vhost(vhost)
        for access, pattern in zip(ACCESS_KINDS, (configure, write, read)):
            _check_pattern(access, pattern)
        self.broker.access.set_permissions(user, vhost, configure, write, read)
        self._record(SavePermissions(user=user, vhost=vhost, configure=configure,
                                     write=write, read=read))

    def clear_permissions(self, user: str, vhost: str) -> None:
        self._user(user)
        self._vhost(vhost)
        self.broker.access.clear_permissions(user, vhost)
        self._record(DeletePermissions(user=user, vhost=vhost))

    def set_topic_permissions(self, user: str, vhost: str, exchange: str, write: str,
                              read: str) -> None:
        self._user(user)
        found = self._vhost(vhost)
        for access, pattern in (("write", write), ("read", read)):
            _check_pattern(access, pattern)
        if found.profile.line.topic_permissions_need_exchange and \
                exchange not in found.exchanges:
            raise AdminError(f"no exchange '{exchange}' in vhost '{vhost}'",
                             reason=["no_such_exchange", exchange])
        self.broker.access.set_topic_permission(user, vhost,
                                                TopicPermission(exchange, write, read))
        self._record(SaveTopicPermissions(user=user, vhost=vhost, exchange=exchange,
                                          write=write, read=read))

    def clear_topic_permissions(self, user: str, vhost: str,
                                exchange: str | None = None) -> None:
        self._user(user)
        self._vhost(vhost)
        self.broker.access.clear_topic_permissions(user, vhost, exchange)
        self._record(DeleteTopicPermissions(user=user, vhost=vhost, exchange=exchange))

    # -- limits --------------------------------------------------------------------

    def set_vhost_limits(self, vhost: str, limits: object) -> None:
        """Replace the vhost's limits, as `rabbitmqctl set_vhost_limits` does: e.g.
        {"max-connections": 10, "max-queues": 100}; a negative value is no limit, 0
        allows nothing new, {} clears them. Anything else (an operator's JSON) is an
        AdminError."""
        self._vhost(vhost)
        limits = _checked_limits("vhost", limits, VHOST_LIMITS)
        self.broker.limits.set_vhost_limits(vhost, limits)
        self._record(SaveVhostLimits(vhost=vhost, limits=limits))

    def clear_vhost_limits(self, vhost: str) -> None:
        self.set_vhost_limits(vhost, {})

    def set_user_limits(self, user: str, limits: object) -> None:
        """Set some of the user's limits ("max-connections", "max-channels"), keeping
        the others, as `rabbitmqctl set_user_limits` does; values as for vhosts."""
        self._user(user)
        limits = _checked_limits("user", limits, USER_LIMITS)
        self._save_user_limits(user, {**self.broker.limits.users.get(user, {}), **limits})

    def clear_user_limits(self, user: str, limit: str = "all") -> None:
        """Clear one of the user's limits, or "all" of them (as in RabbitMQ, a name that
        is not set changes nothing)."""
        self._user(user)
        kept = {} if limit == "all" else {
            key: value for key, value in self.broker.limits.users.get(user, {}).items()
            if key != limit}
        self._save_user_limits(user, kept)

    def _save_user_limits(self, user: str, limits: dict) -> None:
        self.broker.limits.set_user_limits(user, limits)
        self._record(SaveUserLimits(user=user, limits=limits))

    # -- policies ------------------------------------------------------------------

    def set_policy(self, vhost: str, name: str, pattern: str, definition,
                   priority: int = 0, apply_to: str = "all") -> None:
        """Add or replace a policy (`rabbitmqctl set_policy`): `definition` is a JSON
        object (or its text). It applies at once to the matching queues and exchanges."""
        self._set_policy(vhost, POLICY, name, pattern, definition, priority, apply_to)

    def clear_policy(self, vhost: str, name: str) -> None:
        self._clear_policy(vhost, POLICY, name)

    def set_operator_policy(self, vhost: str, name: str, pattern: str, definition,
                            priority: int = 0, apply_to: str = "all") -> None:
        """Add or replace an operator policy (`rabbitmqctl set_operator_policy`): its
        limits (expires, message-ttl, max-length, max-length-bytes) win over a
        policy's where they are lower."""
        self._set_policy(vhost, OPERATOR_POLICY, name, pattern, definition, priority,
                         apply_to)

    def clear_operator_policy(self, vhost: str, name: str) -> None:
        self._clear_policy(vhost, OPERATOR_POLICY, name)

    def _set_policy(self, vhost_name: str, kind: str, name: str, pattern: str,
                    definition, priority, apply_to: str) -> None:
        vhost = self._vhost(vhost_name)
        try:
            policy = make_policy(vhost_name, kind, name, pattern, definition, priority,
                                 apply_to)
        except PolicyError as error:
            raise AdminError(str(error)) from None
        vhost.policies.put(policy)
        vhost.apply_policies()
        self._record(_saved(policy))

    def _clear_policy(self, vhost_name: str, kind: str, name: str) -> None:
        vhost = self._vhost(vhost_name)
        if vhost.policies.remove(kind, name) is None:
            raise AdminError(f"no {kind.replace('_', ' ')} '{name}' in vhost "
                             f"'{vhost_name}' (RabbitMQ: Parameter does not exist)")
        vhost.apply_policies()
        self._record(DeletePolicy(vhost=vhost_name, kind=kind, name=name))

    # -- topology ------------------------------------------------------------------

    def declare_exchange(self, vhost: str, name: str, type: str = "direct",
                         durable: bool = True, auto_delete: bool = False,
                         internal: bool = False, arguments: dict | None = None,
                         user: str | None = None) -> None:
        """Declare an exchange (an equivalent one may exist: 406 when it differs)."""
        with _channel_refusals():
            self._vhost(vhost).declare_exchange(
                name, type, False, durable, auto_delete, internal, arguments or {},
                self._access(vhost, user))

    def delete_exchange(self, vhost: str, name: str, if_unused: bool = False,
                        user: str | None = None) -> None:
        """Delete an exchange (404 when there is none, as the management API answers)."""
        target = self._vhost(vhost)
        if name not in target.exchanges:
            raise AdminError(f"no exchange '{name}' in vhost '{vhost}'", 404)
        with _channel_refusals():
            target.delete_exchange(name, if_unused, self._access(vhost, user))

    def declare_queue(self, vhost: str, name: str, durable: bool = True,
                      auto_delete: bool = False, arguments: dict | None = None,
                      user: str | None = None) -> None:
        """Declare a queue (an equivalent one may exist: 406 when it differs)."""
        if not name:
            raise AdminError("a queue declared by an operator needs a name", 400)
        with _channel_refusals():
            self._vhost(vhost).declare_queue(name, None, False, durable, False,
                                             auto_delete, arguments or {},
                                             self._access(vhost, user))

    def delete_queue(self, vhost: str, name: str, if_unused: bool = False,
                     if_empty: bool = False, user: str | None = None) -> int:
        """Delete a queue (404 when there is none); how many messages it had."""
        target = self._vhost(vhost)
        queue = self._queue(target, name)
        with _channel_refusals():
            self._access(vhost, user).configure("queue", name)
            target.check_exclusive(queue, None)
            return target.delete_queue(queue, if_unused, if_empty)

    def purge_queue(self, vhost: str, name: str, user: str | None = None) -> int:
        """Drop the queue's ready messages; how many there were."""
        target = self._vhost(vhost)
        queue = self._queue(target, name)
        with _channel_refusals():
            self._access(vhost, user).read("queue", name)
            target.check_exclusive(queue, None)
            return queue.purge()

    def bind(self, vhost: str, source: str, destination_kind: str, destination: str,
             routing_key: str = "", arguments: dict | None = None,
             user: str | None = None) -> None:
        """Bind a queue or exchange (`destination_kind` "queue" or "exchange") to the
        exchange `source`."""
        target = self._vhost(vhost)
        with _channel_refusals():
            target.authorize_binding(self._access(vhost, user), destination_kind,
                                     destination, source, routing_key)
            target.exchange(source)
            target.bind(self._destination(target, destination_kind, destination), source,
                        routing_key, arguments or {})

    def unbind(self, vhost: str, source: str, destination_kind: str, destination: str,
               routing_key: str = "", arguments: dict | None = None,
               user: str | None = None) -> None:
        """Remove a binding; 404 when there is no such binding."""
        target = self._vhost(vhost)
        with _channel_refusals():
            target.authorize_binding(self._access(vhost, user), destination_kind,
                                     destination, source, routing_key)
            end = self._destination(target, destination_kind, destination)
            exchange = target.exchange(source)
            if not exchange.has_binding(end, routing_key, arguments or {}):
                raise AdminError(f"no binding from '{source}' to {destination_kind} "
                                 f"'{destination}' with key '{routing_key}'", 404)
            target.unbind(end, source, routing_key, arguments or {})

    def _access(self, vhost: str, user: str | None) -> ChannelAccess:
        access_control = self.broker.access
        if user is None:
            return OperatorAccess(access_control, "", vhost)
        return ChannelAccess(access_control, user, vhost,
                             self._vhost(vhost).profile.line.access_refusal_names_permission)

    @staticmethod
    def _queue(vhost, name: str):
        queue = vhost.queues.get(name)
        if queue is None:
            raise AdminError(f"no queue '{name}' in vhost '{vhost.name}'", 404)
        return queue

    def _destination(self, vhost, kind: str, name: str):
        if kind == "queue":
            return self._queue(vhost, name)
        if kind == "exchange":
            return vhost.exchange(name)
        raise AdminError(f"a binding's destination is a queue or an exchange, not "
                         f"{kind!r}", 400)

    # -- shared --------------------------------------------------------------------

    def _record(self, entry) -> None:
        self.broker.persistence.record(entry)

    def _close_connections(self, selected, reason: str) -> None:
        for connection in [c for c in self.broker.connections if selected(c)]:
            try:
                connection.close(ReplyCode.CONNECTION_FORCED,
                                 f"CONNECTION_FORCED - {reason}")
            except Exception as error:   # that connection fails, the change stands
                connection.fail(error)


@contextmanager
def _channel_refusals():
    """A channel error of the vhost's operations becomes an AdminError with its code."""
    try:
        yield
    except (ChannelError, ConnectionFailure) as error:
        raise AdminError(error.text, int(error.reply_code)) from None


def _saved(policy: Policy) -> SavePolicy:
    return SavePolicy(vhost=policy.vhost, kind=policy.kind, name=policy.name,
                      pattern=policy.pattern, apply_to=policy.apply_to,
                      priority=policy.priority, definition=dict(policy.definition))


def _hashed(password: str | None, password_hash: str | None) -> tuple[str, str]:
    if password is not None and password_hash is not None:
        raise AdminError("give a password or a password hash, not both")
    if password is not None:
        return hash_password(password), SHA256_ALGORITHM
    if password_hash:
        try:
            decoded = base64.b64decode(password_hash, validate=True)
        except binascii.Error:
            raise AdminError("password_hash is not base64 (RabbitMQ's format: base64 of "
                             "a 4-byte salt and the SHA-256 of salt + password)") from None
        if len(decoded) != 36:
            raise AdminError(f"password_hash decodes to {len(decoded)} bytes; "
                             "rabbit_password_hashing_sha256 hashes are 36")
        return password_hash, SHA256_ALGORITHM
    return "", ""


def checked_vhost_metadata(description: object, tags: object, default_queue_type: object,
                           rabbitmq_line: object = None) -> VhostMetadata:
    """A vhost's metadata as an operator gives it (tags as in add_user); RabbitMQ shows
    "undefined" for no default queue type, taken back here as none."""
    if rabbitmq_line is not None and rabbitmq_line not in LINES:
        raise AdminError(f"a vhost's rabbitmq_line is one of {', '.join(LINES)}, "
                         f"not {rabbitmq_line!r}")
    if default_queue_type == "undefined":
        default_queue_type = None
    if not isinstance(description, str):
        raise AdminError(f"a vhost's description is a string, not {description!r}")
    if default_queue_type is not None and (not isinstance(default_queue_type, str) or
                                           default_queue_type not in QUEUE_TYPES):
        raise AdminError(f"invalid_queue_type: the default queue type "
                         f"{default_queue_type!r} is not one of "
                         f"{', '.join(QUEUE_TYPES)}")
    return VhostMetadata(description, _tags(tags), default_queue_type,
                         rabbitmq_line if isinstance(rabbitmq_line, str) else None)


def _tags(tags) -> tuple[str, ...]:
    if isinstance(tags, str):   # RabbitMQ's API takes "a,b" as well as a list
        tags = [tag.strip() for tag in tags.split(",")]
    if not isinstance(tags, (list, tuple)) or not all(isinstance(tag, str) for tag in tags):
        raise AdminError(f"tags must be a list of strings or one string of "
                         f"comma-separated tags, not {tags!r}")
    return tuple(tag for tag in tags if tag)


def _checked_limits(owner: str, limits: object, known: tuple[str, ...]) -> dict[str, int]:
    """The limits, if every key is a known limit and every value an integer."""
    if not isinstance(limits, dict):
        raise AdminError(f"{owner} limits must be a JSON object such as "
                         f'{{"{known[0]}": 10}}, not {limits!r}')
    for key, value in limits.items():
        if key not in known:
            raise AdminError(f"unknown {owner} limit {key!r}: {owner} limits are "
                             f"{' and '.join(known)}")
        if not isinstance(value, int) or isinstance(value, bool):
            raise AdminError(f"{owner} limit {key} must be an integer (negative: no "
                             f"limit, 0: nothing new allowed), not {value!r}")
    return dict(limits)


def _check_pattern(access: str, pattern: str) -> None:
    try:
        compile_pattern(pattern)
    except re.error as error:
        raise AdminError(f"invalid {access} regular expression {pattern!r}: {error}") \
            from None
