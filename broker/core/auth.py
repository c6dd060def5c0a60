"""Users and SASL mechanisms (PLAIN, AMQPLAIN). Passwords are kept as salted hashes
in RabbitMQ's format (passwords.py); plain passwords are never stored."""

import struct

from amqp_codec.field_table import TableError, decode_table

from .passwords import SHA256_ALGORITHM, hash_password, verify_password

MECHANISMS = ("PLAIN", "AMQPLAIN")


class UserDatabase:
    """Users, their password hashes and the vhosts they may open, held in memory
    (loaded from the metadata store at start-up)."""

    def __init__(self):
        self._hashes: dict[str, tuple[str, str]] = {}
        self._vhosts: dict[str, set[str]] = {}

    def add(self, name: str, password: str, vhosts=("/",)) -> None:
        self.add_hashed(name, hash_password(password), SHA256_ALGORITHM, vhosts)

    def add_hashed(self, name: str, password_hash: str, algorithm: str, vhosts) -> None:
        self._hashes[name] = (password_hash, algorithm)
        self._vhosts[name] = set(vhosts)

    def clear(self) -> None:
        self._hashes.clear()
        self._vhosts.clear()

    def authenticate(self, name: str, password: str) -> bool:
        stored = self._hashes.get(name)
        return stored is not None and verify_password(password, *stored)

    def exists(self, name: str) -> bool:
        """Whether the user is known (EXTERNAL logins check nothing more)."""
        return name in self._hashes

    def may_open(self, name: str, vhost: str) -> bool:
        return vhost in self._vhosts.get(name, ())


class AuthenticationFailure(Exception):
    """The SASL response was malformed or named an unsupported mechanism."""


class UndecodableCredentials(AuthenticationFailure):
    """The user name or password is not UTF-8: no user can match, so the login is
    refused as a wrong password is (RabbitMQ 3.10 drops the socket instead)."""


def parse_credentials(mechanism: str, response: bytes | str) -> tuple[str, str]:
    """(username, password) from a Connection.StartOk response; UndecodableCredentials
    when either is not UTF-8."""
    if isinstance(response, str):
        response = response.encode("utf-8", "surrogateescape")
    if mechanism == "PLAIN":
        parts = response.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailure("malformed PLAIN response")
        return _text(parts[1]), _text(parts[2])
    if mechanism == "AMQPLAIN":
        try:
            table, _ = decode_table(struct.pack(">I", len(response)) + response)
        except TableError as exc:
            raise AuthenticationFailure("malformed AMQPLAIN response") from exc
        return _text(table.get("LOGIN")), _text(table.get("PASSWORD"))
    raise AuthenticationFailure(f"unsupported authentication mechanism '{mechanism}'")


def _text(value) -> str:
    if isinstance(value, (bytes, bytearray)):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise UndecodableCredentials("user name or password is not UTF-8") from None
    return "" if value is None else str(value)
