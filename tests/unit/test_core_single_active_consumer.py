"""x-single-active-consumer in the core: which consumer is served, and who takes over
when the active one is cancelled or its channel closes."""

from pamqp import commands

from core_harness import Client, deliveries

SAC = {"x-single-active-consumer": True}


def sac_client(priorities, queue_type="classic"):
    """One channel per consumer (tags c0, c1, ...), each with prefetch 2."""
    client = Client()
    for number in range(1, len(priorities) + 2):
        client.open_channel(number)
    client.declare_queue(len(priorities) + 1, "q", durable=queue_type == "quorum",
                         arguments={**SAC, "x-queue-type": queue_type})
    for index, priority in enumerate(priorities):
        channel = index + 1
        client.method(channel, commands.Basic.Qos(prefetch_count=2))
        client.method(channel, commands.Basic.Consume(
            queue="q", consumer_tag=f"c{index}", arguments={"x-priority": priority}))
    return client


def publish(client, count):
    frames = []
    for number in range(count):
        frames += client.publish(len(client.connection.channels), "", "q",
                                 str(number).encode())
    return frames


def served(frames):
    return [(deliver.consumer_tag, body, deliver.redelivered)
            for deliver, body in deliveries(frames)]


def test_only_the_first_consumer_is_served_whatever_the_priorities():
    client = sac_client([1, 5, 3])
    assert served(publish(client, 5)) == [("c0", b"0", False), ("c0", b"1", False)]


def test_a_closed_channel_hands_its_unacked_messages_to_the_highest_priority():
    client = sac_client([5, 1, 3])
    publish(client, 4)
    frames = client.method(1, commands.Channel.Close(reply_code=200))
    assert served(frames) == [("c2", b"0", True), ("c2", b"1", True)]


def test_a_quorum_queue_hands_over_in_registration_order():
    client = sac_client([5, 1, 3], "quorum")
    publish(client, 4)
    frames = client.method(1, commands.Channel.Close(reply_code=200))
    assert [tag for tag, _, _ in served(frames)] == ["c1", "c1"]


def test_a_cancelled_active_consumer_with_nothing_unacked_hands_over_at_once():
    client = sac_client([0, 0])
    publish(client, 2)
    client.method(1, commands.Basic.Ack(delivery_tag=2, multiple=True))
    client.method(1, commands.Basic.Cancel(consumer_tag="c0"))
    assert served(publish(client, 1)) == [("c1", b"0", False)]


def test_after_a_cancel_the_next_is_served_once_the_unacked_are_settled():
    """Order is kept: the messages the cancelled consumer holds may come back first."""
    client = sac_client([0, 0])
    publish(client, 4)
    assert served(client.method(1, commands.Basic.Cancel(consumer_tag="c0"))) == []
    frames = client.method(1, commands.Basic.Ack(delivery_tag=2, multiple=True))
    assert served(frames) == [("c1", b"2", False), ("c1", b"3", False)]


def test_a_waiting_consumer_leaving_changes_nothing():
    client = sac_client([0, 0, 0])
    publish(client, 4)
    assert served(client.method(2, commands.Basic.Cancel(consumer_tag="c1"))) == []
    frames = client.method(1, commands.Basic.Ack(delivery_tag=2, multiple=True))
    assert served(frames) == [("c0", b"2", False), ("c0", b"3", False)]


def test_a_dispatch_between_a_cancel_and_the_close_serves_the_successor_nothing():
    """pika cancels a consumer, then closes its channel, a round trip apart. A dispatch
    in between for another reason (here the connection's output drained, which redoes
    every channel's queues) must not hand the ready messages to the successor ahead of
    the unacked ones that come back with the close (a loaded CI run saw c2 get 2 and 3)."""
    client = sac_client([5, 1, 3])
    publish(client, 4)
    client.method(1, commands.Basic.Cancel(consumer_tag="c0"))
    client.connection.drained()
    assert served(client.transport.frames()) == []
    frames = client.method(1, commands.Channel.Close(reply_code=200))
    assert served(frames) == [("c2", b"0", True), ("c2", b"1", True)]
