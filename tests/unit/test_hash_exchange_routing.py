"""The exchange types that route each message to one destination
(broker/core/hash_exchanges.py): x-consistent-hash, x-modulus-hash, x-local-random.

Routing is checked on the classes with a fixed key set, so every count is the same on
every run; a share is compared with its expected value within 5 standard deviations of
a binomial count over that many keys. The refusals carry RabbitMQ's codes and texts
(rabbit_exchange_type_consistent_hash.erl, rabbit_exchange_type_local_random.erl and
rabbit_channel.erl's binding_invalid -> 406). The last tests go through a connection
(tests/unit/core_harness.py) for the declare and bind paths of the virtual host."""

import math
import random
import struct
from collections import Counter
from types import SimpleNamespace

import pytest
from pamqp import commands

from amqp_codec import encode_properties
from amqp_codec.reply_codes import ReplyCode
from broker.core.errors import ChannelError, ConnectionFailure
from broker.core.hash_exchanges import (
    MAX_WEIGHT, ConsistentHashExchange, LocalRandomExchange, ModulusHashExchange,
    erlang_binary, jump_bucket)
from broker.core.message import Message, SenderRoutedMessage
from tests.unit.core_harness import Client, close_code

KEYS = [f"order-{number}" for number in range(6000)]


class Destination:
    """A binding's destination as the exchanges see one: a queue of a kind, or an
    exchange."""

    def __init__(self, name: str, is_queue: bool = True, kind: str = "classic"):
        self.name = name
        self.is_queue = is_queue
        self.kind = SimpleNamespace(name=kind)

    def __repr__(self) -> str:
        return self.name


def message(routing_key: str = "", **properties) -> Message:
    raw = encode_properties(commands.Basic.Properties(**properties))
    return Message("x", routing_key, raw, b"")


def only_destination(exchange, routed: Message):
    destinations = tuple(exchange.route(routed))
    assert len(destinations) == 1, destinations
    return destinations[0]


def placements(exchange, keys=KEYS) -> dict:
    """routing key -> the destination the exchange routes a message with it to."""
    return {key: only_destination(exchange, message(key)) for key in keys}


def assert_share(count: int, total: int, share: float) -> None:
    deviation = math.sqrt(total * share * (1 - share))
    assert abs(count - total * share) <= 5 * deviation, (count, total, share)


def weighted(weights: dict[str, int], **arguments) -> tuple:
    """A consistent-hash exchange bound to one queue per weight; (exchange, queues)."""
    exchange = ConsistentHashExchange("x", arguments=arguments or None)
    queues = {}
    for name, weight in weights.items():
        queues[name] = Destination(name)
        exchange.bind(queues[name], str(weight), None)
    return exchange, queues


# -- x-consistent-hash: routing ------------------------------------------------------

def test_shares_follow_the_weights():
    exchange, queues = weighted({"a": 1, "b": 2, "c": 3})
    counts = Counter(placements(exchange).values())
    for name, weight in (("a", 1), ("b", 2), ("c", 3)):
        assert_share(counts[queues[name]], len(KEYS), weight / 6)


def test_a_key_goes_to_the_same_queue_every_time_and_on_an_exchange_bound_alike():
    exchange, _ = weighted({"a": 2, "b": 5, "c": 1})
    first = placements(exchange)
    assert placements(exchange) == first
    again, _ = weighted({"a": 2, "b": 5, "c": 1})   # another instance (a restart)
    assert {key: queue.name for key, queue in placements(again).items()} == \
        {key: queue.name for key, queue in first.items()}


def test_a_new_binding_takes_only_its_share_and_nothing_moves_elsewhere():
    exchange, _ = weighted({"a": 2, "b": 3, "c": 1})
    before = placements(exchange)
    newcomer = Destination("d")
    exchange.bind(newcomer, "2", None)
    after = placements(exchange)
    moved = [key for key in KEYS if after[key] is not before[key]]
    assert all(after[key] is newcomer for key in moved)
    assert_share(len(moved), len(KEYS), 2 / 8)


def test_removing_the_newest_binding_moves_back_only_its_keys():
    exchange, queues = weighted({"a": 2, "b": 3})
    before = placements(exchange)
    newcomer = Destination("c")
    exchange.bind(newcomer, "5", None)
    exchange.unbind(newcomer, "5", None)
    assert placements(exchange) == before
    assert set(before.values()) == {queues["a"], queues["b"]}


def test_removing_a_middle_binding_leaves_every_key_on_a_remaining_queue():
    exchange, queues = weighted({"a": 1, "b": 1, "c": 1})
    exchange.unbind(queues["b"], "1", None)
    counts = Counter(placements(exchange).values())
    assert set(counts) == {queues["a"], queues["c"]}
    assert_share(counts[queues["a"]], len(KEYS), 1 / 2)


def test_a_second_binding_to_a_queue_adds_no_buckets_and_removing_either_removes_all():
    """The plugin keeps one set of buckets per destination: its first binding's."""
    exchange, queues = weighted({"a": 1, "b": 1})
    exchange.bind(queues["a"], "9", None)
    counts = Counter(placements(exchange).values())
    assert_share(counts[queues["a"]], len(KEYS), 1 / 2)
    exchange.unbind(queues["a"], "9", None)
    assert set(placements(exchange).values()) == {queues["b"]}
    assert exchange.has_binding(queues["a"], "1", None)


def test_cc_keys_do_not_change_where_a_message_goes():
    exchange, _ = weighted({"a": 1, "b": 1, "c": 1})
    for key in KEYS[:200]:
        carbon = SenderRoutedMessage("x", key, message(key).properties, b"",
                                     ("other", "keys"))
        assert only_destination(exchange, carbon) is only_destination(exchange, message(key))


def test_an_exchange_can_be_a_destination():
    exchange = ConsistentHashExchange("x")
    inner = Destination("inner", is_queue=False)
    exchange.bind(inner, "1", None)
    assert exchange.route(message("k")) == (inner,)
    assert exchange.exchange_bindings == 1


def test_nothing_bound_routes_nowhere():
    assert ConsistentHashExchange("x").route(message("k")) == ()


def test_jump_buckets_grow_by_moving_keys_only_into_new_buckets():
    for key in range(0, 2**64, 2**64 // 997):
        previous = jump_bucket(key, 1)
        assert previous == 0
        for buckets in range(2, 40):
            bucket = jump_bucket(key, buckets)
            assert bucket == previous or bucket == buckets - 1
            previous = bucket


# -- x-consistent-hash: hash-header and hash-property ---------------------------------

def test_hash_header_spreads_by_the_header_and_ignores_the_routing_key():
    exchange, queues = weighted({"a": 1, "b": 1}, **{"hash-header": "tenant"})
    placed = {tenant: only_destination(exchange, message(
        "same", headers={"tenant": tenant})) for tenant in KEYS}
    counts = Counter(placed.values())
    assert_share(counts[queues["a"]], len(KEYS), 1 / 2)
    for tenant in KEYS[:100]:
        assert only_destination(exchange, message(
            "other key", headers={"tenant": tenant})) is placed[tenant]


def test_messages_without_the_header_all_go_to_one_queue():
    exchange, _ = weighted({"a": 1, "b": 1, "c": 1}, **{"hash-header": "tenant"})
    assert len({only_destination(exchange, message(key)) for key in KEYS[:300]}) == 1


def test_an_integer_header_and_the_same_digits_as_text_are_different_values():
    exchange, _ = weighted({f"q{n}": 1 for n in range(8)}, **{"hash-header": "n"})
    differing = [number for number in range(200) if
                 only_destination(exchange, message(headers={"n": number})) is not
                 only_destination(exchange, message(headers={"n": str(number)}))]
    assert differing


@pytest.mark.parametrize("hash_property", ["message_id", "correlation_id"])
def test_hash_property_spreads_by_that_property(hash_property):
    exchange, queues = weighted({"a": 1, "b": 3}, **{"hash-property": hash_property})
    placed = {value: only_destination(exchange, message("same", **{hash_property: value}))
              for value in KEYS}
    assert_share(Counter(placed.values())[queues["b"]], len(KEYS), 3 / 4)
    assert all(only_destination(exchange, message("x", **{hash_property: value}))
               is placed[value] for value in KEYS[:100])


def test_hash_property_timestamp_uses_the_value_as_sent():
    """The raw 64-bit value, also beyond what a datetime can hold."""
    exchange, queues = weighted({"a": 1, "b": 1}, **{"hash-property": "timestamp"})

    def stamped(seconds: int) -> Message:
        raw = bytearray(encode_properties(commands.Basic.Properties(timestamp=None)))
        flags = struct.unpack_from(">H", raw)[0] | 0x0040     # the timestamp flag
        return Message("x", "k", struct.pack(">H", flags) + bytes(raw[2:])
                       + struct.pack(">Q", seconds), b"")

    placed = Counter(only_destination(exchange, stamped(1_700_000_000 + second))
                     for second in range(2000))
    assert_share(placed[queues["a"]], 2000, 1 / 2)
    huge = [only_destination(exchange, stamped(2**64 - 1 - n)) for n in range(50)]
    assert len(set(huge)) == 2
    assert only_destination(exchange, stamped(2**64 - 1)) is huge[0]


# -- x-consistent-hash: refusals ------------------------------------------------------

@pytest.mark.parametrize("key, text", [
    ("abc", 'The binding key must be an integer: <<"abc">>'),
    ("", "The binding key must be an integer: <<>>"),
    (" 1", 'The binding key must be an integer: <<" 1">>'),
    ("1.5", 'The binding key must be an integer: <<"1.5">>'),
    ("0", "The binding key must be greater than 0"),
    ("-3", "The binding key must be greater than 0"),
    (str(MAX_WEIGHT + 1), f"The binding key must not exceed {MAX_WEIGHT}"),
])
def test_binding_keys_that_are_not_weights_are_refused_with_406(key, text):
    exchange = ConsistentHashExchange("x")
    with pytest.raises(ChannelError) as refused:
        exchange.bind(Destination("q"), key, None)
    assert (refused.value.reply_code, refused.value.text) == \
        (ReplyCode.PRECONDITION_FAILED, text)
    assert not exchange.bindings


@pytest.mark.parametrize("key", ["+4", "007", str(MAX_WEIGHT)])
def test_signed_and_zero_padded_weights_are_read_as_erlang_reads_them(key):
    exchange = ConsistentHashExchange("x")
    assert exchange.bind(Destination("q"), key, None)


def test_refusal_texts_print_binaries_as_erlang_does():
    assert erlang_binary(b'a"b\\c') == '<<"a\\"b\\\\c">>'
    assert erlang_binary("café".encode()) == '<<"café"/utf8>>'
    assert erlang_binary(b"\xff\x01") == "<<255,1>>"


@pytest.mark.parametrize("arguments, code, text", [
    ({"hash-header": "h", "hash-property": "message_id"}, ReplyCode.PRECONDITION_FAILED,
     "hash-header and hash-property are mutually exclusive"),
    ({"hash-header": "h", "hash-property": "nope"}, ReplyCode.PRECONDITION_FAILED,
     "hash-header and hash-property are mutually exclusive"),
    ({"hash-property": "user_id"}, ReplyCode.PRECONDITION_FAILED,
     "Unsupported property: user_id"),
])
def test_hash_arguments_refused_by_the_plugin(arguments, code, text):
    with pytest.raises(ChannelError) as refused:
        ConsistentHashExchange("x", arguments=arguments)
    assert (refused.value.reply_code, refused.value.text) == (code, text)


@pytest.mark.parametrize("arguments", [{"hash-header": 5}, {"hash-property": None},
                                       {"hash-header": bytearray(b"h")}])
def test_hash_arguments_that_are_not_long_strings_close_the_connection_with_541(arguments):
    """The plugin reads only long strings and fails on any other type; RabbitMQ's
    channel dies and the connection closes with a bare INTERNAL_ERROR."""
    with pytest.raises(ConnectionFailure) as refused:
        ConsistentHashExchange("x", arguments=arguments)
    assert (refused.value.reply_code, refused.value.reply_text) == \
        (ReplyCode.INTERNAL_ERROR, "INTERNAL_ERROR")


# -- x-modulus-hash --------------------------------------------------------------------

def modulus(*destinations: Destination, keys: tuple[str, ...] = ("",)):
    exchange = ModulusHashExchange("x")
    for destination in destinations:
        for key in keys:
            exchange.bind(destination, key, None)
    return exchange


def test_modulus_hash_spreads_evenly_and_keeps_a_key_on_its_queue():
    queues = [Destination(f"q{n}") for n in range(4)]
    exchange = modulus(*queues)
    placed = placements(exchange)
    counts = Counter(placed.values())
    for queue in queues:
        assert_share(counts[queue], len(KEYS), 1 / 4)
    assert placements(exchange) == placed


def test_modulus_hash_orders_destinations_by_kind_then_name_not_binding_order():
    a, b, c = Destination("a"), Destination("b"), Destination("c")
    relay = Destination("z-relay", is_queue=False)
    one = modulus(c, relay, a, b)
    other = modulus(b, a, relay, c)
    assert placements(one) == placements(other)
    assert one._destinations == (relay, a, b, c)


def test_a_destination_bound_twice_counts_twice():
    a, b = Destination("a"), Destination("b")
    exchange = modulus(b)
    exchange.bind(a, "one", None)
    exchange.bind(a, "two", None)
    assert_share(Counter(placements(exchange).values())[a], len(KEYS), 2 / 3)


def test_modulus_hash_sends_each_key_where_rabbitmq_4_3_does():
    """Placements observed on a RabbitMQ 4.3.6 node (queues q0..q4 bound to an
    x-modulus-hash exchange; the message with routing key "a" and CC ["b", "c"] went to
    q4, "x" with CC ["y"] to q0): Warren hashes as the node does (erlang:phash2)."""
    queues = [Destination(f"q{n}") for n in range(5)]
    exchange = modulus(*reversed(queues))
    seen = {key: queue.name for key, queue in placements(
        exchange, [f"k{n}" for n in range(8)]).items()}
    assert seen == {"k0": "q3", "k1": "q4", "k2": "q0", "k3": "q1", "k4": "q1",
                    "k5": "q4", "k6": "q4", "k7": "q0"}
    for key, carbon_copies, queue in (("a", ("b", "c"), "q4"), ("x", ("y",), "q0")):
        copied = SenderRoutedMessage("x", key, message(key).properties, b"", carbon_copies)
        assert only_destination(exchange, copied).name == queue


def test_modulus_hash_accepts_any_binding_key():
    exchange = modulus(Destination("a"), keys=("anything", "", "12"))
    assert len(exchange.bindings) == 3


def test_modulus_hash_hashes_the_cc_keys_too():
    """The plugin hashes the message's whole list of routing keys."""
    exchange = modulus(*(Destination(f"q{n}") for n in range(8)))
    differing = 0
    for key in KEYS[:200]:
        carbon = SenderRoutedMessage("x", key, message(key).properties, b"", ("cc",))
        again = SenderRoutedMessage("x", key, message(key).properties, b"", ("cc",))
        assert only_destination(exchange, carbon) is only_destination(exchange, again)
        differing += only_destination(exchange, carbon) is not \
            only_destination(exchange, message(key))
    assert differing


# -- x-local-random --------------------------------------------------------------------

def test_local_random_spreads_over_the_bound_queues():
    exchange = LocalRandomExchange("x")
    exchange.chooser = random.Random(31)
    queues = [Destination(f"q{n}") for n in range(3)]
    for queue in queues:
        exchange.bind(queue, "", None)
    counts = Counter(only_destination(exchange, message("k")) for _ in range(3000))
    for queue in queues:
        assert_share(counts[queue], 3000, 1 / 3)
    exchange.unbind(queues[0], "", None)
    assert {only_destination(exchange, message("k")) for _ in range(100)} == \
        set(queues[1:])


def test_local_random_with_one_queue_or_none():
    exchange = LocalRandomExchange("x")
    assert exchange.route(message()) == ()
    queue = Destination("q")
    exchange.bind(queue, "", {"any": "argument"})
    assert exchange.route(message("whatever")) == (queue,)


@pytest.mark.parametrize("destination, key, text", [
    (Destination("q"), "k", "Non empty binding 'k' key not permitted"),
    (Destination("x2", is_queue=False), "k", "Non empty binding 'k' key not permitted"),
    (Destination("x2", is_queue=False), "", "Destination not found"),
    (Destination("q", kind="quorum"), "",
     "Queue type rabbit_quorum_queue not valid for this exchange type"),
    (Destination("q", kind="stream"), "",
     "Queue type rabbit_stream_queue not valid for this exchange type"),
])
def test_local_random_refuses_what_rabbitmq_refuses(destination, key, text):
    exchange = LocalRandomExchange("x")
    with pytest.raises(ChannelError) as refused:
        exchange.bind(destination, key, None)
    assert (refused.value.reply_code, refused.value.text) == \
        (ReplyCode.PRECONDITION_FAILED, text)
    assert not exchange.bindings


# -- through a connection --------------------------------------------------------------

def declared(client: Client, kind: str, arguments: dict | None = None) -> list:
    return client.method(1, commands.Exchange.Declare(exchange="spread", exchange_type=kind,
                                                      arguments=arguments or {}))


@pytest.mark.parametrize("kind", ["x-consistent-hash", "x-modulus-hash", "x-local-random"])
def test_each_message_reaches_exactly_one_bound_queue(kind):
    client = Client()
    client.open_channel()
    assert close_code(declared(client, kind)) is None
    key = "" if kind == "x-local-random" else "1"
    for name in ("a", "b", "c"):
        client.declare_queue(1, name)
        client.method(1, commands.Queue.Bind(queue=name, exchange="spread",
                                             routing_key=key))
    for number in range(300):
        client.publish(1, "spread", f"k{number}", b"m")
    queues = client.broker.vhosts["/"].queues
    counts = [queues[name].message_count for name in ("a", "b", "c")]
    assert sum(counts) == 300 and all(counts)


def test_a_refused_declaration_closes_the_channel_and_creates_nothing():
    client = Client()
    client.open_channel()
    replies = declared(client, "x-consistent-hash",
                       {"hash-header": "h", "hash-property": "message_id"})
    assert close_code(replies) == ReplyCode.PRECONDITION_FAILED
    assert "spread" not in client.broker.vhosts["/"].exchanges


def test_a_refused_binding_closes_the_channel_and_binds_nothing():
    client = Client()
    client.open_channel()
    declared(client, "x-consistent-hash")
    client.declare_queue(1, "a")
    replies = client.method(1, commands.Queue.Bind(queue="a", exchange="spread",
                                                   routing_key="heavy"))
    assert close_code(replies) == ReplyCode.PRECONDITION_FAILED
    assert not client.broker.vhosts["/"].exchanges["spread"].bindings
