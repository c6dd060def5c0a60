"""Policies in the core: validation as RabbitMQ 3.10 words it, which policy applies
(pattern, apply-to, priority, queue type), how policy, operator policy and arguments
combine, and what a live change does to queues and exchanges (on a fake clock)."""

import pytest
from pamqp import commands

from broker.core.admin import AdminError, Administration
from broker.core.broker import Broker
from broker.core.policy import (OPERATOR_POLICY, POLICY, PolicyError, VhostPolicies,
                                alternate_exchange, classic_queue_settings, make_policy,
                                merged_definition, stream_setting)
from broker.core.queue_types import CLASSIC, STREAM
from core_harness import Client, close_code, deliveries


def policy(name, pattern=".*", definition=None, priority=0, apply_to="all",
           kind=POLICY):
    return make_policy("/", kind, name, pattern,
                       {"max-length": 1} if definition is None else definition,
                       priority, apply_to)


# -- validation ----------------------------------------------------------------------

@pytest.mark.parametrize("definition, words", [
    ({"max-length": -1}, "-1 is not a valid maximum length"),
    ({"max-length": "a"}, '"a" is not a valid maximum length'),
    ({"max-length-bytes": 1.5}, "1.5 is not a valid maximum length in bytes"),
    ({"message-ttl": True}, "true is not a valid message TTL"),
    ({"expires": 0}, "0 is not a valid queue expiry"),
    ({"overflow": "x"}, '"x" is not a valid overflow value'),
    ({"dead-letter-strategy": "x"}, '"x" is not a valid dead letter strategy'),
    ({"dead-letter-exchange": 5}, "5 is not a valid dead letter exchange name"),
    ({"dead-letter-routing-key": None}, "null is not a valid dead letter routing key"),
    ({"alternate-exchange": 5}, "5 is not a valid alternate exchange name"),
    ({"max-age": "1x"}, '"1x" is not a valid max age'),
    ({"max-age": "0s"}, '"0s" is not a valid max age'),
    ({"stream-max-segment-size-bytes": 3_000_000_001}, "is not a valid segment size"),
    ({}, "no policy provided"),
    ({"foo": 1}, '["foo"] are not recognised policy settings'),
    ({"foo": 1, "max-length": -1}, "-1 is not a valid maximum length"),
    ({"queue-mode": "lazy"}, "that Warren does not implement"),
])
def test_a_bad_definition_is_refused_in_rabbitmqs_words(definition, words):
    with pytest.raises(PolicyError, match="Validation failed") as refused:
        policy("p", definition=definition)
    assert words in str(refused.value)


def test_consumer_timeout_is_a_policy_key_of_milliseconds_and_no_operator_policy_key():
    assert policy("p", definition={"consumer-timeout": 5}).definition == {
        "consumer-timeout": 5}
    with pytest.raises(PolicyError, match="-1 is not a valid consumer timeout"):
        policy("p", definition={"consumer-timeout": -1})
    with pytest.raises(PolicyError, match="not recognised policy settings"):
        policy("p", definition={"consumer-timeout": 5}, kind=OPERATOR_POLICY)


@pytest.mark.parametrize("kind", [POLICY, OPERATOR_POLICY])
@pytest.mark.parametrize("value", [-1, "a", 1.5, True])
def test_a_delivery_limit_is_a_non_negative_integer(kind, value):
    policy("p", definition={"delivery-limit": 0}, kind=kind)
    with pytest.raises(PolicyError, match="is not a valid delivery limit"):
        policy("p", definition={"delivery-limit": value}, kind=kind)


def test_operator_policies_take_only_the_numeric_limits():
    policy("o", definition={"max-length": 5, "message-ttl": 1, "expires": 9,
                            "max-length-bytes": 10}, kind=OPERATOR_POLICY)
    with pytest.raises(PolicyError, match=r'\["overflow"\] are not recognised'):
        policy("o", definition={"overflow": "drop-head"}, kind=OPERATOR_POLICY)


def test_pattern_apply_to_and_priority_are_checked():
    with pytest.raises(PolicyError, match="pattern should be regular expression"):
        policy("p", pattern="(")
    with pytest.raises(PolicyError, match="apply-to 'foo' unrecognised"):
        policy("p", apply_to="foo")
    with pytest.raises(PolicyError, match="priority must be a number"):
        policy("p", priority="x")


def test_a_definition_may_be_given_as_json_text():
    assert policy("p", definition='{"max-length": 3}').definition == {"max-length": 3}
    with pytest.raises(PolicyError, match="JSON decoding error"):
        policy("p", definition="notjson")


# -- which policy applies ------------------------------------------------------------------

def test_the_pattern_is_searched_unanchored_and_apply_to_selects_the_kind():
    policies = VhostPolicies()
    policies.put(policy("queues-only", "order", apply_to="queues"))
    assert policies.select("queue", "new-orders")[0].name == "queues-only"
    assert policies.select("exchange", "new-orders") == (None, None)
    assert policies.select("queue", "invoices") == (None, None)


def test_the_highest_priority_wins_and_equal_priorities_go_by_name():
    policies = VhostPolicies()
    policies.put(policy("b", priority=1))
    policies.put(policy("a", priority=1))
    policies.put(policy("z", priority=0))
    assert policies.select("queue", "q")[0].name == "a"
    policies.put(policy("z", priority=2))
    assert policies.select("queue", "q")[0].name == "z"


def test_a_policy_with_a_key_the_queue_type_lacks_does_not_match_it():
    policies = VhostPolicies()
    policies.put(policy("stream-retention", definition={"max-age": "1h"}, priority=5))
    policies.put(policy("limits", definition={"max-length": 5}))
    assert policies.select("queue", "q", CLASSIC.unsupported_policy_keys)[0].name == \
        "limits"
    assert policies.select("queue", "s", STREAM.unsupported_policy_keys)[0].name == \
        "stream-retention"
    assert policies.select("exchange", "x")[0].name == "stream-retention"


def test_policies_and_operator_policies_are_chosen_separately():
    policies = VhostPolicies()
    policies.put(policy("p", definition={"max-length": 10}))
    policies.put(policy("o", definition={"max-length": 3}, kind=OPERATOR_POLICY))
    chosen, operator = policies.select("queue", "q")
    assert (chosen.name, operator.name) == ("p", "o")


# -- how they combine ------------------------------------------------------------------

def test_an_operator_policy_lowers_numeric_limits_and_adds_its_keys():
    chosen = policy("p", definition={"max-length": 10, "message-ttl": 100,
                                     "overflow": "reject-publish"})
    operator = policy("o", definition={"max-length": 3, "message-ttl": 500,
                                       "expires": 60_000}, kind=OPERATOR_POLICY)
    assert merged_definition(chosen, operator) == {
        "max-length": 3, "message-ttl": 100, "overflow": "reject-publish",
        "expires": 60_000}
    assert merged_definition(None, operator) == operator.definition
    assert merged_definition(None, None) == {}


def test_classic_queues_take_the_lower_limit_and_the_arguments_other_settings():
    settings = classic_queue_settings(
        {"x-max-length": 5, "x-message-ttl": 1000, "x-dead-letter-exchange": "arg-dlx"},
        {"max-length": 8, "message-ttl": 200, "expires": 5000, "max-length-bytes": 64,
         "dead-letter-exchange": "policy-dlx", "dead-letter-routing-key": "rk",
         "overflow": "reject-publish"})
    assert (settings.max_length, settings.message_ttl, settings.expires,
            settings.max_length_bytes) == (5, 200, 5000, 64)
    assert settings.dead_letter_exchange == "arg-dlx"
    assert settings.dead_letter_routing_key == "rk"
    assert settings.overflow == "reject-publish"
    assert classic_queue_settings({"x-overflow": "reject-publish-dlx"},
                                  {"overflow": "drop-head"}).overflow == \
        "reject-publish-dlx"
    assert classic_queue_settings({}, {}).overflow == "drop-head"


def test_streams_take_the_policy_and_exchanges_their_argument():
    arguments = {"x-max-length-bytes": 1000, "x-max-age": "1D"}
    assert stream_setting(arguments, {"max-length-bytes": 5000}, "max-length-bytes") \
        == 5000
    assert stream_setting(arguments, {}, "max-age") == "1D"
    assert alternate_exchange({"alternate-exchange": "arg-ae"},
                              {"alternate-exchange": "policy-ae"}) == "arg-ae"
    assert alternate_exchange({}, {"alternate-exchange": "policy-ae"}) == "policy-ae"


# -- live changes, in the core -------------------------------------------------------------

class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def live():
    clock = FakeClock()
    client = Client(Broker(clock=clock))
    client.open_channel()
    client.clock = clock
    client.admin = Administration(client.broker)
    client.vhost = client.broker.vhosts["/"]
    return client


def fill(client, queue: str, count: int, prefix: bytes = b"m") -> None:
    for number in range(count):
        client.publish(1, "", queue, prefix + b"%d" % number)


def bodies(client, queue: str) -> list:
    out = []
    while True:
        replies = client.method(1, commands.Basic.Get(queue=queue, no_ack=True))
        if isinstance(replies[0][1], commands.Basic.GetEmpty):
            return out
        out.append(replies[2][1].value)


def test_lowering_max_length_drops_the_oldest_at_once_and_clearing_lifts_it(live):
    live.declare_queue(1, "q")
    fill(live, "q", 10)
    live.admin.set_policy("/", "limit", "^q$", {"max-length": 3}, apply_to="queues")
    assert live.vhost.queues["q"].message_count == 3
    live.admin.clear_policy("/", "limit")
    fill(live, "q", 5, b"n")
    assert bodies(live, "q") == [b"m7", b"m8", b"m9", b"n0", b"n1", b"n2", b"n3", b"n4"]


def test_max_length_bytes_counts_bodies_and_dead_letters_the_excess(live):
    live.declare_queue(1, "dead")
    live.declare_queue(1, "q", arguments={"x-dead-letter-exchange": ""})
    live.admin.set_policy("/", "bytes", "^q$", {"max-length-bytes": 10,
                                                "dead-letter-routing-key": "dead"})
    fill(live, "q", 4, b"abcd")       # 5 bytes each: two fit
    assert bodies(live, "q") == [b"abcd2", b"abcd3"]
    assert bodies(live, "dead") == [b"abcd0", b"abcd1"]


def test_a_policy_with_reject_publish_and_a_limit_still_drops_once_as_rabbitmq(live):
    """RabbitMQ applies the limit under the old overflow mode (drop-head), then the
    new mode: the queue is cut to the limit, later publishes are refused."""
    live.declare_queue(1, "q")
    fill(live, "q", 5)
    live.admin.set_policy("/", "p", "q", {"max-length": 2, "overflow": "reject-publish"})
    fill(live, "q", 2, b"late")
    assert bodies(live, "q") == [b"m3", b"m4"]


def test_a_new_message_ttl_applies_to_messages_published_afterwards(live):
    live.declare_queue(1, "q")
    live.publish(1, "", "q", b"before")
    live.admin.set_policy("/", "ttl", "q", {"message-ttl": 100})
    live.clock.now += 1
    assert live.vhost.queues["q"].message_count == 1
    assert bodies(live, "q") == [b"before"]
    live.publish(1, "", "q", b"after")
    live.clock.now += 1
    assert live.vhost.queues["q"].message_count == 0


def test_the_argument_ttl_wins_when_lower_and_the_operator_policy_when_lowest(live):
    live.declare_queue(1, "q", arguments={"x-message-ttl": 500})
    live.admin.set_policy("/", "p", "q", {"message-ttl": 10_000})
    assert live.vhost.queues["q"].message_ttl == 500
    live.admin.set_operator_policy("/", "o", "q", {"message-ttl": 50})
    assert live.vhost.queues["q"].message_ttl == 50
    live.admin.clear_operator_policy("/", "o")
    assert live.vhost.queues["q"].message_ttl == 500


def test_expires_from_a_policy_deletes_an_unused_queue_counting_from_the_change(live):
    live.declare_queue(1, "q")
    live.clock.now += 100
    live.admin.set_policy("/", "exp", "q", {"expires": 1000})
    live.clock.now += 0.9
    live.broker.scheduler.run_due()
    assert "q" in live.vhost.queues
    live.clock.now += 0.2
    live.broker.scheduler.run_due()
    assert "q" not in live.vhost.queues


def test_clearing_an_expires_policy_keeps_the_queue(live):
    live.declare_queue(1, "q")
    live.admin.set_policy("/", "exp", "q", {"expires": 1000})
    live.admin.clear_policy("/", "exp")
    live.clock.now += 5
    live.broker.scheduler.run_due()
    assert "q" in live.vhost.queues


def test_a_queue_declared_later_gets_the_policy_and_redeclaring_is_not_inequivalent(live):
    live.admin.set_policy("/", "limit", "^q", {"max-length": 1})
    live.declare_queue(1, "q1")
    fill(live, "q1", 3)
    assert live.vhost.queues["q1"].message_count == 1
    replies = live.method(1, commands.Queue.Declare(queue="q1",
                                                    arguments={"x-max-length": 7}))
    assert isinstance(replies[0][1], commands.Channel.Close)   # arguments do count
    live.open_channel(2)
    replies = live.method(2, commands.Queue.Declare(queue="q1"))
    assert isinstance(replies[0][1], commands.Queue.DeclareOk)


def test_a_policy_on_other_queues_leaves_a_queue_alone(live):
    live.declare_queue(1, "keep")
    fill(live, "keep", 3)
    live.admin.set_policy("/", "limit", "^other$", {"max-length": 1})
    assert live.vhost.queues["keep"].message_count == 3


def test_clearing_an_unknown_policy_and_a_policy_in_an_unknown_vhost_are_refused(live):
    with pytest.raises(AdminError, match="no policy 'nope'"):
        live.admin.clear_policy("/", "nope")
    with pytest.raises(AdminError, match="no vhost 'elsewhere'"):
        live.admin.set_policy("elsewhere", "p", ".*", {"max-length": 1})


# -- alternate exchanges ------------------------------------------------------------------

def declare_exchange(client, name, kind="direct", channel=1, **arguments):
    return client.method(channel, commands.Exchange.Declare(
        exchange=name, exchange_type=kind, arguments=arguments))


def test_an_unroutable_message_follows_the_alternate_exchange_chain(live):
    declare_exchange(live, "last", "fanout")
    declare_exchange(live, "middle", **{"alternate-exchange": "last"})
    declare_exchange(live, "source", **{"alternate-exchange": "middle"})
    live.declare_queue(1, "caught")
    live.method(1, commands.Queue.Bind(queue="caught", exchange="last"))
    replies = live.publish(1, "source", "nowhere", b"m", mandatory=True)
    assert not any(isinstance(frame, commands.Basic.Return) for _, frame in replies)
    assert bodies(live, "caught") == [b"m"]


def test_a_routable_message_does_not_go_to_the_alternate_exchange(live):
    declare_exchange(live, "ae", "fanout")
    declare_exchange(live, "source", **{"alternate-exchange": "ae"})
    for queue in ("bound", "caught"):
        live.declare_queue(1, queue)
    live.method(1, commands.Queue.Bind(queue="bound", exchange="source", routing_key="k"))
    live.method(1, commands.Queue.Bind(queue="caught", exchange="ae"))
    live.publish(1, "source", "k", b"m")
    assert (bodies(live, "bound"), bodies(live, "caught")) == ([b"m"], [])


def test_a_cycle_of_alternate_exchanges_and_a_missing_one_end_in_a_return(live):
    declare_exchange(live, "a", **{"alternate-exchange": "b"})
    declare_exchange(live, "b", **{"alternate-exchange": "a"})
    declare_exchange(live, "lonely", **{"alternate-exchange": "missing"})
    for exchange in ("a", "lonely"):
        replies = live.publish(1, exchange, "k", b"m", mandatory=True)
        assert any(isinstance(frame, commands.Basic.Return) for _, frame in replies)


def test_an_alternate_exchange_policy_applies_live_and_the_argument_wins(live):
    for name in ("policy-ae", "arg-ae"):
        declare_exchange(live, name, "fanout")
        live.declare_queue(1, name + "-q")
        live.method(1, commands.Queue.Bind(queue=name + "-q", exchange=name))
    declare_exchange(live, "plain")
    declare_exchange(live, "with-arg", **{"alternate-exchange": "arg-ae"})
    live.admin.set_policy("/", "ae", "^(plain|with-arg)$",
                          {"alternate-exchange": "policy-ae"}, apply_to="exchanges")
    live.publish(1, "plain", "k", b"p")
    live.publish(1, "with-arg", "k", b"w")
    assert bodies(live, "policy-ae-q") == [b"p"]
    assert bodies(live, "arg-ae-q") == [b"w"]
    live.admin.clear_policy("/", "ae")
    replies = live.publish(1, "plain", "k", b"gone", mandatory=True)
    assert any(isinstance(frame, commands.Basic.Return) for _, frame in replies)


def test_redeclaring_an_exchange_compares_only_its_alternate_exchange(live):
    declare_exchange(live, "x", **{"alternate-exchange": "a1"})
    replies = declare_exchange(live, "x", **{"alternate-exchange": "a1", "x-other": 1})
    assert isinstance(replies[0][1], commands.Exchange.DeclareOk)
    replies = declare_exchange(live, "x", **{"alternate-exchange": "a2"})
    assert close_code(replies) == 406
    assert replies[0][1].reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange 'x' in "
        "vhost '/': received 'a2' but current is 'a1'")
    live.open_channel(2)
    replies = declare_exchange(live, "x", channel=2)
    assert replies[0][1].reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange 'x' in "
        "vhost '/': received none but current is the value 'a1' of type 'longstr'")


def test_an_alternate_exchange_argument_that_is_not_a_string_is_refused(live):
    replies = declare_exchange(live, "x", **{"alternate-exchange": 5})
    assert close_code(replies) == 406
    assert replies[0][1].reply_text == (
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in "
        "exchange 'x' in vhost '/'")


def test_a_limit_drops_ready_messages_and_then_requeued_ones_as_rabbitmq(live):
    """Unacked messages do not count towards max-length; RabbitMQ checks the limits
    again when they are requeued."""
    live.declare_queue(1, "q")
    live.method(1, commands.Basic.Qos(prefetch_count=1))
    live.method(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    frames = live.publish(1, "", "q", b"first") + live.publish(1, "", "q", b"second")
    (deliver, _), = deliveries(frames)
    live.admin.set_policy("/", "limit", "q", {"max-length": 0})
    assert live.vhost.queues["q"].message_count == 0
    live.method(1, commands.Basic.Cancel(consumer_tag="c"))
    live.method(1, commands.Basic.Nack(delivery_tag=deliver.delivery_tag, requeue=True))
    assert live.vhost.queues["q"].message_count == 0
