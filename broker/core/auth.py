"""Users and SASL mechanisms (PLAIN, AMQPLAIN). Passwords are kept as salted hashes
in RabbitMQ's format (storage.passwords); plain passwords are never stored."""

import struct

from pamqp import decode

from storage.passwords import SHA256_ALGORITHM, hash_password, verify_password

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
