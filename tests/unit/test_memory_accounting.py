"""The memory alarm's accounting: every queue's held_bytes is exactly what its ready and
unacked messages cost, whatever happens to them, and 0 once it is drained."""

import pytest
from hypothesis import given, settings, strategies as st
from pamqp import commands

from amqp_codec import InboundPublish, encode_properties
from broker.core.backlog import ENTRY_COST, RUN_ENTRY_COST
from broker.core.broker import Broker
from broker.server.alarms import held_memory
from core_harness import Client, close_code, paging_client


def cost(entry) -> int:
    body = entry.message.body
    return ENTRY_COST + (0 if body is None else len(body))


def true_cost(client, queue) -> int:
    """What the queue's messages cost, counted from scratch."""
    held = sum(cost(entry) for entry in queue.ready_entries())
    for channel in client.connection.channels.values():
        held += sum(cost(d.entry) for d in channel.unacked.values() if d.queue is queue)
    return held


def accounting_client() -> Client:
    client = Client()
    for number in (1, 2):
        client.open_channel(number)
    client.declare_queue(1, "dlq")
    client.declare_queue(1, "q", arguments={"x-max-length": 6,
                                            "x-dead-letter-exchange": "",
                                            "x-dead-letter-routing-key": "dlq"})
    return client


def queues(client):
    vhost = client.broker.vhosts["/"]
    return vhost.queues["q"], vhost.queues["dlq"]


def first_unacked(client):
    unacked = client.connection.channels[2].unacked
    return min(unacked) if unacked else None


def run(client, operation, size):
    if operation == "publish":
        client.publish(1, "", "q", bytes(size))
    elif operation in ("get", "get-no-ack"):
        client.method(2, commands.Basic.Get(queue="q", no_ack=operation == "get-no-ack"))
    elif operation == "drain-no-ack":   # a no_ack consumer takes everything ready
        client.method(1, commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
        client.method(1, commands.Basic.Cancel(consumer_tag="c"))
    elif operation == "purge-dlq":
        client.method(1, commands.Queue.Purge(queue="dlq"))
    elif operation == "close-and-reopen":   # unacked messages go back to the queue
        client.method(2, commands.Channel.Close())
        client.open_channel(2)
    elif first_unacked(client) is not None:
        tag = first_unacked(client)
        if operation == "ack":
            client.method(2, commands.Basic.Ack(delivery_tag=tag))
        elif operation == "requeue":
            client.method(2, commands.Basic.Reject(delivery_tag=tag, requeue=True))
        elif operation == "reject":          # dead-lettered into dlq
            client.method(2, commands.Basic.Reject(delivery_tag=tag, requeue=False))


OPERATIONS = ["publish", "publish", "get", "get-no-ack", "drain-no-ack", "purge-dlq",
              "close-and-reopen", "ack", "requeue", "reject"]


@settings(deadline=None, max_examples=60)
@given(st.lists(st.tuples(st.sampled_from(OPERATIONS), st.integers(0, 5000)),
                max_size=40))
def test_held_bytes_match_the_messages_held_after_every_operation(operations):
    client = accounting_client()
    for operation, size in operations:
        run(client, operation, size)
        for queue in queues(client):
            assert queue.held_bytes == true_cost(client, queue), operation
    run(client, "close-and-reopen", 0)
    for name in ("q", "dlq"):
        client.method(1, commands.Queue.Purge(queue=name))
    assert [queue.held_bytes for queue in queues(client)] == [0, 0]


def test_queued_bytes_are_released_when_consumers_ack():
    client = accounting_client()
    queue, _ = queues(client)
    for _ in range(3):
        client.publish(1, "", "q", bytes(10_000))
    assert queue.held_bytes == 3 * (10_000 + ENTRY_COST)
    client.method(2, commands.Basic.Consume(queue="q", consumer_tag="c"))
    assert queue.held_bytes == 3 * (10_000 + ENTRY_COST)      # unacked: still held
    client.method(2, commands.Basic.Ack(delivery_tag=3, multiple=True))
    assert queue.held_bytes == 0


@pytest.mark.parametrize("no_ack", [True, False])
def test_messages_handed_straight_to_a_consumer_are_held_until_settled(no_ack):
    """A queue with a consumer waiting hands each publish over at once: a no-ack
    delivery is done with there and then, a manual-ack one is held until acked."""
    client = Client()
    client.open_channel(1)
    client.declare_queue(1, "direct")
    queue = client.broker.vhosts["/"].queues["direct"]
    client.method(1, commands.Basic.Consume(queue="direct", consumer_tag="c", no_ack=no_ack))
    for _ in range(3):
        client.publish(1, "", "direct", bytes(1000))
    assert queue.held_bytes == (0 if no_ack else 3 * (1000 + ENTRY_COST))
    assert queue.held_bytes == true_cost(client, queue)
    if not no_ack:
        client.method(1, commands.Basic.Ack(delivery_tag=3, multiple=True))
    assert queue.held_bytes == 0


def test_the_alarm_reading_sums_the_queues_and_forgets_deleted_ones():
    client = accounting_client()
    client.publish(1, "", "dlq", bytes(1000))
    client.publish(1, "", "q", bytes(3000))
    assert held_memory(client.broker, []) == 4000 + 2 * ENTRY_COST
    client.method(1, commands.Queue.Delete(queue="dlq"))
    assert held_memory(client.broker, []) == 3000 + ENTRY_COST


def test_paged_out_bodies_are_not_charged_until_read_back(tmp_path):
    client, queue = paging_client(tmp_path, window=2)
    for _ in range(5):
        client.publish(1, "", "long", bytes(1000),
                       properties=commands.Basic.Properties(delivery_mode=2))
    # two in memory; three paged out behind the window, in a run
    assert queue.held_bytes == 2 * (1000 + ENTRY_COST) + 3 * RUN_ENTRY_COST
    client.method(1, commands.Basic.Get(queue="long", no_ack=False))
    assert queue.held_bytes == true_cost(client, queue)
    client.method(1, commands.Basic.Consume(queue="long", consumer_tag="c", no_ack=True))
    client.method(1, commands.Basic.Ack(delivery_tag=1))
    assert queue.held_bytes == 0


def test_an_oversized_publish_is_refused_with_rabbitmqs_406():
    broker = Broker()
    broker.config.max_message_size = 1000
    client = Client(broker)
    client.open_channel()
    client.declare_queue(1, "q")
    publish = InboundPublish(1, "", "q", False, False, encode_properties(
        commands.Basic.Properties()), None)
    publish.body_size = 2**31
    client.connection.handle(publish)
    client.end_batch()
    [(channel, close)] = client.transport.methods()
    assert (channel, close_code([(channel, close)])) == (1, 406)
    assert close.reply_text == ("PRECONDITION_FAILED - message size 2147483648 is larger "
                                "than configured max size 1000")
    assert (close.class_id, close.method_id) == (60, 40)
    assert client.broker.vhosts["/"].queues["q"].held_bytes == 0
