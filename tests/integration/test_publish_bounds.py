"""Bounded per publish: an oversized message costs the broker no memory, the memory
alarm blocks publishers (even one in the middle of a message) and clears when the
queues drain. Each attack runs on its own connection to a dedicated broker while a
RunningBystander publishes and consumes throughout."""

import time

import pika
import pytest
from pamqp import commands, frame

from tests.support.bystander import RunningBystander
from tests.support.pika_helpers import consume_and_ack
from tests.support.raw_amqp import connect, content_body_frame, content_header_frame

pytestmark = pytest.mark.warren_only(
    "Warren's memory alarm and message size limit, on a Warren broker of its own (broker_factory)")

WATERMARK = 4_000_000            # bytes: [alarms] memory_high_watermark_absolute
FILL_BODY = bytes(100_000)       # the 40th of these takes the held memory past it
EVENT_TIMEOUT = 60               # seconds any awaited event may take on a loaded machine


def alarm_broker(broker_factory, tmp_path):
    config = tmp_path / "warren.toml"
    config.write_text(f"[alarms]\nmemory_high_watermark_absolute = {WATERMARK}\n")
    return broker_factory("--config", str(config))


def pika_connection(broker) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        broker.host, broker.port, heartbeat=0, blocked_connection_timeout=None))


class WatchedPublisher:
    """A pika connection that records connection.blocked / unblocked as they arrive."""

    def __init__(self, broker):
        self.connection = pika_connection(broker)
        self.events: list[str] = []
        self.connection.add_on_connection_blocked_callback(
            lambda _connection, frame_: self.events.append(frame_.method.reason))
        self.connection.add_on_connection_unblocked_callback(
            lambda _connection, _frame: self.events.append("unblocked"))
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()

    def fill_past_the_watermark(self, queue: str) -> int:
        """Publish confirmed messages until the queue holds more than the watermark.
        Each publish returns once confirmed, so the alarm (raised only after the last
        one is queued) cannot hold a publish of this loop."""
        self.channel.queue_declare(queue)
        count = WATERMARK // len(FILL_BODY) + 1
        for _ in range(count):
            self.channel.basic_publish("", queue, FILL_BODY)
        return count

    def wait_for(self, event: str) -> None:
        deadline = time.monotonic() + EVENT_TIMEOUT
        while event not in self.events:
            assert time.monotonic() < deadline, f"no {event!r} within {EVENT_TIMEOUT} s"
            self.connection.process_data_events(time_limit=0.2)


def message_count(broker, queue: str) -> int:
    connection = pika_connection(broker)
    try:
        return connection.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        connection.close()


def consume(broker, queue: str, count: int) -> list[bytes]:
    """`count` messages from `queue`, acked, on a connection that never publishes."""
    connection = pika_connection(broker)
    try:
        return consume_and_ack(connection.channel(), queue, count, EVENT_TIMEOUT)
    finally:
        connection.close()


def test_memory_alarm_blocks_publishers_and_clears_when_the_queue_drains(
        broker_factory, tmp_path):
    broker = alarm_broker(broker_factory, tmp_path)
    with RunningBystander(broker):
        publisher = WatchedPublisher(broker)
        unconfirmed = publisher.connection.channel()   # no confirms: returns at once
        filled = publisher.fill_past_the_watermark("filled")
        publisher.wait_for("low on memory")

        unconfirmed.basic_publish("", "filled", b"sent while blocked")
        assert message_count(broker, "filled") == filled   # not read while blocked

        assert consume(broker, "filled", filled) == [FILL_BODY] * filled
        publisher.wait_for("unblocked")
        publisher.channel.basic_publish("", "filled", b"after the alarm")   # confirmed
        assert consume(broker, "filled", 2) == [b"sent while blocked", b"after the alarm"]
        assert publisher.events == ["low on memory", "unblocked"]
        publisher.connection.close()
    assert broker.process.poll() is None
    assert any("event=resource_alarm raised=none" in line for line in broker.log_lines)


def test_a_connection_in_the_middle_of_a_message_is_paused_by_the_alarm(
        broker_factory, tmp_path):
    broker = alarm_broker(broker_factory, tmp_path)
    body = bytes(range(256)) * 800          # 204,800 bytes, sent in two halves
    half = len(body) // 2
    with RunningBystander(broker), connect(broker.host, broker.port,
                                           timeout=EVENT_TIMEOUT) as client:
        client.open_channel(1)
        client.open_channel(2)
        client.send_method(1, commands.Queue.Declare(queue="mid-publish"))
        client.expect(commands.Queue.DeclareOk, channel=1)
        client.send_raw(frame.marshal(commands.Basic.Publish(routing_key="mid-publish"), 1)
                        + content_header_frame(1, len(body))
                        + content_body_frame(1, body[:half]))
        client.send_method(2, commands.Basic.Qos(prefetch_count=1))
        client.expect(commands.Basic.QosOk, channel=2)     # the first half was read

        publisher = WatchedPublisher(broker)
        filled = publisher.fill_past_the_watermark("filled")
        blocked = client.expect(commands.Connection.Blocked, channel=0)
        assert blocked.reason == "low on memory"

        client.send_raw(content_body_frame(1, body[half:]))
        assert message_count(broker, "mid-publish") == 0   # the rest is not read

        consume(broker, "filled", filled)
        client.expect(commands.Connection.Unblocked, channel=0)
        assert consume(broker, "mid-publish", 1) == [body]
        publisher.connection.close()
    assert broker.process.poll() is None


def vm_status(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as status:
        return {line.split(":")[0]: int(line.split()[1]) * 1024
                for line in status if line.startswith(("VmRSS", "VmHWM"))}


def test_a_2_gib_body_costs_the_broker_no_memory_and_gets_rabbitmqs_406(broker_factory):
    broker = broker_factory()
    pid = broker.process.pid
    body_size = 2**31
    with RunningBystander(broker), connect(broker.host, broker.port,
                                           timeout=EVENT_TIMEOUT) as client:
        client.open_channel(1)
        client.send_method(1, commands.Queue.Declare(queue="huge"))
        client.expect(commands.Queue.DeclareOk, channel=1)
        with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
            clear_refs.write("5")       # VmHWM := VmRSS: the peak from now on
        before = vm_status(pid)["VmRSS"]

        client.send_raw(frame.marshal(commands.Basic.Publish(routing_key="huge"), 1)
                        + content_header_frame(1, body_size))
        payload = client.frame_max - 8
        batch = content_body_frame(1, bytes(payload)) * 32
        sent = 0
        while body_size - sent >= 32 * payload:
            client.send_raw(batch)
            sent += 32 * payload
        while sent < body_size:
            size = min(payload, body_size - sent)
            client.send_raw(content_body_frame(1, bytes(size)))
            sent += size

        close = client.expect(commands.Channel.Close, channel=1)
        peak = vm_status(pid)["VmHWM"]
        assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
            406, "PRECONDITION_FAILED - message size 2147483648 is larger than configured "
                 "max size 16777216", 60, 40)     # the 4.3 line's default, 16 MiB
        client.send_method(1, commands.Channel.CloseOk())
        client.open_channel(1)                       # the connection goes on
        client.publish(1, "huge", b"small")
        assert consume(broker, "huge", 1) == [b"small"]
    assert peak - before < 8 * 2**20, f"RSS rose by {(peak - before) / 2**20:.1f} MiB"
    assert broker.process.poll() is None


@pytest.mark.parametrize("limit, size, refused", [(1000, 1000, False), (1000, 1001, True)])
def test_max_message_size_is_configurable(broker_factory, tmp_path, limit, size, refused):
    config = tmp_path / "warren.toml"
    config.write_text(f"[limits]\nmax_message_size = {limit}\n")
    broker = broker_factory("--config", str(config))
    with connect(broker.host, broker.port) as client:
        client.open_channel(1)
        client.send_method(1, commands.Queue.Declare(queue="sized"))
        client.expect(commands.Queue.DeclareOk, channel=1)
        client.publish(1, "sized", bytes(size))
        client.send_method(1, commands.Basic.Get(queue="sized", no_ack=True))
        reply = client.read_frame_skip_heartbeats().value
    if refused:
        assert (reply.reply_code, reply.reply_text) == (
            406, f"PRECONDITION_FAILED - message size {size} is larger than configured "
                 f"max size {limit}")
    else:
        assert isinstance(reply, commands.Basic.GetOk)
