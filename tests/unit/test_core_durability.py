"""Replies that promise durability wait for the commit that covers them, and
everything the connection sends after them waits behind them."""

from pamqp import commands

from amqp_codec import InboundMethod, InboundPublish, encode_properties
from amqp_codec.properties import delivery_mode
from broker.core.broker import Broker
from broker.core.persistence import Persistence
from broker.core.ports import SaveBinding, SaveQueue
from core_harness import Client, kinds


class RecordingStore:
    """A durable store that counts a write for each persistent message."""

    def __init__(self, persistence: Persistence):
        self.persistence = persistence
        self.store_id = "s"
        self.appended = []

    def append(self, entry) -> None:
        if delivery_mode(entry.message.properties) == 2:
            self.appended.append(entry.seq)
            self.persistence.store_written(self)

    def settle(self, entry) -> None:
        pass

    def drop(self) -> None:
        pass

    def synced(self) -> None:
        pass


def durable_client(store_class=None):
    persistence = Persistence()
    store_class = store_class or RecordingStore
    persistence.store_factory = lambda vhost, queue: store_class(persistence)
    client = Client(Broker(persistence=persistence))
    client.open_channel()
    return client, persistence


def commit(persistence: Persistence) -> None:
    """What the server's committer does once the pending writes are on disk."""
    _, stores, writes = persistence.take_pending()
    persistence.committed(stores, writes)


def handle(client, channel, method):
    client.connection.handle(InboundMethod(channel, method))
    return client.transport.frames()


def test_durable_declare_ok_is_held_until_the_commit():
    client, persistence = durable_client()
    assert handle(client, 1, commands.Queue.Declare(queue="d", durable=True)) == []
    assert client.connection.needs_sync
    client.connection.end_of_batch()
    assert client.transport.frames() == []
    changes, _, writes = persistence.take_pending()
    assert [type(change) for change in changes] == [SaveQueue]
    persistence.committed([], writes)
    assert kinds(client.transport.frames()) == [(1, commands.Queue.DeclareOk)]


def test_transient_declare_ok_is_sent_at_once():
    client, _ = durable_client()
    replies = handle(client, 1, commands.Queue.Declare(queue="t"))
    assert kinds(replies) == [(1, commands.Queue.DeclareOk)]
    assert not client.connection.needs_sync


def publish(client, queue, mode):
    raw = encode_properties(commands.Basic.Properties(delivery_mode=mode))
    client.connection.handle(InboundPublish(1, "", queue, False, False, raw, b"m"))


def test_confirm_of_a_persistent_message_on_a_durable_queue_waits_for_sync():
    client, persistence = durable_client()
    client.declare_queue(1, "d", durable=True)
    client.method(1, commands.Confirm.Select())
    publish(client, "d", 1)
    assert not client.connection.needs_sync
    publish(client, "d", 2)
    assert client.connection.needs_sync
    client.connection.end_of_batch()
    assert client.transport.frames() == []
    _, stores, writes = persistence.take_pending()
    assert stores    # the queue's store is dirty
    persistence.committed(stores, writes)
    (_, ack), = client.transport.methods()
    assert (ack.delivery_tag, ack.multiple) == (2, True)


def test_durable_bindings_are_recorded_and_transient_ones_are_not():
    client, persistence = durable_client()
    client.method(1, commands.Exchange.Declare(exchange="dx", exchange_type="direct",
                                               durable=True))
    client.declare_queue(1, "d", durable=True)
    client.declare_queue(1, "t")
    persistence.take_pending()
    client.method(1, commands.Queue.Bind(queue="d", exchange="dx", routing_key="k"))
    client.method(1, commands.Queue.Bind(queue="t", exchange="dx", routing_key="k"))
    changes, _, _ = persistence.take_pending()
    assert [(type(change), change.destination) for change in changes] == [
        (SaveBinding, "d")]


def test_replies_after_a_held_one_wait_behind_it():
    client, _ = durable_client()
    handle(client, 1, commands.Queue.Declare(queue="d", durable=True))
    assert handle(client, 1, commands.Basic.Qos(prefetch_count=5)) == []
    client.connection.end_of_batch()
    commit(client.broker.persistence)
    assert kinds(client.transport.frames()) == [(1, commands.Queue.DeclareOk),
                                                (1, commands.Basic.QosOk)]


class AckRecordingStore(RecordingStore):
    """Also records acks, which the next commit flushes (store_touched)."""

    def settle(self, entry) -> None:
        self.persistence.store_touched(self)

    def delivered(self, entry) -> None:
        pass


def test_tx_commit_of_acks_waits_until_the_acks_are_on_disk():
    client, persistence = durable_client(AckRecordingStore)
    client.declare_queue(1, "d", durable=True)
    publish(client, "d", 2)
    client.connection.end_of_batch()
    commit(persistence)
    client.method(1, commands.Tx.Select())
    (_, get_ok), _, _ = client.method(1, commands.Basic.Get(queue="d"))
    handle(client, 1, commands.Basic.Ack(delivery_tag=get_ok.delivery_tag))
    assert handle(client, 1, commands.Tx.Commit()) == []
    assert client.connection.needs_sync
    client.connection.end_of_batch()
    assert client.transport.frames() == []
    _, stores, writes = persistence.take_pending()
    assert stores    # the ack is in the commit CommitOk waits for
    persistence.committed(stores, writes)
    assert kinds(client.transport.frames()) == [(1, commands.Tx.CommitOk)]


def test_the_next_reads_are_handled_while_a_commit_runs_and_released_in_order():
    """Batch 1's confirm waits for its commit; batch 2 (a transient publish) is handled
    at once, but its confirm cannot overtake batch 1's: a multiple ack would confirm
    the persistent message too early."""
    client, persistence = durable_client()
    client.declare_queue(1, "d", durable=True)
    client.method(1, commands.Confirm.Select())
    publish(client, "d", 2)
    client.connection.end_of_batch()
    _, stores, first_commit = persistence.take_pending()     # the commit starts
    publish(client, "d", 1)
    client.connection.end_of_batch()
    assert client.transport.frames() == []
    publish(client, "d", 2)
    client.connection.end_of_batch()
    persistence.committed(stores, first_commit)
    assert [(ack.delivery_tag, ack.multiple) for _, ack in client.transport.methods()] \
        == [(1, False), (2, False)]
    commit(persistence)
    assert [(ack.delivery_tag, ack.multiple) for _, ack in client.transport.methods()] \
        == [(3, False)]


def test_a_server_close_waits_behind_held_replies():
    client, persistence = durable_client()
    handle(client, 1, commands.Queue.Declare(queue="d", durable=True))
    client.connection.close(541, "INTERNAL_ERROR - test")
    client.connection.input_ended()
    assert client.transport.frames() == [] and not client.transport.closed
    commit(persistence)
    assert kinds(client.transport.frames()) == [(1, commands.Queue.DeclareOk),
                                                (0, commands.Connection.Close)]
    assert client.transport.closed


def test_a_client_close_gets_its_confirms_and_close_ok_before_the_socket_closes():
    client, persistence = durable_client()
    client.declare_queue(1, "d", durable=True)
    client.method(1, commands.Confirm.Select())
    publish(client, "d", 2)
    client.connection.handle(InboundMethod(0, commands.Connection.Close()))
    client.connection.end_of_batch()
    assert client.transport.frames() == [] and not client.transport.closed
    commit(persistence)
    assert kinds(client.transport.frames()) == [(1, commands.Basic.Ack),
                                                (0, commands.Connection.CloseOk)]
    assert client.transport.closed


# -- a failed commit (a full disk) ---------------------------------------------------------

def fail_commit(persistence: Persistence, reason: str = "No space left on device"):
    """What the committer does when the commit of the pending writes failed."""
    changes, stores, writes = persistence.take_pending()
    persistence.failed(changes, stores, writes, reason)


def test_confirms_of_a_failed_commit_are_nacks_and_later_ones_acks():
    client, persistence = durable_client()
    client.declare_queue(1, "d", durable=True)
    client.method(1, commands.Confirm.Select())
    publish(client, "d", 2)
    publish(client, "d", 2)
    client.connection.end_of_batch()
    fail_commit(persistence)
    (_, nack), = client.transport.methods()
    assert isinstance(nack, commands.Basic.Nack)
    assert (nack.delivery_tag, nack.multiple) == (2, True)
    assert persistence.has_pending()        # the failed store is committed again
    publish(client, "d", 2)
    client.connection.end_of_batch()
    commit(persistence)
    (_, ack), = client.transport.methods()
    assert isinstance(ack, commands.Basic.Ack) and ack.delivery_tag == 3
    assert 1 in client.connection.channels


def test_a_failed_commit_refuses_a_durable_declare_and_closes_only_its_channel():
    client, persistence = durable_client()
    client.open_channel(2)
    handle(client, 1, commands.Queue.Declare(queue="d", durable=True))
    handle(client, 1, commands.Basic.Qos(prefetch_count=5))     # behind it, channel 1
    handle(client, 2, commands.Basic.Qos(prefetch_count=5))     # another channel
    client.connection.end_of_batch()
    fail_commit(persistence)
    replies = client.transport.methods()
    assert kinds(replies) == [(1, commands.Channel.Close), (2, commands.Basic.QosOk)]
    close = replies[0][1]
    assert (close.reply_code, close.class_id, close.method_id) == (406, 50, 10)
    assert "disk" in close.reply_text and "No space left on device" in close.reply_text
    assert 1 not in client.connection.channels and 2 in client.connection.channels
    assert [type(c) for c in persistence.take_pending()[0]] == [SaveQueue]
    assert handle(client, 1, commands.Channel.CloseOk()) == []
    client.open_channel(1)                  # the number can be used again


def test_output_held_behind_a_failed_commit_skips_the_refused_channel():
    client, persistence = durable_client()
    client.open_channel(2)
    handle(client, 1, commands.Queue.Declare(queue="d", durable=True))
    client.connection.end_of_batch()
    _, stores, first = persistence.take_pending()       # the commit that will fail
    handle(client, 1, commands.Basic.Qos(prefetch_count=5))
    handle(client, 2, commands.Basic.Qos(prefetch_count=5))
    client.connection.end_of_batch()
    persistence.failed([], stores, first, "No space left on device")
    assert kinds(client.transport.methods()) == [(1, commands.Channel.Close),
                                                 (2, commands.Basic.QosOk)]


def test_a_tx_commit_whose_commit_failed_is_refused_as_rabbitmq_does():
    client, persistence = durable_client(AckRecordingStore)
    client.declare_queue(1, "d", durable=True)
    client.method(1, commands.Tx.Select())
    publish(client, "d", 2)
    handle(client, 1, commands.Tx.Commit())
    client.connection.end_of_batch()
    fail_commit(persistence)
    (_, close), = client.transport.methods()
    assert (close.reply_code, close.class_id, close.method_id) == (406, 90, 20)
    assert close.reply_text.startswith("PRECONDITION_FAILED - partial tx completion")
