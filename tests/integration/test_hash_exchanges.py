"""The exchange types that route each message to one bound queue, with pika:
x-consistent-hash (RabbitMQ's consistent hash exchange plugin), x-modulus-hash (the
sharding plugin's type, built into RabbitMQ 4.3) and x-local-random (RabbitMQ 4.0+).

Each test declares, binds, publishes distinct keys with confirms and `mandatory` (so
every message is routed before it counts) and counts per queue with Basic.Get. Queue
names are fixed (the vhost is the test's own), so the counts are the same on every run;
shares are checked within 5 standard deviations of a binomial count. Refusals close the
channel (406) or, for a hash argument that is not a string, the connection (541), as on
RabbitMQ. The types outlive a restart and a definitions export and import, with every
key still on its queue.

Warren-only: the reference RabbitMQ 3.10 runs without these plugins and has no
x-local-random (RabbitMQ lines and their types: docs/compatibility.md)."""

import math
from collections import Counter

import pika
import pytest

from tests.support.pika_helpers import _test_deadline, chan, conn, names  # noqa: F401  (fixtures)
from tests.support.pika_helpers import (close_quietly, connect, expect_channel_error,
                                        expect_connection_error, get_all)

pytestmark = [pytest.mark.warren_only("RabbitMQ 3.10 here has neither the consistent "
                                      "hash nor the sharding plugin, nor x-local-random"),
              pytest.mark.warren_rabbitmq("4.3")]   # x-local-random came with 4.0

PIKA_TEST_TIMEOUT = 60
KEYS = [f"order-{number}" for number in range(600)]


def assert_share(count: int, total: int, share: float) -> None:
    deviation = math.sqrt(total * share * (1 - share))
    assert abs(count - total * share) <= 5 * deviation, (count, total, share)


def spread(channel, kind: str, bindings: dict[str, str], arguments: dict | None = None,
           durable: bool = False, exchange: str = "spread") -> None:
    """Declare `exchange` of type `kind` and bind each queue of `bindings` (queue ->
    binding key) to it."""
    channel.exchange_declare(exchange, kind, durable=durable, arguments=arguments)
    for queue, key in bindings.items():
        channel.queue_declare(queue, durable=durable)
        channel.queue_bind(queue, exchange, key)


def publish_keys(channel, keys, exchange: str = "spread", properties=None) -> None:
    """Publish one message per key, its body the key, each confirmed and routed."""
    channel.confirm_delivery()
    for key in keys:
        channel.basic_publish(exchange, key, key.encode(), properties, mandatory=True)


def placements(channel, queues) -> dict[str, str]:
    """body -> the queue it was in, emptying `queues`."""
    return {body.decode(): queue for queue in queues
            for _, _, body in get_all(channel, queue)}


def test_consistent_hash_shares_follow_the_weights(chan):
    weights = {"light": "1", "middle": "2", "heavy": "3"}
    spread(chan, "x-consistent-hash", weights)
    publish_keys(chan, KEYS)
    counts = Counter(placements(chan, weights).values())
    assert sum(counts.values()) == len(KEYS)
    for queue, weight in weights.items():
        assert_share(counts[queue], len(KEYS), int(weight) / 6)


def test_consistent_hash_keeps_a_key_on_its_queue(chan):
    spread(chan, "x-consistent-hash", {"a": "1", "b": "1", "c": "1"})
    publish_keys(chan, [key for key in KEYS[:20] for _ in range(5)])
    queues_of_key: dict[str, set] = {}
    copies = Counter()
    for queue in ("a", "b", "c"):
        for _, _, body in get_all(chan, queue):
            queues_of_key.setdefault(body.decode(), set()).add(queue)
            copies[body.decode()] += 1
    assert all(len(queues) == 1 for queues in queues_of_key.values())
    assert set(copies.values()) == {5} and len(copies) == 20
    assert len(set.union(*queues_of_key.values())) > 1


def test_consistent_hash_a_new_binding_takes_only_its_share(chan):
    spread(chan, "x-consistent-hash", {"a": "2", "b": "2"})
    publish_keys(chan, KEYS)
    before = placements(chan, ["a", "b"])
    chan.queue_declare("newcomer")
    chan.queue_bind("newcomer", "spread", "1")
    publish_keys(chan, KEYS)
    after = placements(chan, ["a", "b", "newcomer"])
    moved = [key for key in KEYS if after[key] != before[key]]
    assert all(after[key] == "newcomer" for key in moved)
    assert_share(len(moved), len(KEYS), 1 / 5)


def test_consistent_hash_on_a_header(chan):
    spread(chan, "x-consistent-hash", {"a": "1", "b": "1"}, {"hash-header": "tenant"})
    chan.confirm_delivery()
    for key in KEYS:
        chan.basic_publish("spread", "ignored", key.encode(),
                           pika.BasicProperties(headers={"tenant": key}), mandatory=True)
    counts = Counter(placements(chan, ["a", "b"]).values())
    assert_share(counts["a"], len(KEYS), 1 / 2)
    for _ in range(20):   # without the header: all to one queue
        chan.basic_publish("spread", "k", b"bare", mandatory=True)
    assert sorted(len(get_all(chan, queue)) for queue in ("a", "b")) == [0, 20]


def test_consistent_hash_on_message_id(chan):
    spread(chan, "x-consistent-hash", {"a": "1", "b": "3"}, {"hash-property": "message_id"})
    chan.confirm_delivery()
    for key in KEYS:
        chan.basic_publish("spread", "same", key.encode(),
                           pika.BasicProperties(message_id=key), mandatory=True)
    assert_share(Counter(placements(chan, ["a", "b"]).values())["b"], len(KEYS), 3 / 4)


@pytest.mark.parametrize("key, text", [
    ("heavy", 'PRECONDITION_FAILED - The binding key must be an integer: <<"heavy">>'),
    ("0", "PRECONDITION_FAILED - The binding key must be greater than 0"),
    ("10001", "PRECONDITION_FAILED - The binding key must not exceed 10000"),
])
def test_consistent_hash_refuses_a_binding_key_that_is_not_a_weight(conn, chan, key, text):
    chan.exchange_declare("spread", "x-consistent-hash")
    chan.queue_declare("q")
    refused = expect_channel_error(conn, chan, 406,
                                   lambda: chan.queue_bind("q", "spread", key))
    assert refused.reply_text == text


@pytest.mark.parametrize("arguments, text", [
    ({"hash-header": "h", "hash-property": "message_id"},
     "PRECONDITION_FAILED - hash-header and hash-property are mutually exclusive"),
    ({"hash-property": "app_id"}, "PRECONDITION_FAILED - Unsupported property: app_id"),
])
def test_consistent_hash_refuses_hash_arguments_as_the_plugin_does(conn, chan, arguments,
                                                                    text):
    refused = expect_channel_error(conn, chan, 406, lambda: chan.exchange_declare(
        "spread", "x-consistent-hash", arguments=arguments))
    assert refused.reply_text == text
    check = conn.channel()
    expect_channel_error(conn, check, 404,
                         lambda: check.exchange_declare("spread", passive=True))


def test_a_hash_header_that_is_not_a_string_closes_the_connection(conn, chan):
    refused = expect_connection_error(conn, 541, lambda: chan.exchange_declare(
        "spread", "x-consistent-hash", arguments={"hash-header": 7}))
    assert refused.reply_text == "INTERNAL_ERROR"


def test_modulus_hash_spreads_evenly_and_keeps_a_key_on_its_queue(chan):
    queues = {"m1": "", "m2": "", "m3": "", "m4": ""}
    spread(chan, "x-modulus-hash", queues)
    publish_keys(chan, KEYS)
    found = placements(chan, queues)
    counts = Counter(found.values())
    for queue in queues:
        assert_share(counts[queue], len(KEYS), 1 / 4)
    publish_keys(chan, KEYS[:50])
    assert placements(chan, queues) == {key: found[key] for key in KEYS[:50]}


def test_local_random_delivers_each_message_to_one_bound_queue(chan):
    queues = {"r1": "", "r2": "", "r3": ""}
    spread(chan, "x-local-random", queues)
    publish_keys(chan, KEYS)
    counts = Counter(placements(chan, queues).values())
    assert sum(counts.values()) == len(KEYS)
    assert set(counts) == set(queues)


@pytest.mark.parametrize("bind, text", [
    (lambda channel: channel.queue_bind("classic", "spread", "key"),
     "PRECONDITION_FAILED - Non empty binding 'key' key not permitted"),
    (lambda channel: channel.queue_bind("quorum", "spread", ""),
     "PRECONDITION_FAILED - Queue type rabbit_quorum_queue not valid for this exchange "
     "type"),
    (lambda channel: channel.exchange_bind("amq.fanout", "spread", ""),
     "PRECONDITION_FAILED - Destination not found"),
])
def test_local_random_refuses_what_rabbitmq_refuses(conn, chan, bind, text):
    chan.exchange_declare("spread", "x-local-random")
    chan.queue_declare("classic")
    chan.queue_declare("quorum", durable=True, arguments={"x-queue-type": "quorum"})
    refused = expect_channel_error(conn, chan, 406, lambda: bind(chan))
    assert refused.reply_text == text


def test_exchange_to_exchange_bindings_route_on(chan):
    """A consistent-hash or modulus-hash exchange may pick an exchange, which routes
    the message further."""
    chan.exchange_declare("relay", "fanout")
    chan.queue_declare("behind")
    chan.queue_bind("behind", "relay", "")
    for kind, key in (("x-consistent-hash", "1"), ("x-modulus-hash", "")):
        name = f"via-{kind}"
        chan.exchange_declare(name, kind)
        chan.exchange_bind("relay", name, key)
        publish_keys(chan, KEYS[:10], exchange=name)
    assert len(get_all(chan, "behind")) == 20


def test_the_overview_lists_the_types_of_the_brokers_line(api):
    overview = api.json("/api/overview")
    listed = {entry["name"]: entry for entry in overview["exchange_types"]}
    assert {"x-consistent-hash", "x-modulus-hash"} <= set(listed)
    # x-local-random came with RabbitMQ 4.0
    assert ("x-local-random" in listed) == (not overview["rabbitmq_version"].startswith("3."))
    assert listed["x-consistent-hash"]["description"] == "Consistent Hashing Exchange"


def durable_spreads(channel) -> None:
    spread(channel, "x-consistent-hash", {"c1": "1", "c2": "2", "c3": "1"},
           durable=True, exchange="consistent")
    spread(channel, "x-modulus-hash", {"m1": "", "m2": "", "m3": ""}, durable=True,
           exchange="modulus")
    spread(channel, "x-local-random", {"r1": ""}, durable=True, exchange="random")


def routed(channel) -> dict:
    """Where each key goes on the consistent and modulus exchanges."""
    publish_keys(channel, KEYS[:200], exchange="consistent")
    publish_keys(channel, KEYS[:200], exchange="modulus")
    return {"consistent": placements(channel, ["c1", "c2", "c3"]),
            "modulus": placements(channel, ["m1", "m2", "m3"])}


def test_the_types_and_their_placements_survive_a_restart(broker_factory, tmp_path):
    data_dir = str(tmp_path / "data")
    process = broker_factory(data_dir=data_dir)
    connection = connect(process)
    channel = connection.channel()
    durable_spreads(channel)
    before = routed(channel)
    close_quietly(connection)
    assert process.stop() == 0
    connection = connect(broker_factory(data_dir=data_dir))
    try:
        channel = connection.channel()
        assert routed(channel) == before
        publish_keys(channel, ["any"], exchange="random")
        assert len(get_all(channel, "r1")) == 1
        for exchange, kind in (("consistent", "x-consistent-hash"),
                               ("modulus", "x-modulus-hash"), ("random", "x-local-random")):
            channel.exchange_declare(exchange, kind, durable=True)   # same type: no 406
    finally:
        close_quietly(connection)


def test_a_definitions_round_trip_keeps_the_types_and_placements(warren, warren_broker,
                                                                 api):
    connection = connect(warren)
    copy = warren_broker.new_vhost("hash-copy", rabbitmq_line="4.3")
    try:
        channel = connection.channel()
        durable_spreads(channel)
        before = routed(channel)
        exported = api.json(f"/api/definitions/{warren.vhost}")
        kinds = {exchange["name"]: exchange["type"] for exchange in exported["exchanges"]}
        assert kinds == {"consistent": "x-consistent-hash", "modulus": "x-modulus-hash",
                         "random": "x-local-random"}
        assert api.post(f"/api/definitions/{copy.vhost}", exported).status_code == 204
        copied = connect(copy)
        try:
            assert routed(copied.channel()) == before
        finally:
            close_quietly(copied)
    finally:
        close_quietly(connection)
        copy.remove()
