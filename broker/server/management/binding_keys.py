"""A binding's `properties_key`: the last path segment naming one binding in
/api/bindings/{vhost}/e/{source}/q|e/{destination}/{props}.

RabbitMQ's form: "~" for an empty routing key without arguments; otherwise the routing
key form-encoded (space as "+", every byte but letters, digits and `-._` as %XX, so "~"
too), followed, when the binding has arguments, by "~" and a short base64url hash of the
arguments. RabbitMQ hashes the Erlang term of the arguments; Warren hashes a canonical
JSON form of them instead, so a key with arguments differs from RabbitMQ's (clients take
it from a binding listing, where both sides agree)."""

import base64
import hashlib
import json
from urllib.parse import quote_plus


def properties_key(routing_key: str, arguments: dict) -> str:
    if not routing_key and not arguments:
        return "~"
    quoted = quote_plus(routing_key, safe="").replace("~", "%7E")
    if not arguments:
        return quoted
    return f"{quoted}~{arguments_hash(arguments)}"


def arguments_hash(arguments: dict) -> str:
    """Six base64url characters (32 bits) naming the arguments, key order ignored."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"),
                           default=_plain)
    digest = hashlib.sha256(canonical.encode()).digest()[:4]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _plain(value):
    """Table values JSON has no type for (byte arrays, decimals, timestamps)."""
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return str(value)
