"""Users and SASL mechanisms (PLAIN, AMQPLAIN). Passwords are kept as salted hashes."""

import hashlib
import hmac
import os
import struct

from pamqp import decode

MECHANISMS = ("PLAIN", "AMQPLAIN")


def hash_password(password: str, salt: bytes | None = None) -> bytes:
    """RabbitMQ's scheme: 4 random salt bytes + SHA-256(salt + password)."""
    salt = os.urandom(4) if salt is None else salt
    return salt + hashlib.sha256(salt + password.encode()).digest()


def password_matches(password_hash: bytes, password: str) -> bool:
    expected = hash_password(password, password_hash[:4])
    return hmac.compare_digest(expected, password_hash)


class UserDatabase:
    """Users, their password hashes and the vhosts they may open."""

    def __init__(self):
        self._users: dict[str, bytes] = {}
        self._vhosts: dict[str, set[str]] = {}

    def add(self, name: str, password: str, vhosts=("/",)) -> None:
        self._users[name] = hash_password(password)
        self._vhosts[name] = set(vhosts)

    def authenticate(self, name: str, password: str) -> bool:
        password_hash = self._users.get(name)
        return password_hash is not None and password_matches(password_hash, password)

    def may_open(self, name: str, vhost: str) -> bool:
        return vhost in self._vhosts.get(name, ())


class AuthenticationFailure(Exception):
    """The SASL response was malformed or named an unsupported mechanism."""


def parse_credentials(mechanism: str, response: bytes | str) -> tuple[str, str]:
    """(username, password) from a Connection.StartOk response."""
    if isinstance(response, str):
        response = response.encode("utf-8", "surrogateescape")
    if mechanism == "PLAIN":
        parts = response.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailure("malformed PLAIN response")
        return parts[1].decode(), parts[2].decode()
    if mechanism == "AMQPLAIN":
        try:
            _, table = decode.field_table(struct.pack(">I", len(response)) + response)
        except Exception as exc:   # pamqp raises several types for a malformed table
            raise AuthenticationFailure("malformed AMQPLAIN response") from exc
        return _text(table.get("LOGIN")), _text(table.get("PASSWORD"))
    raise AuthenticationFailure(f"unsupported authentication mechanism '{mechanism}'")


def _text(value) -> str:
    if isinstance(value, (bytes, bytearray)):
        return value.decode()
    return "" if value is None else str(value)
