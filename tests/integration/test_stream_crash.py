"""Kill -9 a broker that holds a stream queue; after a restart on the same data directory
every confirmed message is there, in publish order at its offset, new messages continue
the offsets, and a consumer offset stored by server-side tracking survives as well.
Warren only (each test starts brokers of its own with broker_factory)."""

import signal
import threading

import pika.exceptions
import pytest

from tests.support.pika_helpers import _test_deadline, close_quietly, connect, wait_until  # noqa: F401
from tests.support.stream_helpers import (
    Reader, STREAM, confirm_channel, publish_confirmed, texts,
)

pytestmark = pytest.mark.warren_only(
    "kills (SIGKILL) and restarts a Warren broker of its own (broker_factory)")

PIKA_TEST_TIMEOUT = 120
STREAM_NAME = "crash-stream"
TRACKING = {"x-stream-automatic-offset-tracking": True, "x-stream-offset": "first"}


def declare(broker) -> None:
    connection = connect(broker)
    connection.channel().queue_declare(STREAM_NAME, durable=True, arguments=STREAM)
    connection.close()


def kill(broker) -> None:
    broker.process.send_signal(signal.SIGKILL)
    broker.process.wait(10)


def test_confirmed_stream_messages_survive_sigkill(broker_factory, tmp_path):
    data_dir = str(tmp_path / "data")
    broker = broker_factory(data_dir=data_dir)
    declare(broker)
    connection = connect(broker)
    publish_confirmed(confirm_channel(connection), STREAM_NAME, texts("m", 2000))
    kill(broker)

    broker = broker_factory(data_dir=data_dir)
    connection = connect(broker)
    try:
        reader = Reader(connection, STREAM_NAME, "first")
        assert reader.read(2000) == texts("m", 2000)
        assert reader.offsets == list(range(2000))
        # New messages continue the offsets.
        publish_confirmed(confirm_channel(connection), STREAM_NAME, texts("after", 5))
        assert reader.read(2005) == texts("m", 2000) + texts("after", 5)
        assert reader.offsets == list(range(2005))
    finally:
        close_quietly(connection)


class Publisher(threading.Thread):
    """Publishes `m0`, `m1`, ... with confirms until the broker goes away; `attempted`
    and `confirmed` as in crash_workload.PublisherLog. `progress` is set once
    `enough` messages were confirmed."""

    def __init__(self, broker, enough: int):
        super().__init__(daemon=True)
        self.broker = broker
        self.enough = enough
        self.attempted = []
        self.confirmed = []
        self.progress = threading.Event()

    def run(self) -> None:
        try:
            connection = connect(self.broker, heartbeat=0)
            channel = confirm_channel(connection)
            while True:
                body = f"m{len(self.attempted)}"
                self.attempted.append(body)
                channel.basic_publish("", STREAM_NAME, body.encode())
                self.confirmed.append(body)
                if len(self.confirmed) == self.enough:
                    self.progress.set()
        except (pika.exceptions.AMQPError, OSError):
            return


def test_sigkill_while_publishing_keeps_every_confirmed_message(broker_factory, tmp_path):
    data_dir = str(tmp_path / "data")
    broker = broker_factory(data_dir=data_dir)
    declare(broker)
    publisher = Publisher(broker, enough=500)
    publisher.start()
    assert publisher.progress.wait(60), "the publisher got no confirms"
    kill(broker)                        # while the publisher goes on
    publisher.join(30)
    assert not publisher.is_alive()

    broker = broker_factory(data_dir=data_dir)
    connection = connect(broker)
    try:
        reader = Reader(connection, STREAM_NAME, "first")
        publish_confirmed(confirm_channel(connection), STREAM_NAME, ["sentinel"])
        assert wait_until(connection, lambda: "sentinel" in reader.texts, timeout=30)
        recovered = reader.texts[:-1]
        assert reader.texts[-1] == "sentinel"
        # What survived is what was published, in order, from the first message on:
        # every confirmed one and perhaps some whose confirm the kill cut off.
        assert len(recovered) >= len(publisher.confirmed)
        assert recovered == publisher.attempted[:len(recovered)]
        assert reader.offsets == list(range(len(recovered) + 1))
    finally:
        close_quietly(connection)


def test_tracked_offset_survives_sigkill(broker_factory, tmp_path):
    data_dir = str(tmp_path / "data")
    broker = broker_factory(data_dir=data_dir)
    declare(broker)
    connection = connect(broker)
    publisher = confirm_channel(connection)
    publish_confirmed(publisher, STREAM_NAME, texts("m", 20))
    reader = Reader(connection, STREAM_NAME, consumer_tag="tracker", ack=False,
                    arguments=TRACKING)
    assert reader.wait_for(20)
    reader.channel.basic_ack(reader.deliveries[11].method.delivery_tag, multiple=True)
    reader.close()                      # Cancel-Ok: the broker has stored offset 11
    # Confirmed after the offset was stored: the sync that confirms it writes the
    # consumer offsets as well (docs/storage-format.md, "Stream logs").
    publish_confirmed(publisher, STREAM_NAME, ["barrier"])
    kill(broker)

    broker = broker_factory(data_dir=data_dir)
    connection = connect(broker)
    try:
        reader = Reader(connection, STREAM_NAME, consumer_tag="tracker", arguments=TRACKING)
        assert reader.read(9) == texts("m", 8, start=12) + ["barrier"]
        assert reader.offsets == list(range(12, 21))
    finally:
        close_quietly(connection)
