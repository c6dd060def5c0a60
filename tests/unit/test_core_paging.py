"""Paging: a long durable queue keeps bodies beyond its window only in the queue file."""

from pamqp import commands

from core_harness import deliveries, paging_client


def publish(client, count, mode=2, start=0):
    for index in range(start, start + count):
        client.publish(1, "", "long", f"body-{index}".encode(),
                       properties=commands.Basic.Properties(delivery_mode=mode))


def test_bodies_beyond_the_window_are_not_kept_in_memory(tmp_path):
    client, queue = paging_client(tmp_path, window=10)
    publish(client, 50)
    queue.store.sync()
    in_memory = [entry.message.body is not None for entry in queue.ready]
    assert in_memory == [True] * 10 + [False] * 40


def test_paged_messages_are_delivered_with_their_bodies_in_order(tmp_path):
    client, queue = paging_client(tmp_path, window=5)
    publish(client, 30)
    queue.store.sync()
    got = deliveries(client.method(1, commands.Basic.Consume(queue="long", consumer_tag="c",
                                                             no_ack=True)))
    assert [body for _, body in got] == [f"body-{i}".encode() for i in range(30)]


def test_basic_get_reads_a_paged_body_back_before_its_sync(tmp_path):
    client, queue = paging_client(tmp_path, window=1)
    publish(client, 3)
    frames = []
    for _ in range(3):
        frames += client.method(1, commands.Basic.Get(queue="long", no_ack=True))
    bodies = [frame.value for _, frame in frames if hasattr(frame, "value")]
    assert bodies == [b"body-0", b"body-1", b"body-2"]


def test_transient_messages_keep_their_bodies(tmp_path):
    client, queue = paging_client(tmp_path, window=2)
    publish(client, 5, mode=1)
    assert all(entry.message.body is not None for entry in queue.ready)
