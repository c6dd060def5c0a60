"""A raised resource alarm blocks publishing connections, as RabbitMQ's alarms do."""

import pika
import pytest

from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.warren_only(
    "raises Warren's disk alarm through its configuration file (BrokerProcess)")

QUEUE = "alarm-queue"


def test_disk_alarm_blocks_publishers_and_tells_them(tmp_path):
    config = tmp_path / "warren.toml"
    config.write_text("[alarms]\ndisk_free_limit = 1000000000000000000\n")
    broker = BrokerProcess(data_dir=str(tmp_path / "data"),
                           extra_args=("--config", str(config))).start()
    try:
        blocked = []
        publisher = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", broker.port, blocked_connection_timeout=None))
        publisher.add_on_connection_blocked_callback(
            lambda _connection, frame: blocked.append(frame.method.reason))
        channel = publisher.channel()
        channel.queue_declare(QUEUE)
        # As in RabbitMQ, the connection is held from its first Basic.Publish frame on:
        # "first" is queued only if its header and body came in the same read.
        channel.basic_publish("", QUEUE, b"first")
        deadline = 100
        while not blocked and deadline:
            publisher.process_data_events(time_limit=0.1)
            deadline -= 1
        assert blocked == ["low on disk"]
        channel.basic_publish("", QUEUE, b"second")   # not read while the alarm is raised
        observer = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", broker.port))
        queued = []
        for _ in range(2):
            _method, _properties, body = observer.channel().basic_get(QUEUE, auto_ack=True)
            queued.append(body)
        assert queued in ([b"first", None], [None, None])
        observer.close()
    finally:
        broker.kill()
    assert any("event=resource_alarm raised=disk" in line for line in broker.log_lines)
