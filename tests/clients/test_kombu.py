"""kombu (on py-amqp, the transport Celery uses) against the broker.

Each test has a vhost and user of its own (the `warren` fixture; on Warren, or on the
broker named by WARREN_TEST_BROKER), removed with what it holds at teardown; names are
still unique (uuid), and what a test declares is auto-delete or exclusive, or deleted
before the test ends.
Waits are bounded: `drain_until` drains events until a condition holds or WAIT passes.
"""

import datetime
import decimal
import json
import socket
import time
import uuid

import amqp.exceptions
import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue

WAIT = 5.0


def unique(prefix: str = "t") -> str:
    return f"kombu-{prefix}-{uuid.uuid4().hex}"


def connect(warren, **kwargs) -> Connection:
    kwargs.setdefault("connect_timeout", WAIT)
    connection = Connection(warren.url, **kwargs)
    connection.connect()
    return connection


@pytest.fixture
def conn(warren):
    connection = connect(warren)
    yield connection
    connection.release()


def drain_until(connection, predicate, timeout: float = WAIT) -> bool:
    """Drain events until `predicate()` is true or `timeout` passes; returns its value."""
    deadline = time.monotonic() + timeout
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            connection.drain_events(timeout=min(0.1, remaining))
        except socket.timeout:
            pass
    return bool(predicate())


def ready_count(channel, queue: Queue) -> int:
    return queue(channel).queue_declare(passive=True).message_count


def wait_for_count(channel, queue: Queue, expected: int, timeout: float = WAIT) -> int:
    """Poll the ready count of `queue` until it equals `expected` or `timeout` passes;
    returns the last value (RabbitMQ's counts can lag behind just-made publishes/acks)."""
    deadline = time.monotonic() + timeout
    while True:
        count = ready_count(channel, queue)
        if count == expected or time.monotonic() >= deadline:
            return count
        try:
            channel.connection.drain_events(timeout=0.01)  # poll interval
        except socket.timeout:
            pass


def test_connection_connects_and_opens_channels(conn):
    assert conn.connected
    assert conn.transport.driver_type == "amqp"
    server = conn.connection.server_properties
    assert server["capabilities"]["publisher_confirms"] is True
    first, second = conn.channel(), conn.channel()
    assert first.channel_id != second.channel_id
    second.close()
    queue = Queue(unique("q"), exclusive=True)
    assert queue(first).declare() == queue.name


def test_producer_declares_and_consumer_receives_json(conn):
    exchange = Exchange(unique("jobs"), type="topic", auto_delete=True)
    queue = Queue(unique("high"), exchange, routing_key="jobs.high.#", auto_delete=True)
    channel = conn.channel()
    producer = Producer(channel)
    payload = {"task": "resize", "sizes": [64, 128], "meta": {"user": "zoë", "retry": None}}
    correlation_id = uuid.uuid4().hex
    producer.publish(payload, exchange=exchange, routing_key="jobs.high.images",
                     declare=[queue], serializer="json", delivery_mode="persistent",
                     headers={"origin": "test", "attempt": 1}, correlation_id=correlation_id,
                     reply_to="answers", priority=3, message_id="m-1")
    producer.publish({"task": "ignored"}, exchange=exchange, routing_key="jobs.low.images")
    received = []

    def on_message(body, message):
        received.append((body, message))
        message.ack()

    with Consumer(conn.channel(), queues=[queue], callbacks=[on_message], accept=["json"]):
        assert drain_until(conn, lambda: received)
        assert wait_for_count(channel, queue, 0) == 0
    body, message = received[0]
    assert body == payload
    assert message.content_type == "application/json"
    assert message.content_encoding == "utf-8"
    assert message.headers == {"origin": "test", "attempt": 1}
    assert message.properties["correlation_id"] == correlation_id
    assert message.properties["reply_to"] == "answers"
    assert message.properties["priority"] == 3
    assert message.properties["message_id"] == "m-1"
    assert message.properties["delivery_mode"] == 2
    assert message.delivery_info["routing_key"] == "jobs.high.images"
    assert message.delivery_info["exchange"] == exchange.name
    assert message.delivery_info["redelivered"] is False
    assert message.acknowledged
    # The queue is auto-delete: it went with its only consumer.
    with pytest.raises(amqp.exceptions.NotFound):
        queue(conn.channel()).queue_declare(passive=True)


def test_consumer_requeue_redelivers(conn):
    queue = Queue(unique("requeue"), exclusive=True)
    channel = conn.channel()
    Producer(channel).publish({"n": 1}, routing_key=queue.name, declare=[queue])
    seen = []

    def on_message(body, message):
        seen.append((body, message.delivery_info["redelivered"]))
        if len(seen) == 1:
            message.requeue()
        else:
            message.ack()

    with Consumer(channel, queues=[queue], callbacks=[on_message], accept=["json"]):
        assert drain_until(conn, lambda: len(seen) >= 2)
        assert wait_for_count(channel, queue, 0) == 0
    assert seen == [({"n": 1}, False), ({"n": 1}, True)]


def test_a_consumer_deletes_its_queue_on_its_own_channel(conn):
    """kombu's own integration tests delete a queue while its consumer is still on it:
    Queue.DeleteOk comes before the broker's Basic.Cancel (as from RabbitMQ), or py-amqp,
    waiting for the DeleteOk, raises ConsumerCancelled."""
    queue = Queue(unique("consumed"), routing_key="consumed")
    channel = conn.channel()
    Producer(channel).publish({"n": 1}, routing_key=queue.name, declare=[queue])
    seen = []
    consumer = Consumer(channel, queues=[queue], accept=["json"],
                        callbacks=[lambda body, message: seen.append(body)])
    with consumer:
        assert drain_until(conn, lambda: seen == [{"n": 1}])
        assert queue(channel).delete() == 0   # its one message is delivered, unacked
    assert channel.is_open
    with pytest.raises(amqp.exceptions.NotFound):
        queue(conn.channel()).queue_declare(passive=True)


def test_consumer_reject_discards(conn):
    queue = Queue(unique("reject"), exclusive=True)
    channel = conn.channel()
    producer = Producer(channel)
    producer.publish("drop me", routing_key=queue.name, declare=[queue], serializer="json")
    producer.publish("keep me", routing_key=queue.name, serializer="json")
    seen = []

    def on_message(body, message):
        seen.append(body)
        if body == "drop me":
            message.reject()
        else:
            message.ack()

    with Consumer(channel, queues=[queue], callbacks=[on_message], accept=["json"]):
        assert drain_until(conn, lambda: len(seen) >= 2)
        assert wait_for_count(channel, queue, 0) == 0
        assert queue(channel).get() is None
    assert seen == ["drop me", "keep me"]


def test_drain_events_times_out_when_nothing_arrives(conn):
    queue = Queue(unique("idle"), exclusive=True)
    channel = conn.channel()
    with Consumer(channel, queues=[queue], callbacks=[lambda body, message: None]):
        with pytest.raises(socket.timeout):
            conn.drain_events(timeout=0.2)
    assert conn.connected


def test_simple_queue_put_get(conn):
    name = unique("simple")
    simple = conn.SimpleQueue(name)
    try:
        with pytest.raises(simple.Empty):
            simple.get_nowait()
        for n in range(3):
            simple.put({"n": n, "text": f"message {n}"})
        first = simple.get(block=True, timeout=WAIT)
        assert first.payload == {"n": 0, "text": "message 0"}
        first.ack()
        second = simple.get(block=True, timeout=WAIT)
        assert second.payload["n"] == 1
        second.requeue()
        # The consumer has no prefetch limit: message 2 may already be buffered, so the
        # requeued message 1 comes back first or second.
        rest = [simple.get(block=True, timeout=WAIT) for _ in range(2)]
        for message in rest:
            message.ack()
        assert sorted((m.payload["n"], m.delivery_info["redelivered"]) for m in rest) == [
            (1, True), (2, False)]
        with pytest.raises(simple.Empty):
            simple.get(block=True, timeout=0.2)
        # Without a consumer, the queue's own counts show what is in it.
        simple.consumer.cancel()
        simple.put("left over")
        assert wait_for_count(simple.channel, simple.queue, 1) == 1
        assert simple.qsize() == 1
        assert simple.clear() == 1
        assert simple.qsize() == 0
    finally:
        simple.consumer.cancel()
        simple.queue(simple.channel).delete()
        simple.queue.exchange(simple.channel).delete()
        simple.close()


def test_simple_buffer_is_transient(conn):
    name = unique("buffer")
    buffer = conn.SimpleBuffer(name)
    try:
        buffer.put(b"raw bytes", serializer=None, content_type="application/data",
                   content_encoding="binary")
        message = buffer.get(block=True, timeout=WAIT)
        assert message.body == b"raw bytes"
        assert message.content_type == "application/data"
        assert message.properties.get("delivery_mode") in (None, 1)
    finally:
        buffer.close()
    # SimpleBuffer's queue is auto-delete: cancelling its consumer removed it.
    with pytest.raises(amqp.exceptions.NotFound):
        Queue(name)(conn.channel()).queue_declare(passive=True)


def test_serialization_round_trip(conn):
    queue = Queue(unique("serial"), exclusive=True)
    channel = conn.channel()
    producer = Producer(channel, routing_key=queue.name)
    queue(channel).declare()
    values = [
        {"unicode": "Grüße, 世界 🌍", "int": 2**53 + 1, "float": 3.25, "bool": [True, False],
         "none": None, "nested": {"list": [1, [2, [3]]], "empty": {}}},
        {"when": datetime.datetime(2024, 1, 2, 3, 4, 5, 678000),
         "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
         "amount": decimal.Decimal("12.50")},
        "a plain string",  # json: '"a plain string"'
        [1, "two", 3.0],
    ]
    for value in values:
        producer.publish(value, serializer="json")
    producer.publish({"compressed": "x" * 2000}, serializer="json", compression="zlib")
    producer.publish(b"\x00\x01\xff binary", serializer=None, content_type="application/data",
                     content_encoding="binary")
    received = []
    with Consumer(channel, queues=[queue], accept=["json", "application/data"],
                  callbacks=[lambda body, message: (received.append((body, message)),
                                                    message.ack())]):
        assert drain_until(conn, lambda: len(received) >= len(values) + 2)
    bodies = [body for body, _ in received]
    assert bodies[0] == values[0]
    assert bodies[1] == {"when": datetime.datetime(2024, 1, 2, 3, 4, 5, 678000),
                         "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
                         "amount": decimal.Decimal("12.50")}
    assert bodies[2:4] == values[2:4]
    assert bodies[4] == {"compressed": "x" * 2000}
    assert received[4][1].headers["compression"] == "application/x-gzip"
    assert bodies[5] == b"\x00\x01\xff binary"


def test_queue_get_basic_get(conn):
    queue = Queue(unique("get"), exclusive=True)
    channel = conn.channel()
    bound = queue(channel)
    bound.declare()
    assert bound.get() is None
    Producer(channel).publish({"x": 1}, routing_key=queue.name)
    message = None
    deadline = time.monotonic() + WAIT
    while message is None and time.monotonic() < deadline:
        message = bound.get(accept=["json"])
    assert message is not None
    assert message.payload == {"x": 1}
    message.ack()
    assert bound.get() is None


def test_prefetch_count_limits_unacked_deliveries(conn):
    queue = Queue(unique("prefetch"), exclusive=True)
    channel = conn.channel()
    producer = Producer(channel, routing_key=queue.name)
    queue(channel).declare()
    for n in range(4):
        producer.publish({"n": n})
    assert wait_for_count(channel, queue, 4) == 4
    consumer_channel = conn.channel()
    held = []
    consumer = Consumer(consumer_channel, queues=[queue], prefetch_count=1, accept=["json"],
                        callbacks=[lambda body, message: held.append(message)])
    with consumer:
        assert drain_until(conn, lambda: len(held) >= 1)
        assert wait_for_count(channel, queue, 3) == 3
        assert wait_for_count(channel, queue, 3) == 3
        assert len(held) == 1
        held[0].ack()
        assert drain_until(conn, lambda: len(held) >= 2)
        assert wait_for_count(channel, queue, 2) == 2
        assert len(held) == 2
        # A new Basic.Qos (global=False) applies to consumers started after it; this
        # consumer keeps its limit of one (RabbitMQ's per-consumer prefetch).
        consumer.qos(prefetch_count=0)
        assert wait_for_count(channel, queue, 2) == 2
        assert len(held) == 2
        held[1].ack()
        assert drain_until(conn, lambda: len(held) >= 3)
        held[2].ack()
        assert drain_until(conn, lambda: len(held) >= 4)
        held[3].ack()
        assert wait_for_count(channel, queue, 0) == 0
    assert [message.payload["n"] for message in held] == [0, 1, 2, 3]


def test_confirm_publish_and_mandatory_return(warren):
    connection = connect(warren, transport_options={"confirm_publish": True})
    try:
        channel = connection.channel()
        queue = Queue(unique("confirmed"), exclusive=True)
        returned = []
        producer = Producer(channel, on_return=lambda exc, exchange, routing_key, message:
                            returned.append((exc.reply_code, exchange, routing_key, message.body)))
        for n in range(5):
            producer.publish({"n": n}, routing_key=queue.name, declare=[queue])
        assert wait_for_count(channel, queue, 5) == 5
        # Unroutable with mandatory: Basic.Return arrives before the confirm.
        missing_key = unique("nowhere")
        producer.publish({"lost": True}, exchange="amq.direct", routing_key=missing_key,
                         mandatory=True)
        assert drain_until(connection, lambda: returned)
        code, exchange, routing_key, body = returned[0]
        assert (code, exchange, routing_key) == (312, "amq.direct", missing_key)
        assert json.loads(body) == {"lost": True}
        # Publishing to a missing exchange closes the channel with 404.
        with pytest.raises(amqp.exceptions.NotFound):
            Producer(connection.channel()).publish({"x": 1}, exchange=unique("missing"),
                                                   routing_key="k")
        assert connection.connected
        assert wait_for_count(connection.channel(), queue, 5) == 5
    finally:
        connection.release()


def test_queue_arguments_from_kombu(conn):
    channel = conn.channel()
    queue = Queue(unique("bounded"), auto_delete=True, max_length=2, message_ttl=60,
                  expires=60)
    assert queue(channel).declare() == queue.name
    # Redeclaring with the same arguments is accepted.
    assert queue(channel).declare() == queue.name
    producer = Producer(channel, routing_key=queue.name)
    for n in range(3):
        producer.publish(n)
    assert wait_for_count(channel, queue, 2) == 2  # max-length drops the oldest
    assert [queue(channel).get(no_ack=True).payload for _ in range(2)] == [1, 2]
    queue(channel).delete()


def test_broadcast_fanout_reaches_every_consumer(conn):
    exchange = Exchange(unique("bcast"), type="fanout", auto_delete=True)
    queues = [Queue(unique("member"), exchange, exclusive=True) for _ in range(3)]
    channel = conn.channel()
    for queue in queues:
        queue(channel).declare()
    Producer(channel).publish({"hello": "all"}, exchange=exchange)
    got = []
    with Consumer(channel, queues=queues, accept=["json"],
                  callbacks=[lambda body, message: (got.append(message.delivery_info[
                      "consumer_tag"]), message.ack())]):
        assert drain_until(conn, lambda: len(got) >= 3)
    assert len(set(got)) == 3


def test_heartbeat_is_negotiated_and_checked(warren):
    connection = connect(warren, heartbeat=10)
    try:
        assert connection.connection.heartbeat == 10  # the lower of client's and server's
        connection.heartbeat_check()  # sends a heartbeat frame when one is due
        queue = Queue(unique("hb"), exclusive=True)
        channel = connection.channel()
        Producer(channel).publish("alive", routing_key=queue.name, declare=[queue],
                                  serializer="json")
        assert wait_for_count(channel, queue, 1) == 1
        connection.heartbeat_check()
        assert connection.connected
    finally:
        connection.release()


def test_large_message_round_trip(conn):
    queue = Queue(unique("large"), exclusive=True)
    channel = conn.channel()
    payload = {"blob": "x" * (2 * 1024 * 1024), "tail": list(range(1000))}
    Producer(channel).publish(payload, routing_key=queue.name, declare=[queue],
                              serializer="json")
    received = []
    with Consumer(channel, queues=[queue], accept=["json"],
                  callbacks=[lambda body, message: (received.append(body), message.ack())]):
        assert drain_until(conn, lambda: received)
    assert received[0] == payload
