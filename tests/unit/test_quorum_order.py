"""The order a quorum queue delivers in, per RabbitMQ line, as measured on RabbitMQ
3.10.8, 4.0.5 and 4.3.6 (pika probes, Basic.Get after the returns): where a message
handed back goes, and how message priorities order the ready ones. Against the real
nodes: tests/integration/test_quorum_queues.py."""

import pytest
from pamqp import commands

from broker.core.broker import Broker
from broker.core.message import Message, QueueEntry
from broker.core.quorum_ready import QuorumReady
from broker.core.rabbitmq_lines import (
    LINE_3_10, LINE_4_0, LINE_4_3, STRICT_32_PRIORITIES, TWO_WEIGHTED_PRIORITIES, Profile,
)
from amqp_codec import encode_properties
from core_harness import Client

QUORUM = {"x-queue-type": "quorum"}
LINES = {"3.10": LINE_3_10, "4.0": LINE_4_0, "4.3": LINE_4_3}


def client_of(line: str) -> Client:
    client = Client(Broker(profile=Profile(LINES[line])))
    client.open_channel()
    client.open_channel(2)
    return client


def get(client, queue, channel=1, ack=False):
    frames = client.method(channel, commands.Basic.Get(queue=queue, no_ack=ack))
    method = frames[0][1]
    if isinstance(method, commands.Basic.GetEmpty):
        return None
    return method.delivery_tag, b"".join(frame.value for _, frame in frames[2:]).decode()


def drain(client, queue):
    bodies = []
    while (got := get(client, queue, ack=True)) is not None:
        bodies.append(got[1])
    return bodies


def filled(client, queue, count, **arguments):
    client.method(1, commands.Queue.Declare(queue=queue, durable=True,
                                            arguments={**QUORUM, **arguments}))
    for number in range(1, count + 1):
        client.publish(1, "", queue, str(number).encode())


def returned_in_order(client, **arguments):
    """Publish 1-7, get 1-5, reject 4, nack 2, nack multiple up to 5: the order of all
    seven afterwards."""
    filled(client, "q", 7, **arguments)
    tags = {body: tag for tag, body in (get(client, "q") for _ in range(5))}
    client.method(1, commands.Basic.Reject(delivery_tag=tags["4"], requeue=True))
    client.method(1, commands.Basic.Nack(delivery_tag=tags["2"], requeue=True))
    client.method(1, commands.Basic.Nack(delivery_tag=tags["5"], multiple=True,
                                         requeue=True))
    return drain(client, "q")


def abandoned_in_order(client):
    """Publish 1-4, get 1-3 on channel 2, reject 2, close channel 2: the order."""
    filled(client, "q", 4)
    tags = {body: tag for tag, body in (get(client, "q", 2) for _ in range(3))}
    client.method(2, commands.Basic.Reject(delivery_tag=tags["2"], requeue=True))
    client.method(2, commands.Channel.Close(reply_code=200, reply_text="", class_id=0,
                                            method_id=0))
    return drain(client, "q")


def recovered_in_order(client):
    filled(client, "q", 4)
    for _ in range(3):
        get(client, "q", 2)
    client.method(2, commands.Basic.Recover(requeue=True))
    return drain(client, "q")


@pytest.mark.parametrize("line, without_limit, with_limit", [
    ("3.10", ["6", "7", "4", "2", "1", "3", "5"], ["4", "2", "1", "3", "5", "6", "7"]),
    ("4.0", ["4", "2", "1", "3", "5", "6", "7"], ["4", "2", "1", "3", "5", "6", "7"]),
    ("4.3", ["4", "2", "1", "3", "5", "6", "7"], ["4", "2", "1", "3", "5", "6", "7"]),
])
def test_returned_messages_go_first_in_return_order(line, without_limit, with_limit):
    """RabbitMQ 3.10 requeues at the back unless the queue has a delivery limit."""
    assert returned_in_order(client_of(line)) == without_limit
    assert returned_in_order(client_of(line), **{"x-delivery-limit": 100}) == with_limit


@pytest.mark.parametrize("line, expected", [
    ("3.10", ["1", "3", "4", "2"]), ("4.0", ["2", "1", "3", "4"]),
    ("4.3", ["2", "1", "3", "4"]),
])
def test_a_closed_channels_messages_go_first(line, expected):
    assert abandoned_in_order(client_of(line)) == expected


@pytest.mark.parametrize("line, expected", [
    ("3.10", ["4", "1", "2", "3"]), ("4.0", ["1", "2", "3", "4"]),
    ("4.3", ["1", "2", "3", "4"]),
])
def test_recovered_messages(line, expected):
    assert recovered_in_order(client_of(line)) == expected


MIXED = [None, 0, 1, 4, 5, 9, 10, 31, 32, 255, 3, 7, None, 5, 30, 6]


def by_priority(line: str, priorities: list) -> list[int]:
    """Publish one message per priority (None: no property) to a quorum queue with no
    consumer, then get them all: their indexes in delivery order."""
    client = client_of(line)
    client.method(1, commands.Queue.Declare(queue="p", durable=True, arguments=QUORUM))
    for index, priority in enumerate(priorities):
        client.publish(1, "", "p", str(index).encode(),
                       properties=commands.Basic.Properties(priority=priority))
    return [int(body) for body in drain(client, "p")]


@pytest.mark.parametrize("line, expected", [
    ("3.10", list(range(16))),
    # two levels (above 4: high), every third message the older head
    ("4.0", [4, 5, 0, 6, 7, 1, 8, 9, 2, 11, 13, 3, 14, 15, 10, 12]),
    # 0-31 strict, above 31 counts as 31, none as 4
    ("4.3", [7, 8, 9, 14, 6, 5, 11, 15, 4, 13, 0, 3, 12, 10, 2, 1]),
])
def test_message_priorities(line, expected):
    assert by_priority(line, MIXED) == expected


def test_the_weighted_turn_of_4_0():
    """Measured on 4.0.5: six normal then six high messages."""
    assert by_priority("4.0", [None] * 6 + [5] * 6) == [6, 7, 0, 8, 9, 1, 10, 11, 2, 3, 4, 5]
    assert by_priority("4.0", [None, 5, None, 5, None, 5, None, 5, 0, 0, 9, 9]) == [
        1, 3, 0, 5, 7, 2, 10, 11, 4, 6, 8, 9]


@pytest.mark.parametrize("line, expected", [
    ("3.10", ["2", "3", "1", "0"]), ("4.0", ["3", "1", "0", "2"]),
    ("4.3", ["3", "1", "0", "2"]),
])
def test_returned_messages_go_before_higher_priorities(line, expected):
    """Publish priorities 0, 9, 0, 9; get two, nack the second then the first."""
    client = client_of(line)
    client.method(1, commands.Queue.Declare(queue="p", durable=True, arguments=QUORUM))
    for index, priority in enumerate([0, 9, 0, 9]):
        client.publish(1, "", "p", str(index).encode(),
                       properties=commands.Basic.Properties(priority=priority))
    first, second = get(client, "p"), get(client, "p")
    client.method(1, commands.Basic.Nack(delivery_tag=second[0], requeue=True))
    client.method(1, commands.Basic.Nack(delivery_tag=first[0], requeue=True))
    assert drain(client, "p") == expected


def entry(seq: int, priority: int | None = None) -> QueueEntry:
    properties = encode_properties(commands.Basic.Properties(priority=priority))
    return QueueEntry(Message("", "q", properties, b""), seq)


@pytest.mark.parametrize("priorities", [None, TWO_WEIGHTED_PRIORITIES,
                                        STRICT_32_PRIORITIES])
def test_peeking_and_iterating_agree_with_taking(priorities):
    """ready[0], ready[i] and iteration say what popleft will take, without taking a
    turn of the weighted order; remove and within see the same order."""
    ready = QuorumReady(priorities)
    entries = [entry(seq, priority) for seq, priority in enumerate(MIXED, 1)]
    for item in entries:
        ready.append(item)
    ready.put_back(entry(100, 0))
    ready.remove(entries[3])
    order = list(ready)
    assert [ready[index] for index in range(len(order))] == order
    assert ready.within(order[3], 3) and not ready.within(order[4], 3)
    taken = []
    while ready:
        assert ready[0] is order[len(taken)]
        taken.append(ready.popleft())
    assert taken == order and entries[3] not in taken
