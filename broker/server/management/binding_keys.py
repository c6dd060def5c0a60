"""A binding's `properties_key`: the last path segment naming one binding in
/api/bindings/{vhost}/e/{source}/q|e/{destination}/{props}.

RabbitMQ's form: "~" for an empty routing key without arguments; otherwise the routing
key form-encoded (space as "+", every byte but letters, digits and `-._` as %XX, so "~"
too), followed, when the binding has arguments, by "~" and the base64url (unpadded) of
erlang:phash2 of the arguments as RabbitMQ holds them: a list sorted by key of
{Key, Type, Value} with JSON's types (strings longstr, integers long, floats double,
booleans bool, lists array, objects table). A binding made over AMQP with other table
types (signedint, byte arrays, timestamps...) gets a key RabbitMQ would spell otherwise;
it is still the key both sides of Warren's API use for it."""

import base64
import datetime
import decimal
from urllib.parse import quote_plus

from broker.core.erlang_hash import Atom, phash2


def properties_key(routing_key: str, arguments: dict) -> str:
    if not routing_key and not arguments:
        return "~"
    quoted = quote_plus(routing_key, safe="").replace("~", "%7E")
    if not arguments:
        return quoted
    return f"{quoted}~{arguments_hash(arguments)}"


def arguments_hash(arguments: dict) -> str:
    digest = phash2(_table(arguments)).to_bytes(4, "big")
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _table(table: dict) -> list:
    entries = [(str(key).encode(), *_typed(value)) for key, value in table.items()]
    return sorted(entries, key=lambda entry: entry[0])


def _typed(value) -> tuple:
    """(type atom, Erlang value) as RabbitMQ types a JSON value in a field table."""
    if isinstance(value, bool):
        return Atom("bool"), value
    if isinstance(value, int):
        return Atom("long"), value
    if isinstance(value, (float, decimal.Decimal)):
        return Atom("double"), float(value)
    if isinstance(value, str):
        return Atom("longstr"), value.encode()
    if isinstance(value, (bytes, bytearray)):
        return Atom("longstr"), bytes(value)
    if isinstance(value, dict):
        return Atom("table"), _table(value)
    if isinstance(value, (list, tuple)):
        return Atom("array"), [_typed(item) for item in value]
    if isinstance(value, datetime.datetime):
        return Atom("timestamp"), int(value.timestamp())
    return Atom("void"), Atom("undefined")
