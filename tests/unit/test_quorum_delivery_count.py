"""Quorum queues in the core: the delivery count each delivery carries, what makes it
go up, the delivery limit from the argument, the policy and the operator policy, and
what happens to a message past the limit, as RabbitMQ 3.10 has them (the 4.0 and 4.3
lines' counts: test_rabbitmq_lines.py)."""

import pytest
from pamqp import commands
from pamqp import header as pamqp_header

from broker.core.admin import Administration
from broker.core.broker import Broker
from broker.core.message import Message
from broker.core.quorum_queue import (DELIVERY_COUNT, delivery_count, delivery_limit,
                                      with_delivery_count)
from broker.core.rabbitmq_lines import LINE_3_10, Profile
from amqp_codec import encode_properties
from core_harness import Client

QUORUM = {"x-queue-type": "quorum"}


@pytest.fixture
def client():
    client = Client(Broker(profile=Profile(LINE_3_10)))
    client.open_channel()
    client.admin = Administration(client.broker)
    return client


def declare(client, name, **arguments):
    return client.method(1, commands.Queue.Declare(
        queue=name, durable=True, arguments={**QUORUM, **arguments}))


def get(client, queue):
    """(delivery tag, redelivered, headers, body) of a Basic.Get, or None if empty."""
    frames = client.method(1, commands.Basic.Get(queue=queue))
    method = frames[0][1]
    if isinstance(method, commands.Basic.GetEmpty):
        return None
    header = next(frame for _, frame in frames
                  if isinstance(frame, pamqp_header.ContentHeader))
    body = b"".join(frame.value for _, frame in frames[2:])
    return (method.delivery_tag, method.redelivered, header.properties.headers or {},
            body)


def nack(client, tag):
    client.method(1, commands.Basic.Nack(delivery_tag=tag, requeue=True))


def counts_until_gone(client, queue):
    """The x-delivery-count of each Basic.Get of the head, nacked back every time,
    until the queue is empty."""
    counts = []
    while (got := get(client, queue)) is not None:
        counts.append(got[2][DELIVERY_COUNT])
        nack(client, got[0])
        assert len(counts) < 20, "the message keeps coming back"
    return counts


def test_the_first_delivery_carries_count_zero_and_each_return_adds_one(client):
    declare(client, "q")
    client.publish(1, "", "q", b"m", properties=commands.Basic.Properties(
        headers={"app": "kept", DELIVERY_COUNT: 7}))
    tag, redelivered, headers, body = get(client, "q")
    assert (redelivered, headers, body) == (False, {"app": "kept", DELIVERY_COUNT: 0},
                                            b"m")
    nack(client, tag)
    tag, redelivered, headers, _ = get(client, "q")
    assert (redelivered, headers) == (True, {"app": "kept", DELIVERY_COUNT: 1})
    client.method(1, commands.Basic.Recover(requeue=True))
    tag, _, headers, _ = get(client, "q")
    assert headers[DELIVERY_COUNT] == 2
    client.method(1, commands.Channel.Close())
    client.open_channel()
    assert get(client, "q")[2][DELIVERY_COUNT] == 3


def test_a_classic_queue_leaves_the_headers_alone(client):
    client.declare_queue(1, "classic")
    client.publish(1, "", "classic", b"m")
    tag, _, headers, _ = get(client, "classic")
    assert headers == {}
    nack(client, tag)
    assert get(client, "classic")[2] == {}


def test_past_the_limit_a_message_is_dropped_without_a_dead_letter_exchange(client):
    declare(client, "q", **{"x-delivery-limit": 2})
    client.publish(1, "", "q", b"m")
    assert counts_until_gone(client, "q") == [0, 1, 2]


def test_past_the_limit_a_message_is_dead_lettered_with_reason_delivery_limit(client):
    client.declare_queue(1, "dead")
    declare(client, "q", **{"x-delivery-limit": 0, "x-dead-letter-exchange": "",
                            "x-dead-letter-routing-key": "dead"})
    client.publish(1, "", "q", b"m", properties=commands.Basic.Properties(
        headers={"app": "kept"}))
    assert counts_until_gone(client, "q") == [0]
    _, _, headers, body = get(client, "dead")
    assert body == b"m" and DELIVERY_COUNT not in headers
    (death,) = headers["x-death"]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", "q", 1)
    assert (headers["app"], headers["x-first-death-reason"]) == ("kept",
                                                                 "delivery_limit")


def test_the_limit_follows_the_policy_and_the_operator_policy_live(client):
    declare(client, "q", **{"x-delivery-limit": 5})
    client.admin.set_policy("/", "p", "^q$", {"delivery-limit": 3})
    client.publish(1, "", "q", b"a")
    assert counts_until_gone(client, "q") == [0, 1, 2, 3]
    client.admin.set_operator_policy("/", "o", "^q$", {"delivery-limit": 1})
    client.publish(1, "", "q", b"b")
    assert counts_until_gone(client, "q") == [0, 1]
    client.admin.clear_operator_policy("/", "o")
    client.admin.clear_policy("/", "p")
    client.publish(1, "", "q", b"c")
    assert counts_until_gone(client, "q") == [0, 1, 2, 3, 4, 5]


def test_a_delivery_limit_policy_does_not_match_a_classic_queue(client):
    client.declare_queue(1, "classic")
    client.admin.set_policy("/", "p", ".*", {"delivery-limit": 0}, priority=1)
    client.admin.set_policy("/", "lower", ".*", {"max-length": 7})
    queue = client.broker.vhosts["/"].queues["classic"]
    assert queue.applied_policies[0].name == "lower"


@pytest.mark.parametrize("arguments, definition, limit", [
    ({}, {}, None),
    ({"x-delivery-limit": 4}, {}, 4),
    ({"x-delivery-limit": 4}, {"delivery-limit": 2}, 2),
    ({"x-delivery-limit": 1}, {"delivery-limit": 2}, 1),
    ({"x-delivery-limit": "a"}, {}, None),          # not a number: no limit, as Erlang
    ({"x-delivery-limit": "a"}, {"delivery-limit": 3}, 3),
    ({"x-delivery-limit": -1}, {}, -1),
])
def test_the_effective_limit_is_the_lower_number(arguments, definition, limit):
    assert delivery_limit(arguments, definition) == limit


def test_the_count_header_is_a_signed_64_bit_integer_after_the_others():
    raw = encode_properties(commands.Basic.Properties(headers={"b": 1}))
    message = with_delivery_count(Message("", "q", raw, b"x"), 2 ** 40)
    assert message.properties.endswith(
        b"\x10x-delivery-countl" + (2 ** 40).to_bytes(8, "big"))
    assert list(message.headers) == ["b", DELIVERY_COUNT]
    assert delivery_count(message) == 2 ** 40
    assert with_delivery_count(message, None).headers == {"b": 1}
