"""Who is asking: HTTP basic auth against Warren's users, and RabbitMQ's tag rules.

RabbitMQ's management tags: `management` (their own vhosts' objects), `policymaker`
(management + policies and parameters of their vhosts), `monitoring` (management + every
vhost's objects, read-only: connections, channels, node data), `administrator`
(everything). A user with none of them cannot use the API (401 "Not management user").
Users named in `loopback_users` (guest by default) may use it from a loopback address
only, as RabbitMQ applies loopback_users to the management listener too.
"""

import base64
import binascii
from dataclasses import dataclass

from starlette.requests import Request

from broker.core.access_control import User
from broker.core.auth import is_loopback
from broker.core.broker import Broker

from .errors import ApiError, not_authorised

MANAGEMENT, POLICYMAKER, MONITORING, ADMINISTRATOR = (
    "management", "policymaker", "monitoring", "administrator")

# Each tag and the tags it implies (administrator implies every other one).
_IMPLIED = {
    MANAGEMENT: {MANAGEMENT},
    POLICYMAKER: {MANAGEMENT, POLICYMAKER},
    MONITORING: {MANAGEMENT, MONITORING},
    ADMINISTRATOR: {MANAGEMENT, POLICYMAKER, MONITORING, ADMINISTRATOR},
}

_CHALLENGE = {"WWW-Authenticate": 'Basic realm="RabbitMQ Management"'}


@dataclass(frozen=True)
class Caller:
    """The authenticated user of one request."""

    user: User
    roles: frozenset[str]   # management tags held, with the ones they imply

    @property
    def name(self) -> str:
        return self.user.name

    def has(self, tag: str) -> bool:
        return tag in self.roles

    def require(self, tag: str) -> None:
        """401 as RabbitMQ answers a user without `tag` (or a tag implying it)."""
        if tag not in self.roles:
            raise not_authorised(_REFUSALS.get(tag, "Not authorised"))

    def sees_all_vhosts(self) -> bool:
        """monitoring and administrator users see every vhost's objects."""
        return MONITORING in self.roles


_REFUSALS = {
    MANAGEMENT: "Not management user",
    POLICYMAKER: "Not policymaker user",   # RabbitMQ words it "Not administrator user"
    MONITORING: "Not monitor user",
    ADMINISTRATOR: "Not administrator user",
}


def authenticate(broker: Broker, request: Request) -> Caller:
    """The caller of `request`, or ApiError 401 (RabbitMQ's bodies)."""
    header = request.headers.get("authorization", "")
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        raise NoCredentials()
    name, password = _credentials(encoded)
    user = broker.access.authenticate(name, password)
    client = request.client.host if request.client else ""
    if user is None or (name in broker.loopback_users and not is_loopback(client)):
        raise _login_failed()
    roles = frozenset(role for tag in user.tags for role in _IMPLIED.get(tag, ()))
    if MANAGEMENT not in roles:
        raise not_authorised("Not management user")
    return Caller(user, roles)


class NoCredentials(ApiError):
    """A request without basic credentials: 401 with an empty body and the challenge,
    as RabbitMQ answers it."""

    def __init__(self):
        super().__init__(401, "", "", headers=_CHALLENGE)


def _credentials(encoded: str) -> tuple[str, str]:
    try:
        text = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise _login_failed() from None
    name, separator, password = text.partition(":")
    if not separator:
        raise _login_failed()
    return name, password


def _login_failed() -> ApiError:
    """RabbitMQ's answer to a wrong user or password (spelt "not_authorized" there,
    unlike its other 401s), also given to a loopback-only user from elsewhere."""
    return ApiError(401, "not_authorized", "Login failed", headers=_CHALLENGE)
