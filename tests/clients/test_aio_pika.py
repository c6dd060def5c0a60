"""aio-pika (asyncio, on aiormq) against the broker: the calls an asyncio service makes.

Each test is a plain function that runs one coroutine with `asyncio.run`, bounded by
`TEST_TIMEOUT` (no pytest-asyncio). Each test has a vhost and user of its
own (the `warren` fixture; on Warren, or on the broker named by WARREN_TEST_BROKER),
removed with what it holds at teardown; names are still unique (uuid), and everything a
test declares is exclusive or auto-delete, or deleted before the test ends.

aio-pika's defaults matter here: channels put the broker in confirm mode
(`publisher_confirms=True`), so `exchange.publish` awaits the broker's Basic.Ack, and
publishes are `mandatory=True`, so an unroutable message comes back as Basic.Return.
"""

import asyncio
import datetime
import uuid

import aio_pika
import aio_pika.exceptions
import aiormq
import pytest
from aio_pika import DeliveryMode, ExchangeType, Message

# Upper bound for one wait on the broker (a delivery, a queue count).
WAIT = 5.0
# Wall-clock limit of one test.
TEST_TIMEOUT = 30.0


def unique(prefix: str = "t") -> str:
    return f"aio-{prefix}-{uuid.uuid4().hex}"


def run(test_coroutine, warren, timeout: float = TEST_TIMEOUT):
    """Run `test_coroutine(connection)` on a fresh robust connection, within `timeout`."""

    async def main():
        connection = await aio_pika.connect_robust(warren.aio_pika_url, timeout=WAIT)
        try:
            return await test_coroutine(connection)
        finally:
            await connection.close()

    async def bounded():
        return await asyncio.wait_for(main(), timeout)

    return asyncio.run(bounded())


async def next_message(iterator, timeout: float = WAIT):
    return await asyncio.wait_for(iterator.__anext__(), timeout)


async def ready_count(queue) -> int:
    """The ready count of Queue.DeclareOk for a passive declare of `queue`, sent on the
    underlying aiormq channel (a robust channel answers passive declares of queues it
    knows from its cache, without asking the broker)."""
    underlay = await queue.channel.get_underlay_channel()
    result = await underlay.queue_declare(queue.name, passive=True)
    return result.message_count


async def wait_for_count(queue, expected: int, timeout: float = WAIT) -> int:
    """Poll `ready_count(queue)` until it equals `expected` or `timeout` passes; returns
    the last count (callers assert on it). RabbitMQ's counts may lag behind publishes
    and acks made just before, so a single read is not enough."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        count = await ready_count(queue)
        if count == expected or loop.time() >= deadline:
            return count
        await asyncio.sleep(0.01)  # poll interval of a bounded wait


async def exclusive_queue(channel):
    return await channel.declare_queue("", exclusive=True)


def test_connect_robust_opens_channels(warren):
    async def body(connection):
        assert not connection.is_closed
        first = await connection.channel()
        second = await connection.channel()
        assert not first.is_closed and not second.is_closed
        assert first.number != second.number
        server = connection.transport.connection.server_properties
        assert "capabilities" in server
        assert server["capabilities"].get("publisher_confirms") is True
        await second.close()
        assert second.is_closed
        # The remaining channel still works. (A robust channel names an unnamed queue
        # itself, so it can redeclare it after a reconnect.)
        queue = await exclusive_queue(first)
        assert queue.name
        assert await wait_for_count(queue, 0) == 0

    run(body, warren)


def test_topic_exchange_routes_with_properties(warren):
    async def body(connection):
        channel = await connection.channel()
        exchange = await channel.declare_exchange(unique("orders"), ExchangeType.TOPIC,
                                                  auto_delete=True)
        queue = await channel.declare_queue(unique("created"), exclusive=True)
        await queue.bind(exchange, routing_key="orders.*.created")
        await queue.bind(exchange, routing_key="audit.#")

        correlation_id = uuid.uuid4().hex
        timestamp = datetime.datetime(2024, 5, 17, 12, 30, 15, tzinfo=datetime.timezone.utc)
        headers = {"tenant": "acme", "attempt": 3, "urgent": True,
                   "nested": {"region": "eu", "ids": [1, 2, 3]}}
        sent = Message(
            b'{"order": 42}', headers=headers, content_type="application/json",
            content_encoding="utf-8", correlation_id=correlation_id,
            delivery_mode=DeliveryMode.PERSISTENT, message_id="m-1", reply_to="replies",
            priority=5, type="order.created", app_id="aio-test", timestamp=timestamp,
            expiration=60, user_id=warren.user)
        confirm = await exchange.publish(sent, routing_key="orders.eu.created")
        assert isinstance(confirm, aiormq.spec.Basic.Ack)
        # Not matching either binding: aio-pika publishes mandatory, so it comes back.
        returned = await exchange.publish(Message(b"ignored"), routing_key="orders.eu.deleted")
        assert not isinstance(returned, aiormq.spec.Basic.Ack)
        await exchange.publish(Message(b"audit"), routing_key="audit.orders.x.y")

        async with queue.iterator() as iterator:
            message = await next_message(iterator)
            assert message.body == b'{"order": 42}'
            assert message.routing_key == "orders.eu.created"
            assert message.exchange == exchange.name
            assert message.redelivered is False
            assert message.headers == headers
            assert message.content_type == "application/json"
            assert message.content_encoding == "utf-8"
            assert message.correlation_id == correlation_id
            assert message.delivery_mode == DeliveryMode.PERSISTENT
            assert message.message_id == "m-1"
            assert message.reply_to == "replies"
            assert message.priority == 5
            assert message.type == "order.created"
            assert message.app_id == "aio-test"
            assert message.timestamp == timestamp
            assert message.expiration == 60  # sent as "60000" (milliseconds)
            assert message.user_id == warren.user
            await message.ack()

            audit = await next_message(iterator)
            assert (audit.body, audit.routing_key) == (b"audit", "audit.orders.x.y")
            assert audit.delivery_mode == DeliveryMode.NOT_PERSISTENT
            await audit.ack()
        assert await wait_for_count(queue, 0) == 0
        await queue.unbind(exchange, routing_key="audit.#")
        returned = await exchange.publish(Message(b"x"), routing_key="audit.again")
        assert not isinstance(returned, aiormq.spec.Basic.Ack)

    run(body, warren)


def test_iterator_receives_messages_in_order_and_ack(warren):
    async def body(connection):
        channel = await connection.channel()
        queue = await exclusive_queue(channel)
        for n in range(10):
            await channel.default_exchange.publish(Message(str(n).encode()), queue.name)
        received = []
        async with queue.iterator() as iterator:
            async for message in iterator:
                received.append(int(message.body))
                await message.ack()
                if len(received) == 10:
                    break
        assert received == list(range(10))
        assert await wait_for_count(queue, 0) == 0

    run(body, warren)


def test_nack_with_requeue_redelivers_with_redelivered_flag(warren):
    async def body(connection):
        channel = await connection.channel()
        queue = await exclusive_queue(channel)
        await channel.default_exchange.publish(Message(b"again"), queue.name)
        async with queue.iterator() as iterator:
            first = await next_message(iterator)
            assert (first.body, first.redelivered) == (b"again", False)
            await first.nack(requeue=True)
            second = await next_message(iterator)
            assert (second.body, second.redelivered) == (b"again", True)
            assert second.delivery_tag != first.delivery_tag
            await second.ack()
        assert await wait_for_count(queue, 0) == 0

    run(body, warren)


def test_nack_without_requeue_and_reject_drop_the_message(warren):
    async def body(connection):
        channel = await connection.channel()
        queue = await exclusive_queue(channel)
        for text in (b"nacked", b"rejected", b"requeued", b"kept"):
            await channel.default_exchange.publish(Message(text), queue.name)
        async with queue.iterator() as iterator:
            nacked = await next_message(iterator)
            await nacked.nack(requeue=False)
            rejected = await next_message(iterator)
            await rejected.reject()  # requeue=False by default
            requeued = await next_message(iterator)
            await requeued.reject(requeue=True)
            kept = await next_message(iterator)
            await kept.ack()
            again = await next_message(iterator)
            assert (again.body, again.redelivered) == (b"requeued", True)
            await again.ack()
        assert [m.body for m in (nacked, rejected, requeued, kept)] == [
            b"nacked", b"rejected", b"requeued", b"kept"]
        # Nothing else is left: the nacked and rejected messages are gone.
        assert await wait_for_count(queue, 0) == 0
        assert await queue.get(fail=False) is None

    run(body, warren)


def test_message_process_context_acks_or_rejects(warren):
    async def body(connection):
        channel = await connection.channel()
        queue = await exclusive_queue(channel)
        await channel.default_exchange.publish(Message(b"ok"), queue.name)
        await channel.default_exchange.publish(Message(b"fails"), queue.name)
        async with queue.iterator() as iterator:
            message = await next_message(iterator)
            async with message.process():
                assert message.body == b"ok"
            failing = await next_message(iterator)
            with pytest.raises(ValueError):
                async with failing.process(requeue=True):
                    raise ValueError("handler failed")
            retried = await next_message(iterator)
            assert (retried.body, retried.redelivered) == (b"fails", True)
            async with retried.process():
                pass
        assert await wait_for_count(queue, 0) == 0

    run(body, warren)


def test_publisher_confirms_ack_every_publish(warren):
    async def body(connection):
        channel = await connection.channel()  # publisher_confirms=True by default
        queue = await exclusive_queue(channel)
        confirms = await asyncio.gather(*(
            channel.default_exchange.publish(Message(f"m{n}".encode()), queue.name)
            for n in range(50)))
        assert all(isinstance(c, aiormq.spec.Basic.Ack) for c in confirms)
        # The broker may confirm several publishes with one multiple=True ack.
        assert max(c.delivery_tag for c in confirms) == 50
        # Confirmed messages are in the queue.
        assert await wait_for_count(queue, 50) == 50
        message = await queue.get()
        assert message.body == b"m0"
        await message.ack()

    run(body, warren)


def test_mandatory_unroutable_publish_is_returned(warren):
    async def body(connection):
        exchange_name = unique("direct")
        channel = await connection.channel()
        returned_messages = []
        channel.return_callbacks.add(lambda _channel, message: returned_messages.append(message))
        exchange = await channel.declare_exchange(exchange_name, ExchangeType.DIRECT,
                                                  auto_delete=True)
        keep = await exclusive_queue(channel)
        await keep.bind(exchange, "routed")
        result = await exchange.publish(Message(b"lost", message_id="lost-1"), "nowhere")
        assert not isinstance(result, aiormq.spec.Basic.Ack)
        assert len(returned_messages) == 1
        assert returned_messages[0].body == b"lost"
        # A routed publish on the same channel is still acked.
        assert isinstance(await exchange.publish(Message(b"ok"), "routed"),
                          aiormq.spec.Basic.Ack)
        # mandatory=False: silently dropped, but still confirmed.
        assert isinstance(await exchange.publish(Message(b"drop"), "nowhere", mandatory=False),
                          aiormq.spec.Basic.Ack)

        raising = await connection.channel(on_return_raises=True)
        raising_exchange = await raising.get_exchange(exchange_name)
        with pytest.raises(aio_pika.exceptions.PublishError) as info:
            await raising_exchange.publish(Message(b"lost", message_id="lost-2"), "nowhere")
        frame = info.value.frame
        assert isinstance(frame, aiormq.spec.Basic.Return)
        assert (frame.reply_code, frame.reply_text) == (312, "NO_ROUTE")
        assert (frame.exchange, frame.routing_key) == (exchange_name, "nowhere")
        # The channel stays usable after the return.
        assert isinstance(await raising_exchange.publish(Message(b"ok2"), "routed"),
                          aiormq.spec.Basic.Ack)
        assert await wait_for_count(keep, 2) == 2
        assert [(await keep.get(no_ack=True)).body for _ in range(2)] == [b"ok", b"ok2"]

    run(body, warren)


def test_set_qos_prefetch_limits_unacked_deliveries(warren):
    async def body(connection):
        channel = await connection.channel()
        observer = await connection.channel()
        queue = await exclusive_queue(channel)
        for n in range(6):
            await channel.default_exchange.publish(Message(str(n).encode()), queue.name)
        await channel.set_qos(prefetch_count=2)
        watched = await observer.get_queue(queue.name)
        received = []
        arrived = asyncio.Condition()

        async def on_message(message):
            async with arrived:
                received.append(message)
                arrived.notify_all()

        async def wait_received(count):
            async with arrived:
                await asyncio.wait_for(arrived.wait_for(lambda: len(received) >= count), WAIT)

        tag = await queue.consume(on_message)
        await wait_received(2)
        # The broker holds back the other four while two are unacked.
        assert await wait_for_count(watched, 4) == 4
        assert await wait_for_count(watched, 4) == 4
        assert len(received) == 2
        await received[0].ack()
        await wait_received(3)
        assert await wait_for_count(watched, 3) == 3
        assert len(received) == 3
        for message in received[1:]:
            await message.ack()
        await wait_received(5)
        for message in received[3:5]:
            await message.ack()
        await wait_received(6)
        await received[5].ack()
        assert [int(m.body) for m in received] == list(range(6))
        await queue.cancel(tag)
        assert await wait_for_count(watched, 0) == 0

    run(body, warren)


def test_queue_get_purge_and_delete(warren):
    async def body(connection):
        channel = await connection.channel()
        name = unique("get")
        queue = await channel.declare_queue(name, durable=False, auto_delete=False)
        try:
            with pytest.raises(aio_pika.exceptions.QueueEmpty):
                await queue.get()
            assert await queue.get(fail=False) is None
            for text in (b"one", b"two", b"three", b"four"):
                await channel.default_exchange.publish(
                    Message(text, content_type="text/plain"), name)
            assert await wait_for_count(queue, 4) == 4
            first = await queue.get()
            assert (first.body, first.content_type, first.redelivered) == (
                b"one", "text/plain", False)
            assert first.message_count == 3
            await first.ack()
            second = await queue.get(no_ack=True)
            assert second.body == b"two"
            third = await queue.get()
            await third.nack(requeue=True)
            again = await queue.get()
            assert (again.body, again.redelivered) == (b"three", True)
            await again.ack()
            purged = await queue.purge()
            assert purged.message_count == 1
            assert await queue.get(fail=False) is None
        finally:
            deleted = await queue.delete(if_unused=False, if_empty=False)
        assert deleted.message_count == 0
        check = await connection.channel()
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            await check.declare_queue(name, passive=True)

    run(body, warren)


def test_passive_declare_of_missing_queue_closes_only_that_channel(warren):
    async def body(connection):
        channel = await connection.channel()
        survivor = await connection.channel()
        queue = await exclusive_queue(survivor)
        missing = unique("missing")
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity) as info:
            await channel.declare_queue(missing, passive=True)
        assert "NOT_FOUND" in str(info.value)
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            await (await connection.channel()).get_exchange(unique("missing"), ensure=True)
        # The connection and the other channel are untouched; a new channel works.
        assert not connection.is_closed
        fresh = await connection.channel()
        await fresh.default_exchange.publish(Message(b"after"), queue.name)
        assert await wait_for_count(queue, 1) == 1
        message = await queue.get()
        assert message.body == b"after"
        await message.ack()
        # The exclusive queue of this connection is still declared.
        redeclared = await fresh.declare_queue(queue.name, passive=True)
        assert redeclared.name == queue.name

    run(body, warren)


def test_precondition_failed_on_redeclare_with_other_type(warren):
    async def body(connection):
        name = unique("typed")
        channel = await connection.channel()
        exchange = await channel.declare_exchange(name, ExchangeType.FANOUT, auto_delete=True)
        other = await connection.channel()
        with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed):
            await other.declare_exchange(name, ExchangeType.DIRECT, auto_delete=True)
        await exchange.delete()
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            await (await connection.channel()).get_exchange(name, ensure=True)

    run(body, warren)


def test_transaction_commit_and_rollback(warren):
    async def body(connection):
        channel = await connection.channel(publisher_confirms=False)
        observer = await connection.channel()
        queue = await exclusive_queue(observer)
        transaction = channel.transaction()
        await transaction.select()
        await channel.default_exchange.publish(Message(b"rolled back"), queue.name)
        await transaction.rollback()
        await channel.default_exchange.publish(Message(b"committed"), queue.name)
        await transaction.commit()
        assert await wait_for_count(queue, 1) == 1
        message = await queue.get(no_ack=True)
        assert message.body == b"committed"

        async with channel.transaction():
            await channel.default_exchange.publish(Message(b"in context"), queue.name)
        assert await wait_for_count(queue, 1) == 1
        assert (await queue.get(no_ack=True)).body == b"in context"

        with pytest.raises(RuntimeError):  # confirm-mode channels refuse transactions
            observer.transaction()

    run(body, warren)


def test_transactional_acks_apply_on_commit_only(warren):
    async def body(connection):
        channel = await connection.channel(publisher_confirms=False)
        observer = await connection.channel()
        queue = await exclusive_queue(observer)
        await observer.default_exchange.publish(Message(b"a"), queue.name)
        await observer.default_exchange.publish(Message(b"b"), queue.name)
        consuming = await channel.get_queue(queue.name)
        transaction = channel.transaction()
        await transaction.select()
        first, second = await consuming.get(), await consuming.get()
        await first.ack()
        await second.ack()
        await transaction.rollback()  # both acks discarded: still unacked
        underlay = await channel.get_underlay_channel()
        await underlay.basic_ack(first.delivery_tag)
        await transaction.commit()
        await channel.close()  # requeues what is still unacked: only "b"
        assert await wait_for_count(queue, 1) == 1
        message = await queue.get(no_ack=True)
        assert (message.body, message.redelivered) == (b"b", True)

    run(body, warren)


def test_fanout_and_headers_exchanges(warren):
    async def body(connection):
        channel = await connection.channel()
        fanout = await channel.declare_exchange(unique("fan"), ExchangeType.FANOUT,
                                                auto_delete=True)
        headers_exchange = await channel.declare_exchange(unique("hdr"), ExchangeType.HEADERS,
                                                          auto_delete=True)
        first, second = await exclusive_queue(channel), await exclusive_queue(channel)
        await first.bind(fanout)
        await second.bind(fanout)
        matched = await exclusive_queue(channel)
        await matched.bind(headers_exchange,
                           arguments={"x-match": "all", "kind": "invoice", "v": 2})
        await fanout.publish(Message(b"everyone"), routing_key="ignored")
        await headers_exchange.publish(Message(b"yes", headers={"kind": "invoice", "v": 2}), "")
        await headers_exchange.publish(Message(b"no", headers={"kind": "invoice", "v": 3}),
                                       "", mandatory=False)
        for queue, expected in ((first, b"everyone"), (second, b"everyone"), (matched, b"yes")):
            assert await wait_for_count(queue, 1) == 1
            assert (await queue.get(no_ack=True)).body == expected

    run(body, warren)


def test_exchange_to_exchange_binding(warren):
    async def body(connection):
        channel = await connection.channel()
        source = await channel.declare_exchange(unique("src"), ExchangeType.TOPIC)
        try:
            destination = await channel.declare_exchange(unique("dst"), ExchangeType.FANOUT,
                                                         auto_delete=True)
            await destination.bind(source, routing_key="logs.#")
            queue = await exclusive_queue(channel)
            await queue.bind(destination)
            await source.publish(Message(b"via e2e"), "logs.app.error")
            assert await wait_for_count(queue, 1) == 1
            assert (await queue.get(no_ack=True)).body == b"via e2e"
            await destination.unbind(source, routing_key="logs.#")
            result = await source.publish(Message(b"gone"), "logs.app.error")
            assert not isinstance(result, aiormq.spec.Basic.Ack)
        finally:
            await source.delete()

    run(body, warren)


def test_auto_delete_exchange_goes_with_its_last_binding(warren):
    async def body(connection):
        channel = await connection.channel()
        name = unique("auto")
        exchange = await channel.declare_exchange(name, ExchangeType.DIRECT, auto_delete=True)
        queue = await exclusive_queue(channel)
        await queue.bind(exchange, "k")
        # Still there while bound.
        assert isinstance(await exchange.publish(Message(b"1"), "k"), aiormq.spec.Basic.Ack)
        await queue.unbind(exchange, "k")
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            await (await connection.channel()).get_exchange(name, ensure=True)

    run(body, warren)


def test_unbind_after_auto_delete_queue_went_is_accepted(warren):
    """An auto-delete queue goes when its last consumer is cancelled; unbinding it
    afterwards is accepted (RabbitMQ answers Queue.UnbindOk for a missing queue, and
    aio_pika.patterns.RPC.close relies on it: cancel, then unbind, then delete)."""

    async def body(connection):
        channel = await connection.channel()
        queue = await channel.declare_queue(unique("ad"), auto_delete=True)
        headers_exchange = await channel.get_exchange("amq.headers")
        arguments = {"From": queue.name, "x-match": "any"}
        await queue.bind(headers_exchange, "", arguments=arguments)

        async def ignore(message):
            pass

        tag = await queue.consume(ignore)
        await queue.cancel(tag)
        await queue.unbind(headers_exchange, "", arguments=arguments)
        assert not channel.is_closed
        await queue.delete()
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            await (await connection.channel()).declare_queue(queue.name, passive=True)

    run(body, warren)


def test_large_message_spans_many_frames(warren):
    async def body(connection):
        channel = await connection.channel()
        queue = await exclusive_queue(channel)
        frame_max = connection.transport.connection.connection_tune.frame_max
        payload = bytes(range(256)) * (4 * 1024 + 7)  # ~1 MiB, not a multiple of frames
        assert len(payload) > 8 * frame_max
        await channel.default_exchange.publish(Message(payload, headers={"size": len(payload)}),
                                               queue.name)
        await channel.default_exchange.publish(Message(b""), queue.name)  # empty body
        async with queue.iterator() as iterator:
            big = await next_message(iterator)
            assert (len(big.body), big.headers["size"]) == (len(payload), len(payload))
            assert big.body == payload
            await big.ack()
            empty = await next_message(iterator)
            assert empty.body == b""
            await empty.ack()

    run(body, warren)


def test_broker_cancels_consumer_when_its_queue_is_deleted(warren):
    """consumer_cancel_notify: the broker sends Basic.Cancel to the consumer of a
    deleted queue (a plain connection here: a robust one would recover, see below)."""

    async def body(_robust_connection):
        connection = await aio_pika.connect(warren.aio_pika_url, timeout=WAIT)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(unique("doomed"))
            cancelled = asyncio.Event()
            frames = []

            def on_cancel(frame):
                frames.append(frame)
                cancelled.set()

            (await channel.get_underlay_channel()).on_consumer_cancel_callbacks.add(on_cancel)

            async def ignore(message):
                pass

            tag = await queue.consume(ignore)
            other = await connection.channel()
            deleted = await other.queue_delete(queue.name)
            assert deleted.message_count == 0
            await asyncio.wait_for(cancelled.wait(), WAIT)
            assert isinstance(frames[0], aiormq.spec.Basic.Cancel)
            assert frames[0].consumer_tag == tag
            assert not channel.is_closed
            await channel.default_exchange.publish(Message(b"x"), "amq.nothing",
                                                   mandatory=False)

    run(body, warren)


def test_exclusive_queue_is_locked_for_other_connections(warren):
    async def body(connection):
        channel = await connection.channel()
        queue = await channel.declare_queue(unique("mine"), exclusive=True)
        other_connection = await aio_pika.connect(warren.aio_pika_url, timeout=WAIT)
        async with other_connection:
            other = await other_connection.channel()
            with pytest.raises(aiormq.exceptions.ChannelLockedResource):
                await other.declare_queue(queue.name, passive=True)
            again = await other_connection.channel()
            with pytest.raises(aiormq.exceptions.ChannelLockedResource):
                await again.declare_queue(queue.name, exclusive=True)
        # The owner is unaffected.
        await channel.default_exchange.publish(Message(b"still mine"), queue.name)
        assert await wait_for_count(queue, 1) == 1

    run(body, warren)


def test_rpc_pattern_over_reply_queue(warren):
    """aio_pika.patterns.RPC: a request queue, reply_to a server-named exclusive queue."""

    async def body(connection):
        from aio_pika.patterns import RPC

        server_channel = await connection.channel()
        client_channel = await connection.channel()
        method = unique("multiply").replace("-", "_")

        async def multiply(*, x, y):
            return x * y

        server = await RPC.create(server_channel)
        await server.register(method, multiply, auto_delete=True)
        client = await RPC.create(client_channel)
        results = await asyncio.gather(*(
            client.call(method, kwargs={"x": n, "y": 7}, expiration=WAIT) for n in range(5)))
        assert results == [n * 7 for n in range(5)]
        await client.close()
        await server.close()

    run(body, warren)
