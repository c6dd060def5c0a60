"""Policies and operator policies, as RabbitMQ 3.10 has them: which one applies to a
queue or exchange, and what a queue or exchange then does, combined with its
x-arguments.

- A policy matches an entity when its pattern (a regular expression, unanchored) is
  found in the entity's name, its apply-to covers the entity's kind, and none of its
  definition's keys is one the entity's queue type does not support (its kind's
  `unsupported_policy_keys`, queue_types.py: a policy with `max-age` does not match a
  classic queue at all, one with `max-length` no stream).
- Of the matching policies the one with the highest priority applies; RabbitMQ leaves
  the choice between equal priorities to the order of its parameter table, Warren takes
  the name that sorts first. Operator policies are chosen the same way, separately.
- The two definitions are merged: where both set a key, the lower value wins
  (RabbitMQ's merge strategy; operator policies only have numeric keys).
- The merged definition is then combined with the entity's arguments: for classic
  queues the lower of argument and policy for the numeric limits, the argument for
  the others; for streams the policy; for exchanges the argument.

Definitions are validated as RabbitMQ validates them, with its wording; keys Warren does
not implement are refused rather than accepted and ignored.
"""

import json
import re
from dataclasses import dataclass, field

from amqp_codec.field_table import text_value

from .stream_arguments import parse_duration

POLICY = "policy"
OPERATOR_POLICY = "operator_policy"
APPLY_TO = ("queues", "exchanges", "all")
OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
DEAD_LETTER_STRATEGIES = ("at-most-once", "at-least-once")   # quorum_queue.py
MAX_SEGMENT_SIZE = 3_000_000_000   # RabbitMQ's limit on stream-max-segment-size-bytes

# What a definition key must be, in RabbitMQ's words ("<value> is not a valid ...").
_INTEGER_KEYS = {                   # key: (smallest value, what RabbitMQ calls it)
    "message-ttl": (0, "message TTL"),
    "expires": (1, "queue expiry"),
    "max-length": (0, "maximum length"),
    "max-length-bytes": (0, "maximum length in bytes"),
    "stream-max-segment-size-bytes": (0, "segment size"),
    "delivery-limit": (0, "delivery limit"),
    "consumer-timeout": (0, "consumer timeout"),   # RabbitMQ 3.12 and later
}
_NAME_KEYS = {
    "dead-letter-exchange": "dead letter exchange name",
    "dead-letter-routing-key": "dead letter routing key",
    "alternate-exchange": "alternate exchange name",
}
POLICY_KEYS = frozenset([*_INTEGER_KEYS, *_NAME_KEYS, "overflow", "max-age",
                         "dead-letter-strategy"])
OPERATOR_POLICY_KEYS = frozenset(["expires", "message-ttl", "max-length",
                                  "max-length-bytes", "delivery-limit"])
# Keys RabbitMQ 3.10 knows that configure what Warren does not have.
NOT_IMPLEMENTED = frozenset([
    "max-in-memory-length", "max-in-memory-bytes", "queue-mode", "queue-version",
    "queue-leader-locator", "initial-cluster-size", "ha-mode", "ha-params", "ha-sync-mode",
    "ha-sync-batch-size", "ha-promote-on-shutdown", "ha-promote-on-failure",
    "queue-master-locator", "federation-upstream", "federation-upstream-set",
    "single-active-consumer", "max-priority"])

# Keys of an operator policy and a policy that both apply: the lower value wins.
_MERGED_BY_MINIMUM = frozenset(["message-ttl", "max-length", "max-length-bytes",
                                "expires", "delivery-limit"])


class PolicyError(ValueError):
    """A policy that cannot be set as given (the text says why)."""


@dataclass(frozen=True)
class Policy:
    """One policy or operator policy (`kind`) of a vhost."""

    vhost: str
    kind: str
    name: str
    pattern: str
    apply_to: str
    priority: int
    definition: dict
    regex: re.Pattern = field(compare=False, repr=False)

    def matches(self, entity_kind: str, name: str, unsupported: frozenset) -> bool:
        """Whether it applies to the queue or exchange (`entity_kind`) `name`, whose
        type does not support the keys `unsupported`."""
        return (self.apply_to in ("all", entity_kind + "s")
                and unsupported.isdisjoint(self.definition)
                and self.regex.search(name) is not None)


def make_policy(vhost: str, kind: str, name: str, pattern: str, definition,
                priority=0, apply_to: str = "all") -> Policy:
    """A validated Policy; PolicyError when RabbitMQ would refuse it."""
    if kind not in (POLICY, OPERATOR_POLICY):
        raise PolicyError(f"unknown policy kind {kind!r}")
    if not name:
        raise PolicyError("a policy needs a non-empty name")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise PolicyError(f"{_shown(priority)} priority must be a number")
    if apply_to not in APPLY_TO:
        raise PolicyError(f"Validation failed: apply-to '{apply_to}' unrecognised; "
                          "should be 'queues', 'exchanges' or 'all'")
    try:
        regex = re.compile(pattern)
    except (re.error, TypeError) as error:
        raise PolicyError(f"Validation failed: pattern should be regular expression but "
                          f"is invalid: {error}") from None
    definition = validate_definition(definition, kind)
    return Policy(vhost, kind, name, pattern, apply_to, priority, definition, regex)


def validate_definition(definition, kind: str = POLICY) -> dict:
    """The definition as a dict, checked as RabbitMQ checks it: values of known keys
    first, then keys that are not allowed. Accepts a JSON text or a dict."""
    if isinstance(definition, str):
        try:
            definition = json.loads(definition)
        except ValueError as error:
            raise PolicyError(f"JSON decoding error. Reason: {error}") from None
    if not isinstance(definition, dict):
        raise PolicyError(f"Validation failed: definition must be a dictionary: "
                          f"{_shown(definition)}")
    if not definition:
        raise PolicyError("Validation failed: no policy provided")
    allowed = POLICY_KEYS if kind == POLICY else OPERATOR_POLICY_KEYS
    for key, value in definition.items():
        if key in allowed:
            problem = _value_problem(key, value)
            if problem:
                raise PolicyError(f"Validation failed: {problem}")
    rabbit_only = sorted(key for key in definition if key in NOT_IMPLEMENTED)
    if rabbit_only and kind == POLICY:
        raise PolicyError(f"Validation failed: {_shown(rabbit_only)} are RabbitMQ policy "
                          "settings that Warren does not implement")
    unknown = sorted(key for key in definition if key not in allowed)
    if unknown:
        raise PolicyError(
            f"Validation failed: {_shown(unknown)} are not recognised policy settings"
            + ("" if kind == POLICY else
               f" (operator policies take {', '.join(sorted(OPERATOR_POLICY_KEYS))})"))
    return dict(definition)


def _value_problem(key: str, value) -> str | None:
    if key in _INTEGER_KEYS:
        smallest, what = _INTEGER_KEYS[key]
        largest = MAX_SEGMENT_SIZE if key == "stream-max-segment-size-bytes" else None
        if (isinstance(value, bool) or not isinstance(value, int) or value < smallest
                or (largest is not None and value > largest)):
            return f"{_shown(value)} is not a valid {what}"
    elif key in _NAME_KEYS:
        if not isinstance(value, str):
            return f"{_shown(value)} is not a valid {_NAME_KEYS[key]}"
    elif key == "overflow":
        if value not in OVERFLOW_MODES:
            return f"{_shown(value)} is not a valid overflow value"
    elif key == "dead-letter-strategy":
        if value not in DEAD_LETTER_STRATEGIES:
            return f"{_shown(value)} is not a valid dead letter strategy"
    elif key == "max-age":
        if not isinstance(value, str) or parse_duration(value) is None:
            return f"{_shown(value)} is not a valid max age"
    return None


def _shown(value) -> str:
    return json.dumps(value, ensure_ascii=False)


class VhostPolicies:
    """The policies and operator policies of one vhost."""

    def __init__(self):
        self.by_kind: dict[str, dict[str, Policy]] = {POLICY: {}, OPERATOR_POLICY: {}}

    def put(self, policy: Policy) -> None:
        self.by_kind[policy.kind][policy.name] = policy

    def remove(self, kind: str, name: str) -> Policy | None:
        return self.by_kind[kind].pop(name, None)

    def select(self, entity_kind: str, name: str,
               unsupported: frozenset = frozenset()) -> tuple[Policy | None, Policy | None]:
        """The policy and the operator policy that apply to the queue or exchange."""
        return (_highest(self.by_kind[POLICY].values(), entity_kind, name, unsupported),
                _highest(self.by_kind[OPERATOR_POLICY].values(), entity_kind, name,
                         unsupported))


def _highest(policies, entity_kind: str, name: str,
             unsupported: frozenset) -> Policy | None:
    """The matching policy of highest priority; of equal ones, the first by name."""
    best = None
    for policy in policies:
        if policy.matches(entity_kind, name, unsupported) and (
                best is None or (-policy.priority, policy.name)
                < (-best.priority, best.name)):
            best = policy
    return best


def merged_definition(policy: Policy | None, operator_policy: Policy | None) -> dict:
    """The definition that applies: the policy's, with the operator policy's keys
    added, the lower value winning where both set a key."""
    definition = dict(policy.definition) if policy is not None else {}
    if operator_policy is not None:
        for key, value in operator_policy.definition.items():
            if key in definition and key in _MERGED_BY_MINIMUM:
                definition[key] = min(definition[key], value)
            else:
                definition[key] = value
    return definition


@dataclass(frozen=True)
class ClassicQueueSettings:
    """What a classic queue does, from its arguments and the definition that applies."""

    message_ttl: int | None
    expires: int | None
    max_length: int | None
    max_length_bytes: int | None
    overflow: str
    dead_letter_exchange: str | None
    dead_letter_routing_key: str | None


def classic_queue_settings(arguments: dict, definition: dict) -> ClassicQueueSettings:
    """The lower of argument and policy for the limits (message-ttl, expires,
    max-length, max-length-bytes); the argument, if given, for the others."""
    def lower(key):
        argument = arguments.get("x-" + key)
        value = definition.get(key)
        if argument is None or value is None:
            return value if argument is None else argument
        return min(argument, value)

    def argument_first(key):
        argument = arguments.get("x-" + key)
        return text_value(argument) if argument is not None else definition.get(key)

    return ClassicQueueSettings(
        lower("message-ttl"), lower("expires"), lower("max-length"),
        lower("max-length-bytes"), argument_first("overflow") or "drop-head",
        argument_first("dead-letter-exchange"), argument_first("dead-letter-routing-key"))


def stream_setting(arguments: dict, definition: dict, key: str):
    """A stream's max-length-bytes, max-age or stream-max-segment-size-bytes: the
    policy's when it sets one (RabbitMQ lets the policy win for streams), else the
    argument's."""
    if key in definition:
        return definition[key]
    return arguments.get("x-" + key)


def alternate_exchange(arguments: dict, definition: dict) -> str | None:
    """An exchange's alternate exchange: its argument, else the policy's."""
    argument = arguments.get("alternate-exchange")
    if isinstance(argument, (str, bytes)):
        return text_value(argument)
    return definition.get("alternate-exchange")
