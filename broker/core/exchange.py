"""Exchanges: direct, fanout, topic and headers routing.

A destination is a queue or, for exchange-to-exchange bindings, another Exchange; each
says which by `is_queue`.
`route` returns the destinations bound for one message; the virtual host follows
exchange destinations further (see VirtualHost.route).
"""

import datetime
from decimal import Decimal

from amqp_codec.field_table import text_value

from .errors import precondition_failed
from .message import Message
from .policy import alternate_exchange

ALTERNATE_EXCHANGE = "alternate-exchange"

X_MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")
from .topic import TopicTrie


def freeze_arguments(arguments: dict | None):
    """A hashable, order-independent form of an arguments table (bindings are sets)."""
    if not arguments:
        return ()
    return tuple(sorted((key, _freeze(value)) for key, value in arguments.items()))


def _freeze(value):
    if isinstance(value, dict):
        return freeze_arguments(value)
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item) for item in value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


class Exchange:
    """Common state of every exchange type; subclasses index bindings for routing."""

    kind = ""
    is_queue = False   # as a binding's destination (QueueBase.is_queue is True)
    delays_messages = False   # an x-delayed-message exchange (delayed_exchange.py)

    def __init__(self, name: str, durable: bool = False, auto_delete: bool = False,
                 internal: bool = False, arguments: dict | None = None):
        self.name = name
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments = dict(arguments or {})
        # (destination, routing_key, frozen arguments) -> arguments as given
        self.bindings: dict[tuple, dict] = {}
        # The exchange unroutable messages go to, by name (its argument, else the
        # policy's); the default exchange has none.
        self.alternate: str | None = alternate_exchange(self.arguments, {}) if name else None
        self.applied_policies: tuple = (None, None)   # (policy, operator policy) in force
        # Bindings whose destination is an exchange: while there are none, routing
        # ends at the queues this exchange's index gives (VirtualHost.route).
        self.exchange_bindings = 0
        self.deleted = False    # set when the vhost forgets it (caches that hold it check)

    def apply_policy(self, definition: dict) -> None:
        """The policy in force changed: `definition` is the merged definition of the
        policy and operator policy now in force ({} for none)."""
        if self.name:
            self.alternate = alternate_exchange(self.arguments, definition)

    def bind(self, destination, routing_key: str, arguments: dict | None) -> bool:
        """Add a binding; False when it already existed."""
        key = (destination, routing_key, freeze_arguments(arguments))
        if key in self.bindings:
            return False
        self.bindings[key] = dict(arguments or {})
        self._index_add(destination, routing_key, arguments or {})
        if not destination.is_queue:
            self.exchange_bindings += 1
        return True

    def unbind(self, destination, routing_key: str, arguments: dict | None) -> bool:
        key = (destination, routing_key, freeze_arguments(arguments))
        if self.bindings.pop(key, None) is None:
            return False
        self._index_remove(destination, routing_key, arguments or {})
        if not destination.is_queue:
            self.exchange_bindings -= 1
        return True

    def unbind_destination(self, destination) -> bool:
        """Remove every binding to `destination`; whether there was one."""
        keys = [key for key in self.bindings if key[0] is destination]
        for key in keys:
            self.unbind(key[0], key[1], self.bindings[key])
        return bool(keys)

    def has_binding(self, destination, routing_key: str, arguments: dict | None) -> bool:
        return (destination, routing_key, freeze_arguments(arguments)) in self.bindings

    def difference(self, kind: str, durable: bool, auto_delete: bool, internal: bool,
                   arguments: dict | None) -> tuple | None:
        """(field, received, current) for the first property a redeclaration changes,
        each value as RabbitMQ shows it in the 406 text. Of the arguments only
        alternate-exchange counts, as in RabbitMQ (others may differ)."""
        checks = (("type", kind, self.kind), ("durable", durable, self.durable),
                  ("auto_delete", auto_delete, self.auto_delete),
                  ("internal", internal, self.internal))
        for field, asked, has in checks:
            if asked != has:
                return field, f"'{_flag(asked)}'", f"'{_flag(has)}'"
        received = (arguments or {}).get(ALTERNATE_EXCHANGE)
        current = self.arguments.get(ALTERNATE_EXCHANGE)
        if received is None and current is None:
            return None
        if received is None or current is None or \
                field_type_name(received) != field_type_name(current):
            return ALTERNATE_EXCHANGE, _typed_value(received), _typed_value(current)
        if _freeze(received) != _freeze(current):
            return ALTERNATE_EXCHANGE, f"'{text_value(received)}'", f"'{text_value(current)}'"
        return None

    def validate_binding(self, arguments: dict | None) -> None:
        """Raise a ChannelError when binding arguments make no sense for this type."""

    def route(self, message: Message):
        raise NotImplementedError

    def _index_add(self, destination, routing_key: str, arguments: dict) -> None:
        raise NotImplementedError

    def _index_remove(self, destination, routing_key: str, arguments: dict) -> None:
        raise NotImplementedError


def _flag(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _typed_value(value) -> str:
    if value is None:
        return "none"
    return f"the value '{text_value(value)}' of type '{field_type_name(value)}'"


def field_type_name(value) -> str:
    """The AMQP field type RabbitMQ names in its texts for a decoded table value
    (integers as pika encodes them: 32-bit signedint, else long)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -2**31 <= value < 2**31 else "long"
    for kind, name in ((str, "longstr"), (bytes, "longstr"), (bytearray, "longstr"),
                       (float, "double"), (Decimal, "decimal"), (dict, "table"),
                       (list, "array"), (datetime.datetime, "timestamp")):
        if isinstance(value, kind):
            return name
    return "void"


class DirectExchange(Exchange):
    kind = "direct"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._by_key: dict[str, dict] = {}      # routing key -> {destination: bindings}
        # routing key -> its destinations, as a tuple made when the bindings change:
        # a route the caller can keep while enqueueing changes bindings, without a copy
        # per message.
        self._routes: dict[str, tuple] = {}

    def route(self, message: Message) -> tuple:
        return self._routes.get(message.routing_key, ())

    def _index_add(self, destination, routing_key, arguments):
        destinations = self._by_key.setdefault(routing_key, {})
        destinations[destination] = destinations.get(destination, 0) + 1
        self._routes[routing_key] = tuple(destinations)

    def _index_remove(self, destination, routing_key, arguments):
        destinations = self._by_key[routing_key]
        destinations[destination] -= 1
        if not destinations[destination]:
            del destinations[destination]
        if destinations:
            self._routes[routing_key] = tuple(destinations)
        else:
            del self._by_key[routing_key]
            del self._routes[routing_key]


class FanoutExchange(Exchange):
    kind = "fanout"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._destinations: dict = {}

    def route(self, message: Message):
        return self._destinations

    def _index_add(self, destination, routing_key, arguments):
        self._destinations[destination] = self._destinations.get(destination, 0) + 1

    def _index_remove(self, destination, routing_key, arguments):
        self._destinations[destination] -= 1
        if not self._destinations[destination]:
            del self._destinations[destination]


class TopicExchange(Exchange):
    kind = "topic"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._trie = TopicTrie()

    def route(self, message: Message):
        return self._trie.match(message.routing_key)

    def _index_add(self, destination, routing_key, arguments):
        self._trie.add(routing_key, destination)

    def _index_remove(self, destination, routing_key, arguments):
        self._trie.remove(routing_key, destination)


class HeadersExchange(Exchange):
    """Matches message headers against binding arguments (x-match all/any).

    Argument keys starting with "x-" are not matched. A binding value of void (None)
    matches any value of that header. `all-with-x` / `any-with-x` also match x- keys.
    """

    kind = "headers"

    def validate_binding(self, arguments: dict | None) -> None:
        mode = text_value((arguments or {}).get("x-match", "all"))
        if mode not in X_MATCH_MODES:
            raise precondition_failed(
                f"Invalid x-match field value {mode!r}; expected one of "
                f"{', '.join(X_MATCH_MODES)}")

    def route(self, message: Message):
        headers = message.headers
        found: dict = {}     # destination -> None: each once, in binding order
        for (destination, _key, _frozen), arguments in self.bindings.items():
            if destination not in found and headers_match(arguments, headers):
                found[destination] = None
        return found

    def _index_add(self, destination, routing_key, arguments):
        """Headers bindings are scanned at route time; `bindings` is the index."""

    def _index_remove(self, destination, routing_key, arguments):
        """Nothing beyond `bindings` to update."""


def headers_match(arguments: dict, headers: dict) -> bool:
    mode = text_value(arguments.get("x-match", "all"))
    with_x = mode.endswith("-with-x")
    wanted = [(key, value) for key, value in arguments.items()
              if key != "x-match" and (with_x or not key.startswith("x-"))]
    results = (_header_matches(headers, key, value) for key, value in wanted)
    if mode.startswith("any"):
        return any(results)
    return all(results)


def _header_matches(headers: dict, key: str, value) -> bool:
    if key not in headers:
        return False
    return value is None or headers[key] == value


EXCHANGE_TYPES = {cls.kind: cls for cls in
                  (DirectExchange, FanoutExchange, TopicExchange, HeadersExchange)}
