"""Policies and operator policies applied live, and alternate exchanges, as pika sees
them. Each test works in a vhost of its own (the `warren` fixture's; policies are set
through the broker's admin: Warren's control socket, or rabbitmqctl with
WARREN_TEST_BROKER=127.0.0.1:5673), so a policy never reaches another test's queues.

RabbitMQ applies a policy to its queues after rabbitmqctl returns, so every effect is
waited for (with a deadline); Warren's control socket answers once it is applied.
"""

import time
from dataclasses import dataclass

import pika
import pika.exceptions
import pytest

from tests.support.broker_admin import AdminRefused
from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline: fixture)
    WAIT, _test_deadline, close_quietly, connect, get_all, publish_bodies, queue_exists,
    ready_count, wait_for_bodies, wait_for_count, wait_until,
)

PIKA_TEST_TIMEOUT = 120   # rabbitmqctl takes about a second per call
STREAM = {"x-queue-type": "stream"}


@dataclass
class Space:
    """The test's own vhost, its admin operations, a connection and a channel in it."""

    admin: object
    vhost: str
    connection: pika.BlockingConnection
    channel: object

    def policy(self, name, pattern, definition, priority=0, apply_to="all"):
        self.admin.set_policy(self.vhost, name, pattern, definition, priority, apply_to)

    def operator_policy(self, name, pattern, definition, priority=0, apply_to="all"):
        self.admin.set_operator_policy(self.vhost, name, pattern, definition, priority,
                                       apply_to)

    def count(self, queue, expected):
        """The ready count once it is `expected`, or the last seen after WAIT."""
        return wait_for_count(self.channel, queue, expected)


@pytest.fixture
def space(broker_admin, warren):
    connection = pika.BlockingConnection(warren.connection_parameters())
    try:
        yield Space(broker_admin, warren.vhost, connection, connection.channel())
    finally:
        close_quietly(connection)


def fill(channel, queue, count, prefix="m"):
    publish_bodies(channel, "", queue, [f"{prefix}{number}" for number in range(count)])


def bodies(channel, queue):
    return [body.decode() for _, _, body in get_all(channel, queue)]


def settled(channel, queue):
    """A Basic.Get round trip to `queue` (nothing to get): the queue has handled what
    this channel sent it before, dead-letters included."""
    assert channel.basic_get(queue, auto_ack=True)[0] is None


# -- one test per definition key: applied, changed, cleared ------------------------------

def test_max_length(space):
    channel = space.channel
    channel.queue_declare("q")
    fill(channel, "q", 10)
    space.policy("limit", "^q$", {"max-length": 5}, apply_to="queues")
    assert space.count("q", 5) == 5
    space.policy("limit", "^q$", {"max-length": 2}, apply_to="queues")
    assert space.count("q", 2) == 2
    space.admin.clear_policy(space.vhost, "limit")
    fill(channel, "q", 3, "n")
    assert bodies(channel, "q") == ["m8", "m9", "n0", "n1", "n2"]


def test_max_length_bytes(space):
    channel = space.channel
    channel.queue_declare("q")
    fill(channel, "q", 10)        # 2 bytes each
    space.policy("bytes", "^q$", {"max-length-bytes": 12})
    assert space.count("q", 6) == 6
    space.policy("bytes", "^q$", {"max-length-bytes": 5})
    assert space.count("q", 2) == 2
    space.admin.clear_policy(space.vhost, "bytes")
    fill(channel, "q", 4, "n")
    assert bodies(channel, "q") == ["m8", "m9", "n0", "n1", "n2", "n3"]


def test_message_ttl(space):
    """A new TTL applies to messages published afterwards; queued ones keep the expiry
    they were given (RabbitMQ computes it once, on publish)."""
    channel = space.channel
    channel.queue_declare("dead")
    channel.queue_declare("q", arguments={"x-dead-letter-exchange": "",
                                          "x-dead-letter-routing-key": "dead"})
    space.policy("ttl", "^q$", {"message-ttl": 0})
    fill(channel, "q", 1, "zero")
    assert wait_for_bodies(channel, "dead", 1) == ["zero0"]
    space.policy("ttl", "^q$", {"message-ttl": 3_600_000})
    fill(channel, "q", 1, "hour")
    space.policy("ttl", "^q$", {"message-ttl": 0})
    fill(channel, "q", 1, "zero")
    assert channel.basic_get("q", auto_ack=True)[2] == b"hour0"
    assert wait_for_bodies(channel, "dead", 1) == ["zero0"]
    space.admin.clear_policy(space.vhost, "ttl")
    fill(channel, "q", 1, "kept")
    assert bodies(channel, "q") == ["kept0"]


def test_expires(space):
    channel = space.channel
    channel.queue_declare("long-lived")
    space.policy("expiry", "lived$", {"expires": 3_600_000})
    assert queue_exists(space.connection, "long-lived")
    space.policy("expiry", "lived$", {"expires": 100})
    _let_time_pass(channel, 1000)
    assert not queue_exists(space.connection, "long-lived")
    channel.queue_declare("kept-lived")
    tag = channel.basic_consume("kept-lived", lambda *args: None)   # in use: no expiry
    space.admin.clear_policy(space.vhost, "expiry")
    channel.basic_cancel(tag)
    _let_time_pass(channel, 1000)
    assert queue_exists(space.connection, "kept-lived")


def _let_time_pass(channel, milliseconds):
    """Wait until a message with that expiration has expired (a dead-letter shows it),
    without touching any other queue."""
    channel.queue_declare("tick")
    channel.queue_declare("clock", arguments={"x-dead-letter-exchange": "",
                                              "x-dead-letter-routing-key": "tick"})
    channel.basic_publish("", "clock", b"tick",
                          pika.BasicProperties(expiration=str(milliseconds)))
    assert wait_for_bodies(channel, "tick", 1, timeout=WAIT + milliseconds / 1000) == \
        ["tick"]


def test_overflow(space):
    channel = space.channel
    channel.queue_declare("dead")
    channel.queue_declare("q", arguments={"x-max-length": 1, "x-dead-letter-exchange": "",
                                          "x-dead-letter-routing-key": "dead"})
    channel.confirm_delivery()
    space.policy("overflow", "^q$", {"overflow": "reject-publish"})
    channel.basic_publish("", "q", b"first")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", "q", b"refused")
    space.policy("overflow", "^q$", {"overflow": "reject-publish-dlx"})
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", "q", b"to-dead")
    assert wait_for_bodies(channel, "dead", 1) == ["to-dead"]
    space.admin.clear_policy(space.vhost, "overflow")      # drop-head again
    channel.basic_publish("", "q", b"second")
    assert bodies(channel, "q") == ["second"]
    assert wait_for_bodies(channel, "dead", 1) == ["first"]


def test_dead_letter_exchange(space):
    channel = space.channel
    for number in (1, 2):
        channel.exchange_declare(f"dlx{number}", "fanout")
        channel.queue_declare(f"dead{number}")
        channel.queue_bind(f"dead{number}", f"dlx{number}")
    channel.queue_declare("q")
    fill(channel, "q", 3)
    space.policy("dlx", "^q$", {"dead-letter-exchange": "dlx1"})
    _reject_one(channel, "q")
    assert wait_for_bodies(channel, "dead1", 1) == ["m0"]
    space.policy("dlx", "^q$", {"dead-letter-exchange": "dlx2"})
    _reject_one(channel, "q")
    assert wait_for_bodies(channel, "dead2", 1) == ["m1"]
    space.admin.clear_policy(space.vhost, "dlx")
    _reject_one(channel, "q")
    settled(channel, "q")
    assert (ready_count(channel, "dead1"), ready_count(channel, "dead2")) == (0, 0)


def test_dead_letter_routing_key(space):
    """The queue's x-dead-letter-exchange is the default exchange; the policy names
    the routing key; without it a message goes back under its own key (the queue)."""
    channel = space.channel
    for name in ("dead1", "dead2"):
        channel.queue_declare(name)
    channel.queue_declare("q", arguments={"x-dead-letter-exchange": ""})
    fill(channel, "q", 3)
    space.policy("dlrk", "^q$", {"dead-letter-routing-key": "dead1"})
    _reject_one(channel, "q")
    assert wait_for_bodies(channel, "dead1", 1) == ["m0"]
    space.policy("dlrk", "^q$", {"dead-letter-routing-key": "dead2"})
    _reject_one(channel, "q")
    assert wait_for_bodies(channel, "dead2", 1) == ["m1"]
    space.admin.clear_policy(space.vhost, "dlrk")
    _reject_one(channel, "q")
    method, properties, body = _wait_for_message(channel, "q")
    assert (body, properties.headers["x-death"][0]["reason"]) == (b"m2", "rejected")


@pytest.mark.warren_rabbitmq("3.10")   # 4.3 counts only failed deliveries; a nack does not
def test_delivery_limit(space):
    """On a quorum queue: a message nacked back more often than the limit is
    dead-lettered (reason delivery_limit); cleared, it keeps coming back."""
    channel = space.channel
    channel.queue_declare("dead")
    channel.queue_declare("q", durable=True, arguments={
        "x-queue-type": "quorum", "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "dead"})
    space.policy("limit", "^q$", {"delivery-limit": 1})
    fill(channel, "q", 1)
    assert _nack_until_dead_lettered(channel, "q", 2) == [0, 1]
    space.policy("limit", "^q$", {"delivery-limit": 0})
    fill(channel, "q", 1)
    assert _nack_until_dead_lettered(channel, "q", 1) == [0]
    space.admin.clear_policy(space.vhost, "limit")
    fill(channel, "q", 1)
    for count in range(3):
        method, properties, _ = _wait_for_message(channel, "q", auto_ack=False)
        assert properties.headers["x-delivery-count"] == count
        channel.basic_nack(method.delivery_tag, requeue=True)
    assert space.count("q", 1) == 1


def _nack_until_dead_lettered(channel, queue, deliveries):
    """Nack the queue's only message back `deliveries` times; then it is in the
    dead-letter queue "dead". The x-delivery-count of each delivery."""
    counts = []
    for _ in range(deliveries):
        method, properties, _ = _wait_for_message(channel, queue, auto_ack=False)
        counts.append(properties.headers["x-delivery-count"])
        channel.basic_nack(method.delivery_tag, requeue=True)
    _, properties, _ = _wait_for_message(channel, "dead")
    assert properties.headers["x-death"][0]["reason"] == "delivery_limit"
    assert channel.basic_get(queue)[0] is None
    return counts


@pytest.mark.parametrize("argument, before, after, arrived", [
    (None, "at-least-once", "at-least-once", ["held", "marker"]),
    (None, "at-most-once", "at-most-once", ["marker"]),
    (None, "at-least-once", "at-most-once", ["marker"]),   # switched: deleted
    ("at-most-once", "at-least-once", "at-least-once", ["marker"]),   # argument first
])
def test_dead_letter_strategy(space, argument, before, after, arrived):
    """A quorum queue with overflow reject-publish and a dead-letter exchange that does
    not exist yet rejects "held": at least once, the queue keeps it until the exchange
    routes it (RabbitMQ tries again when the policy changes); at most once, it is lost.
    Then the exchange and its queue exist, the policy changes (it names the routing key
    and `after`'s strategy) and "marker" is rejected: "dead" gets what survived, then
    "marker"."""
    channel = space.channel
    arguments = {"x-queue-type": "quorum", "x-overflow": "reject-publish",
                 "x-dead-letter-exchange": "dlx"}
    if argument is not None:
        arguments["x-dead-letter-strategy"] = argument
    channel.queue_declare("q", durable=True, arguments=arguments)
    space.policy("dls", "^q$", {"dead-letter-strategy": before}, apply_to="queues")
    fill(channel, "q", 1, prefix="held")
    _reject_next(channel, "q")
    settled(channel, "q")
    channel.exchange_declare("dlx", "direct")
    channel.queue_declare("dead")
    channel.queue_bind("dead", "dlx", "to-dead")
    space.policy("dls", "^q$", {"dead-letter-strategy": after,
                                "dead-letter-routing-key": "to-dead"}, apply_to="queues")
    fill(channel, "q", 1, prefix="marker")
    _reject_next(channel, "q")
    bodies = wait_for_bodies(channel, "dead", len(arrived))
    assert [body.removesuffix("0") for body in bodies] == arrived
    assert channel.basic_get("q", auto_ack=True)[0] is None


def _reject_next(channel, queue):
    """Reject the next message of `queue` once it is there (a quorum queue of
    RabbitMQ's takes a publish in after the channel's next method)."""
    method, _, _ = _wait_for_message(channel, queue, auto_ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)


def _reject_one(channel, queue):
    method, _, _ = channel.basic_get(queue)
    channel.basic_reject(method.delivery_tag, requeue=False)


def _wait_for_message(channel, queue, auto_ack=True):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        method, properties, body = channel.basic_get(queue, auto_ack=auto_ack)
        if method is not None:
            return method, properties, body
        channel.connection.process_data_events(time_limit=0.01)
    raise AssertionError(f"nothing in {queue}")


def test_alternate_exchange(space):
    channel = space.channel
    for number in (1, 2):
        channel.exchange_declare(f"ae{number}", "fanout")
        channel.queue_declare(f"caught{number}")
        channel.queue_bind(f"caught{number}", f"ae{number}")
    channel.exchange_declare("source", "direct")
    returned = []
    channel.add_on_return_callback(lambda *args: returned.append(args[3]))
    space.policy("ae", "^source$", {"alternate-exchange": "ae1"}, apply_to="exchanges")
    channel.basic_publish("source", "nowhere", b"one", mandatory=True)
    assert wait_for_bodies(channel, "caught1", 1) == ["one"]
    space.policy("ae", "^source$", {"alternate-exchange": "ae2"}, apply_to="exchanges")
    channel.basic_publish("source", "nowhere", b"two", mandatory=True)
    assert wait_for_bodies(channel, "caught2", 1) == ["two"]
    space.admin.clear_policy(space.vhost, "ae")
    channel.basic_publish("source", "nowhere", b"three", mandatory=True)
    assert wait_until(space.connection, lambda: returned)
    assert returned == [b"three"]


def test_stream_max_length_bytes(space):
    """Retention by size: a policy applies to an existing stream (RabbitMQ lets it win
    over the stream's arguments); old segments go, the first offset moves on."""
    channel = space.channel
    channel.queue_declare("s", durable=True, arguments={
        **STREAM, "x-stream-max-segment-size-bytes": 4000, "x-max-length-bytes": 10**9})
    channel.confirm_delivery()
    _publish_stream(channel, "s", 100)
    assert _first_offset(space.connection, "s") == 0
    space.policy("retention", "^s$", {"max-length-bytes": 20_000})
    first = _first_offset_above(space.connection, "s", 0)
    assert first > 0
    space.policy("retention", "^s$", {"max-length-bytes": 5_000})
    _publish_stream(channel, "s", 20)
    assert _first_offset_above(space.connection, "s", first) > first


def test_stream_max_age(space):
    channel = space.channel
    channel.queue_declare("s", durable=True, arguments={
        **STREAM, "x-stream-max-segment-size-bytes": 4000})
    channel.confirm_delivery()
    _publish_stream(channel, "s", 40)
    _let_time_pass(channel, 1500)
    space.policy("age", "^s$", {"max-age": "1s"})
    _publish_stream(channel, "s", 1)
    assert _first_offset_above(space.connection, "s", 0) > 0


def test_stream_max_segment_size_bytes(space):
    """A stream declared under a segment-size policy cuts its log into segments of that
    size, so retention by size can delete old ones. (RabbitMQ 3.10 does not change the
    segment size of a running stream when the policy changes; Warren's next segments
    take it: docs/policies.md.)"""
    channel = space.channel
    space.policy("segments", "^s$", {"stream-max-segment-size-bytes": 4000,
                                     "max-length-bytes": 20_000})
    channel.queue_declare("s", durable=True, arguments=STREAM)
    channel.confirm_delivery()
    _publish_stream(channel, "s", 200)
    assert _first_offset_above(space.connection, "s", 0) > 0


def _publish_stream(channel, queue, count):
    for _ in range(count):
        channel.basic_publish("", queue, b"x" * 500)


def _first_offset(connection, queue):
    """The offset of the first message a consumer from 'first' gets."""
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1)
    offsets = []
    channel.basic_consume(queue, lambda ch, method, properties, body: offsets.append(
        properties.headers["x-stream-offset"]), arguments={"x-stream-offset": "first"})
    assert wait_until(connection, lambda: offsets), f"nothing delivered from {queue}"
    channel.close()
    return offsets[0]


def _first_offset_above(connection, queue, offset):
    """The stream's first offset once retention moved it above `offset` (or the last
    seen after WAIT)."""
    deadline = time.monotonic() + WAIT
    while True:
        first = _first_offset(connection, queue)
        if first > offset or time.monotonic() >= deadline:
            return first
        connection.process_data_events(time_limit=0.05)


# -- precedence ---------------------------------------------------------------------------

def test_the_lower_of_argument_and_policy_limits_the_queue(space):
    channel = space.channel
    channel.queue_declare("arg-lower", arguments={"x-max-length": 2})
    channel.queue_declare("policy-lower", arguments={"x-max-length": 8})
    space.policy("limit", "-lower$", {"max-length": 4})
    for queue in ("arg-lower", "policy-lower"):
        fill(channel, queue, 10)
    assert (space.count("arg-lower", 2), space.count("policy-lower", 4)) == (2, 4)


def test_the_argument_wins_for_dead_lettering_and_overflow(space):
    channel = space.channel
    for name in ("by-arg", "by-policy"):
        channel.queue_declare(name)
    channel.queue_declare("q", arguments={"x-dead-letter-exchange": "",
                                          "x-dead-letter-routing-key": "by-arg",
                                          "x-overflow": "drop-head"})
    space.policy("p", "^q$", {"dead-letter-routing-key": "by-policy", "max-length": 1,
                              "overflow": "reject-publish"})
    fill(channel, "q", 2)
    assert wait_for_bodies(channel, "by-arg", 1) == ["m0"]
    assert ready_count(channel, "by-policy") == 0


def test_an_operator_policy_can_only_lower_a_policys_limit(space):
    channel = space.channel
    for name in ("q1", "q2"):
        channel.queue_declare(name)
        fill(channel, name, 10)
    space.policy("p", "^q", {"max-length": 5})
    space.operator_policy("cap", "^q1$", {"max-length": 3})
    space.operator_policy("loose", "^q2$", {"max-length": 8})
    assert (space.count("q1", 3), space.count("q2", 5)) == (3, 5)
    space.admin.clear_policy(space.vhost, "p")
    fill(channel, "q2", 10, "n")
    assert space.count("q2", 8) == 8


def test_only_the_highest_priority_policy_applies(space):
    channel = space.channel
    channel.queue_declare("q")
    fill(channel, "q", 10)
    space.policy("low", "q", {"max-length": 2}, priority=1)
    assert space.count("q", 2) == 2
    space.policy("high", "q", {"message-ttl": 3_600_000}, priority=5)
    fill(channel, "q", 3)      # "low" no longer applies: no length limit
    assert space.count("q", 5) == 5


def test_apply_to_selects_queues_or_exchanges(space):
    channel = space.channel
    channel.queue_declare("same-name")
    channel.exchange_declare("ae", "fanout")
    channel.queue_declare("caught")
    channel.queue_bind("caught", "ae")
    channel.exchange_declare("same-name", "direct")
    space.policy("exchanges-only", "^same-name$",
                 {"max-length": 1, "alternate-exchange": "ae"}, apply_to="exchanges")
    fill(channel, "same-name", 3)
    channel.basic_publish("same-name", "nowhere", b"via-ae")
    assert wait_for_bodies(channel, "caught", 1) == ["via-ae"]
    assert ready_count(channel, "same-name") == 3


def test_a_policy_is_not_an_argument_for_redeclaring(space):
    channel = space.channel
    space.policy("limit", "^q$", {"max-length": 3, "message-ttl": 60_000})
    channel.queue_declare("q")
    channel.queue_declare("q", arguments={})
    fill(channel, "q", 5)
    assert space.count("q", 3) == 3


# -- admin errors, as RabbitMQ words them ----------------------------------------------

@pytest.mark.parametrize("definition, words", [
    ({"max-length": -1}, "-1 is not a valid maximum length"),
    ({"overflow": "sideways"}, "is not a valid overflow value"),
    ({"dead-letter-strategy": "twice"}, "is not a valid dead letter strategy"),
    ({"expires": 0}, "0 is not a valid queue expiry"),
    ({"max-age": "1x"}, "is not a valid max age"),
    ({"no-such-key": 1}, "are not recognised policy settings"),
    ({}, "no policy provided"),
])
def test_an_invalid_definition_is_refused(space, definition, words):
    with pytest.raises(AdminRefused) as refused:
        space.policy("bad", ".*", definition)
    assert "Validation failed" in str(refused.value)
    assert words in str(refused.value)


def test_an_operator_policy_refuses_keys_a_policy_takes(space):
    with pytest.raises(AdminRefused, match="are not recognised policy settings"):
        space.operator_policy("bad", ".*", {"overflow": "drop-head"})


# -- alternate exchanges ------------------------------------------------------------------

@pytest.fixture
def ae_space(space):
    """`source` (direct, no bindings) -> alternate `middle` (direct, no bindings) ->
    alternate `last` (fanout to queue `caught`)."""
    channel = space.channel
    channel.exchange_declare("last", "fanout")
    channel.exchange_declare("middle", "direct", arguments={"alternate-exchange": "last"})
    channel.exchange_declare("source", "direct",
                             arguments={"alternate-exchange": "middle"})
    channel.queue_declare("caught")
    channel.queue_bind("caught", "last")
    return space


def test_an_alternate_exchange_chain_routes_and_mandatory_is_not_returned(ae_space):
    channel = ae_space.channel
    channel.confirm_delivery()
    channel.basic_publish("source", "nowhere", b"m", mandatory=True)   # no UnroutableError
    assert bodies(channel, "caught") == ["m"]


def test_a_routed_message_skips_the_alternate_exchange(ae_space):
    channel = ae_space.channel
    channel.queue_declare("bound")
    channel.queue_bind("bound", "source", "key")
    channel.basic_publish("source", "key", b"m")
    assert (bodies(channel, "bound"), bodies(channel, "caught")) == (["m"], [])


def test_a_missing_alternate_exchange_or_a_cycle_returns_the_message(space):
    channel = space.channel
    channel.exchange_declare("lonely", "direct", arguments={"alternate-exchange": "gone"})
    channel.exchange_declare("a", "direct", arguments={"alternate-exchange": "b"})
    channel.exchange_declare("b", "direct", arguments={"alternate-exchange": "a"})
    channel.confirm_delivery()
    for exchange in ("lonely", "a"):
        with pytest.raises(pika.exceptions.UnroutableError):
            channel.basic_publish(exchange, "k", b"m", mandatory=True)
    channel.basic_publish("a", "k", b"m")   # not mandatory: confirmed, dropped


def test_an_alternate_exchange_with_nothing_bound_leaves_the_message_unroutable(space):
    channel = space.channel
    channel.exchange_declare("empty-ae", "fanout")
    channel.exchange_declare("source", "direct", arguments={"alternate-exchange": "empty-ae"})
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("source", "k", b"m", mandatory=True)


def test_confirms_of_messages_routed_through_the_alternate_exchange(ae_space):
    """A queue behind the alternate exchange that refuses the message nacks it."""
    channel = ae_space.channel
    channel.queue_declare("full", arguments={"x-max-length": 0,
                                             "x-overflow": "reject-publish"})
    channel.queue_bind("full", "last")
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("source", "nowhere", b"m")
    assert bodies(channel, "caught") == ["m"]


def test_redeclaring_an_exchange_with_another_alternate_exchange_is_406(ae_space):
    channel = ae_space.channel
    channel.exchange_declare("source", "direct", arguments={
        "alternate-exchange": "middle", "x-other": "ignored"})
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.exchange_declare("source", "direct",
                                 arguments={"alternate-exchange": "last"})
    assert (closed.value.reply_code, closed.value.reply_text) == (
        406, f"PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange "
             f"'source' in vhost '{ae_space.vhost}': received 'last' but current is "
             "'middle'")


def test_an_alternate_exchange_of_the_wrong_type_is_406(space):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        space.channel.exchange_declare("x", "direct", arguments={"alternate-exchange": 5})
    assert (closed.value.reply_code, closed.value.reply_text) == (
        406, f"PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' "
             f"in exchange 'x' in vhost '{space.vhost}'")


def test_dead_letters_follow_the_alternate_exchange(space):
    channel = space.channel
    channel.exchange_declare("ae", "fanout")
    channel.queue_declare("caught")
    channel.queue_bind("caught", "ae")
    channel.exchange_declare("dlx", "direct", arguments={"alternate-exchange": "ae"})
    channel.queue_declare("q", arguments={"x-dead-letter-exchange": "dlx"})
    fill(channel, "q", 1)
    _reject_one(channel, "q")
    assert wait_for_bodies(channel, "caught", 1) == ["m0"]



# -- durability (Warren only: restarts a broker of its own) ------------------------------

@pytest.mark.warren_only("restarts and kills a Warren broker of its own (broker_factory)")
def test_policies_survive_a_restart_and_a_kill(broker_factory, tmp_path):
    data_dir = str(tmp_path / "data")
    broker = broker_factory(data_dir=data_dir)
    admin = broker.admin()
    admin.set_policy("/", "limit", "^q$", {"max-length": 2}, apply_to="queues")
    admin.set_policy("/", "ae", "^x$", {"alternate-exchange": "ae"}, apply_to="exchanges")
    admin.set_operator_policy("/", "cap", "^capped$", {"max-length": 1})
    connection = connect(broker)
    channel = connection.channel()
    channel.exchange_declare("x", "direct", durable=True)
    channel.exchange_declare("ae", "fanout", durable=True)
    for queue in ("q", "capped", "caught"):
        channel.queue_declare(queue, durable=True)
    channel.queue_bind("caught", "ae")
    close_quietly(connection)
    assert broker.stop() == 0

    broker = broker_factory(data_dir=data_dir)
    connection = connect(broker)
    channel = connection.channel()
    fill(channel, "q", 5)
    fill(channel, "capped", 3)
    channel.basic_publish("x", "nowhere", b"via-ae")
    assert (bodies(channel, "q"), bodies(channel, "capped")) == (["m3", "m4"], ["m2"])
    assert bodies(channel, "caught") == ["via-ae"]
    close_quietly(connection)
    broker.admin().clear_policy("/", "limit")
    broker.kill()      # SIGKILL: only what the control socket's reply promised is there

    broker = broker_factory(data_dir=data_dir)
    connection = connect(broker)
    channel = connection.channel()
    fill(channel, "q", 5)
    fill(channel, "capped", 3)
    assert (len(bodies(channel, "q")), bodies(channel, "capped")) == (5, ["m2"])
    close_quietly(connection)


@pytest.mark.warren_only("restarts and kills a Warren broker of its own (broker_factory)")
def test_a_policy_applies_to_messages_recovered_at_start_up(broker_factory, tmp_path):
    """Messages beyond a policy's limit at start-up (unacked when the limit came, so
    not dropped then, and ready again after the crash) are dropped as the queue is
    recovered: RabbitMQ applies policies when it recovers a queue."""
    data_dir = str(tmp_path / "data")
    broker = broker_factory(data_dir=data_dir)
    connection = connect(broker)
    channel = connection.channel()
    channel.queue_declare("q", durable=True)
    persistent = pika.BasicProperties(delivery_mode=2)
    channel.confirm_delivery()
    for number in range(5):
        channel.basic_publish("", "q", b"%d" % number, persistent)
    unacked = [channel.basic_get("q")[0] for _ in range(5)]     # ready: none
    broker.admin().set_policy("/", "limit", "^q$", {"max-length": 2})
    assert all(method is not None for method in unacked)
    broker.kill()      # the five come back as ready messages, over the limit

    broker = broker_factory(data_dir=data_dir)
    connection = connect(broker)
    assert bodies(connection.channel(), "q") == ["3", "4"]
    close_quietly(connection)
