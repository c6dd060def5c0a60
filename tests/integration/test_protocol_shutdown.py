"""Graceful shutdown of a dedicated Warren broker (broker_factory) on SIGTERM / SIGINT.

Like RabbitMQ stopping, the broker closes every client connection with
Connection.Close 320 CONNECTION_FORCED (RabbitMQ: "CONNECTION_FORCED - broker forced
connection closure with reason 'shutdown'") and then exits with status 0.
These tests need a Warren subprocess; they do not use the shared/external broker.
"""

import signal

import pika
import pytest
from pamqp import commands

from tests.support.raw_amqp import connect

pytestmark = pytest.mark.warren_only(
    "signals a Warren broker of its own (broker_factory) and checks its exit status")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_closes_clients_with_320_and_exits_0(broker_factory, sig):
    broker = broker_factory()
    pika_connection = pika.BlockingConnection(pika.ConnectionParameters(
        host=broker.host, port=broker.port, heartbeat=0, socket_timeout=10,
        stack_timeout=10, blocked_connection_timeout=10))
    raw = connect(broker.host, broker.port)
    try:
        pika_channel = pika_connection.channel()
        queue = pika_channel.queue_declare("", exclusive=True).method.queue
        pika_channel.basic_publish("", queue, b"before shutdown")
        raw.open_channel(1)
        raw.send_method(1, commands.Queue.Declare(exclusive=True))
        raw.expect(commands.Queue.DeclareOk, channel=1)

        broker.process.send_signal(sig)

        close = raw.wait_for_connection_close(timeout=15)   # answers with CloseOk
        assert close.channel == 0
        assert close.reply_code == 320
        assert close.reply_text.startswith("CONNECTION_FORCED - ")

        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            pika_connection.process_data_events(time_limit=15)
        assert closed.value.reply_code == 320
        assert closed.value.reply_text.startswith("CONNECTION_FORCED - ")

        assert broker.process.wait(timeout=30) == 0
    finally:
        raw.close()
        if pika_connection.is_open:
            pika_connection.close()
