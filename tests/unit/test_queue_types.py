"""The table of queue kinds (broker/core/queue_types.py) as clients see it: which kind a
declaration gets, what each kind refuses at declaration and at consume with RabbitMQ's
406 texts, and which kind honours a channel-wide prefetch limit."""

import pytest
from pamqp import commands

from broker.core.broker import Broker
from broker.core.priority_queue import PriorityQueue, max_priority
from broker.core.queue import Queue
from broker.core.rabbitmq_lines import LINE_3_10, LINE_4_3, Profile
from broker.core.queue_types import (CLASSIC, PRIORITY, QUEUE_TYPES, QUORUM, STREAM,
                                     kind_of)
from core_harness import Client, close_code
from test_core_streams import StreamBroker

QUORUM_ARGUMENTS = {"x-queue-type": "quorum"}
STREAM_ARGUMENTS = {"x-queue-type": "stream"}


@pytest.fixture
def client():
    client = Client()
    client.open_channel()
    return client


def test_the_kinds_are_named_by_x_queue_type_in_rabbitmqs_order():
    assert list(QUEUE_TYPES) == ["classic", "quorum", "stream"]
    assert kind_of({}) is CLASSIC and kind_of({"x-queue-type": b"quorum"}) is QUORUM
    assert kind_of(STREAM_ARGUMENTS) is STREAM
    assert kind_of({"x-max-priority": 3}) is PRIORITY and PRIORITY.name == "classic"
    # a type Warren lacks is checked as classic first (validate_declaration refuses it)
    assert kind_of({"x-queue-type": "mqtt"}) is CLASSIC
    assert kind_of({"x-queue-type": ["not", "text"]}) is CLASSIC


@pytest.mark.parametrize("line", [LINE_3_10, LINE_4_3], ids=lambda line: line.name)
def test_x_max_priority_selects_the_queue_class(line):
    """0 is a plain queue under 3.10, two priorities since 4.0."""
    assert max_priority({"x-max-priority": 10}) == 10
    assert max_priority({"x-max-priority": 0}) == 0
    assert max_priority({"x-max-priority": 0}, least=1) == 1
    assert max_priority({}) == 0 and max_priority({}, least=1) == 0
    client = Client(Broker(profile=Profile(line)))
    client.open_channel()
    client.declare_queue(1, "p", arguments={"x-max-priority": 4})
    client.declare_queue(1, "zero", arguments={"x-max-priority": 0})
    client.declare_queue(1, "plain")
    queues = client.broker.vhosts["/"].queues
    assert type(queues["p"]) is PriorityQueue and queues["p"].kind is PRIORITY
    zero = Queue if line is LINE_3_10 else PriorityQueue
    assert type(queues["zero"]) is zero and type(queues["plain"]) is Queue
    assert queues["plain"].kind is CLASSIC


@pytest.mark.parametrize("queue, kwargs, text", [
    ("q", {"durable": True, "arguments": {**QUORUM_ARGUMENTS, "x-max-priority": 3}},
     "invalid arg 'x-max-priority' for queue 'q' in vhost '/' of queue type "
     "rabbit_quorum_queue"),
    ("q", {"arguments": QUORUM_ARGUMENTS},
     "invalid property 'non-durable' for queue 'q' in vhost '/'"),
    ("q", {"durable": True, "exclusive": True, "arguments": QUORUM_ARGUMENTS},
     "invalid property 'exclusive-owner' for queue 'q' in vhost '/'"),
    ("", {"durable": True, "arguments": QUORUM_ARGUMENTS},
     "Cannot declare a server-named queue for type rabbit_quorum_queue"),
    ("c", {"arguments": {"x-delivery-limit": 1}},
     "invalid arg 'x-delivery-limit' for queue 'c' in vhost '/' of queue type "
     "rabbit_classic_queue"),
    ("c", {"arguments": {"x-max-age": "1h", "x-max-priority": 2}},
     "invalid arg 'x-max-age' for queue 'c' in vhost '/' of queue type "
     "rabbit_classic_queue"),
    ("s", {"arguments": STREAM_ARGUMENTS},
     "invalid property 'non-durable' for queue 's' in vhost '/'"),
    ("s", {"durable": True, "auto_delete": True, "arguments": STREAM_ARGUMENTS},
     "invalid property 'auto-delete' for queue 's' in vhost '/'"),
    ("s", {"durable": True, "arguments": {**STREAM_ARGUMENTS, "x-message-ttl": 5}},
     "invalid arg 'x-message-ttl' for queue 's' in vhost '/' of queue type "
     "rabbit_stream_queue"),
    ("s", {"durable": True, "arguments": {**STREAM_ARGUMENTS, "x-max-age": "0s"}},
     "invalid arg 'x-max-age' for queue 's' in vhost '/': invalid_max_age (expected a "
     "number and a unit Y, M, D, h, m or s, such as '7D')"),
    ("t", {"durable": True, "arguments": {"x-queue-type": "mqtt"}},
     "invalid arg 'x-queue-type' for queue 't' in vhost '/': Warren implements "
     "classic, quorum (one replica) and stream queues, not 'mqtt'"),
])
def test_declarations_rabbitmq_refuses_are_406(client, queue, kwargs, text):
    (_, close), = client.method(1, commands.Queue.Declare(queue=queue, **kwargs))
    assert (close.reply_code, close.reply_text) == (406, "PRECONDITION_FAILED - " + text)
    assert queue not in client.broker.vhosts["/"].queues


def test_what_each_kind_allows_of_a_declaration():
    assert [kind.name for kind in QUEUE_TYPES.values() if kind.server_named] == \
        ["classic", "stream"]
    assert "exclusive-owner" in QUORUM.refused_properties
    assert "exclusive-owner" in STREAM.refused_properties
    assert CLASSIC.refused_properties == ()


@pytest.mark.parametrize("declare, consume, text", [
    ({}, {"x-stream-offset": "first"},
     "invalid arg 'x-stream-offset' for queue 'q' in vhost '/' of queue type "
     "rabbit_classic_queue"),
    ({"x-max-priority": 2}, {"x-stream-offset": "first"},
     "invalid arg 'x-stream-offset' for queue 'q' in vhost '/' of queue type "
     "rabbit_classic_queue"),
    (QUORUM_ARGUMENTS, {"x-stream-offset": "first"},
     "invalid arg 'x-stream-offset' for queue 'q' in vhost '/' of queue type "
     "rabbit_quorum_queue"),
])
def test_a_consumer_argument_of_another_kind_is_a_406(client, declare, consume, text):
    client.declare_queue(1, "q", durable=True, arguments=declare)
    (_, close), = client.method(1, commands.Basic.Consume(queue="q", arguments=consume))
    assert (close.reply_code, close.reply_text) == (406, "PRECONDITION_FAILED - " + text)


def test_a_stream_refuses_a_consumer_with_x_priority(tmp_path):
    client = StreamBroker(tmp_path).client()
    client.declare_queue(1, "s", durable=True, arguments=STREAM_ARGUMENTS)
    (_, close), = client.method(1, commands.Basic.Consume(
        queue="s", arguments={"x-priority": 1, "x-stream-offset": "first"}))
    assert (close.reply_code, close.reply_text) == (
        406, "PRECONDITION_FAILED - invalid arg 'x-priority' for queue 's' in vhost '/' "
        "of queue type rabbit_stream_queue")


def test_global_qos_is_honoured_by_classic_queues_only():
    assert [kind.name for kind in QUEUE_TYPES.values() if kind.honours_global_qos] == \
        ["classic"]
    assert PRIORITY.honours_global_qos


@pytest.mark.parametrize("declare, refused", [
    ({}, False), ({"x-max-priority": 2}, False), (QUORUM_ARGUMENTS, True),
    (STREAM_ARGUMENTS, True)])
@pytest.mark.parametrize("line", [LINE_3_10, LINE_4_3])
def test_a_consumer_on_a_globally_limited_channel_is_refused_by_other_kinds(
        tmp_path, declare, refused, line):
    """Where global qos is permitted (3.10, 4.0); 4.3 denies it, and its Basic.Qos
    global=true limits each consumer, so no kind refuses a consumer there."""
    client = StreamBroker(tmp_path, profile=Profile(line)).client()
    refused = refused and line is LINE_3_10
    client.declare_queue(1, "q", durable=True, arguments=declare)
    client.method(1, commands.Basic.Qos(prefetch_count=2))   # a stream consumer needs one
    client.method(1, commands.Basic.Qos(prefetch_count=2, global_=True))
    replies = client.method(1, commands.Basic.Consume(
        queue="q", arguments={"x-stream-offset": "first"} if declare is STREAM_ARGUMENTS
        else {}))
    assert close_code(replies) == (540 if refused else None)
    if refused:
        assert replies[-1][1].reply_text.startswith(
            "NOT_IMPLEMENTED - queue 'q' in vhost '/' does not support global qos")


def test_each_queue_has_the_kind_the_management_api_shows_as_its_type(tmp_path):
    client = StreamBroker(tmp_path).client()
    for name, arguments in (("c", {}), ("p", {"x-max-priority": 2}),
                            ("qq", QUORUM_ARGUMENTS), ("s", STREAM_ARGUMENTS)):
        client.declare_queue(1, name, durable=True, arguments=arguments)
    queues = client.broker.vhosts["/"].queues
    assert {name: queue.kind.name for name, queue in queues.items()} == {
        "c": "classic", "p": "classic", "qq": "quorum", "s": "stream"}
