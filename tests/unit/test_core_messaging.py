"""Queues, consumers, acks, prefetch, requeue, confirms and transactions in the core."""

from pamqp import commands

from broker.core.broker import Broker
from broker.core.rabbitmq_lines import LINE_3_10, Profile

from core_harness import Client, close_code, deliveries, kinds


def consumer_client(prefetch=0, no_ack=False, queue="q"):
    client = Client()
    client.open_channel()
    client.declare_queue(1, queue)
    if prefetch:
        client.method(1, commands.Basic.Qos(prefetch_count=prefetch))
    client.method(1, commands.Basic.Consume(queue=queue, consumer_tag="c", no_ack=no_ack))
    return client


def publish_many(client, count, queue="q", channel=1):
    frames = []
    for index in range(count):
        frames += client.publish(channel, "", queue, str(index).encode())
    return frames


def test_messages_are_delivered_in_order_with_increasing_tags():
    client = consumer_client()
    got = deliveries(publish_many(client, 5))
    assert [body for _, body in got] == [b"0", b"1", b"2", b"3", b"4"]
    assert [deliver.delivery_tag for deliver, _ in got] == [1, 2, 3, 4, 5]


def test_prefetch_limits_unacked_deliveries_and_ack_releases_more():
    client = consumer_client(prefetch=2)
    got = deliveries(publish_many(client, 5))
    assert len(got) == 2
    got = deliveries(client.method(1, commands.Basic.Ack(delivery_tag=2, multiple=True)))
    assert [body for _, body in got] == [b"2", b"3"]


def test_global_prefetch_is_shared_by_the_channels_consumers():
    """As RabbitMQ 3.10 (and 4.0) apply it; 4.3 denies global qos (test_rabbitmq_lines)."""
    client = Client(Broker(profile=Profile(LINE_3_10)))
    client.open_channel()
    for name in ("a", "b"):
        client.declare_queue(1, name)
    client.method(1, commands.Basic.Qos(prefetch_count=3, global_=True))
    for name in ("a", "b"):
        client.method(1, commands.Basic.Consume(queue=name, consumer_tag=name))
    frames = publish_many(client, 3, "a") + publish_many(client, 3, "b")
    assert len(deliveries(frames)) == 3


def test_consumers_on_one_queue_are_served_round_robin():
    client = Client()
    client.open_channel()
    client.declare_queue(1, "q")
    for tag in ("x", "y"):
        client.method(1, commands.Basic.Consume(queue="q", consumer_tag=tag, no_ack=True))
    got = deliveries(publish_many(client, 4))
    assert [deliver.consumer_tag for deliver, _ in got] == ["x", "y", "x", "y"]


def test_nack_with_requeue_returns_to_the_head_redelivered():
    client = consumer_client(prefetch=1)
    publish_many(client, 3)
    replies = client.method(1, commands.Basic.Nack(delivery_tag=1, requeue=True))
    (deliver, body), = deliveries(replies)
    assert (body, deliver.redelivered) == (b"0", True)


def test_reject_without_requeue_drops_the_message():
    client = Client()
    client.open_channel()
    client.declare_queue(1, "q")
    client.publish(1, "", "q", b"m")
    client.method(1, commands.Basic.Get(queue="q"))
    client.method(1, commands.Basic.Reject(delivery_tag=1, requeue=False))
    assert client.broker.vhosts["/"].queues["q"].message_count == 0


def test_unknown_delivery_tag_closes_the_channel_with_406():
    client = consumer_client()
    assert close_code(client.method(1, commands.Basic.Ack(delivery_tag=7))) == 406
    client.method(1, commands.Channel.CloseOk())
    client.open_channel()


def test_double_ack_is_406():
    client = consumer_client()
    publish_many(client, 1)
    assert client.method(1, commands.Basic.Ack(delivery_tag=1)) == []
    assert close_code(client.method(1, commands.Basic.Ack(delivery_tag=1))) == 406


def test_multiple_ack_needs_the_named_tag_to_be_unacked():
    client = consumer_client()
    publish_many(client, 3)
    client.method(1, commands.Basic.Ack(delivery_tag=2))
    assert close_code(client.method(1, commands.Basic.Ack(delivery_tag=2,
                                                          multiple=True))) == 406


def test_closing_a_channel_requeues_its_unacked_messages_in_order():
    client = consumer_client()
    publish_many(client, 3)
    client.method(1, commands.Channel.Close())
    queue = client.broker.vhosts["/"].queues["q"]
    assert [entry.message.body for entry in queue.ready] == [b"0", b"1", b"2"]
    assert all(entry.redelivered for entry in queue.ready)


def test_get_reports_the_messages_left_behind():
    client = Client()
    client.open_channel()
    client.declare_queue(1, "q")
    publish_many(client, 3)
    (_, get_ok), _header, _body = client.method(1, commands.Basic.Get(queue="q", no_ack=True))
    assert get_ok.message_count == 2
    client.method(1, commands.Basic.Get(queue="q", no_ack=True))
    client.method(1, commands.Basic.Get(queue="q", no_ack=True))
    assert kinds(client.method(1, commands.Basic.Get(queue="q"))) == [
        (1, commands.Basic.GetEmpty)]


def test_recover_requeue_redelivers_unacked():
    client = consumer_client(prefetch=10)
    publish_many(client, 2)
    got = deliveries(client.method(1, commands.Basic.Recover(requeue=True)))
    assert [(body, deliver.redelivered) for deliver, body in got] == [
        (b"0", True), (b"1", True)]


def test_confirms_are_coalesced_into_one_multiple_ack_per_batch():
    client = Client()
    client.open_channel()
    client.declare_queue(1, "q")
    client.method(1, commands.Confirm.Select())
    from amqp_codec import InboundPublish, encode_properties
    raw = encode_properties(commands.Basic.Properties())
    for index in range(3):
        client.connection.handle(InboundPublish(1, "", "q", False, False, raw, b"x"))
    client.connection.end_of_batch()
    (_, ack), = client.transport.methods()
    assert (ack.delivery_tag, ack.multiple) == (3, True)


def test_confirms_count_from_confirm_select_after_earlier_publishes():
    """Publishes before Confirm.Select are not confirmed; the first one after it is
    delivery tag 1, as the spec and RabbitMQ number them (a nack keeps that numbering)."""
    client = Client()
    client.open_channel()
    client.declare_queue(1, "q", arguments={"x-max-length": 3,
                                            "x-overflow": "reject-publish"})
    for _ in range(2):
        client.publish(1, "", "q", b"before")
    client.method(1, commands.Confirm.Select())
    frames = [frame for _, frame in client.publish(1, "", "q", b"first")]
    assert [(type(f), f.delivery_tag) for f in frames
            if isinstance(f, (commands.Basic.Ack, commands.Basic.Nack))] == [
        (commands.Basic.Ack, 1)]
    frames = [frame for _, frame in client.publish(1, "", "q", b"refused: full")]
    assert [(type(f), f.delivery_tag) for f in frames
            if isinstance(f, (commands.Basic.Ack, commands.Basic.Nack))] == [
        (commands.Basic.Nack, 2)]


def test_mandatory_unroutable_is_returned_before_its_confirm():
    client = Client()
    client.open_channel()
    client.method(1, commands.Confirm.Select())
    frames = client.publish(1, "", "nowhere", b"x", mandatory=True)
    methods = [frame for _, frame in frames if isinstance(frame, (
        commands.Basic.Return, commands.Basic.Ack))]
    assert [type(frame) for frame in methods] == [commands.Basic.Return, commands.Basic.Ack]
    assert methods[0].reply_code == 312


def test_tx_publishes_and_acks_take_effect_at_commit_only():
    client = Client()
    client.open_channel()
    client.declare_queue(1, "q")
    client.method(1, commands.Tx.Select())
    client.publish(1, "", "q", b"m")
    queue = client.broker.vhosts["/"].queues["q"]
    assert queue.message_count == 0
    client.method(1, commands.Tx.Commit())
    assert queue.message_count == 1
    client.publish(1, "", "q", b"n")
    client.method(1, commands.Tx.Rollback())
    assert queue.message_count == 1


def test_tx_rollback_keeps_acked_messages_unacked():
    client = Client()
    client.open_channel()
    client.declare_queue(1, "q")
    client.publish(1, "", "q", b"m")
    client.method(1, commands.Tx.Select())
    client.method(1, commands.Basic.Get(queue="q"))
    client.method(1, commands.Basic.Ack(delivery_tag=1))
    client.method(1, commands.Tx.Rollback())
    client.method(1, commands.Basic.Ack(delivery_tag=1))
    assert kinds(client.method(1, commands.Tx.Commit())) == [(1, commands.Tx.CommitOk)]


def test_closing_a_tx_channel_requeues_what_it_acked_and_rejected_uncommitted():
    """As RabbitMQ: the close rolls the transaction back, so the messages its
    uncommitted acks and rejects named come back, redelivered, in order."""
    client = Client()
    client.open_channel()
    client.declare_queue(1, "q")
    for body in (b"a", b"b", b"c"):
        client.publish(1, "", "q", body)
    client.open_channel(2)
    client.method(2, commands.Tx.Select())
    for _ in range(3):
        client.method(2, commands.Basic.Get(queue="q"))
    client.method(2, commands.Basic.Ack(delivery_tag=1))
    client.method(2, commands.Basic.Reject(delivery_tag=2, requeue=False))
    client.method(2, commands.Channel.Close(reply_code=200, reply_text="bye"))
    got = []
    for _ in range(3):
        get_ok, _, body = client.method(1, commands.Basic.Get(queue="q", no_ack=True))
        got.append((get_ok[1].redelivered, body[1].value))
    assert got == [(True, b"a"), (True, b"b"), (True, b"c")]


def test_commit_without_select_is_406():
    client = Client()
    client.open_channel()
    assert close_code(client.method(1, commands.Tx.Commit())) == 406


def test_confirm_on_a_tx_channel_is_406():
    client = Client()
    client.open_channel()
    client.method(1, commands.Tx.Select())
    assert close_code(client.method(1, commands.Confirm.Select())) == 406


def test_exclusive_queue_is_locked_to_its_connection_and_dies_with_it():
    owner = Client()
    owner.open_channel()
    owner.declare_queue(1, "mine", exclusive=True)
    other = Client(owner.broker)
    other.open_channel()
    assert close_code(other.method(1, commands.Queue.Declare(queue="mine", passive=True))) == 405
    owner.connection.lost()
    assert "mine" not in owner.broker.vhosts["/"].queues


def test_auto_delete_queue_goes_with_its_last_consumer():
    client = Client()
    client.open_channel()
    client.declare_queue(1, "ad", auto_delete=True)
    client.method(1, commands.Basic.Consume(queue="ad", consumer_tag="c"))
    client.method(1, commands.Basic.Cancel(consumer_tag="c"))
    assert "ad" not in client.broker.vhosts["/"].queues


def test_deleting_a_consumed_queue_cancels_its_consumers():
    owner = consumer_client()
    other = Client(owner.broker)
    other.open_channel()
    other.method(1, commands.Queue.Delete(queue="q"))
    cancels = [frame for _, frame in owner.transport.methods()
               if isinstance(frame, commands.Basic.Cancel)]
    assert [frame.consumer_tag for frame in cancels] == ["c"]


def test_backpressure_stops_and_resumes_delivery():
    client = consumer_client(no_ack=True)
    client.transport.writable = False
    publish_many(client, 3)
    assert deliveries(client.transport.frames()) == []
    client.transport.writable = True
    client.connection.drained()
    assert len(deliveries(client.transport.frames())) == 3


def test_channel_flow_active_false_is_refused_with_540_as_rabbitmq_does():
    client = consumer_client(no_ack=True)
    assert close_code(client.method(1, commands.Channel.Flow(active=False))) == 540


def test_max_length_drop_head_keeps_the_newest_messages():
    client = Client()
    client.open_channel()
    client.declare_queue(1, "q", arguments={"x-max-length": 2})
    publish_many(client, 5)
    queue = client.broker.vhosts["/"].queues["q"]
    assert [entry.message.body for entry in queue.ready] == [b"3", b"4"]


def test_reject_publish_overflow_nacks_refused_messages_in_sequence():
    client = Client()
    client.open_channel()
    client.declare_queue(1, "q", arguments={"x-max-length": 2,
                                            "x-overflow": "reject-publish"})
    client.method(1, commands.Confirm.Select())
    from amqp_codec import InboundPublish, encode_properties
    raw = encode_properties(commands.Basic.Properties())
    for _ in range(4):
        client.connection.handle(InboundPublish(1, "", "q", False, False, raw, b"x"))
    client.connection.end_of_batch()
    confirms = [(type(frame).__name__, frame.delivery_tag, frame.multiple)
                for _, frame in client.transport.methods()]
    assert confirms == [("Ack", 2, True), ("Nack", 3, False), ("Nack", 4, False)]


def test_invalid_queue_arguments_are_406():
    client = Client()
    client.open_channel()
    for arguments in ({"x-max-length": -1}, {"x-overflow": "sideways"},
                      {"x-message-ttl": "soon"}, {"x-queue-type": "stream"}):
        replies = client.method(1, commands.Queue.Declare(queue="bad", arguments=arguments))
        assert close_code(replies) == 406
        client.method(1, commands.Channel.CloseOk())
        client.open_channel()


def test_higher_priority_consumers_are_served_first_until_blocked():
    client = Client()
    for channel in (1, 2):
        client.open_channel(channel)
    client.declare_queue(1, "q")
    client.method(2, commands.Basic.Qos(prefetch_count=2))
    client.method(2, commands.Basic.Consume(queue="q", consumer_tag="high",
                                            arguments={"x-priority": 10}))
    client.method(1, commands.Basic.Consume(queue="q", consumer_tag="low", no_ack=True))
    got = deliveries(publish_many(client, 4))
    assert [deliver.consumer_tag for deliver, _ in got] == ["high", "high", "low", "low"]


def test_a_direct_exchange_routes_by_its_bindings_as_they_change():
    """Two bindings of one queue with one key (other arguments) route it once; the
    route follows binds and unbinds, and a queue bound by another key is not reached."""
    client = Client()
    client.open_channel()
    for name in ("a", "b"):
        client.declare_queue(1, name)
    vhost = client.broker.vhosts["/"]

    def bind(queue, key, arguments, unbind=False):
        method = commands.Queue.Unbind if unbind else commands.Queue.Bind
        client.method(1, method(queue=queue, exchange="amq.direct", routing_key=key,
                                arguments=arguments))

    def publish_and_count():
        client.publish(1, "amq.direct", "k", b"m")
        return {name: vhost.queues[name].backlog for name in ("a", "b")}

    bind("a", "k", {})
    bind("a", "k", {"x": 1})
    bind("b", "other", {})
    assert publish_and_count() == {"a": 1, "b": 0}
    bind("b", "k", {})
    assert publish_and_count() == {"a": 2, "b": 1}
    bind("a", "k", {}, unbind=True)
    assert publish_and_count() == {"a": 3, "b": 2}
    bind("a", "k", {"x": 1}, unbind=True)
    bind("b", "k", {}, unbind=True)
    assert publish_and_count() == {"a": 3, "b": 2}
