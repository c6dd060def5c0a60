"""A full disk is survived: publishers are blocked before the disk fills, a write that
fails for lack of space nacks its publishes without stopping the broker, consumers can
drain a full disk (acks have reserved space), and no confirmed message is lost.

A durable declare the disk cannot store is refused with 406 and stored by a later commit.

Each test gives its broker a data directory on a 20 MiB tmpfs it mounts itself (root, as
here and in CI), and runs a RunningBystander beside it: its queue is exclusive and its
messages transient, so it needs no disk, but as a publisher it is blocked while the disk
alarm is raised, as RabbitMQ blocks every publisher.
"""

import errno
import os
import subprocess

import pika.exceptions
import pytest
from pamqp import commands

from tests.support import raw_amqp
from tests.support.bystander import RunningBystander
from tests.support.pika_helpers import _test_deadline, connect, consume_and_ack  # noqa: F401  (fixture)

pytestmark = pytest.mark.warren_only(
    "fills the disk of a Warren broker of its own on a small tmpfs (broker_factory)")

PIKA_TEST_TIMEOUT = 240
DISK_SIZE = 20 * 1024 * 1024
BODY = 64 * 1024                # more than a page: a write of one always needs new space
QUEUE = "disk-full"
PERSISTENT = commands.Basic.Properties(delivery_mode=2)
SMALL_MESSAGES = 300            # their acks take 6,000 bytes: more than a page
WAIT = 60                       # deadline of one wait for the broker (loaded machine)


@pytest.fixture
def small_disk(tmp_path):
    """A 20 MiB tmpfs, unmounted after the test (after the brokers on it were killed:
    broker_factory is set up after this fixture, so it is torn down first)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs",
                    str(mount_point)], check=True)
    yield mount_point
    subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


def start_broker(broker_factory, tmp_path, data_dir, **alarms):
    config = tmp_path / "warren.toml"
    config.write_text("[alarms]\n" + "".join(f"{key} = {value}\n"
                                             for key, value in alarms.items()))
    return broker_factory("--config", str(config), data_dir=str(data_dir))


def body(number: int, size: int = BODY) -> bytes:
    return b"%08d" % number + bytes(size - 8)


def fill(path) -> None:
    """Write `path` until the file system has no byte left (tmpfs: no free page)."""
    with open(path, "wb", buffering=0) as filler:
        for chunk in (1024 * 1024, 4096, 1):
            data = bytes(chunk)
            while True:
                try:
                    filler.write(data)
                except OSError as error:
                    assert error.errno == errno.ENOSPC
                    break


def drain(broker, count: int, transactional: bool = False) -> list[bytes]:
    """Consume `count` messages from QUEUE with manual acks (committed in one Tx when
    `transactional`, so the acks are on disk when this returns)."""
    connection = connect(broker, heartbeat=0)
    channel = connection.channel()
    if transactional:
        channel.tx_select()
    bodies = consume_and_ack(channel, QUEUE, count, WAIT)
    if transactional:
        channel.tx_commit()
    connection.close()
    return bodies


def queue_depth(broker) -> int:
    connection = connect(broker)
    count = connection.channel().queue_declare(QUEUE, durable=True,
                                               passive=True).method.message_count
    connection.close()
    return count


class RawPublisher:
    """Publishes persistent 64 KiB messages with confirms to the durable QUEUE, one at a
    time, reading every frame itself: it sees connection.blocked the moment it arrives
    (pika's BlockingConnection reports it only between calls, and a publish in confirm
    mode waits for its confirm, which a blocked connection does not get)."""

    def __init__(self, broker):
        self.client = raw_amqp.connect(broker.host, broker.port, timeout=WAIT)
        self.client.open_channel(1)
        self.client.send_method(1, commands.Confirm.Select())
        self.client.expect(commands.Confirm.SelectOk, channel=1)
        self.client.send_method(1, commands.Queue.Declare(queue=QUEUE, durable=True))
        self.client.expect(commands.Queue.DeclareOk, channel=1)
        self.sent = 0
        self.in_flight: bytes | None = None
        self.confirmed: list[bytes] = []
        self.nacked: list[bytes] = []
        self.blocked = False
        self.unblocked = False

    def publish(self, payload: bytes) -> str | None:
        """"ack" or "nack"; None when connection.blocked came first (the message then
        waits unread in the socket: `wait_for` its confirm)."""
        self.client.publish(1, QUEUE, payload, properties=PERSISTENT)
        self.sent += 1
        self.in_flight = payload
        return self.wait_for(lambda: self.in_flight is None, stop_when_blocked=True)

    def wait_for(self, condition, stop_when_blocked: bool = False) -> str | None:
        """Read frames until `condition()`; returns the last confirm's kind."""
        outcome = None
        while not condition():
            value = self.client.read_frame_skip_heartbeats(WAIT).value
            if isinstance(value, commands.Connection.Blocked):
                self.blocked = True
                if stop_when_blocked:
                    return None
            elif isinstance(value, commands.Connection.Unblocked):
                self.unblocked = True
            elif isinstance(value, (commands.Basic.Ack, commands.Basic.Nack)):
                assert (value.delivery_tag, value.multiple) == (self.sent, False)
                outcome = "ack" if isinstance(value, commands.Basic.Ack) else "nack"
                (self.confirmed if outcome == "ack" else self.nacked).append(
                    self.in_flight)
                self.in_flight = None
            else:
                raise AssertionError(f"unexpected frame {value!r}")
        return outcome


def consume_after_restart(broker) -> list[bytes]:
    """Every message in QUEUE, auto-acked (the queue is empty afterwards)."""
    connection = connect(broker)
    channel = connection.channel()
    bodies = []
    while True:
        method, _properties, received = channel.basic_get(QUEUE, auto_ack=True)
        if method is None:
            break
        bodies.append(received)
    connection.close()
    return bodies


def test_publishers_are_blocked_before_the_disk_fills_and_resume_after_a_drain(
        small_disk, broker_factory, tmp_path):
    settings = {"disk_free_limit": 8_000_000, "disk_reserve": 2_000_000}
    broker = start_broker(broker_factory, tmp_path, small_disk / "data", **settings)
    with RunningBystander(broker):
        publisher = RawPublisher(broker)
        number = 0
        while publisher.publish(body(number)) == "ack":
            number += 1
        assert publisher.blocked and not publisher.nacked   # blocked before a failure
        in_queue = queue_depth(broker)
        assert in_queue * BODY > 8_000_000                  # a good part of the disk
        drained = drain(broker, in_queue)
        publisher.wait_for(lambda: publisher.unblocked and publisher.in_flight is None)
        resumed = [body(number + extra) for extra in range(1, 6)]
        for payload in resumed:
            assert publisher.publish(payload) == "ack"
        publisher.client.close()
    assert not any("event=commit_failed" in line for line in broker.log_lines)
    assert broker.process.poll() is None

    broker.process.kill()               # kill -9: what was confirmed is on disk
    broker.process.wait()
    restarted = start_broker(broker_factory, tmp_path, small_disk / "data", **settings)
    after_restart = consume_after_restart(restarted)
    assert set(publisher.confirmed) <= set(drained) | set(after_restart)
    assert set(resumed) <= set(after_restart)


def test_a_commit_that_finds_the_disk_full_nacks_and_the_broker_drains_and_recovers(
        small_disk, broker_factory, tmp_path):
    # disk_free_limit = 0: the alarm cannot fire before the write fails.
    settings = {"disk_free_limit": 0, "disk_reserve": 1_048_576}
    broker = start_broker(broker_factory, tmp_path, small_disk / "data", **settings)
    with RunningBystander(broker):
        publisher = RawPublisher(broker)
        for number in range(SMALL_MESSAGES):
            assert publisher.publish(body(number, size=1024)) == "ack"
        fill(small_disk / "filler")                 # behind the broker's back
        assert publisher.publish(body(SMALL_MESSAGES)) == "nack"    # ENOSPC in the commit
        assert broker.process.poll() is None
        publisher.wait_for(lambda: publisher.blocked)   # the failure raised the alarm

        # On the full disk a consumer drains the queue; its acks (more tombstones than
        # the last page of a segment file holds), committed in a transaction
        # (Tx.CommitOk only once they are on disk), need the reserve.
        in_queue = queue_depth(broker)
        assert in_queue in (SMALL_MESSAGES, SMALL_MESSAGES + 1)  # the nacked one may stay
        drained = drain(broker, in_queue, transactional=True)
        assert set(publisher.confirmed) <= set(drained)

        os.unlink(small_disk / "filler")
        publisher.wait_for(lambda: publisher.unblocked)
        resumed = [body(number) for number in range(10, 13)]
        for payload in resumed:
            assert publisher.publish(payload) == "ack"
        publisher.client.close()
    assert broker.process.poll() is None
    assert any("event=commit_failed" in line for line in broker.log_lines)

    broker.process.kill()
    broker.process.wait()
    restarted = start_broker(broker_factory, tmp_path, small_disk / "data", **settings)
    after_restart = consume_after_restart(restarted)
    assert set(resumed) <= set(after_restart)               # nothing confirmed lost
    assert not set(drained) & set(after_restart)            # the acks were on disk


def test_a_durable_declare_the_full_disk_cannot_store_is_refused_and_stored_later(
        small_disk, broker_factory, tmp_path):
    settings = {"disk_free_limit": 0, "disk_reserve": 1_048_576}
    broker = start_broker(broker_factory, tmp_path, small_disk / "data", **settings)
    with RunningBystander(broker):
        connection = connect(broker, heartbeat=0)
        refused_channel, other_channel = connection.channel(), connection.channel()
        fill(small_disk / "filler")                 # behind the broker's back
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            refused_channel.queue_declare("declared-on-a-full-disk", durable=True)
        assert refused.value.reply_code == 406
        assert "database or disk is full" in refused.value.reply_text   # SQLite's
        assert broker.process.poll() is None
        other_channel.queue_declare("", exclusive=True)     # the connection still works
        os.unlink(small_disk / "filler")
        # The refused declare took effect in memory and went back into the journal:
        # the commit that confirms a later durable declare writes it first.
        other_channel.queue_declare("declared-after", durable=True)
        connection.close()
    assert broker.process.poll() is None

    broker.process.kill()
    broker.process.wait()
    restarted = start_broker(broker_factory, tmp_path, small_disk / "data", **settings)
    connection = connect(restarted)
    channel = connection.channel()
    for queue in ("declared-on-a-full-disk", "declared-after"):
        channel.queue_declare(queue, durable=True, passive=True)    # 404 if missing
    connection.close()
