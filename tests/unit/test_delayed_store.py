"""The x-delayed-message exchange in the core, on fake clocks (its held-message index),
and its durable store's recovery from a queue file."""

import os
import shutil
from decimal import Decimal

from pamqp import commands

from amqp_codec import encode_properties
from broker.core.broker import Broker
from broker.core.delayed_exchange import DelayedExchange, MemoryDelayedStore, delay_ms
from broker.core.message import Message
from broker.core.persistence import Persistence
from broker.server.durability import DurableStorage
from broker.server.delayed_store import DurableDelayedStore, held_index
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
    store = MemoryDelayedStore()
    store.messages.update({1: Message("dx", "k", properties, b"overdue"),
                           2: Message("dx", "k", properties, b"later")})
    exchange.restore_pending(store, [(1, now_ms - 5000), (2, now_ms + 100)])
    client.broker.scheduler.run_due()
    assert ready(client) == [b"overdue"]
    advance(client, clock, wall, 0.1)
    assert ready(client) == [b"overdue", b"later"]


def test_a_released_message_carries_the_delay_negated_as_the_plugin_forwards_it():
    client, clock, wall = delayed_client()
    client.publish(1, "dx", "k", b"m", properties=commands.Basic.Properties(
        headers={"a": 1, "x-delay": "100", "z": "last"}))
    advance(client, clock, wall, 0.1)
    (entry,) = client.broker.vhosts["/"].queues["q"].ready
    assert list(entry.message.headers.items()) == [("a", 1), ("x-delay", -100),
                                                   ("z", "last")]


def test_a_message_reaching_a_delayed_exchange_through_a_binding_is_held_there():
    client, clock, wall = delayed_client()
    client.method(1, commands.Exchange.Declare(exchange="front", exchange_type="fanout"))
    client.method(1, commands.Exchange.Bind(destination="dx", source="front"))
    client.declare_queue(1, "now")
    client.method(1, commands.Queue.Bind(queue="now", exchange="front"))
    client.publish(1, "front", "k", b"m", properties=commands.Basic.Properties(
        headers={"x-delay": 100}))
    queues = client.broker.vhosts["/"].queues
    assert [entry.message.body for entry in queues["now"].ready] == [b"m"]
    assert ready(client) == []
    advance(client, clock, wall, 0.1)
    (entry,) = queues["q"].ready
    assert (entry.message.body, entry.message.exchange) == (b"m", "front")


def test_a_message_reaching_a_delayed_alternate_exchange_is_held_there():
    client, clock, wall = delayed_client()
    client.method(1, commands.Exchange.Declare(
        exchange="front", exchange_type="direct",
        arguments={"alternate-exchange": "dx"}))
    client.publish(1, "front", "k", b"m", properties=commands.Basic.Properties(
        headers={"x-delay": 100}))
    assert ready(client) == []
    advance(client, clock, wall, 0.1)
    assert ready(client) == [b"m"]


class _InlineReads:
    """The ReadPool's contract, on the calling thread."""

    def submit(self, read, done) -> None:
        done(read())


def durable_store(directory: str) -> DurableDelayedStore:
    return DurableDelayedStore(QueueFile(directory), Persistence(), "dx", _InlineReads(),
                               "dx", True)


def test_store_recovers_held_messages_and_tombstones_released_ones(tmp_path):
    directory = str(tmp_path / "dx")
    store = durable_store(directory)
    properties = encode_properties(commands.Basic.Properties(delivery_mode=2))
    for seq, due in ((1, 5000), (2, 3000), (3, 4000)):
        assert store.append(seq, due, Message("dx", f"key{seq}", properties,
                                              b"body%d" % seq))
    store.sync()
    store.remove(2, True)
    store.synced()    # the commit that may have begun before the release
    store.sync()
    store.synced()    # the commit that made its routed copies durable
    store.sync()      # writes the tombstone
    store.close()
    _, records, problems = QueueFile.recover(directory, load_bodies=False)
    assert problems == []
    assert [held_index(record) for record in records] == [(1, 5000), (3, 4000)]


def test_store_reads_held_messages_back_from_its_file_with_their_exchange(tmp_path):
    store = durable_store(str(tmp_path / "dx"))
    properties = encode_properties(commands.Basic.Properties(delivery_mode=2))
    store.append(1, 5000, Message("dx", "k1", properties, b"on disk"))
    store.sync()
    store.append(2, 6000, Message("front", "k2", b"\x00\x00", b"buffered"))
    found = []
    store.read([1, 2, 3], found.extend)
    assert [(message.exchange, message.routing_key, message.properties, message.body)
            for message in found[:2]] == [("dx", "k1", properties, b"on disk"),
                                          ("front", "k2", b"\x00\x00", b"buffered")]
    assert found[2] is None          # never written: logged and dropped by the exchange


def test_store_does_not_recover_transient_messages_or_those_of_a_transient_exchange(
        tmp_path):
    directory = str(tmp_path / "dx")
    store = durable_store(directory)
    persistent = encode_properties(commands.Basic.Properties(delivery_mode=2))
    assert not store.append(1, 5000, Message("dx", "k", b"\x00\x00", b"transient"))
    assert store.append(2, 5000, Message("dx", "k", persistent, b"persistent"))
    store.sync()
    store.close()
    _, records, _ = QueueFile.recover(directory, load_bodies=False)
    assert [record.seq for record in records] == [2]
    transient = DurableDelayedStore(QueueFile(str(tmp_path / "tx")), Persistence(), "tx",
                                    _InlineReads(), "tx", False)
    assert not transient.append(1, 5000, Message("tx", "k", persistent, b"m"))


def test_store_keeps_a_released_message_until_its_routed_copies_are_committed(tmp_path):
    directory = str(tmp_path / "dx")
    store = durable_store(directory)
    properties = encode_properties(commands.Basic.Properties(delivery_mode=2))
    store.append(1, 5000, Message("dx", "k", properties, b"m"))
    store.sync()
    store.remove(1, True)
    store.synced()
    store.sync()      # a crash now: the message was routed, its copies maybe not durable
    store.queue_file.close(flush=False)
    _, records, _ = QueueFile.recover(directory)
    assert [record.seq for record in records] == [1]


def _commit(storage: DurableStorage) -> None:
    """One group commit, as the committer runs it."""
    changes, stores, writes = storage.persistence.take_pending()
    storage.apply_changes(changes)
    storage.sync_stores(stores)
    storage.persistence.committed(stores, writes)


def _started(data_dir: str) -> tuple[DurableStorage, Client]:
    storage = DurableStorage(data_dir)
    broker = Broker(persistence=storage.persistence)
    storage.restore(broker)
    client = Client(broker)
    client.open_channel()
    return storage, client


def _declare_durable_delayed(client) -> None:
    client.method(1, commands.Exchange.Declare(
        exchange="dx", exchange_type="x-delayed-message", durable=True,
        arguments={"x-delayed-type": "direct"}))


def _hold_persistent(client, body: bytes) -> None:
    client.publish(1, "dx", "k", body, properties=commands.Basic.Properties(
        headers={"x-delay": 3_600_000}, delivery_mode=2))


def test_a_durable_delayed_exchange_redeclared_before_the_commit_keeps_its_messages(
        tmp_path):
    data_dir = str(tmp_path)
    storage, client = _started(data_dir)
    _declare_durable_delayed(client)
    _hold_persistent(client, b"old")
    _commit(storage)                   # the first exchange's store is on disk
    client.method(1, commands.Exchange.Delete(exchange="dx"))
    _declare_durable_delayed(client)   # before the commit that drops the old files
    _hold_persistent(client, b"new")
    _commit(storage)
    storage.close(client.broker)
    storage, client = _started(data_dir)
    exchange = client.broker.vhosts["/"].exchanges["dx"]
    assert exchange.pending == 1
    (store_dir,) = os.listdir(os.path.join(data_dir, "delayed"))
    _, records, _ = QueueFile.recover(os.path.join(data_dir, "delayed", store_dir))
    assert [record.body for record in records] == [b"new"]
    storage.close(client.broker)


def test_an_older_generation_left_by_a_crash_is_not_recovered_and_is_removed(tmp_path):
    data_dir = str(tmp_path)
    storage, client = _started(data_dir)
    _declare_durable_delayed(client)
    _hold_persistent(client, b"current")
    _commit(storage)
    storage.close(client.broker)
    delayed_dir = os.path.join(data_dir, "delayed")
    (current,) = os.listdir(delayed_dir)
    prefix, _, generation = current.partition(".")
    older = os.path.join(delayed_dir, f"{prefix}.{int(generation) - 1}")
    shutil.copytree(os.path.join(delayed_dir, current), older)   # as if never dropped
    storage, client = _started(data_dir)
    assert client.broker.vhosts["/"].exchanges["dx"].pending == 1
    assert os.listdir(delayed_dir) == [current]
    storage.close(client.broker)


def test_holding_after_recovery_continues_above_every_seq_the_store_used(tmp_path):
    directory = str(tmp_path / "dx")
    store = durable_store(directory)
    properties = encode_properties(commands.Basic.Properties(
        delivery_mode=2, headers={"x-delay": 3_600_000}))
    store.append(1, 5000, Message("dx", "k", properties, b"held"))
    store.append(2, 4000, Message("dx", "k", properties, b"released"))
    store.remove(2, True)
    for _commit in range(3):    # the tombstone waits for two commits, the third writes it
        store.sync()
        store.synced()
    store.close()
    queue_file, records, _ = QueueFile.recover(directory, load_bodies=False)
    recovered = DurableDelayedStore(queue_file, Persistence(), "dx", _InlineReads(), "dx",
                                    True)
    exchange = DelayedExchange("dx", durable=True, arguments={"x-delayed-type": "direct"})
    exchange.attach(Broker().vhosts["/"], None)
    exchange.restore_pending(recovered, [held_index(record) for record in records])
    exchange.hold(Message("dx", "k", properties, b"new"), 100)    # seq 3, not 2
    assert exchange.pending == 2
