"""Routing through direct, fanout, topic, headers and the default exchange."""

import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn, names: fixtures)
    _test_deadline, chan, conn, exclusive_queue, expect_channel_error, get_bodies, names,
    unique,
)

ROUTING_KEYS = ["", "a", "b", "a.b", "a.x.b", "a.x.y.b", "a..b", ".", "..", "a.", ".a",
                "x.a", "a.b.c", "a.b.b", "b.a.b", "x.y"]

# Binding pattern -> the keys of ROUTING_KEYS it matches, as RabbitMQ 3.10 routes them.
# Words are separated by "."; the empty routing key has no words at all, while "." is two
# empty words; "*" matches exactly one (possibly empty) word, "#" zero or more.
TOPIC_CASES = {
    "#": ROUTING_KEYS,
    "#.#": ROUTING_KEYS,
    "": [""],
    "*": ["a", "b"],
    "a": ["a"],
    "a.b": ["a.b"],
    "a.*": ["a.b", "a."],
    "*.*": ["a.b", ".", "a.", ".a", "x.a", "x.y"],
    "a.#": ["a", "a.b", "a.x.b", "a.x.y.b", "a..b", "a.", "a.b.c", "a.b.b"],
    "#.a": ["a", ".a", "x.a"],
    "a.#.b": ["a.b", "a.x.b", "a.x.y.b", "a..b", "a.b.b"],
    "a.#.#.b": ["a.b", "a.x.b", "a.x.y.b", "a..b", "a.b.b"],
    "a.*.b": ["a.x.b", "a..b", "a.b.b"],
    "a.*.#": ["a.b", "a.x.b", "a.x.y.b", "a..b", "a.", "a.b.c", "a.b.b"],
    "*.#": [key for key in ROUTING_KEYS if key != ""],
    "#.*": [key for key in ROUTING_KEYS if key != ""],
    "#.b.#": ["b", "a.b", "a.x.b", "a.x.y.b", "a..b", "a.b.c", "a.b.b", "b.a.b"],
    "a..b": ["a..b"],
    "*..*": ["a..b", ".."],
}


def topic_matches(pattern: str, key: str) -> bool:
    """Reference topic matching, as RabbitMQ does it (see TOPIC_CASES): split on ".",
    where the empty string has no words; "*" is one word, "#" zero or more."""
    def words(text):
        return text.split(".") if text else []

    def match(p, k):
        if not p:
            return not k
        if p[0] == "#":
            return any(match(p[1:], k[i:]) for i in range(len(k) + 1))
        return bool(k) and p[0] in ("*", k[0]) and match(p[1:], k[1:])

    return match(words(pattern), words(key))


def test_reference_matcher_agrees_with_the_table():
    for pattern, keys in TOPIC_CASES.items():
        assert [k for k in ROUTING_KEYS if topic_matches(pattern, k)] == keys, pattern


def label(key: str) -> str:
    return key if key else "<empty>"


def test_default_exchange_routes_by_queue_name(chan):
    first, second = exclusive_queue(chan), exclusive_queue(chan)
    chan.basic_publish("", first, b"to first")
    chan.basic_publish("", second, b"to second")
    chan.basic_publish("", unique("nobody"), b"dropped")
    assert get_bodies(chan, first) == ["to first"]
    assert get_bodies(chan, second) == ["to second"]


def test_default_exchange_delivery_reports_exchange_and_key(chan):
    queue = exclusive_queue(chan)
    chan.basic_publish("", queue, b"x")
    method, _, _ = chan.basic_get(queue, auto_ack=True)
    assert method.exchange == ""
    assert method.routing_key == queue


def test_direct_exchange_routes_on_exact_key(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "direct")
    red, green, both = exclusive_queue(chan), exclusive_queue(chan), exclusive_queue(chan)
    chan.queue_bind(red, exchange, "red")
    chan.queue_bind(green, exchange, "green")
    chan.queue_bind(both, exchange, "red")
    chan.queue_bind(both, exchange, "green")
    for key in ["red", "green", "blue", "Red", "red.x", ""]:
        chan.basic_publish(exchange, key, key.encode() or b"<empty>")
    assert get_bodies(chan, red) == ["red"]
    assert get_bodies(chan, green) == ["green"]
    assert get_bodies(chan, both) == ["red", "green"]


def test_queue_gets_one_copy_despite_several_matching_bindings(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "topic")
    queue = exclusive_queue(chan)
    chan.queue_bind(queue, exchange, "a.*")
    chan.queue_bind(queue, exchange, "*.b")
    chan.queue_bind(queue, exchange, "#")
    chan.basic_publish(exchange, "a.b", b"once")
    assert get_bodies(chan, queue) == ["once"]


def test_fanout_exchange_ignores_routing_key(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "fanout")
    queues = [exclusive_queue(chan) for _ in range(3)]
    chan.queue_bind(queues[0], exchange, "")
    chan.queue_bind(queues[1], exchange, "some-key")
    chan.queue_bind(queues[2], exchange, "#")
    chan.basic_publish(exchange, "anything", b"one")
    chan.basic_publish(exchange, "", b"two")
    for queue in queues:
        assert get_bodies(chan, queue) == ["one", "two"]


def test_exchange_without_bindings_drops_messages(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "fanout")
    chan.basic_publish(exchange, "", b"nowhere")
    queue = exclusive_queue(chan)
    chan.queue_bind(queue, exchange)
    chan.basic_publish(exchange, "", b"somewhere")
    assert get_bodies(chan, queue) == ["somewhere"]
    assert chan.is_open


def test_topic_patterns(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "topic")
    queues = {}
    for pattern in TOPIC_CASES:
        queues[pattern] = exclusive_queue(chan)
        chan.queue_bind(queues[pattern], exchange, pattern)
    for key in ROUTING_KEYS:
        chan.basic_publish(exchange, key, label(key).encode())
    routed = {pattern: get_bodies(chan, queue) for pattern, queue in queues.items()}
    expected = {pattern: [label(key) for key in keys] for pattern, keys in TOPIC_CASES.items()}
    assert routed == expected


WORDS = st.sampled_from(["a", "b", ""])
PATTERN_WORDS = st.sampled_from(["a", "b", "", "*", "#"])
KEYS = st.lists(WORDS, max_size=4).map(".".join)
PATTERNS = st.lists(PATTERN_WORDS, max_size=4).map(".".join)


@settings(max_examples=60,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(patterns=st.lists(PATTERNS, min_size=1, max_size=4, unique=True),
       keys=st.lists(KEYS, min_size=1, max_size=6, unique=True))
def test_topic_routing_matches_reference(chan, patterns, keys):
    exchange = unique("x-topic-prop")
    chan.exchange_declare(exchange, "topic", auto_delete=True)
    queues = {}
    try:
        for pattern in patterns:
            queues[pattern] = exclusive_queue(chan)
            chan.queue_bind(queues[pattern], exchange, pattern)
        for key in keys:
            chan.basic_publish(exchange, key, label(key).encode())
        routed = {pattern: get_bodies(chan, queue) for pattern, queue in queues.items()}
    finally:
        for queue in queues.values():
            chan.queue_delete(queue)
        chan.exchange_delete(exchange)
    expected = {pattern: [label(k) for k in keys if topic_matches(pattern, k)]
                for pattern in patterns}
    assert routed == expected


def test_topic_is_case_sensitive_and_literal(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "topic")
    queue = exclusive_queue(chan)
    chan.queue_bind(queue, exchange, "Stock.USD.*")
    for key in ["Stock.USD.nyse", "stock.usd.nyse", "Stock.USD", "Stock.USDX.nyse",
                "StockXUSD.nyse"]:
        chan.basic_publish(exchange, key, key.encode())
    assert get_bodies(chan, queue) == ["Stock.USD.nyse"]


def test_topic_unbind_removes_only_that_pattern(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "topic")
    queue = exclusive_queue(chan)
    chan.queue_bind(queue, exchange, "a.*")
    chan.queue_bind(queue, exchange, "#.z")
    chan.queue_unbind(queue, exchange, "a.*")
    for key in ["a.b", "y.z", "a.z"]:
        chan.basic_publish(exchange, key, key.encode())
    assert get_bodies(chan, queue) == ["y.z", "a.z"]


def _headers_route(chan, names, bindings, messages):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "headers")
    queues = {}
    for name, arguments in bindings.items():
        queues[name] = exclusive_queue(chan)
        chan.queue_bind(queues[name], exchange, "ignored-key", arguments=arguments)
    for name, headers in messages.items():
        chan.basic_publish(exchange, "any-key", name.encode(),
                           pika.BasicProperties(headers=headers))
    return {name: get_bodies(chan, queue) for name, queue in queues.items()}


def test_headers_exchange_all_and_any(chan, names):
    bindings = {
        "all": {"x-match": "all", "format": "pdf", "type": "report"},
        "any": {"x-match": "any", "format": "pdf", "type": "report"},
        "default": {"format": "pdf", "type": "report"},  # x-match defaults to all
    }
    messages = {
        "both": {"format": "pdf", "type": "report"},
        "format_only": {"format": "pdf"},
        "type_only": {"type": "report"},
        "extra": {"format": "pdf", "type": "report", "pages": 3},
        "wrong_value": {"format": "zip", "type": "report"},
        "no_headers": None,
        "empty_headers": {},
    }
    routed = _headers_route(chan, names, bindings, messages)
    assert routed == {
        "all": ["both", "extra"],
        "any": ["both", "format_only", "type_only", "extra", "wrong_value"],
        "default": ["both", "extra"],
    }


def test_headers_exchange_edge_cases(chan, names):
    bindings = {
        # No headers to match: "all" matches everything, "any" matches nothing.
        "all_empty": {"x-match": "all"},
        "any_empty": {"x-match": "any"},
        "no_arguments": None,
        # Binding arguments starting with "x-" are not matched against headers.
        "x_prefixed": {"x-match": "all", "x-foo": "1"},
        # Values compare with their types: the integer 1 is not the string "1".
        "string_one": {"x-match": "any", "n": "1"},
        "integer_one": {"x-match": "any", "n": 1},
        # A void (None) binding value matches the header's presence, whatever its value.
        "present": {"x-match": "all", "flag": None},
    }
    messages = {
        "str": {"n": "1"},
        "int": {"n": 1},
        "flag_none": {"flag": None},
        "flag_set": {"flag": "yes"},
        "nothing": None,
    }
    routed = _headers_route(chan, names, bindings, messages)
    everything = list(messages)
    assert routed == {
        "all_empty": everything,
        "any_empty": [],
        "no_arguments": everything,
        "x_prefixed": everything,
        "string_one": ["str"],
        "integer_one": ["int"],
        "present": ["flag_none", "flag_set"],
    }


def test_headers_exchange_rejects_unknown_x_match(conn, chan):
    queue = exclusive_queue(chan)
    error = expect_channel_error(
        conn, chan, 406,
        lambda: chan.queue_bind(queue, "amq.headers", "", arguments={"x-match": "bogus"}))
    assert "PRECONDITION_FAILED" in error.reply_text


@pytest.mark.parametrize("name", ["amq.headers", "amq.match"])
def test_builtin_headers_exchanges_route(chan, name):
    queue = exclusive_queue(chan)
    value = unique("v")  # other tests' bindings on the shared exchange never match it
    chan.queue_bind(queue, name, "", arguments={"k": value})
    chan.basic_publish(name, "", b"other value", pika.BasicProperties(headers={"k": "v"}))
    chan.basic_publish(name, "", b"match", pika.BasicProperties(headers={"k": value}))
    assert get_bodies(chan, queue) == ["match"]


@pytest.mark.parametrize("name", ["amq.direct", "amq.fanout", "amq.topic"])
def test_builtin_exchanges_route(chan, name):
    queue = exclusive_queue(chan)
    routing_key = unique("k").replace("-", "")
    binding = {"amq.direct": routing_key, "amq.fanout": "",
               "amq.topic": routing_key + ".#"}[name]
    chan.queue_bind(queue, name, binding)
    chan.basic_publish(name, routing_key, b"via " + name.encode())
    assert get_bodies(chan, queue) == ["via " + name]
    chan.queue_unbind(queue, name, binding)
    chan.basic_publish(name, routing_key, b"after unbind")
    assert get_bodies(chan, queue) == []


def test_publish_to_missing_exchange_is_404(conn, chan):
    missing = unique("no-exchange")
    error = expect_channel_error(conn, chan, 404,
                                 lambda: chan.basic_publish(missing, "key", b"lost"))
    assert "NOT_FOUND" in error.reply_text
    assert missing in error.reply_text
