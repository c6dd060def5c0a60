"""The broker: configuration, virtual hosts, users and the live connections."""

import platform
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from amqp_codec.constants import DEFAULT_FRAME_MAX

from .access_control import AccessControl
from .auth import MECHANISMS
from .direct_reply import DirectReplies
from .limits import Limits
from .persistence import Persistence
from .rabbitmq_lines import Profile
from .upgrade_lint import UpgradeLint
from .scheduler import Scheduler
from .vhost import VirtualHost

if TYPE_CHECKING:
    from .connection import Connection

# How Connection.Start's `platform` begins on Warren (its product is RabbitMQ's).
WARREN_PLATFORM = "Warren"

CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}


@dataclass
class BrokerConfig:
    """The `[limits]` settings: what Connection.Tune offers and the largest message body
    accepted (RabbitMQ's defaults), and how many connections are served.
    `connection_max` and `unauthenticated_connection_max` of 0 are worked out from the
    open-file limit at start-up (broker/server/admission)."""

    channel_max: int = 2047
    frame_max: int = DEFAULT_FRAME_MAX
    heartbeat: int = 60
    max_message_size: int | None = None   # bytes; None: the RabbitMQ line's default
    connection_max: int = 0                 # open connections (refused at Connection.Open)
    unauthenticated_connection_max: int = 0   # sockets still in the handshake
    handshake_timeout: float = 10.0         # seconds from accept to Connection.Open
    consumer_timeout: int = 1_800_000       # ms an unacked delivery may wait; 0: no limit

    def message_size_limit(self, profile: Profile) -> int:
        """The largest message body accepted under `profile`: the operator's setting,
        else the default of the profile's RabbitMQ line (128 MiB in 3.10, 16 MiB in
        4.x)."""
        return self.max_message_size or profile.line.max_message_size


class Broker:
    """Everything one Warren process serves."""

    def __init__(self, config: BrokerConfig | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 persistence: Persistence | None = None, version: str = "unknown",
                 loopback_users: Iterable[str] = ("guest",),
                 profile: Profile | None = None):
        self.config = config or BrokerConfig()
        # The RabbitMQ line it behaves as (a vhost may have its own: vhost.describe).
        self.profile = profile or Profile()
        self.lint = UpgradeLint()   # what each vhost did that another line treats otherwise
        self.version = version   # advertised in Connection.Start (the package's version)
        # Users who may log in only from a loopback address (RabbitMQ's loopback_users).
        self.loopback_users = frozenset(loopback_users)
        self.scheduler = Scheduler(clock)
        self.persistence = persistence or Persistence()
        self.limits = Limits()   # per-vhost and per-user (broker/core/admin.py sets them)
        self.vhosts: dict[str, VirtualHost] = {}
        self.add_vhost("/")
        self.access = AccessControl()   # the metadata store's users replace guest
        self.access.add_user("guest", "guest", ("administrator",))
        self.access.set_permissions("guest", "/", ".*", ".*", ".*")
        # What Connection.Start offers (`auth_mechanisms`; EXTERNAL only over TLS).
        self.auth_mechanisms: tuple[str, ...] = MECHANISMS
        self.connections: set[Connection] = set()
        self.direct_replies = DirectReplies()

    def add_vhost(self, name: str) -> VirtualHost:
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VirtualHost(name, self.scheduler, self.persistence,
                                                       self.limits, self.profile, self.lint)
        return vhost

    def server_properties(self) -> dict:
        """Connection.Start's server properties: the identity of the RabbitMQ release
        the broker's line emulates (clients branch on product and version), with
        Warren's own name and version in `platform`."""
        line = self.profile.line
        return {
            "product": "RabbitMQ",
            "version": line.version,
            "platform": f"{WARREN_PLATFORM} {self.version} on Python "
                        f"{platform.python_version()}",
            "copyright": "Warren contributors",
            "information": f"Warren, an AMQP 0-9-1 broker in Python, behaving as "
                           f"RabbitMQ {line.name}",
            "cluster_name": "warren",
            "capabilities": {name: on for name, on in CAPABILITIES.items() if on},
        }

    def connection_opened(self, connection: "Connection") -> None:
        self.connections.add(connection)
        self.limits.connection_opened(connection.user, _vhost_name(connection))

    def connection_closed(self, connection: "Connection") -> None:
        """An opened connection is gone (called again, or for one never opened: no-op)."""
        if connection in self.connections:
            self.connections.remove(connection)
            self.limits.connection_closed(connection.user, _vhost_name(connection))


def _vhost_name(connection: "Connection") -> str:
    assert connection.vhost is not None, "only connections opened on a vhost are counted"
    return connection.vhost.name
