"""Paging: a long durable queue keeps bodies beyond its window only in the queue file,
and the core reads none back itself: it asks its store, which answers later (here when
the test runs the pending reads, as the server's worker threads would)."""

import logging
import time
from collections import deque

from pamqp import body as pamqp_body, commands, frame
from pamqp.header import ContentHeader

from amqp_codec import PROTOCOL_HEADER, InboundMethod
from broker.core.broker import Broker
from broker.core.message import Message, QueueEntry
from broker.core.backlog import (ENTRY_COST, ENTRY_WINDOW, MEMORY_RUN_COST, READ_AHEAD,
                                 HeadOnDisk, PagedOut)
from broker.core.queue import Queue
from storage.queue_file import QueueFile
from core_harness import Client, ManualReads, deliveries, kinds, paging_client


def publish(client, count, mode=2, start=0, queue="long"):
    for index in range(start, start + count):
        client.publish(1, "", queue, f"body-{index}".encode(),
                       properties=commands.Basic.Properties(delivery_mode=mode))


def bodies(frames) -> list[bytes]:
    return [frame.value for _, frame in frames if hasattr(frame, "value")]


def expected(indexes) -> list[bytes]:
    return [f"body-{i}".encode() for i in indexes]


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_bodies_beyond_the_window_are_not_kept_in_memory(tmp_path):
    client, queue = paging_client(tmp_path, window=10)
    publish(client, 50)
    queue.store.sync()
    in_memory = [entry.message.body is not None for entry in queue.ready_entries()]
    assert in_memory == [True] * 10 + [False] * 40


def test_consumers_get_paged_messages_once_the_store_has_read_them(tmp_path):
    reads = ManualReads()
    client, queue = paging_client(tmp_path, window=5, reads=reads)
    publish(client, 30)
    queue.store.sync()
    got = deliveries(client.method(1, commands.Basic.Consume(
        queue="long", consumer_tag="c", no_ack=True)))
    assert [body for _, body in got] == expected(range(5))
    assert reads.pending, "the next bodies are asked for before the consumer needs them"
    reads.run()
    got = deliveries(client.transport.frames())
    assert [body for _, body in got] == expected(range(5, 30))
    assert queue.held_bytes == 0


def test_nothing_is_read_while_enough_bodies_are_in_memory(tmp_path):
    reads = ManualReads()
    client, queue = paging_client(tmp_path, window=2000, reads=reads)
    publish(client, 2100)
    client.method(1, commands.Basic.Qos(prefetch_count=100))
    client.method(1, commands.Basic.Consume(queue="long", consumer_tag="c"))
    assert not reads.pending     # 1,900 bodies in memory still precede the first on disk


def test_a_get_waits_for_the_head_body_and_later_commands_wait_behind_it(tmp_path):
    reads = ManualReads()
    client, queue = paging_client(tmp_path, window=1, reads=reads)
    publish(client, 3)
    client.method(1, commands.Basic.Get(queue="long", no_ack=True))   # body-0, in memory
    connection = client.connection
    connection.handle(InboundMethod(1, commands.Basic.Get(queue="long", no_ack=True)))
    connection.handle(InboundMethod(1, commands.Queue.Declare(queue="long", durable=True,
                                                              passive=True)))
    client.end_batch()
    assert client.transport.frames() == []      # neither Get-Empty nor the Declare-Ok
    reads.run()
    replies = client.transport.frames()
    assert kinds(replies)[0] == (1, commands.Basic.GetOk)
    assert bodies(replies) == [b"body-1"]
    assert kinds(replies)[-1] == (1, commands.Queue.DeclareOk)
    assert replies[-1][1].message_count == 1
    assert bodies(client.method(1, commands.Basic.Get(queue="long", no_ack=True))) == \
        [b"body-2"]


def test_a_purge_while_a_read_is_pending_drops_its_late_result(tmp_path):
    reads = ManualReads()
    client, queue = paging_client(tmp_path, window=2, reads=reads)
    publish(client, 10)
    got = deliveries(client.method(1, commands.Basic.Consume(
        queue="long", consumer_tag="c", no_ack=True)))
    assert len(got) == 2 and reads.pending
    other = Client(client.broker)
    other.open_channel()
    (_, purge_ok), = other.method(1, commands.Queue.Purge(queue="long"))
    assert purge_ok.message_count == 8
    reads.run()
    assert deliveries(client.transport.frames()) == []
    assert queue.message_count == 0 and queue.held_bytes == 0
    publish(other, 1, start=10)
    assert [body for _, body in deliveries(client.transport.frames())] == [b"body-10"]


def test_a_waiting_get_sees_a_purge_as_if_it_came_first(tmp_path):
    reads = ManualReads()
    client, queue = paging_client(tmp_path, window=0, reads=reads)
    publish(client, 3)
    assert client.method(1, commands.Basic.Get(queue="long", no_ack=True)) == []
    other = Client(client.broker)
    other.open_channel()
    other.method(1, commands.Queue.Purge(queue="long"))
    reads.run()
    assert kinds(client.transport.frames()) == [(1, commands.Basic.GetEmpty)]


def test_a_waiting_get_on_a_deleted_queue_is_answered_404(tmp_path):
    reads = ManualReads()
    client, queue = paging_client(tmp_path, window=0, reads=reads)
    publish(client, 3)
    assert client.method(1, commands.Basic.Get(queue="long")) == []
    other = Client(client.broker)
    other.open_channel()
    other.method(1, commands.Queue.Delete(queue="long"))
    reads.run()
    (_, close), = client.transport.frames()
    assert isinstance(close, commands.Channel.Close) and close.reply_code == 404


def test_expired_paged_messages_are_dead_lettered_with_their_bodies_in_order(tmp_path):
    reads = ManualReads()
    clock = FakeClock()
    client, queue = paging_client(tmp_path, window=3, reads=reads, clock=clock,
                                  arguments={"x-message-ttl": 1000,
                                             "x-dead-letter-exchange": "",
                                             "x-dead-letter-routing-key": "dead"})
    client.declare_queue(1, "dead")
    publish(client, 8)
    clock.now += 2
    client.broker.scheduler.run_due()
    dead = client.broker.vhosts["/"].queues["dead"]
    assert [entry.message.body for entry in dead.ready] == expected(range(3))
    reads.run()
    assert [entry.message.body for entry in dead.ready] == expected(range(8))
    assert all(entry.message.headers["x-death"][0]["reason"] == "expired"
               for entry in dead.ready)
    assert queue.message_count == 0 and queue.held_bytes == 0


def test_requeued_messages_go_back_ahead_of_paged_ones(tmp_path):
    reads = ManualReads()
    client, queue = paging_client(tmp_path, window=2, reads=reads)
    publish(client, 6)
    client.method(1, commands.Basic.Qos(prefetch_count=2))
    got = deliveries(client.method(1, commands.Basic.Consume(queue="long",
                                                             consumer_tag="c")))
    assert [body for _, body in got] == expected(range(2))
    got += deliveries(client.method(1, commands.Basic.Recover(requeue=True)))
    reads.run()
    frames = client.transport.frames()      # prefetch 2: the redelivered pair holds it
    for _ in range(3):
        got += deliveries(client.method(1, commands.Basic.Ack(delivery_tag=0,
                                                              multiple=True)))
        reads.run()
        got += deliveries(client.transport.frames())
    assert [body for _, body in got] == expected([0, 1, 0, 1, 2, 3, 4, 5])
    assert [deliver.redelivered for deliver, _ in got] == [False] * 2 + [True] * 2 + \
        [False] * 4
    assert frames == []


def test_unreadable_bodies_cost_only_their_messages(tmp_path, caplog):
    reads = ManualReads()
    client, queue = paging_client(tmp_path, window=1, reads=reads)
    publish(client, 4)
    client.method(1, commands.Basic.Consume(queue="long", consumer_tag="c", no_ack=True))
    client.transport.frames()
    (read, done), = reads.pending
    reads.pending.clear()
    found = read()
    with caplog.at_level(logging.ERROR, "warren.queue"):
        done([found[0], None, found[2]])    # the second one is damaged on disk
    got = deliveries(client.transport.frames())
    assert [body for _, body in got] == [b"body-1", b"body-3"]
    assert "event=paged_messages_unreadable" in caplog.text
    assert queue.held_bytes == 0 and not queue.ready


def test_transient_messages_keep_their_bodies(tmp_path):
    client, queue = paging_client(tmp_path, window=2)
    publish(client, 5, mode=1)
    entries = list(queue.ready_entries())
    assert len(entries) == 5 and all(entry.message.body is not None for entry in entries)
    bodies = sum(len(entry.message.body) for entry in entries)
    # two in the window, three kept in parts in a MemoryRun behind it
    assert queue.held_bytes == bodies + 2 * ENTRY_COST + 3 * MEMORY_RUN_COST


def test_paged_messages_keep_their_own_routing_key_and_properties(tmp_path):
    """Paged-out messages alike share one placeholder: the ones that differ (routing
    key, a property, the body size) must each come back with their own."""
    client, queue = paging_client(tmp_path, window=3)
    client.method(1, commands.Exchange.Declare(exchange="x", exchange_type="direct"))
    for key in ("a", "b"):
        client.method(1, commands.Queue.Bind(queue="long", exchange="x", routing_key=key))
    published = []
    for index in range(40):
        key = "a" if index % 7 < 4 else "b"
        message_id = "same" if index % 5 else f"id-{index}"
        body = b"x" * (16 if index % 3 else 17)
        client.publish(1, "x", key, body, properties=commands.Basic.Properties(
            delivery_mode=2, message_id=message_id))
        published.append((key, message_id, body))
    queue.store.sync()
    frames = client.method(1, commands.Basic.Consume(queue="long", consumer_tag="c",
                                                     no_ack=True))
    frames += client.transport.frames()
    delivered = []
    for _, frame in frames:
        if isinstance(frame, commands.Basic.Deliver):
            delivered.append([frame.routing_key])
        elif isinstance(frame, ContentHeader):
            delivered[-1].append(frame.properties.message_id)
        elif hasattr(frame, "value"):
            delivered[-1].append(frame.value)
    assert [tuple(item) for item in delivered] == published


def test_a_deep_backlog_keeps_only_the_window_as_entries(tmp_path):
    """Beyond the window, messages are kept as runs of seqs, not one QueueEntry each;
    the counts and the delivery order are those of every message."""
    client, queue = paging_client(tmp_path, window=10)
    publish(client, 5000)
    queue.store.sync()
    assert (len(queue.ready), queue.message_count) == (10, 5000)
    got = deliveries(client.method(1, commands.Basic.Consume(
        queue="long", consumer_tag="c", no_ack=True)))
    got += deliveries(client.transport.frames())
    assert [body for _, body in got] == expected(range(5000))
    assert queue.message_count == 0 and queue.held_bytes == 0


def test_transient_messages_behind_a_paged_backlog_keep_their_place(tmp_path):
    client, queue = paging_client(tmp_path, window=3)
    publish(client, 5)
    publish(client, 3, mode=1, start=5)     # transient: kept in memory, behind the run
    publish(client, 4, start=8)
    publish(client, 2, mode=1, start=12)
    queue.store.sync()
    assert queue.message_count == 14
    got = deliveries(client.method(1, commands.Basic.Consume(
        queue="long", consumer_tag="c", no_ack=True)))
    got += deliveries(client.transport.frames())
    got += deliveries(client.publish(1, "", "long", b"body-14"))   # nothing ahead now
    assert [body for _, body in got] == expected(range(15))


def test_drop_head_reaches_into_the_paged_backlog_and_dead_letters_in_order(tmp_path):
    client, queue = paging_client(tmp_path, window=0,
                                  arguments={"x-max-length": 3,
                                             "x-dead-letter-exchange": "",
                                             "x-dead-letter-routing-key": "dead"})
    client.declare_queue(1, "dead")
    publish(client, 10)
    queue.store.sync()
    assert queue.message_count == 3
    dead = client.broker.vhosts["/"].queues["dead"]
    assert [entry.message.body for entry in dead.ready] == expected(range(7))
    got = deliveries(client.method(1, commands.Basic.Consume(
        queue="long", consumer_tag="c", no_ack=True)))
    got += deliveries(client.transport.frames())
    assert [body for _, body in got] == expected(range(7, 10))
    assert queue.held_bytes == 0


def test_a_purge_counts_and_drops_the_paged_backlog(tmp_path):
    client, queue = paging_client(tmp_path, window=4)
    publish(client, 100)
    (_, purge_ok), = client.method(1, commands.Queue.Purge(queue="long"))
    assert purge_ok.message_count == 100
    assert queue.message_count == 0 and queue.held_bytes == 0
    publish(client, 2, start=100)
    assert bodies(client.method(1, commands.Basic.Get(queue="long", no_ack=True))) == \
        [b"body-100"]


def test_the_ready_messages_listed_in_order_include_the_paged_backlog(tmp_path):
    """What the inspection's peek reads: every ready message in order, with no body
    for those paged out."""
    client, queue = paging_client(tmp_path, window=2)
    publish(client, 4)
    publish(client, 1, mode=1, start=4)
    listed = [(entry.seq, entry.message.body) for entry in queue.ready_entries()]
    assert listed == [(1, b"body-0"), (2, b"body-1"), (3, None), (4, None),
                      (5, b"body-4")]


def test_a_recovered_backlog_keeps_its_order_and_redelivered_flags(tmp_path):
    client, queue = paging_client(tmp_path, window=2)
    publish(client, 8)
    client.method(1, commands.Basic.Qos(prefetch_count=3))
    client.method(1, commands.Basic.Consume(queue="long", consumer_tag="c"))
    queue.store.sync()      # three delivered, unacked: redelivered after a restart
    _file, recovered, problems = QueueFile.recover(str(tmp_path / "long"),
                                                   load_bodies=False)
    assert problems == []
    restored = Queue(queue.vhost, "again", True, None, False, {}, queue.store)
    restored.page_window = 2
    restored.restore(recovered)
    assert restored.message_count == 8
    entries = []
    while restored.message_count:
        try:
            entries.append(restored.take())
        except HeadOnDisk:
            client.reads.run()
    assert [entry.message.body for entry in entries] == expected(range(8))
    assert [entry.redelivered for entry in entries] == [True] * 3 + [False] * 5


def test_a_deep_transient_backlog_beyond_the_window_keeps_order_and_accounting():
    """A queue without a queue file keeps the messages beyond its window in memory, in
    runs: they come out in order, and the accounting drains to nothing."""
    client = Client()
    client.open_channel()
    client.declare_queue(1, "plain")
    queue = client.broker.vhosts["/"].queues["plain"]
    queue.page_window = 5
    publish(client, 3000, mode=1, queue="plain")
    assert (len(queue.ready), queue.message_count) == (5, 3000)
    got = deliveries(client.method(1, commands.Basic.Consume(
        queue="plain", consumer_tag="c", no_ack=True)))
    assert [body for _, body in got] == expected(range(3000))
    assert queue.message_count == 0 and queue.held_bytes == 0


def test_recovered_messages_with_a_ttl_expire_from_the_tail(tmp_path):
    """After a restart every message is behind the window, none read yet: those whose
    TTL ran out still leave the queue on time."""
    clock = FakeClock()
    client, queue = paging_client(tmp_path, window=2, clock=clock)
    publish(client, 5)
    queue.store.sync()
    _file, recovered, _problems = QueueFile.recover(str(tmp_path / "long"),
                                                    load_bodies=False)
    restored = Queue(queue.vhost, "again", True, None, False, {"x-message-ttl": 1000},
                     queue.store)
    restored.restore(recovered)
    assert restored.message_count == 5
    clock.now += 2
    client.broker.scheduler.run_due()
    assert restored.message_count == 0 and restored.held_bytes == 0


def test_messages_requeued_one_by_one_go_back_ahead_of_the_paged_backlog(tmp_path):
    """Rejected one at a time, each requeued message goes back to its place in publish
    order, ahead of the messages still queued beyond the window."""
    reads = ManualReads()
    client, queue = paging_client(tmp_path, window=3, reads=reads)
    publish(client, READ_AHEAD + 100)    # a tail the read-ahead leaves
    queue.store.sync()
    for _ in range(3):
        client.method(1, commands.Basic.Get(queue="long"))
    for tag in (1, 2, 3):
        client.method(1, commands.Basic.Reject(delivery_tag=tag, requeue=True))
    got = deliveries(client.method(1, commands.Basic.Consume(
        queue="long", consumer_tag="c", no_ack=True)))
    reads.run()
    got += deliveries(client.transport.frames())
    assert [body for _, body in got] == expected(range(READ_AHEAD + 100))
    assert [deliver.redelivered for deliver, _ in got] == [True] * 3 + [False] * (READ_AHEAD + 97)


def memory_queue(arguments: dict | None = None, clock=None):
    """A Client and its classic queue "plain" with no queue file (every message in
    memory), with the default windows."""
    client = Client(Broker(clock=clock or time.monotonic))
    client.open_channel()
    client.declare_queue(1, "plain", arguments=arguments or {})
    return client, client.broker.vhosts["/"].queues["plain"]


def publish_with_ids(client, count, start=0, queue="plain"):
    """Transient messages each with a message id of its own (so a property block of
    its own)."""
    for index in range(start, start + count):
        client.publish(1, "", queue, f"body-{index}".encode(),
                       properties=commands.Basic.Properties(
                           delivery_mode=1, message_id=f"id-{index}"))


def message_ids(frames) -> list[str]:
    return [frame.properties.message_id for _, frame in frames
            if isinstance(frame, ContentHeader)]


def consume_all(client, queue="plain", no_ack=True) -> list:
    frames = client.method(1, commands.Basic.Consume(queue=queue, consumer_tag="c",
                                                     no_ack=no_ack))
    return frames + client.transport.frames()


def test_a_transient_backlog_beyond_the_entry_window_keeps_each_message_whole():
    """Beyond ENTRY_WINDOW, a queue without a queue file keeps its messages in parts
    (MemoryRun): each still comes out with its own body and properties, in order, and
    the accounting charges less while they wait and drains to nothing."""
    client, queue = memory_queue()
    publish_with_ids(client, ENTRY_WINDOW + 1000)
    assert (len(queue.ready), queue.message_count) == (ENTRY_WINDOW, ENTRY_WINDOW + 1000)
    bodies_held = sum(len(entry.message.body) for entry in queue.ready_entries())
    assert queue.held_bytes == (bodies_held + ENTRY_COST * ENTRY_WINDOW
                                + MEMORY_RUN_COST * 1000)
    assert queue.held_bytes - queue.bookkeeping_bytes == bodies_held
    frames = consume_all(client)
    assert [body for _, body in deliveries(frames)] == expected(range(ENTRY_WINDOW + 1000))
    assert message_ids(frames) == [f"id-{i}" for i in range(ENTRY_WINDOW + 1000)]
    assert queue.message_count == 0 and queue.held_bytes == 0


def test_publishes_read_from_the_wire_are_kept_in_parts_beyond_the_entry_window():
    """What the decoder makes (a PublishedMessage, not a Message) is kept in parts
    behind the entry window too, and comes out whole and in order."""
    client, queue = memory_queue()
    framer = client.connection.framer
    framer.feed(PROTOCOL_HEADER)
    count = ENTRY_WINDOW + 100
    client.connection.handle_all(framer.feed(b"".join(
        frame.marshal(commands.Basic.Publish(exchange="", routing_key="plain"), 1)
        + frame.marshal(ContentHeader(0, len(body), commands.Basic.Properties(
            delivery_mode=1, message_id=f"id-{index}")), 1)
        + frame.marshal(pamqp_body.ContentBody(body), 1)
        for index, body in enumerate(expected(range(count))))))
    bodies_held = sum(len(body) for body in expected(range(count)))
    assert queue.held_bytes == (bodies_held + ENTRY_COST * ENTRY_WINDOW
                                + MEMORY_RUN_COST * 100)
    frames = consume_all(client)
    assert [body for _, body in deliveries(frames)] == expected(range(count))
    assert message_ids(frames) == [f"id-{i}" for i in range(count)]


def test_transient_messages_requeued_go_back_ahead_of_the_memory_backlog():
    client, queue = memory_queue()
    count = ENTRY_WINDOW * 3
    publish(client, count, mode=1, queue="plain")
    for _ in range(3):
        client.method(1, commands.Basic.Get(queue="plain"))
    for tag in (2, 1, 3):
        client.method(1, commands.Basic.Reject(delivery_tag=tag, requeue=True))
    got = deliveries(consume_all(client))
    assert [body for _, body in got] == expected(range(count))
    assert [deliver.redelivered for deliver, _ in got] == [True] * 3 + [False] * (count - 3)
    assert queue.held_bytes == 0


def test_transient_messages_with_a_ttl_behind_the_entry_window_expire_in_order():
    clock = FakeClock()
    client, queue = memory_queue({"x-message-ttl": 1000}, clock=clock)
    publish(client, ENTRY_WINDOW + 50, mode=1, queue="plain")
    clock.now += 0.5
    publish(client, 20, mode=1, start=ENTRY_WINDOW + 50, queue="plain")
    clock.now += 0.6        # the first ones expired, the last 20 not yet
    client.broker.scheduler.run_due()
    assert queue.message_count == 20
    got = deliveries(consume_all(client))
    assert [body for _, body in got] == expected(range(ENTRY_WINDOW + 50,
                                                       ENTRY_WINDOW + 70))
    assert queue.held_bytes == 0


def test_drop_head_dead_letters_the_memory_backlog_in_order():
    """A policy lowering max-length drops (dead-letters) the oldest messages, from the
    window and then the MemoryRun behind it."""
    client, queue = memory_queue({"x-dead-letter-exchange": "",
                                  "x-dead-letter-routing-key": "dead"})
    client.declare_queue(1, "dead")
    dead = client.broker.vhosts["/"].queues["dead"]
    publish_with_ids(client, ENTRY_WINDOW + 500)
    queue.apply_policy({"max-length": 10})
    assert queue.message_count == 10
    assert [entry.message.body for entry in dead.ready_entries()] == \
        expected(range(ENTRY_WINDOW + 490))
    frames = consume_all(client)
    assert message_ids(frames) == [f"id-{i}" for i in range(ENTRY_WINDOW + 490,
                                                             ENTRY_WINDOW + 500)]
    assert queue.held_bytes == 0


def test_a_purge_drops_the_memory_backlog():
    client, queue = memory_queue()
    publish(client, ENTRY_WINDOW + 700, mode=1, queue="plain")
    (_, purge_ok), = client.method(1, commands.Queue.Purge(queue="plain"))
    assert purge_ok.message_count == ENTRY_WINDOW + 700
    assert queue.message_count == 0 and queue.held_bytes == 0
    publish(client, 1, mode=1, start=5, queue="plain")
    assert bodies(client.method(1, commands.Basic.Get(queue="plain", no_ack=True))) == \
        [b"body-5"]


def test_a_durable_queue_pages_out_only_beyond_its_page_window(tmp_path):
    """Between the entry window and the page window, persistent messages wait in the
    tail with their bodies in memory; only those beyond the page window are paged out."""
    client, queue = paging_client(tmp_path, window=ENTRY_WINDOW + 100)
    publish(client, ENTRY_WINDOW + 150)
    queue.store.sync()
    listed = [entry.message.body for entry in queue.ready_entries()]
    assert len(queue.ready) == ENTRY_WINDOW
    assert listed == expected(range(ENTRY_WINDOW + 100)) + [None] * 50
    got = deliveries(consume_all(client, queue="long"))
    assert [body for _, body in got] == expected(range(ENTRY_WINDOW + 150))
    assert queue.held_bytes == 0


def _slots(cls) -> tuple[str, ...]:
    """A core class's instance attributes: its __slots__, or a compiled (mypyc) class's
    __mypyc_attrs__ (it has no __slots__)."""
    return getattr(cls, "__slots__", None) or cls.__mypyc_attrs__


def test_a_message_made_again_from_a_memory_run_has_every_field_of_the_one_queued():
    """MemoryRun.move_to makes a Message and its QueueEntry without their __init__:
    every slot must come out set as a freshly queued one's (a slot added to Message or
    QueueEntry and not set there would fail here)."""
    paged = PagedOut(ENTRY_WINDOW)
    queued = []
    for seq, (routing_key, persistent) in enumerate([("a", True), ("a", True),
                                                      ("b", False), ("b", None)]):
        message = Message("amq.direct", routing_key, b"\x10\x00\x02", f"m{seq}".encode())
        message.persistent_cache = persistent
        paged.append_parts(message, seq)
        queued.append(QueueEntry(message, seq))
    ready = deque()
    assert paged.tail[0].move_to(ready, 10) == 4
    entry_slots = [slot for slot in _slots(QueueEntry) if slot != "message"]
    for made, entry in zip(ready, queued):
        assert {slot: getattr(made, slot) for slot in entry_slots} == \
            {slot: getattr(entry, slot) for slot in entry_slots}
        assert {slot: getattr(made.message, slot) for slot in _slots(Message)} == \
            {slot: getattr(entry.message, slot) for slot in _slots(Message)}
    assert paged.tail[0].bodies == [None] * 4     # the run let go of the bodies
