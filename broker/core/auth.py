"""SASL mechanisms (PLAIN, AMQPLAIN): the credentials in a Connection.StartOk. Users
and their password hashes are access_control.py's."""

import ipaddress
import struct

from amqp_codec.field_table import TableError, decode_table

MECHANISMS = ("PLAIN", "AMQPLAIN")


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


def is_loopback(address: str) -> bool:
    """Whether `address` (an IP address as the socket reports it, without a port) is
    this machine's loopback: 127.0.0.0/8, ::1, or 127.x mapped into IPv6
    (::ffff:127.x.y.z), as RabbitMQ's loopback_users check counts it. Anything else,
    an empty or unparsable address included, is not."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback
