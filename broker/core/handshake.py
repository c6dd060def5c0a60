"""Channel 0 of one connection before it is open: Connection.Start, the login
(Start-Ok with PLAIN, AMQPLAIN or EXTERNAL, and its refusals), Tune/Tune-Ok, and
Connection.Open with its vhost, limit and permission checks.

The handshake ends at one point, `Connection.opened(Opened(...))`: everything the rest
of the connection needs from it (the vhost, the user, the tuned limits, the client's
properties) is in that record. Until then the connection's state is one of the
handshake's (STARTING, TUNING, OPENING) and channel 0 goes to its `Handshake`. Frames
above 8192 octets (RabbitMQ 4.1's frame-min-size) are refused until Tune-Ok by the
connection's framer, which Tune-Ok tunes to the agreed frame_max; the smallest frame_max
Tune-Ok may give is the broker's RabbitMQ line's (4096 octets up to 4.0, 8192 since 4.1).
"""

import logging
from enum import Enum
from typing import TYPE_CHECKING

from pamqp import commands

from amqp_codec import PROTOCOL_HEADER
from amqp_codec.reply_codes import ReplyCode
from amqp_codec.wire_ids import CONNECTION_OPEN, CONNECTION_TUNE_OK

from .access_control import User
from .auth import (AuthenticationFailure, UndecodableCredentials, is_loopback,
                   parse_credentials)
from .certificate_login import EXTERNAL, offered_mechanisms
from .errors import ConnectionFailure

if TYPE_CHECKING:
    from .connection import Connection
    from .vhost import VirtualHost

log = logging.getLogger("warren.connection")

_LOGIN_REFUSED = ("Login was refused using authentication mechanism {}. For details see "
                  "the broker logfile.")


# The largest frame read before Tune-Ok, in every line (RabbitMQ 4.1 raised it to 8192).
HANDSHAKE_FRAME_MAX = 8192

# AMQP 1.0's header with its SASL layer, which RabbitMQ 4.x (speaking AMQP 1.0 too)
# offers to a client whose protocol header it does not take.
AMQP_1_0_SASL_HEADER = b"AMQP\x03\x01\x00\x00"


def header_refusal(seen: bytes, offers_amqp_1_0: bool) -> bytes:
    """What a broker answers to a protocol header it does not take (`seen`: the bytes
    read up to the first that did not match), before it closes the socket: AMQP
    0-9-1's header, as 3.10 always does; since 4.0 only to "AMQP" 0 0 9+ (another
    0-9-x revision), AMQP 1.0's SASL header to the rest (rabbit_reader's
    version_negotiation)."""
    if not offers_amqp_1_0 or (seen.startswith(b"AMQP\x00\x00") and len(seen) >= 7
                               and seen[6] >= 9):
        return PROTOCOL_HEADER
    return AMQP_1_0_SASL_HEADER

class ConnectionState(Enum):
    """Where a connection is; the values are RabbitMQ's names for the states."""

    STARTING = "starting"   # Connection.Start sent, waiting for Start-Ok
    TUNING = "tuning"       # logged in, Connection.Tune sent, waiting for Tune-Ok
    OPENING = "opening"     # tuned, waiting for Connection.Open
    OPEN = "running"        # opened on a vhost: channels may be used
    CLOSING = "closing"     # the broker sent Connection.Close, waiting for Close-Ok
    CLOSED = "closed"       # no more frames either way


class Opened:
    """What a finished handshake hands to its connection at Connection.Open.

    (A plain class, not a dataclass: under mypyc a dataclass builds its annotations at
    import, when the VirtualHost type may not exist yet.)"""

    __slots__ = ("vhost", "user", "user_tags", "channel_max", "heartbeat",
                 "client_properties", "capabilities")

    def __init__(self, vhost: "VirtualHost", user: str, user_tags: tuple[str, ...],
                 channel_max: int, heartbeat: int, client_properties: dict,
                 capabilities: dict):
        self.vhost = vhost
        self.user = user
        self.user_tags = user_tags          # as at login, as RabbitMQ keeps them
        self.channel_max = channel_max      # agreed at Tune-Ok (frame_max: the framer's)
        self.heartbeat = heartbeat          # seconds, 0: none
        self.client_properties = client_properties
        self.capabilities = capabilities    # the client's, from client_properties


class Handshake:
    """Channel 0 of `connection` from Connection.Start to Connection.Open."""

    def __init__(self, connection: "Connection"):
        self.connection = connection
        config = connection.broker.config
        self.mechanisms = offered_mechanisms(connection.broker.auth_mechanisms,
                                             connection.tls)
        self.login_refused = False   # the server slows down the refusal it sends
        self.client_properties: dict = {}
        self.capabilities: dict = {}
        self.user = ""
        self.user_tags: tuple[str, ...] = ()
        self.channel_max = config.channel_max
        self.heartbeat = 0

    def start(self) -> None:
        """The protocol header arrived: offer Connection.Start."""
        connection = self.connection
        connection.write(connection.framer.encode_connection_start(
            connection.broker.server_properties(), " ".join(self.mechanisms), "en_US"))

    def skip_to_open(self, account: User) -> None:
        """The broker's own connection (management's direct session): `account` was
        authenticated by the caller, the limits are the server's, and Connection.Open
        comes next."""
        self.user = account.name
        self.user_tags = account.tags
        self.connection.state = ConnectionState.OPENING

    def handle(self, state: ConnectionState, method) -> bool:
        """Handle a channel 0 method the handshake expects in `state`; False when it is
        not one (the connection decides what that means)."""
        step = _STEPS.get((state, type(method)))
        if step is None:
            return False
        step(self, method)
        return True

    def supports(self, capability: str) -> bool:
        return bool(self.capabilities.get(capability))

    # -- login ---------------------------------------------------------------------

    def _start_ok(self, method) -> None:
        self.client_properties = method.client_properties or {}
        capabilities = self.client_properties.get("capabilities")
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}
        if method.mechanism not in self.mechanisms:
            self._refuse_mechanism(f"authentication mechanism '{method.mechanism}' "
                                   "not offered")
            return
        if method.mechanism == EXTERNAL:
            self._external_login()
            return
        try:
            user, password = parse_credentials(method.mechanism, method.response)
        except UndecodableCredentials:
            self._refuse_login(_LOGIN_REFUSED.format(method.mechanism))
            log.info("event=login_refused peer=%s reason=credentials_not_utf8",
                     self.connection.peer)
            return
        except AuthenticationFailure as failure:
            self._refuse_mechanism(str(failure))
            return
        account = self.connection.broker.access.authenticate(user, password)
        if account is None:
            self._refuse_login(_LOGIN_REFUSED.format(method.mechanism))
            log.debug("event=login_refused peer=%s user=%r", self.connection.peer, user)
            return
        self._logged_in(account, method.mechanism)

    def _external_login(self) -> None:
        """EXTERNAL: the user the client's TLS certificate names, if it exists; the
        response is not read (RabbitMQ ignores it too)."""
        tls = self.connection.tls
        assert tls is not None   # EXTERNAL is offered only over TLS
        user = tls.user
        account = None if user is None else self.connection.broker.access.users.get(user)
        if account is None:
            self._refuse_login(_LOGIN_REFUSED.format(EXTERNAL))
            log.debug("event=login_refused peer=%s mechanism=EXTERNAL user=%r reason=%r",
                      self.connection.peer, user, tls.missing or "no such user")
            return
        self._logged_in(account, EXTERNAL)

    def _refuse_mechanism(self, reason: str) -> None:
        """A mechanism not offered, or a malformed response: RabbitMQ closes the socket
        without a frame."""
        log.debug("event=login_refused peer=%s reason=%r", self.connection.peer, reason)
        self.login_refused = True
        self.connection.refuse_login(None)

    def _refuse_login(self, text: str) -> None:
        """Wrong credentials: Connection.Close (403) to a client that asked for it with
        the authentication_failure_close capability, else the socket just closes."""
        self.login_refused = True
        self.connection.refuse_login(
            f"ACCESS_REFUSED - {text}" if self.supports("authentication_failure_close")
            else None)

    def _logged_in(self, account: User, mechanism: str) -> None:
        """`account` proved who it is; a user in loopback_users still needs a loopback
        address, whatever the mechanism (as RabbitMQ checks it after authentication)."""
        connection = self.connection
        user = account.name
        if user in connection.broker.loopback_users and not is_loopback(connection.address):
            self._refuse_login(_LOGIN_REFUSED.format(mechanism))
            log.warning("event=login_refused peer=%s user=%r reason=not_loopback hint=%r",
                        connection.peer, user, f"'{user}' is in loopback_users: it may log "
                        "in only from a loopback address; connect from this machine, use "
                        "another user, or change loopback_users")
            return
        self.user = user
        self.user_tags = account.tags
        connection.state = ConnectionState.TUNING
        config = connection.broker.config
        connection.send_method(0, commands.Connection.Tune(
            channel_max=config.channel_max, frame_max=config.frame_max,
            heartbeat=config.heartbeat))

    # -- tune and open -------------------------------------------------------------

    def _tune_ok(self, method) -> None:
        connection = self.connection
        config = connection.broker.config
        frame_max = method.frame_max   # RabbitMQ refuses 0 here, as Warren does
        # frame-min-size: 4096 octets in AMQP 0-9-1 and up to RabbitMQ 4.0, 8192 since 4.1
        frame_min = connection.broker.profile.line.frame_min_size
        if frame_max < frame_min or frame_max > config.frame_max:
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED,
                f"frame_max={method.frame_max} outside {frame_min}..{config.frame_max}",
                *CONNECTION_TUNE_OK)
        channel_max = method.channel_max
        if not 0 < channel_max <= config.channel_max:
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED,
                f"channel_max={channel_max} > {config.channel_max} max channels",
                *CONNECTION_TUNE_OK)
        connection.framer.tune(frame_max)
        self.channel_max = channel_max
        self.heartbeat = method.heartbeat
        connection.state = ConnectionState.OPENING
        connection.transport.tuned(method.heartbeat)

    def _open(self, method) -> None:
        """RabbitMQ's order: the vhost exists, its connection limit, the user's
        connection limit, then the user's access to the vhost."""
        broker = self.connection.broker
        name = method.virtual_host
        vhost = broker.vhosts.get(name)
        if vhost is None:
            raise ConnectionFailure(ReplyCode.NOT_ALLOWED, f"vhost {name} not found",
                                    *CONNECTION_OPEN)
        broker.limits.check_connection(self.user, name)
        if not broker.access.may_open(self.user, name):
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED,
                f"access to vhost '{name}' refused for user '{self.user}'",
                *CONNECTION_OPEN)
        limit = broker.config.connection_max
        if limit and len(broker.connections) >= limit:
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED,
                f"connection refused: node connection limit ({limit}) is reached",
                *CONNECTION_OPEN)
        self.connection.opened(Opened(vhost, self.user, self.user_tags, self.channel_max,
                                      self.heartbeat, self.client_properties,
                                      self.capabilities))


# The handshake's transitions: the method each state waits for, and its handler.
_STEPS = {
    (ConnectionState.STARTING, commands.Connection.StartOk): Handshake._start_ok,
    (ConnectionState.TUNING, commands.Connection.TuneOk): Handshake._tune_ok,
    (ConnectionState.OPENING, commands.Connection.Open): Handshake._open,
}
