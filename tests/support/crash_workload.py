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
# The crash point of a cycle is a random number of confirms, from 1 up to this many,
# received by its publishers together: a point in the workload's progress, which a
# loaded machine reaches later but reaches (unloaded, about 0.05-0.6 s of publishing).
MAX_CONFIRMS_BEFORE_KILL = 1500
# How long a cycle may take to reach its crash point before it fails (a deadline).
PROGRESS_TIMEOUT = 60.0


@dataclass
class PublisherLog:
    """What one publisher sent and which of those the broker confirmed."""

    name: str
    confirmed: list = field(default_factory=list)
    attempted: list = field(default_factory=list)


class CrashPoint:
    """The crash point of a cycle: `settled` is set once its publishers received
    `confirms` confirms together, or all of them stopped before that (the broker went
    away on its own)."""

    def __init__(self, confirms: int, publishers: int):
        self.confirms = confirms
        self.received = 0
        self.running = publishers
        self.settled = threading.Event()
        self._lock = threading.Lock()

    def confirmed(self) -> None:
        with self._lock:
            self.received += 1
            if self.received >= self.confirms:
                self.settled.set()

    def publisher_stopped(self) -> None:
        with self._lock:
            self.running -= 1
            if self.running == 0:
                self.settled.set()

    @property
    def reached(self) -> bool:
        return self.received >= self.confirms


def declare(port: int) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    connection.channel().queue_declare(QUEUE, durable=True)
    connection.close()


def publish_until_broken(port: int, log: PublisherLog, crash_point: CrashPoint) -> None:
    """Publish persistent messages with confirms until the broker goes away, telling
    `crash_point` of every confirm."""
    try:
        connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))
        channel = connection.channel()
        channel.confirm_delivery()
        sequence = 0
        while True:
            body = f"{log.name}-{sequence}"
            log.attempted.append(body)
            channel.basic_publish("", QUEUE, body.encode(), PERSISTENT)
            log.confirmed.append(body)
            crash_point.confirmed()
            sequence += 1
    except (pika.exceptions.AMQPError, OSError):
        return
    finally:
        crash_point.publisher_stopped()


def run_cycle(broker, publishers: int, rng: random.Random, cycle: int) -> list:
    """Publish from several connections, SIGKILL the broker once they received a random
    number of confirms (the crash point); return the publishers' logs. Raises
    AssertionError if the publishers stopped, or did not get there, before the kill."""
    logs = [PublisherLog(f"c{cycle}p{index}") for index in range(publishers)]
    crash_point = CrashPoint(rng.randint(1, MAX_CONFIRMS_BEFORE_KILL), publishers)
    threads = [threading.Thread(target=publish_until_broken,
                                args=(broker.port, log, crash_point), daemon=True)
               for log in logs]
    for thread in threads:
        thread.start()
    crash_point.settled.wait(PROGRESS_TIMEOUT)
    reached = crash_point.reached    # before the kill: later confirms do not count
    broker.process.send_signal(signal.SIGKILL)
    broker.process.wait(10)
    for thread in threads:
        thread.join(30)
    if not reached:
        raise AssertionError(
            f"cycle {cycle}: killed after {crash_point.received} of the "
            f"{crash_point.confirms} confirms of its crash point, with {crash_point.running} "
            f"of {publishers} publishers still running (a publisher stops when its "
            f"connection fails); broker log:\n" + "".join(broker.log_lines[-20:]))
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
