"""Priority queues in the core: the order PriorityReady keeps (requeue positions,
drop-head, expiry heads), recovery order, and paging of a deep priority queue (its
bodies beyond the page window are in the queue file only, as the memory accounting
shows) with a high-priority message still delivered first."""

import re

from pamqp import commands

from broker.core.backlog import ENTRY_COST, ENTRY_WINDOW, PAGE_WINDOW
from broker.core.message import Message, QueueEntry
from broker.core.priority_queue import PriorityQueue, PriorityReady, message_priority
from amqp_codec import InboundMethod, encode_properties
from storage.queue_file import QueueFile
from core_harness import Client, deliveries, paging_client


def entry(seq: int, priority: int | None) -> QueueEntry:
    properties = encode_properties(commands.Basic.Properties(priority=priority))
    return QueueEntry(Message("", "q", properties, f"m{seq}".encode()), seq)


def test_the_priority_is_read_past_the_fields_before_it():
    properties = commands.Basic.Properties(
        content_type="text/plain", content_encoding="gzip", headers={"k": "v" * 300},
        delivery_mode=2, priority=7, correlation_id="c")
    item = QueueEntry(Message("", "q", encode_properties(properties), b""), 1)
    assert message_priority(item, 9) == 7 and message_priority(item, 5) == 5
    assert message_priority(entry(2, None), 9) == 0
    truncated = QueueEntry(Message("", "q", b"\x08\x00", b""), 3)   # flag, no value
    assert message_priority(truncated, 9) == 0


def seqs(ready) -> list[int]:
    return [item.seq for item in ready]


def filled(highest: int, priorities: list[int | None]) -> PriorityReady:
    ready = PriorityReady(highest)
    for seq, priority in enumerate(priorities, 1):
        ready.append(entry(seq, priority))
    return ready


def test_delivery_order_is_highest_priority_first_then_publication_order():
    ready = filled(5, [None, 3, 0, 5, 3, 200, 1])   # 200 counts as the maximum, 5
    assert seqs(ready) == [4, 6, 2, 5, 7, 1, 3]
    assert len(ready) == 7
    assert ready[0].seq == 4 and ready[3].seq == 5 and ready[-1].seq == 3
    assert [ready.popleft().seq for _ in range(3)] == [4, 6, 2]
    assert seqs(ready) == [5, 7, 1, 3]


def test_a_requeued_entry_goes_back_to_its_place_among_its_priority():
    ready = filled(9, [1, 5, 1, 5, 1])
    taken = [ready.popleft() for _ in range(3)]          # seqs 2, 4 (priority 5), 1
    assert [item.seq for item in taken] == [2, 4, 1]
    ready.append(entry(6, 5))
    for item in sorted(taken, key=lambda item: item.seq):
        ready.put_back(item)
    assert seqs(ready) == [2, 4, 6, 1, 3, 5]


def test_requeued_entries_land_between_those_still_ready():
    ready = filled(3, [2] * 5)
    taken = [ready.popleft() for _ in range(3)]          # seqs 1, 2, 3
    ready.put_back(taken[2])
    ready.put_back(taken[0])
    ready.put_back(taken[1])                             # between 1 and 3
    assert seqs(ready) == [1, 2, 3, 4, 5]


def test_within_counts_the_entries_ahead_in_delivery_order():
    ready = filled(9, [0] * 5 + [9] * 3)
    first_low = ready[3]                                 # seq 1: 3 high ones ahead
    assert first_low.seq == 1
    assert ready.within(first_low, 3) and not ready.within(first_low, 2)
    assert ready.within(ready[0], 0)


def test_remove_and_clear_keep_the_count():
    ready = filled(4, [4, 0, 4])
    ready.remove(ready[1])
    assert seqs(ready) == [1, 2] and len(ready) == 2
    ready.clear()
    assert len(ready) == 0 and not ready and list(ready) == []


def publish(client, queue: str, body: bytes, priority: int | None, mode: int = 1):
    client.publish(1, "", queue, body, properties=commands.Basic.Properties(
        priority=priority, delivery_mode=mode))


def get_bodies(client, queue: str) -> list[bytes]:
    bodies = []
    while True:
        replies = client.method(1, commands.Basic.Get(queue=queue, no_ack=True))
        if isinstance(replies[0][1], commands.Basic.GetEmpty):
            return bodies
        bodies.append(replies[-1][1].value)


def test_drop_head_drops_the_next_message_to_deliver():
    client = Client()
    client.open_channel()
    client.declare_queue(1, "p", arguments={"x-max-priority": 9, "x-max-length": 2})
    for body, priority in [(b"low", 1), (b"high", 8), (b"mid", 4)]:
        publish(client, "p", body, priority)
    assert get_bodies(client, "p") == [b"mid", b"low"]


def test_requeue_over_the_limit_drops_from_the_head_in_priority_order():
    client = Client()
    client.open_channel()
    client.declare_queue(1, "p", arguments={"x-max-priority": 9, "x-max-length": 2})
    publish(client, "p", b"high", 8)
    (_, get_ok), *_ = client.method(1, commands.Basic.Get(queue="p"))
    publish(client, "p", b"low1", 1)
    publish(client, "p", b"low2", 1)
    client.method(1, commands.Basic.Reject(delivery_tag=get_ok.delivery_tag,
                                           requeue=True))
    assert get_bodies(client, "p") == [b"low1", b"low2"]    # high came back, dropped


def test_a_deep_priority_queue_keeps_only_the_page_window_in_memory(tmp_path):
    """Five page windows of persistent messages (50,000): the bodies beyond the window
    are charged nothing (queue file only); one published last at the highest priority is
    delivered first, read back from the file, and the backlog follows in publication
    order."""
    count = 5 * PAGE_WINDOW
    client, queue = paging_client(tmp_path, window=PAGE_WINDOW,
                                  arguments={"x-max-priority": 9})
    for index in range(count):
        publish(client, "long", b"body-%08d" % index, 0, mode=2)
    publish(client, "long", b"urgent", 9, mode=2)
    queue.store.sync()
    body_length = len(b"body-00000000")
    assert queue.held_bytes == (count + 1) * ENTRY_COST + PAGE_WINDOW * body_length
    assert sum(item.message.body is not None for item in queue.ready) == PAGE_WINDOW
    first = client.method(1, commands.Basic.Get(queue="long", no_ack=True))
    assert first[-1][1].value == b"urgent"
    client.connection.handle(InboundMethod(1, commands.Basic.Consume(
        queue="long", consumer_tag="c", no_ack=True)))
    client.end_batch()
    # the bodies in the order written (decoding 50,000 deliveries frame by frame, as
    # client.method does, would take a minute)
    written = re.findall(rb"body-(\d{8})", bytes(client.transport.output))
    assert [int(index) for index in written] == list(range(count))
    assert queue.held_bytes == 0 and len(queue.ready) == 0


def test_recovery_restores_priority_order(tmp_path):
    client, queue = paging_client(tmp_path, window=3, clock=lambda: 1000.0,
                                  arguments={"x-max-priority": 5})
    for index, priority in enumerate([0, 5, 2, 5, 0, 2]):
        publish(client, "long", f"m{index}".encode(), priority, mode=2)
    queue.store.sync()
    _file, recovered, problems = QueueFile.recover(str(tmp_path / "long"),
                                                   load_bodies=False)
    assert problems == []
    restored = PriorityQueue(queue.vhost, "again", True, None, False,
                             {"x-max-priority": 5}, queue.store)
    restored.restore(recovered)
    assert seqs(restored.ready) == [2, 4, 3, 6, 1, 5]
    assert seqs(restored._paged.tail) == seqs(restored.ready)


def test_a_priority_queue_beyond_the_entry_window_still_delivers_highest_first():
    """Plain queues keep a backlog beyond ENTRY_WINDOW in runs; a priority queue keeps
    every ready message in its PriorityReady, so a late high-priority one still
    overtakes a long backlog."""
    client = Client()
    client.open_channel()
    client.declare_queue(1, "p", arguments={"x-max-priority": 5})
    for index in range(ENTRY_WINDOW + 100):
        publish(client, "p", f"low{index}".encode(), 1)
    publish(client, "p", b"high", 5)
    got = get_bodies(client, "p")
    assert got == [b"high"] + [f"low{index}".encode()
                               for index in range(ENTRY_WINDOW + 100)]
