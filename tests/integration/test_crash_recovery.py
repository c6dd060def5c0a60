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


def test_a_dead_lettered_message_keeps_its_history_across_a_restart(broker_factory,
                                                                    tmp_path):
    """Under RabbitMQ 4.x only the x-death the broker wrote counts on when a message is
    dead-lettered again (docs/compatibility.md); the queue file keeps the mark that
    tells it from a client's. Rejected from `work` into `parked` before the restart,
    from `parked` back into `work` after: both deaths are in the history."""
    data_dir = str(tmp_path / "data")
    broker = broker_factory("--rabbitmq", "4.3", data_dir=data_dir)
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    channel = connection.channel()
    for queue, target in (("work", "parked"), ("parked", "work")):
        channel.queue_declare(queue, durable=True, arguments={
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": target})
    channel.basic_publish("", "work", b"m", PERSISTENT)
    reject_from(channel, "work")
    connection.close()
    assert broker.stop() == 0
    broker = broker_factory("--rabbitmq", "4.3", data_dir=data_dir)
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    channel = connection.channel()
    reject_from(channel, "parked")
    method, properties, body = channel.basic_get("work", auto_ack=True)
    assert body == b"m"
    assert [(death["queue"], death["reason"], death["count"])
            for death in properties.headers["x-death"]] == [("parked", "rejected", 1),
                                                            ("work", "rejected", 1)]
    assert properties.headers["x-first-death-queue"] == "work"
    connection.close()


def reject_from(channel, queue: str) -> None:
    """Take the message in `queue` and reject it (it is dead-lettered at once: the
    channel's next method is handled after it)."""
    method, _properties, _body = channel.basic_get(queue)
    channel.basic_reject(method.delivery_tag, requeue=False)
