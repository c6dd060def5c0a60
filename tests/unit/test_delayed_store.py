"""The x-delayed-message exchange in the core, on fake clocks (its held-message index),
and its durable store's recovery from a queue file."""

from decimal import Decimal

from pamqp import commands

from amqp_codec import encode_properties
from broker.core.broker import Broker
from broker.core.delayed_exchange import delay_ms
from broker.core.message import Message
from broker.core.persistence import Persistence
from broker.server.delayed_store import DurableDelayedStore, held_message
from core_harness import Client
from storage.queue_file import QueueFile


class FakeClock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def delayed_client(kind: str = "direct"):
    """A client on a broker whose monotonic and wall clocks are fakes, with a
    delayed exchange "dx" bound to queue "q" with key "k"."""
    clock, wall = FakeClock(1000.0), FakeClock(1_700_000_000.0)
    client = Client(Broker(clock=clock))
    client.broker.scheduler.wall_clock = wall
    client.open_channel()
    client.method(1, commands.Exchange.Declare(
        exchange="dx", exchange_type="x-delayed-message",
        arguments={"x-delayed-type": kind}))
    client.declare_queue(1, "q")
    client.method(1, commands.Queue.Bind(queue="q", exchange="dx", routing_key="k"))
    return client, clock, wall


def publish(client, body: bytes, delay, routing_key: str = "k") -> None:
    client.publish(1, "dx", routing_key, body,
                   properties=commands.Basic.Properties(headers={"x-delay": delay}))


def ready(client) -> list[bytes]:
    return [entry.message.body for entry in client.broker.vhosts["/"].queues["q"].ready]


def advance(client, clock, wall, seconds: float) -> None:
    clock.now += seconds
    wall.now += seconds
    client.broker.scheduler.run_due()


def with_delay(value) -> Message:
    properties = encode_properties(commands.Basic.Properties(headers={"x-delay": value}))
    return Message("dx", "k", properties, b"")


def test_delay_header_is_read_as_the_plugin_reads_it():
    assert [delay_ms(with_delay(value)) for value in
            (500, "500", "+7", Decimal("2.9"), 0, -5, "5s", True, 2**32 - 1, 2**32)] == \
        [500, 500, 7, 2, 0, 0, 0, 0, 2**32 - 1, 0]
    assert delay_ms(Message("dx", "k", b"\x00\x00", b"")) == 0   # no headers at all


def test_held_messages_are_released_in_due_order_not_publish_order():
    client, clock, wall = delayed_client()
    publish(client, b"b", 200)
    publish(client, b"a", 100)
    publish(client, b"c", 300)
    assert ready(client) == []
    advance(client, clock, wall, 0.1)
    assert ready(client) == [b"a"]
    advance(client, clock, wall, 0.2)
    assert ready(client) == [b"a", b"b", b"c"]


def test_a_wall_clock_behind_the_timer_keeps_the_message_held():
    client, clock, wall = delayed_client()
    publish(client, b"m", 100)
    clock.now += 0.2              # the monotonic timer fires, the wall clock lags
    wall.now += 0.05
    client.broker.scheduler.run_due()
    assert ready(client) == []
    advance(client, clock, wall, 0.05)
    assert ready(client) == [b"m"]


def test_deleting_the_exchange_drops_what_it_holds():
    client, clock, wall = delayed_client()
    publish(client, b"m", 100)
    client.method(1, commands.Exchange.Delete(exchange="dx"))
    advance(client, clock, wall, 1)
    assert ready(client) == []


def test_recovered_messages_past_due_are_routed_at_once_and_others_wait(tmp_path):
    client, clock, wall = delayed_client()
    exchange = client.broker.vhosts["/"].exchanges["dx"]
    now_ms = int(wall.now * 1000)
    properties = encode_properties(commands.Basic.Properties())
    exchange.restore_pending(_NoStore(), [
        (1, now_ms - 5000, Message("dx", "k", properties, b"overdue")),
        (2, now_ms + 100, Message("dx", "k", properties, b"later"))])
    client.broker.scheduler.run_due()
    assert ready(client) == [b"overdue"]
    advance(client, clock, wall, 0.1)
    assert ready(client) == [b"overdue", b"later"]


class _NoStore:
    def remove(self, seq: int) -> None:
        pass


def test_store_recovers_held_messages_and_tombstones_released_ones(tmp_path):
    persistence = Persistence()
    directory = str(tmp_path / "dx")
    store = DurableDelayedStore(QueueFile(directory), persistence, "dx", None)
    properties = encode_properties(commands.Basic.Properties(delivery_mode=2))
    for seq, due in ((1, 5000), (2, 3000), (3, 4000)):
        store.append(seq, due, Message("dx", f"key{seq}", properties, b"body%d" % seq))
    store.sync()
    store.remove(2)
    store.synced()    # the commit that may have begun before the release
    store.sync()
    store.synced()    # the commit that made its routed copies durable
    store.sync()      # writes the tombstone
    store.close()
    _, records, problems = QueueFile.recover(directory)
    assert problems == []
    held = [held_message("dx", record) for record in records]
    assert [(seq, due, message.routing_key, message.body)
            for seq, due, message in held] == [(1, 5000, "key1", b"body1"),
                                               (3, 4000, "key3", b"body3")]


def test_store_keeps_a_released_message_until_its_routed_copies_are_committed(tmp_path):
    persistence = Persistence()
    directory = str(tmp_path / "dx")
    store = DurableDelayedStore(QueueFile(directory), persistence, "dx", None)
    properties = encode_properties(commands.Basic.Properties(delivery_mode=2))
    store.append(1, 5000, Message("dx", "k", properties, b"m"))
    store.sync()
    store.remove(1)
    store.synced()
    store.sync()      # a crash now: the message was routed, its copies maybe not durable
    store.queue_file.close(flush=False)
    _, records, _ = QueueFile.recover(directory)
    assert [record.seq for record in records] == [1]
