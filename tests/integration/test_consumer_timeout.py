"""Consumer timeouts with pika: a delivery left unacked longer than the timeout closes
its channel with 406 PRECONDITION_FAILED and RabbitMQ's text, and goes back to its queue
to be redelivered; channels that ack, or consume without acks, are left alone; the
queue's `x-consumer-timeout` argument and the `consumer-timeout` policy key override the
broker's `consumer_timeout` (Warren only: RabbitMQ 3.10 ignores the argument and refuses
the policy key; RabbitMQ 3.12 and later honour both).

Each test that RabbitMQ 3.10 can pass runs twice: against a Warren with `[limits]
consumer_timeout = 1000`, and against a throw-away RabbitMQ 3.10 node the module starts
with `consumer_timeout = 1000` and a channel check every 100 ms (`channel_tick_interval`,
60 s by default), tests/support/rabbitmq_node.py. With WARREN_TEST_BROKER set the module is not
run: it brings its own brokers, configured as it needs them.
"""

from types import SimpleNamespace

import pika.exceptions
import pytest

from tests.support.pika_helpers import (_test_deadline, close_quietly, connect, unique,  # noqa: F401
                                        wait_for_count, wait_until)
from tests.support.rabbitmq_node import HOST, NodeError, RabbitInstance

TIMEOUT_MS = 1000
CLOSE_DEADLINE = 90.0      # a bound for a loaded machine (RabbitMQ's default check: 60 s)
PIKA_TEST_TIMEOUT = 240
TEXT = ("PRECONDITION_FAILED - delivery acknowledgement on channel {} timed out. Timeout "
        "value used: {} ms. This timeout value can be configured, see consumers doc guide "
        "to learn more")


pytestmark = pytest.mark.warren_only(
    "starts its own Warren and RabbitMQ nodes with consumer_timeout = 1000 (the "
    "RabbitMQ side runs in the default suite)")


@pytest.fixture(scope="module")
def rabbitmq_with_timeout():
    """A throw-away RabbitMQ 3.10 node with consumer_timeout TIMEOUT_MS."""
    node = RabbitInstance(start_timeout=120, node_prefix="ctimeout", line="3.10",
                          extra_config=f"consumer_timeout = {TIMEOUT_MS}\n",
                          advanced_config="[{rabbit, [{channel_tick_interval, 100}]}].")
    try:
        node.start()
    except NodeError as error:
        node.stop()
        pytest.fail(f"the RabbitMQ side of the consumer-timeout tests did not start: {error}")
    yield SimpleNamespace(host=HOST, port=node.port)
    node.stop()


@pytest.fixture(params=["warren", "rabbitmq"])
def timeout_broker(request, broker_factory, tmp_path):
    """A broker of the 3.10 line whose consumer_timeout is TIMEOUT_MS: Warren, then
    RabbitMQ."""
    if request.param == "rabbitmq":
        return request.getfixturevalue("rabbitmq_with_timeout")
    config = tmp_path / "warren.toml"
    config.write_text(f"[limits]\nconsumer_timeout = {TIMEOUT_MS}\n")
    return broker_factory("--rabbitmq", "3.10", "--config", str(config))


class Watched:
    """A channel of `connection` whose Channel.Close from the broker is recorded."""

    def __init__(self, connection):
        self.channel = connection.channel()
        self.closed_by: list[pika.exceptions.ChannelClosed] = []
        self.channel._impl.add_on_close_callback(
            lambda _channel, reason: self.closed_by.append(reason))

    def wait_for_close(self, connection) -> pika.exceptions.ChannelClosed:
        assert wait_until(connection, lambda: self.closed_by, timeout=CLOSE_DEADLINE), \
            "the broker did not close the channel"
        return self.closed_by[0]


def hold_one_unacked(connection, queue: str, arguments=None) -> Watched:
    """A channel whose consumer got one message from a new `queue` and never acks it."""
    watched = Watched(connection)
    channel = watched.channel
    channel.queue_declare(queue, arguments=arguments)
    channel.basic_publish("", queue, b"held")
    got = []
    channel.basic_consume(queue, lambda *delivery: got.append(delivery))
    assert wait_until(connection, lambda: got), "the message was not delivered"
    return watched


def test_an_unacked_delivery_closes_its_channel_with_406_and_rabbitmqs_text(
        timeout_broker):
    connection = connect(timeout_broker)
    try:
        other = connection.channel()
        queue = unique("ctimeout")
        watched = hold_one_unacked(connection, queue)
        reason = watched.wait_for_close(connection)
        assert (reason.reply_code, reason.reply_text) == (
            406, TEXT.format(watched.channel.channel_number, TIMEOUT_MS))
        assert connection.is_open and other.is_open
        assert wait_for_count(other, queue, 1) == 1      # requeued
        other.queue_delete(queue)
    finally:
        close_quietly(connection)


def test_the_timed_out_message_is_redelivered_to_another_consumer(timeout_broker):
    connection = connect(timeout_broker)
    second = connect(timeout_broker)
    try:
        queue = unique("ctimeout")
        hold_one_unacked(connection, queue).wait_for_close(connection)
        channel = second.channel()
        got = []
        channel.basic_consume(queue, lambda _ch, method, _props, body:
                              got.append((method.redelivered, body)))
        assert wait_until(second, lambda: got)
        assert got == [(True, b"held")]
        channel.basic_ack(1)
        channel.queue_delete(queue)
    finally:
        close_quietly(connection)
        close_quietly(second)


@pytest.mark.parametrize("auto_ack", [False, True], ids=["acking", "no-ack"])
def test_consumers_that_ack_in_time_or_need_no_acks_are_left_alone(timeout_broker,
                                                                  auto_ack):
    """A consumer gets its first message before another channel's delivery that is never
    acked; once that channel is closed for it, the first consumer still works."""
    connection = connect(timeout_broker)
    try:
        quick = Watched(connection)
        queue = unique("ctimeout-quick")
        quick.channel.queue_declare(queue)
        got = []

        def on_message(channel, method, _properties, body):
            got.append(body)
            if not auto_ack:
                channel.basic_ack(method.delivery_tag)

        quick.channel.basic_consume(queue, on_message, auto_ack=auto_ack)
        quick.channel.basic_publish("", queue, b"first")
        assert wait_until(connection, lambda: got == [b"first"])
        late_queue = unique("ctimeout-late")
        hold_one_unacked(connection, late_queue).wait_for_close(connection)
        quick.channel.basic_publish("", queue, b"after")
        assert wait_until(connection, lambda: got == [b"first", b"after"])
        assert quick.closed_by == [] and quick.channel.is_open
        quick.channel.queue_delete(queue)
        quick.channel.queue_delete(late_queue)
    finally:
        close_quietly(connection)


@pytest.mark.warren_only("RabbitMQ 3.10 ignores x-consumer-timeout (3.12 and later "
                         "honour it)")
@pytest.mark.warren_rabbitmq("4.0")   # classic queues time consumers out up to 4.0
def test_the_queue_argument_overrides_the_broker_timeout(warren):
    connection = connect(warren)     # the session broker: its 30-minute default
    try:
        queue = unique("ctimeout-arg")
        watched = hold_one_unacked(connection, queue, arguments={"x-consumer-timeout": 500})
        reason = watched.wait_for_close(connection)
        assert (reason.reply_code, reason.reply_text) == (
            406, TEXT.format(watched.channel.channel_number, 500))
        connection.channel().queue_delete(queue)
    finally:
        close_quietly(connection)


@pytest.mark.warren_only("RabbitMQ 3.10 refuses the consumer-timeout policy key (3.12 "
                         "and later honour it)")
@pytest.mark.warren_rabbitmq("4.0")   # classic queues time consumers out up to 4.0
def test_the_policy_overrides_the_broker_timeout_and_the_lower_of_it_and_the_argument_wins(
        broker_admin, warren):
    broker_admin.set_policy(warren.vhost, "timeout", "^ctimeout-",
                              {"consumer-timeout": 600})
    connection = pika.BlockingConnection(warren.connection_parameters())
    try:
        watched = hold_one_unacked(connection, unique("ctimeout-policy"),
                                   arguments={"x-consumer-timeout": 3_600_000})
        reason = watched.wait_for_close(connection)
        assert (reason.reply_code, reason.reply_text) == (
            406, TEXT.format(watched.channel.channel_number, 600))
    finally:
        close_quietly(connection)


@pytest.mark.warren_only("RabbitMQ 3.10 accepts any x-consumer-timeout, as an argument "
                         "it does not know (3.12 and later check it)")
@pytest.mark.warren_rabbitmq("4.0")   # classic queues time consumers out up to 4.0
def test_a_negative_queue_argument_is_refused(warren):
    connection = connect(warren)
    try:
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            channel.queue_declare(unique("ctimeout"), arguments={"x-consumer-timeout": -1})
        assert refused.value.reply_code == 406
        assert "invalid arg 'x-consumer-timeout'" in refused.value.reply_text
        assert "{value_negative,-1}" in refused.value.reply_text
    finally:
        close_quietly(connection)


# -- RabbitMQ 4.3: quorum consumers are cancelled, classic ones never time out ------------

@pytest.fixture(scope="module")
def rabbitmq_4_3_with_timeout():
    """A throw-away RabbitMQ 4.3 node with consumer_timeout TIMEOUT_MS (its quorum
    queues check deliveries themselves: no channel tick involved)."""
    node = RabbitInstance(start_timeout=120, node_prefix="ctimeout43", line="4.3",
                          extra_config=f"consumer_timeout = {TIMEOUT_MS}\n")
    try:
        node.start()
    except NodeError as error:
        node.stop()
        pytest.fail(f"the RabbitMQ 4.3 node of the consumer-timeout tests did not start: "
                    f"{error}")
    yield SimpleNamespace(host=HOST, port=node.port)
    node.stop()


@pytest.fixture(params=["warren", "rabbitmq"])
def timeout_broker_4_3(request, broker_factory, tmp_path):
    """A broker of the 4.3 line whose consumer_timeout is TIMEOUT_MS: Warren, then
    RabbitMQ 4.3.6."""
    if request.param == "rabbitmq":
        return request.getfixturevalue("rabbitmq_4_3_with_timeout")
    config = tmp_path / "warren.toml"
    config.write_text(f"[limits]\nconsumer_timeout = {TIMEOUT_MS}\n")
    return broker_factory("--rabbitmq", "4.3", "--config", str(config))


def test_under_4_3_a_quorum_consumer_that_times_out_is_cancelled(timeout_broker_4_3):
    """Measured on RabbitMQ 4.3.6: the consumer of a quorum queue gets Basic.Cancel, its
    timed-out messages go back first (handed back: x-acquired-count, no
    x-delivery-count), the channel stays open, and an ack of a timed-out delivery is no
    error. A classic consumer on the same channel, whose delivery is older, is left
    alone."""
    connection = connect(timeout_broker_4_3)
    try:
        other = connection.channel()
        other.confirm_delivery()
        classic, qq = unique("ctimeout-classic"), unique("ctimeout-qq")
        other.queue_declare(classic, durable=True)
        other.queue_declare(qq, durable=True, arguments={"x-queue-type": "quorum"})
        other.basic_publish("", classic, b"c")
        for body in (b"m1", b"m2", b"m3"):
            other.basic_publish("", qq, body)
        watched = Watched(connection)
        channel = watched.channel
        channel.basic_qos(prefetch_count=2)
        cancelled, got = [], []
        channel.add_on_cancel_callback(lambda frame: cancelled.append(
            frame.method.consumer_tag))
        classic_tag = channel.basic_consume(classic, lambda *delivery: got.append(delivery))
        assert wait_until(connection, lambda: got)
        qq_tag = channel.basic_consume(qq, lambda *delivery: got.append(delivery))
        assert wait_until(connection, lambda: cancelled, timeout=CLOSE_DEADLINE)
        assert cancelled == [qq_tag] and channel.is_open and not watched.closed_by
        assert [body for *_, body in got] == [b"c", b"m1", b"m2"]
        channel.basic_ack(got[1][1].delivery_tag)
        channel.basic_ack(got[0][1].delivery_tag)      # the classic one
        assert wait_for_count(other, classic, 0) == 0
        assert wait_for_count(other, qq, 3) == 3
        assert channel.is_open and classic_tag in channel.consumer_tags
        left = []
        for _ in range(3):
            method, properties, body = other.basic_get(qq, auto_ack=True)
            headers = properties.headers or {}
            left.append((body, method.redelivered, headers.get("x-delivery-count"),
                         headers.get("x-acquired-count")))
        assert left == [(b"m1", True, None, 1), (b"m2", True, None, 1),
                        (b"m3", False, None, None)]
    finally:
        close_quietly(connection)
    # Deleted from another connection: RabbitMQ keeps the cancelled consumer on its
    # channel, and deleting its queue would send pika a second Basic.Cancel for it.
    connection = connect(timeout_broker_4_3)
    try:
        channel = connection.channel()
        channel.queue_delete(classic)
        channel.queue_delete(qq)
    finally:
        close_quietly(connection)


def test_under_4_3_a_timed_out_basic_get_closes_the_channel(timeout_broker_4_3):
    """Measured on RabbitMQ 4.3.6: 406 saying "-1 ms" (RabbitMQ's fallback), the message
    handed back."""
    connection = connect(timeout_broker_4_3)
    try:
        other = connection.channel()
        other.confirm_delivery()
        qq = unique("ctimeout-get")
        other.queue_declare(qq, durable=True, arguments={"x-queue-type": "quorum"})
        other.basic_publish("", qq, b"g")
        watched = Watched(connection)
        method, _, _ = watched.channel.basic_get(qq)
        assert method is not None
        reason = watched.wait_for_close(connection)
        assert (reason.reply_code, reason.reply_text) == (
            406, TEXT.format(watched.channel.channel_number, -1))
        assert wait_for_count(other, qq, 1) == 1
        method, properties, _ = other.basic_get(qq, auto_ack=True)
        assert (properties.headers or {}) == {"x-acquired-count": 1}
        other.queue_delete(qq)
    finally:
        close_quietly(connection)


def test_under_4_3_a_consumers_own_timeout_replaces_the_brokers(timeout_broker_4_3):
    """x-consumer-timeout on Basic.Consume (4.3's quorum queues): a consumer that asks
    for a minute is still there when one on the broker's TIMEOUT_MS, whose delivery
    came later, is cancelled."""
    connection = connect(timeout_broker_4_3)
    patient, hasty = unique("ctimeout-patient"), unique("ctimeout-hasty")
    try:
        other = connection.channel()
        other.confirm_delivery()
        for queue in (patient, hasty):
            other.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
            other.basic_publish("", queue, b"m")
        channel = connection.channel()
        channel.basic_qos(prefetch_count=1)
        cancelled, got = [], []
        channel.add_on_cancel_callback(lambda frame: cancelled.append(
            frame.method.consumer_tag))
        patient_tag = channel.basic_consume(patient, lambda *delivery: got.append(delivery),
                                            arguments={"x-consumer-timeout": 60000})
        assert wait_until(connection, lambda: got)
        hasty_tag = channel.basic_consume(hasty, lambda *delivery: got.append(delivery))
        assert wait_until(connection, lambda: cancelled, timeout=CLOSE_DEADLINE)
        assert cancelled == [hasty_tag] and patient_tag in channel.consumer_tags
        channel.basic_ack(got[0][1].delivery_tag)
        assert wait_for_count(other, patient, 0) == 0
    finally:
        close_quietly(connection)
    connection = connect(timeout_broker_4_3)
    try:
        channel = connection.channel()
        channel.queue_delete(patient)
        channel.queue_delete(hasty)
    finally:
        close_quietly(connection)
