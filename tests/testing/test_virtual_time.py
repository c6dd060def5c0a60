"""Virtual time with pika: `warren.advance(seconds)` makes TTLs, queue expiry, delayed
messages, consumer timeouts, stream timestamps and the broker's heartbeat checks fall
due at once. Nothing
here waits for real time to pass.

The test's own connections turn heartbeats off: an advance longer than twice a
connection's heartbeat interval drops it (which the heartbeat test relies on)."""

import datetime
import time
from urllib.parse import quote

import pika
import pika.exceptions
import pytest
import requests

from broker.testing import BrokerRefused

DELIVERY_WAIT = 10.0   # real seconds a consumer waits for a message before failing


@pytest.fixture(scope="module")
def warren_broker(broker_of_the_module):
    """This module moves the broker's clock: a broker of its own (tests/conftest.py)."""
    return broker_of_the_module


@pytest.fixture
def vhost_channel(warren):
    connection = pika.BlockingConnection(warren.connection_parameters(heartbeat=0))
    yield connection.channel()
    if connection.is_open:
        connection.close()


def ready_count(vhost_channel, queue: str) -> int:
    return vhost_channel.queue_declare(queue, passive=True).method.message_count


def next_body(vhost_channel, queue: str) -> bytes | None:
    """The next message of `queue` as a consumer gets it, or None if none came within
    DELIVERY_WAIT seconds."""
    for _method, _properties, body in vhost_channel.consume(
            queue, auto_ack=True, inactivity_timeout=DELIVERY_WAIT):
        vhost_channel.cancel()
        return body
    return None


def management_get(warren, path: str) -> requests.Response:
    return requests.get(f"{warren.management_url}/api/{path}",
                        auth=(warren.user, warren.password), timeout=10)


def queue_status(warren, queue: str) -> int:
    """The management API's status for the queue: looking does not count as using it."""
    return management_get(warren, f"queues/{quote(warren.vhost, safe='')}/{queue}"
                          ).status_code


def connection_names(warren) -> list[str]:
    reply = management_get(warren, "connections")
    reply.raise_for_status()
    return [connection["client_properties"].get("connection_name")
            for connection in reply.json()]


def test_per_message_expiration_runs_on_the_advanced_clock(warren, vhost_channel):
    vhost_channel.queue_declare("expired")
    vhost_channel.queue_declare("orders", arguments={"x-dead-letter-exchange": "",
                                               "x-dead-letter-routing-key": "expired"})
    vhost_channel.basic_publish("", "orders", b"order 1",
                          pika.BasicProperties(expiration="60000"))

    warren.advance(59)
    assert (ready_count(vhost_channel, "orders"), ready_count(vhost_channel, "expired")) == (1, 0)

    warren.advance(2)
    assert ready_count(vhost_channel, "orders") == 0
    method, _properties, body = vhost_channel.basic_get("expired", auto_ack=True)
    assert body == b"order 1"


def test_queue_message_ttl_runs_on_the_advanced_clock(warren, vhost_channel):
    vhost_channel.queue_declare("orders", arguments={"x-message-ttl": 30000})
    vhost_channel.basic_publish("", "orders", b"order 1")

    warren.advance(29)
    assert ready_count(vhost_channel, "orders") == 1

    warren.advance(2)
    assert ready_count(vhost_channel, "orders") == 0


def test_an_unused_queue_expires_on_the_advanced_clock(warren, vhost_channel):
    vhost_channel.queue_declare("idle", arguments={"x-expires": 3600000})

    warren.advance(3599)
    assert queue_status(warren, "idle") == 200   # a passive declare would renew it

    warren.advance(2)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        vhost_channel.queue_declare("idle", passive=True)
    assert refused.value.reply_code == 404


def test_a_delayed_message_is_delivered_once_its_delay_has_been_advanced(warren, vhost_channel):
    vhost_channel.exchange_declare("later", "x-delayed-message",
                             arguments={"x-delayed-type": "direct"})
    vhost_channel.queue_declare("reminders")
    vhost_channel.queue_bind("reminders", "later", "remind")
    vhost_channel.basic_publish("later", "remind", b"in ten minutes",
                          pika.BasicProperties(headers={"x-delay": 600000}))

    warren.advance(599)
    assert ready_count(vhost_channel, "reminders") == 0

    warren.advance(2)
    # The due message's body is read back from disk after advance returns: consume it.
    assert next_body(vhost_channel, "reminders") == b"in ten minutes"


def test_the_broker_drops_a_connection_that_stopped_heartbeating(warren):
    def connect(name: str, heartbeat: int) -> pika.BlockingConnection:
        # Not called into until the end: pika sends no heartbeat meanwhile.
        return pika.BlockingConnection(warren.connection_parameters(
            heartbeat=heartbeat, client_properties={"connection_name": name}))

    silent, patient = connect("silent", 10), connect("patient", 60)
    try:
        warren.advance(19)
        assert sorted(connection_names(warren)) == ["patient", "silent"]

        # The broker checks every half interval: a silent peer is dropped between two
        # and two and a half intervals of silence.
        warren.advance(6)
        assert connection_names(warren) == ["patient"]
        with pytest.raises(pika.exceptions.StreamLostError):
            silent.process_data_events(time_limit=0)
    finally:
        patient.close()


def test_an_unacked_delivery_times_out_on_the_advanced_clock(warren, vhost_channel):
    connection = vhost_channel.connection
    closed_by = []
    vhost_channel._impl.add_on_close_callback(lambda _channel, reason: closed_by.append(reason))
    vhost_channel.queue_declare("jobs", arguments={"x-consumer-timeout": 60000})
    vhost_channel.basic_publish("", "jobs", b"job 1")
    vhost_channel.basic_consume("jobs", lambda *delivery: None)   # never acks
    connection.process_data_events(time_limit=DELIVERY_WAIT)

    warren.advance(59)
    connection.process_data_events(time_limit=0)
    assert closed_by == []

    # As in RabbitMQ, the channel is closed between 1 and 1.5 timeouts after delivery.
    warren.advance(31)
    connection.process_data_events(time_limit=0)
    assert [reason.reply_code for reason in closed_by] == [406]
    assert ready_count(connection.channel(), "jobs") == 1   # back in its queue


def test_advancing_by_a_negative_time_is_refused(warren):
    with pytest.raises(BrokerRefused) as refused:
        warren.advance(-5)
    assert str(refused.value) == ("cannot advance time by -5 seconds: time only moves "
                                  "forward; pass a finite number of seconds >= 0")


def test_stream_publish_timestamps_follow_the_broker_clock(warren, vhost_channel):
    """A stream stamps each message with the broker's wall clock, which advance moves:
    a consumer starting from a moment between two advances gets only what came after."""
    vhost_channel.queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
    vhost_channel.confirm_delivery()
    vhost_channel.basic_publish("", "events", b"before")
    moment = time.time() + warren.advance(0) + 60   # a minute after "before", broker time
    warren.advance(120)
    vhost_channel.basic_publish("", "events", b"after")
    vhost_channel.basic_qos(prefetch_count=10)
    start = datetime.datetime.fromtimestamp(moment, datetime.timezone.utc)
    bodies = []
    for method, _properties, body in vhost_channel.consume(
            "events", arguments={"x-stream-offset": start},
            inactivity_timeout=DELIVERY_WAIT):
        if method is None:
            break
        vhost_channel.basic_ack(method.delivery_tag)
        bodies.append(body)
        if body == b"after":
            break
    vhost_channel.cancel()
    assert bodies == [b"after"]
