"""Fault injection through the `warren` fixture: each test shows what the client sees
(exceptions, reply codes and texts, callbacks) when the broker misbehaves on purpose,
and the ops' refusals of bad input."""

import asyncio
import time
import uuid

import aio_pika
import aiormq.exceptions
import pika
import pika.exceptions
import pytest
import trio
from pamqp import commands

from broker.config import AlarmLimits
from broker.server.alarms import ResourceAlarm

from broker.testing import BrokerRefused

# Upper bound, in real seconds, of one wait for something the client must see.
WAIT = 30.0


@pytest.fixture(scope="module")
def warren_broker(broker_of_the_module):
    """This module moves the broker's clock: a broker of its own (tests/conftest.py)."""
    return broker_of_the_module


def connect(warren, name: str = "under-test", **options) -> pika.BlockingConnection:
    return pika.BlockingConnection(warren.connection_parameters(
        client_properties={"connection_name": name}, **options))


def pump_until(connection: pika.BlockingConnection, seen, what: str) -> None:
    """Process the connection's events until `seen()` is true (WAIT seconds at most)."""
    deadline = time.monotonic() + WAIT
    while not seen():
        if time.monotonic() > deadline:
            raise AssertionError(f"the client did not see {what} within {WAIT} s")
        connection.process_data_events(time_limit=0.2)


def pump_until_raises(connection: pika.BlockingConnection, error_type, what: str):
    """Process events until pika raises `error_type` (WAIT seconds at most); returns it."""
    with pytest.raises(error_type) as raised:
        pump_until(connection, lambda: False, what)
    return raised.value


def declare_queue(channel, durable: bool = False) -> str:
    name = f"q-{uuid.uuid4().hex[:8]}"
    channel.queue_declare(name, durable=durable)
    return name


def ready_count(channel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


# -- publishes and confirms -----------------------------------------------------------

def test_nacked_publishes_raise_nack_error_and_are_not_enqueued(warren):
    connection = connect(warren)
    channel = connection.channel()
    channel.confirm_delivery()
    queue = declare_queue(channel)
    warren.nack_next_publishes(2)

    for body in (b"first", b"second"):
        with pytest.raises(pika.exceptions.NackError):
            channel.basic_publish("", queue, body)
    channel.basic_publish("", queue, b"third")

    assert ready_count(channel, queue) == 1
    assert channel.basic_get(queue, auto_ack=True)[2] == b"third"
    connection.close()


def test_nack_next_publishes_refuses_a_negative_count(warren):
    with pytest.raises(BrokerRefused, match="count must be 0 or more, not -1"):
        warren.nack_next_publishes(-1)


def test_delayed_confirms_arrive_in_order_once_released(warren):
    """Held confirms are not sent while held (the queue already has the messages),
    and go out in publish order, a nack among them, when delay_confirms(0) releases
    them; a short delay expires by itself."""

    async def scenario():
        connection = await aio_pika.connect(warren.aio_pika_url)
        async with connection:
            channel = await connection.channel()   # confirm mode (aio-pika's default)
            queue = await channel.declare_queue(f"q-{uuid.uuid4().hex[:8]}")
            warren.delay_confirms(600)
            warren.nack_next_publishes(1)
            publishes = [asyncio.ensure_future(channel.default_exchange.publish(
                aio_pika.Message(str(number).encode()), queue.name))
                for number in range(3)]
            other = await connection.channel(publisher_confirms=False)
            # Declare-Ok comes after the publishes were handled on this connection
            declared = await other.declare_queue(queue.name, passive=True)
            assert declared.declaration_result.message_count == 2   # one was nacked
            assert not any(publish.done() for publish in publishes)

            warren.delay_confirms(0)
            confirms = await asyncio.wait_for(
                asyncio.gather(*publishes, return_exceptions=True), WAIT)
            assert isinstance(confirms[0], aiormq.exceptions.DeliveryError)
            assert isinstance(confirms[0].frame, commands.Basic.Nack)
            assert [type(confirm) for confirm in confirms[1:]] == [
                commands.Basic.Ack, commands.Basic.Ack]

            warren.delay_confirms(0.2)
            confirm = await asyncio.wait_for(channel.default_exchange.publish(
                aio_pika.Message(b"late"), queue.name), WAIT)
            assert isinstance(confirm, commands.Basic.Ack)

    asyncio.run(scenario())


def test_delay_confirms_refuses_a_negative_delay(warren):
    with pytest.raises(BrokerRefused, match="seconds must be 0 or more, not -1.0"):
        warren.delay_confirms(-1)


# -- connections ----------------------------------------------------------------------

def test_closed_connection_sees_the_reply_code_and_text(warren):
    connection = connect(warren, "orders")
    assert warren.close_connection("orders", 320, "CONNECTION_FORCED - maintenance") == 1

    closed = pump_until_raises(connection, pika.exceptions.ConnectionClosedByBroker,
                               "Connection.Close")
    assert (closed.reply_code, closed.reply_text) == (320,
                                                      "CONNECTION_FORCED - maintenance")


def test_close_connection_names_the_connections_there_are(warren):
    connection = connect(warren, "orders")
    with pytest.raises(BrokerRefused) as refused:
        warren.close_connection("billing")
    assert str(refused.value) == (
        f"no open connection named 'billing' in vhost '{warren.vhost}'; its connections "
        "are named: 'orders' (clients name theirs with the connection_name client "
        "property)")
    assert connection.is_open
    connection.close()


def test_dropped_connection_is_lost_without_a_close(warren):
    connection = connect(warren, "orders")
    assert warren.drop_connection("orders") == 1

    lost = pump_until_raises(connection, pika.exceptions.StreamLostError,
                             "the socket closing")
    assert not isinstance(lost, pika.exceptions.ConnectionClosedByBroker)


def test_robust_aio_pika_connection_recovers_from_a_dropped_socket(warren):
    async def scenario():
        connection = await aio_pika.connect_robust(
            warren.aio_pika_url, client_properties={"connection_name": "robust"})
        async with connection:
            reconnected = asyncio.Event()
            connection.reconnect_callbacks.add(lambda *args: reconnected.set())
            channel = await connection.channel()
            queue = await channel.declare_queue(f"q-{uuid.uuid4().hex[:8]}")

            warren.drop_connection("robust")
            await asyncio.wait_for(reconnected.wait(), WAIT)

            await channel.default_exchange.publish(aio_pika.Message(b"after"), queue.name)
            message = await queue.get(timeout=WAIT)
            assert message.body == b"after"
            await message.ack()

    asyncio.run(scenario())


def test_stopped_heartbeats_fire_the_clients_heartbeat_timeout(warren):
    connection = connect(warren, "beating", heartbeat=1)
    assert warren.stop_heartbeats("beating") == 1

    pump_until_raises(connection, pika.exceptions.AMQPHeartbeatTimeout,
                      "its heartbeat timeout")


def test_stop_heartbeats_refuses_a_connection_without_heartbeats(warren):
    connection = connect(warren, "silent", heartbeat=0)
    with pytest.raises(BrokerRefused, match=r"connection 'silent' negotiated no "
                                            r"heartbeats \(heartbeat 0\)"):
        warren.stop_heartbeats("silent")
    connection.close()


# -- broker-wide ----------------------------------------------------------------------

def test_raised_alarm_blocks_publishers_until_cleared(warren):
    connection = connect(warren)
    notifications = []
    connection.add_on_connection_blocked_callback(
        lambda _connection, frame: notifications.append(frame.method))
    connection.add_on_connection_unblocked_callback(
        lambda _connection, frame: notifications.append(frame.method))
    channel = connection.channel()
    channel.basic_publish("", "nowhere", b"makes this connection a publisher")

    warren.raise_alarm("memory")
    pump_until(connection, lambda: notifications, "connection.blocked")
    assert notifications[0].NAME == "Connection.Blocked"
    assert notifications[0].reason == "low on memory"

    warren.clear_alarm("memory")
    pump_until(connection, lambda: len(notifications) == 2, "connection.unblocked")
    assert notifications[1].NAME == "Connection.Unblocked"
    connection.close()


def test_readings_do_not_clear_a_forced_alarm():
    readings = {"memory": 2000, "disk": 10_000}
    changes = []
    alarm = ResourceAlarm(AlarmLimits(disk_free_limit=100), "/data", changes.append,
                          read_memory=lambda: readings["memory"],
                          read_disk=lambda path: readings["disk"])
    alarm.memory_limit = 1000

    async def checks():
        alarm.check()                       # measured: memory
        alarm.force("memory", True)
        alarm.force("disk", True)
        readings["memory"] = 10
        alarm.check()                       # measured: nothing; both stay forced
        alarm.check_disk()
        assert alarm.raised == {"memory", "disk"}
        alarm.force("disk", False)
        readings["memory"] = 2000
        alarm.check()                       # measured: memory, forced too
        alarm.force("memory", False)        # the reading still says memory

    trio.run(checks)
    assert changes == [{"memory"}, {"memory", "disk"}, {"memory"}]


def test_raise_alarm_names_the_alarms_there_are(warren):
    with pytest.raises(BrokerRefused, match="kind must be one of memory, disk, not 'cpu'"):
        warren.raise_alarm("cpu")


def test_an_alarm_left_raised_is_cleared_for_the_next_test(warren_broker):
    first = warren_broker.new_vhost()
    first.raise_alarm("disk")
    first.remove()

    second = warren_broker.new_vhost()
    try:
        connection = connect(second, blocked_connection_timeout=WAIT)
        channel = connection.channel()
        channel.confirm_delivery()
        queue = declare_queue(channel)
        channel.basic_publish("", queue, b"not blocked")   # confirmed: not blocked
        assert ready_count(channel, queue) == 1
        connection.close()
    finally:
        second.remove()


def test_short_consumer_timeout_closes_the_channel_with_406(warren):
    warren.set_consumer_timeout(100)
    connection = connect(warren)
    channel = connection.channel()
    queue = declare_queue(channel)
    channel.basic_publish("", queue, b"never acked")
    channel.basic_consume(queue, lambda *delivery: None)
    connection.call_later(WAIT, channel.stop_consuming)   # bounds the wait below

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as raised:
        channel.start_consuming()
    closed = raised.value
    assert closed.reply_code == 406
    assert closed.reply_text.startswith(
        "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. "
        "Timeout value used: 100 ms.")
    connection.close()


def test_the_consumer_timeout_is_put_back_when_the_vhost_is_removed(warren_broker):
    shortened = warren_broker.new_vhost()
    shortened.set_consumer_timeout(1000)
    shortened.remove()
    warren = warren_broker.new_vhost()
    try:
        connection = connect(warren, heartbeat=0)   # an advance must not drop it
        channel = connection.channel()
        queue = declare_queue(channel)
        channel.basic_publish("", queue, b"held")
        channel.basic_consume(queue, lambda *delivery: None)
        warren.wait_for_consumer(queue)
        warren.advance(10)   # ten times the shortened timeout; the usual one is 30 min
        assert warren.queue(queue).unacked == 1
        assert channel.queue_declare(queue, passive=True)   # the channel is still open
        connection.close()
    finally:
        warren.remove()


def test_set_consumer_timeout_refuses_zero(warren):
    with pytest.raises(BrokerRefused, match="milliseconds must be more than 0, not 0"):
        warren.set_consumer_timeout(0)


# -- restart --------------------------------------------------------------------------

def test_restart_closes_with_320_and_keeps_durable_messages(warren):
    connection = connect(warren)
    channel = connection.channel()
    channel.confirm_delivery()
    queue = declare_queue(channel, durable=True)
    for number in range(3):
        channel.basic_publish("", queue, str(number).encode(),
                              pika.BasicProperties(delivery_mode=2))

    warren.restart()

    closed = pump_until_raises(connection, pika.exceptions.ConnectionClosedByBroker,
                               "the restart's Connection.Close")
    assert closed.reply_code == 320
    connection = pika.BlockingConnection(pika.URLParameters(warren.url))
    channel = connection.channel()
    assert [channel.basic_get(queue, auto_ack=True)[2] for _ in range(3)] == [
        b"0", b"1", b"2"]
    connection.close()
