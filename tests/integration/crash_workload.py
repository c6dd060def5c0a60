"""A confirm-mode publishing workload that a broker crash interrupts, and the check that
no confirmed message was lost. Used by test_crash_recovery.py and bench/crash_stress.py.
"""

import random
import signal
import threading
from dataclasses import dataclass, field

import pika
import pika.exceptions

QUEUE = "crash-durable"
PERSISTENT = pika.BasicProperties(delivery_mode=2)


@dataclass
class PublisherLog:
    """What one publisher sent and which of those the broker confirmed."""

    name: str
    confirmed: list = field(default_factory=list)
    attempted: list = field(default_factory=list)


def declare(port: int) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    connection.channel().queue_declare(QUEUE, durable=True)
    connection.close()


def publish_until_broken(port: int, log: PublisherLog, start_at: int) -> None:
    """Publish persistent messages with confirms until the broker goes away."""
    try:
        connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))
        channel = connection.channel()
        channel.confirm_delivery()
        sequence = start_at
        while True:
            body = f"{log.name}-{sequence}"
            log.attempted.append(body)
            channel.basic_publish("", QUEUE, body.encode(), PERSISTENT)
            log.confirmed.append(body)
            sequence += 1
    except (pika.exceptions.AMQPError, OSError):
        return


def run_cycle(broker, publishers: int, rng: random.Random, cycle: int) -> list:
    """Publish from several connections, SIGKILL the broker at a random moment; return
    the publishers' logs."""
    logs = [PublisherLog(f"c{cycle}p{index}") for index in range(publishers)]
    threads = [threading.Thread(target=publish_until_broken,
                                args=(broker.port, log, 0), daemon=True) for log in logs]
    for thread in threads:
        thread.start()
    kill_after = rng.uniform(0.05, 0.6)
    killed = threading.Event()
    # The kill time is the random crash point of the scenario, not synchronisation.
    threading.Timer(kill_after, lambda: (broker.process.send_signal(signal.SIGKILL),
                                         killed.set())).start()
    killed.wait(10)
    broker.process.wait(10)
    for thread in threads:
        thread.join(30)
    return logs


def drain(port: int) -> list:
    """Every message in the durable queue (acked as read)."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    bodies = []
    while True:
        method, _, body = channel.basic_get(QUEUE, auto_ack=True)
        if method is None:
            break
        bodies.append(body.decode())
    connection.close()
    return bodies


def lost_messages(logs: list, recovered: list) -> list:
    received = set(recovered)
    return [body for log in logs for body in log.confirmed if body not in received]


def out_of_order(logs: list, recovered: list) -> list:
    """Publishers whose recovered messages are not in publish order."""
    bad = []
    for log in logs:
        order = {body: index for index, body in enumerate(log.attempted)}
        mine = [order[body] for body in recovered if body in order]
        if mine != sorted(mine):
            bad.append(log.name)
    return bad
