"""Deep durable queues whose bodies are on disk only: longer than the page window, or
restarted (a restart loads no body), they are read back off the event loop and still
reach Basic.Get and consumers whole and in order."""

import pytest

from tests.support.numbered_bodies import (PERSISTENT, body_index, connect, fill_durable_queue,
                                           numbered_body)
from tests.support.pika_helpers import _test_deadline, wait_until  # noqa: F401  (fixture)

pytestmark = pytest.mark.warren_only(
    "Warren's page window and restarts of a Warren broker of its own (broker_factory)")

PIKA_TEST_TIMEOUT = 300
QUEUE = "deep-durable"
MESSAGES = 10_500           # more than the page window (10,000 bodies in memory)
BODY_SIZE = 300
GETS = 1_500


def body(index: int) -> bytes:
    return numbered_body(index, BODY_SIZE)


def consume(port: int, first: int, prefetch: int = 500) -> list[int]:
    """Consume the rest of the queue with manual acks (multiple, every 100 deliveries);
    the indexes in delivery order, every body checked."""
    connection = connect(port)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    seen = []

    def on_message(channel_, method, _properties, data):
        index = body_index(data)
        assert data == body(index)
        seen.append(index)
        if len(seen) % 100 == 0 or index == MESSAGES - 1:
            channel_.basic_ack(method.delivery_tag, multiple=True)

    channel.basic_consume(QUEUE, on_message)
    assert wait_until(connection, lambda: len(seen) == MESSAGES - first, timeout=120), \
        f"{len(seen)} of {MESSAGES - first} delivered"
    connection.close()
    return seen


def test_a_restarted_deep_queue_drains_by_get_then_consume_in_order(broker_factory,
                                                                    tmp_path):
    data_dir = str(tmp_path / "data")
    broker = broker_factory(data_dir=data_dir)
    fill_durable_queue(broker.port, QUEUE, MESSAGES, BODY_SIZE)
    assert broker.stop() == 0
    broker.start()          # every body is on disk only now

    connection = connect(broker.port)
    channel = connection.channel()
    for index in range(GETS):
        method, _properties, data = channel.basic_get(QUEUE, auto_ack=index % 2 == 0)
        assert method is not None, f"Get-Empty at {index} of a non-empty queue"
        assert data == body(index)
        assert method.message_count == MESSAGES - index - 1
        if index % 2:
            channel.basic_ack(method.delivery_tag)
    connection.close()

    assert consume(broker.port, GETS) == list(range(GETS, MESSAGES))
    assert broker.process.poll() is None


def test_a_deep_queue_beyond_the_page_window_redelivers_in_order(broker_factory):
    broker = broker_factory()
    fill_durable_queue(broker.port, QUEUE, MESSAGES, BODY_SIZE)
    connection = connect(broker.port)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=200)
    taken = []

    def on_message(_channel, method, _properties, data):
        taken.append((method.delivery_tag, body_index(data), data, method.redelivered))

    tag = channel.basic_consume(QUEUE, on_message)
    assert wait_until(connection, lambda: len(taken) == 200)
    channel.basic_cancel(tag)
    channel.basic_nack(taken[-1][0], multiple=True, requeue=True)
    connection.close()

    seen = consume(broker.port, 0, prefetch=1000)
    assert seen == list(range(MESSAGES))
    assert broker.process.poll() is None


def test_restarted_messages_expire_to_the_dead_letter_queue_with_their_bodies(
        broker_factory, tmp_path):
    broker = broker_factory(data_dir=str(tmp_path / "data"))
    connection = connect(broker.port)
    channel = connection.channel()
    channel.queue_declare("expired-here", durable=True)
    channel.queue_declare("short-lived", durable=True, arguments={
        "x-message-ttl": 3000, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "expired-here"})
    channel.tx_select()
    for index in range(50):
        channel.basic_publish("", "short-lived", body(index), PERSISTENT)
    channel.tx_commit()
    connection.close()
    assert broker.stop() == 0
    broker.start()          # bodies on disk only; the TTL counts again from now

    connection = connect(broker.port)
    channel = connection.channel()
    dead = []

    def on_message(_channel, _method, properties, data):
        dead.append((data, properties.headers["x-death"][0]["reason"]))

    channel.basic_consume("expired-here", on_message, auto_ack=True)
    assert wait_until(connection, lambda: len(dead) == 50, timeout=60), len(dead)
    assert dead == [(body(index), "expired") for index in range(50)]
    connection.close()
    assert broker.process.poll() is None


def test_a_body_damaged_on_disk_costs_only_its_message(broker_factory, tmp_path):
    data_dir = tmp_path / "data"
    broker = broker_factory(data_dir=str(data_dir))
    connection = connect(broker.port)
    channel = connection.channel()
    channel.queue_declare(QUEUE, durable=True)
    channel.queue_declare("healthy", durable=True)
    channel.tx_select()
    for index in range(200):
        channel.basic_publish("", QUEUE, body(index), PERSISTENT)
    channel.tx_commit()
    connection.close()
    assert broker.stop() == 0
    broker.start()          # recovery indexed every record; no body is in memory

    damaged = 77
    (segment,) = [path for path in (data_dir / "queues").rglob("*.seg")
                  if body(damaged) in path.read_bytes()]
    data = bytearray(segment.read_bytes())
    data[data.index(body(damaged)) + 40] ^= 0xFF    # the disk lost a bit of one body
    segment.write_bytes(bytes(data))

    connection = connect(broker.port)
    channel = connection.channel()
    seen = []
    channel.basic_consume(QUEUE, lambda _c, _m, _p, data: seen.append(data),
                          auto_ack=True)
    assert wait_until(connection, lambda: len(seen) == 199, timeout=60), len(seen)
    assert seen == [body(index) for index in range(200) if index != damaged]
    channel.basic_publish("", "healthy", b"still served", PERSISTENT)
    assert channel.basic_get("healthy", auto_ack=True)[2] == b"still served"
    connection.close()
    log = "".join(broker.log_lines)
    assert "event=body_read_failed" in log and "event=paged_messages_unreadable" in log
    assert broker.process.poll() is None
