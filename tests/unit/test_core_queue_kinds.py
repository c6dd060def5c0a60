"""The queue hierarchy: classic and stream queues are both QueueBase, and the channel and
the virtual host serve either through that interface alone."""

from typing import NamedTuple

import pytest
from pamqp import commands

from broker.core.message import QueueEntry
from broker.core.message_store import MEMORY_STORE
from broker.core.queue import Queue
from broker.core.queue_base import DeliveredOffset, QueueBase
from broker.core.quorum_queue import QuorumQueue
from broker.core.stream_queue import StreamQueue
from core_harness import deliveries
from test_core_streams import StreamBroker


class Kind(NamedTuple):
    declare: dict         # Queue.Declare arguments
    consume: dict         # Basic.Consume arguments that read from the first message
    entry_type: type      # what the channel holds for an unacked delivery
    kept: int             # messages left once three were delivered and acked


KINDS = {
    "classic": Kind({}, {}, QueueEntry, 0),
    "stream": Kind({"x-queue-type": "stream"}, {"x-stream-offset": "first"},
                   DeliveredOffset, 3),
}


@pytest.fixture
def streams(tmp_path):
    return StreamBroker(tmp_path)


def test_the_base_class_cannot_be_instantiated(streams):
    vhost = streams.broker.vhosts["/"]
    with pytest.raises(TypeError, match="abstract"):
        QueueBase(vhost, "q", False, None, False, {}, MEMORY_STORE)


def test_asking_a_queue_whether_it_is_of_another_kind_changes_nothing(streams):
    """Asked whether it is a stream, a quorum queue, a classic one, a queue's answers
    must not depend on what was asked before (a compiled ABC's shared isinstance cache
    made them so)."""
    client = streams.client()
    client.method(1, commands.Queue.Declare(queue="q", durable=True))
    queue = streams.broker.vhosts["/"].queues["q"]
    for _ in range(2):
        assert not isinstance(queue, StreamQueue) and not isinstance(queue, QuorumQueue)
        assert isinstance(queue, Queue) and isinstance(queue, QueueBase)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_publishes_delivers_and_acks_through_the_base_interface(streams, kind):
    declare, consume, entry_type, kept = KINDS[kind]
    client = streams.client()
    client.method(1, commands.Queue.Declare(queue="q", durable=True, arguments=declare))
    queue = streams.broker.vhosts["/"].queues["q"]
    assert isinstance(queue, QueueBase)
    for body in (b"m0", b"m1", b"m2"):
        client.publish(1, "", "q", body)
    streams.commit()   # streams deliver only what is durable
    client.method(1, commands.Basic.Qos(prefetch_count=2))
    frames = client.method(1, commands.Basic.Consume(queue="q", consumer_tag="c",
                                                     arguments=consume))
    assert [body for _, body in deliveries(frames)] == [b"m0", b"m1"]
    assert queue.consumer_count == 1

    unacked = client.connection.channels[1].unacked
    assert [type(delivery.entry) for delivery in unacked.values()] == [entry_type] * 2
    assert all(delivery.queue is queue for delivery in unacked.values())

    frames = client.method(1, commands.Basic.Ack(delivery_tag=1))
    assert [body for _, body in deliveries(frames)] == [b"m2"]   # the ack gave credit
    client.method(1, commands.Basic.Ack(delivery_tag=3, multiple=True))
    assert not unacked
    assert queue.message_count == kept


@pytest.mark.parametrize("kind", KINDS)
def test_routing_through_an_exchange_to_exchange_binding_reaches_each_kind(streams, kind):
    client = streams.client()
    client.method(1, commands.Exchange.Declare(exchange="up", exchange_type="fanout"))
    client.method(1, commands.Exchange.Declare(exchange="down", exchange_type="direct"))
    client.method(1, commands.Exchange.Bind(destination="down", source="up"))
    client.method(1, commands.Queue.Declare(queue="q", durable=True,
                                            arguments=KINDS[kind].declare))
    client.method(1, commands.Queue.Bind(queue="q", exchange="down", routing_key="k"))
    client.publish(1, "up", "k", b"routed")
    client.publish(1, "up", "other", b"not routed")
    streams.commit()
    assert streams.broker.vhosts["/"].queues["q"].message_count == 1
