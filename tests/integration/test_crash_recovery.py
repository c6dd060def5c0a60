"""Kill -9 the broker while publishers wait for confirms (once they received a random
number of them: crash_workload.py); every confirmed message must be there after a
restart on the same data directory, in publish order."""

import random

import pika
import pytest

from tests.support.crash_workload import (PERSISTENT, QUEUE, declare, drain, lost_messages,
                                          out_of_order, run_cycle)

pytestmark = pytest.mark.warren_only(
    "kills (SIGKILL) and restarts a Warren broker of its own (broker_factory)")

CYCLES = 3
PUBLISHERS = 3


def test_confirmed_messages_survive_sigkill(broker_factory, tmp_path):
    rng = random.Random(20261122)
    data_dir = str(tmp_path / "data")
    broker = broker_factory(data_dir=data_dir)
    declare(broker.port)
    for cycle in range(CYCLES):
        logs = run_cycle(broker, PUBLISHERS, rng, cycle)    # asserts confirms came
        broker = broker_factory(data_dir=data_dir)
        recovered = drain(broker.port)
        assert lost_messages(logs, recovered) == []
        assert out_of_order(logs, recovered) == []
        assert len(recovered) == len(set(recovered))


def test_acked_messages_stay_gone_after_sigkill(broker_factory, tmp_path):
    data_dir = str(tmp_path / "data")
    broker = broker_factory(data_dir=data_dir)
    declare(broker.port)
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    channel = connection.channel()
    channel.confirm_delivery()
    for index in range(10):
        channel.basic_publish("", QUEUE, str(index).encode(), PERSISTENT)
    for _ in range(4):
        method, _, _ = channel.basic_get(QUEUE)
        channel.basic_ack(method.delivery_tag)
    channel.basic_get(QUEUE)                          # delivered, never acked
    # Confirmed after the acks: its commit writes them too.
    channel.basic_publish("", QUEUE, b"barrier", PERSISTENT)
    broker.process.kill()
    broker.process.wait(10)
    broker = broker_factory(data_dir=data_dir)
    assert drain(broker.port) == ["4", "5", "6", "7", "8", "9", "barrier"]


def test_a_damaged_record_is_reported_and_the_rest_recovered(broker_factory, tmp_path):
    data_dir = tmp_path / "data"
    broker = broker_factory(data_dir=str(data_dir))
    declare(broker.port)
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    channel = connection.channel()
    channel.confirm_delivery()
    for index in range(5):
        channel.basic_publish("", QUEUE, f"message-{index}".encode(), PERSISTENT)
    connection.close()
    assert broker.stop() == 0
    (segment,) = (data_dir / "queues").glob("*/*.seg")
    data = bytearray(segment.read_bytes())
    position = data.index(b"message-2")
    data[position] ^= 0xFF
    segment.write_bytes(bytes(data))
    broker = broker_factory(data_dir=str(data_dir))
    assert drain(broker.port) == ["message-0", "message-1", "message-3", "message-4"]
    problems = [line for line in broker.log_lines if "event=recovery_problem" in line]
    assert len(problems) == 1 and segment.name in problems[0]


def test_a_drained_durable_queue_takes_persistent_messages_after_a_restart(broker_factory,
                                                                           tmp_path):
    """Every message acked, clean stop, restart: the queue file continues after its last
    seq, so the next persistent publish is confirmed (it was a 541 when the recovered
    queue started counting again at 0)."""
    data_dir = str(tmp_path / "data")
    for stop in ("clean", "sigkill"):
        broker = broker_factory(data_dir=data_dir)
        declare(broker.port)
        connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", broker.port))
        channel = connection.channel()
        channel.confirm_delivery()
        for index in range(3):
            channel.basic_publish("", QUEUE, f"{stop}-{index}".encode(), PERSISTENT)
        for _ in range(3):
            method, _, _ = channel.basic_get(QUEUE)
            channel.basic_ack(method.delivery_tag)
        # A confirmed publish to another durable queue: its commit writes the acks too.
        channel.queue_declare("barrier", durable=True)
        channel.basic_publish("", "barrier", b"barrier", PERSISTENT)
        connection.close()
        if stop == "clean":
            assert broker.stop() == 0
        else:
            broker.process.kill()
            broker.process.wait(10)
        broker = broker_factory(data_dir=data_dir)
        connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", broker.port))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("", QUEUE, f"after-{stop}".encode(), PERSISTENT)
        connection.close()
        assert drain(broker.port) == [f"after-{stop}"]
        broker.stop()
