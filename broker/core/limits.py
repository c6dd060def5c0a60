"""Per-vhost and per-user limits as RabbitMQ 3.10 has them: a vhost's max-connections
and max-queues, a user's max-connections and max-channels (`rabbitmqctl
set_vhost_limits` / `set_user_limits`; broker/core/admin.py sets them here).

A limit is an integer: a negative one means no limit, 0 allows nothing new. A limit is
checked when something new is asked for (Connection.Open, Channel.Open, the declare of
a queue that does not exist yet) against counts kept as connections and channels open
and close, so a check is two dict look-ups. Lowering a limit below what is open closes
nothing: the next request is refused, as in RabbitMQ.
"""

from amqp_codec.reply_codes import ReplyCode
from amqp_codec.wire_ids import CONNECTION_OPEN

from .errors import ConnectionFailure, precondition_failed

VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")


class Limits:
    """The limits set on vhosts and users, and the counts they are checked against:
    open connections per vhost and per user, open channels per user."""

    def __init__(self):
        self.vhosts: dict[str, dict[str, int]] = {}   # as set (negative values kept)
        self.users: dict[str, dict[str, int]] = {}
        self._vhost_connections: dict[str, int] = {}
        self._user_connections: dict[str, int] = {}
        self._user_channels: dict[str, int] = {}

    # -- changes -------------------------------------------------------------------

    def set_vhost_limits(self, vhost: str, limits: dict[str, int]) -> None:
        """Replace the vhost's limits ({} clears them)."""
        _replace(self.vhosts, vhost, limits)

    def set_user_limits(self, user: str, limits: dict[str, int]) -> None:
        """Replace the user's limits ({} clears them)."""
        _replace(self.users, user, limits)

    # -- checks (each raises the AMQP error RabbitMQ answers with) -----------------

    def check_connection(self, user: str, vhost: str) -> None:
        """At Connection.Open: the vhost's connection limit, then the user's."""
        limit = _limit(self.vhosts, vhost, "max-connections")
        if limit is not None and self._vhost_connections.get(vhost, 0) >= limit:
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED, f"access to vhost '{vhost}' refused for user "
                f"'{user}': connection limit ({limit}) is reached", *CONNECTION_OPEN)
        limit = _limit(self.users, user, "max-connections")
        if limit is not None and self._user_connections.get(user, 0) >= limit:
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED, f"connection refused for user '{user}': user "
                f"connection limit ({limit}) is reached", *CONNECTION_OPEN)

    def check_channel(self, user: str, parenthesised: bool = True) -> None:
        """At Channel.Open: the user's channel limit over all its connections (a
        connection error, class and method 0, as RabbitMQ sends it; the limit in
        parentheses up to 4.0, bare since 4.3)."""
        limit = _limit(self.users, user, "max-channels")
        if limit is not None and self._user_channels.get(user, 0) >= limit:
            shown = f"({limit})" if parenthesised else str(limit)
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED, f"number of channels opened for user '{user}' has "
                f"reached the maximum allowed user limit of {shown}")

    def check_new_queue(self, vhost: str, queue: str, queue_count: int) -> None:
        """Before a queue that does not exist yet is declared (exclusive and
        server-named ones count; redeclaring an existing queue does not)."""
        limit = _limit(self.vhosts, vhost, "max-queues")
        if limit is not None and queue_count >= limit:
            raise precondition_failed(f"cannot declare queue '{queue}': queue limit in "
                                      f"vhost '{vhost}' ({limit}) is reached")

    # -- counts --------------------------------------------------------------------

    def connection_opened(self, user: str, vhost: str) -> None:
        _count(self._vhost_connections, vhost, 1)
        _count(self._user_connections, user, 1)

    def connection_closed(self, user: str, vhost: str) -> None:
        _count(self._vhost_connections, vhost, -1)
        _count(self._user_connections, user, -1)

    def channel_opened(self, user: str) -> None:
        _count(self._user_channels, user, 1)

    def channel_closed(self, user: str) -> None:
        _count(self._user_channels, user, -1)


def _limit(table: dict[str, dict[str, int]], owner: str, key: str) -> int | None:
    """The limit in force (None: none, a negative value included)."""
    limits = table.get(owner)
    if not limits:
        return None
    value = limits.get(key)
    return value if value is not None and value >= 0 else None


def _replace(table: dict[str, dict[str, int]], owner: str, limits: dict[str, int]) -> None:
    if limits:
        table[owner] = dict(limits)
    else:
        table.pop(owner, None)


def _count(counts: dict[str, int], key: str, change: int) -> None:
    """Add `change`; a count back at 0 is dropped, so the tables hold only what is open."""
    count = counts.get(key, 0) + change
    if count > 0:
        counts[key] = count
    else:
        counts.pop(key, None)
