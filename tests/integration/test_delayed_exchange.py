"""The x-delayed-message exchange (the interface of RabbitMQ's
rabbitmq_delayed_message_exchange plugin): declaration and its refusal, delivery order
by due time, never before publish time + x-delay, each x-delayed-type, publisher
confirms, mandatory returns, and held messages surviving a restart and a kill -9.

Warren-only: the reference RabbitMQ has no such plugin. "Never early" compares the
consumer's wall-clock receive time with the publisher's wall-clock time just before the
publish plus the delay; the broker runs on the same machine and clock."""

import signal
import time
from decimal import Decimal

import pika
import pika.exceptions
import pytest

from tests.support.pika_helpers import _test_deadline, chan, conn, names  # noqa: F401  (fixtures)
from tests.support.pika_helpers import close_quietly, connect, expect_channel_error

pytestmark = pytest.mark.warren_only("RabbitMQ 3.10 here runs without the "
                                     "rabbitmq_delayed_message_exchange plugin")

WAIT = 30.0
PERSISTENT = 2


def declare_delayed(channel, name: str, kind: str = "direct", durable: bool = False):
    channel.exchange_declare(name, "x-delayed-message", durable=durable,
                             arguments={"x-delayed-type": kind})


def delayed_publish(channel, exchange: str, routing_key: str, body: bytes, delay,
                    headers: dict | None = None, **kwargs) -> float:
    """Publish with x-delay `delay`; returns the wall-clock time just before it."""
    properties = pika.BasicProperties(headers={"x-delay": delay, **(headers or {})},
                                      delivery_mode=kwargs.pop("delivery_mode", None))
    sent = time.time()
    channel.basic_publish(exchange, routing_key, body, properties, **kwargs)
    return sent


def receive_full(channel, queue: str, count: int) -> list:
    """(method, properties, body, wall-clock receive time) of the next `count`
    deliveries of `queue`."""
    received = []
    for method, properties, body in channel.consume(queue, auto_ack=True,
                                                    inactivity_timeout=WAIT):
        assert method is not None, f"got {len(received)} of {count} from {queue}"
        received.append((method, properties, body, time.time()))
        if len(received) == count:
            break
    channel.cancel()
    return received


def receive(channel, queue: str, count: int) -> list[tuple[bytes, float]]:
    """(body, wall-clock receive time) of the next `count` deliveries of `queue`."""
    return [(body, at) for _, _, body, at in receive_full(channel, queue, count)]


def stop_and_restart(broker_factory, process, connection, data_dir: str, stop: str):
    """Stop the broker (SIGKILL for "kill", else a clean stop); one on the same data."""
    if stop == "kill":
        process.process.send_signal(signal.SIGKILL)
        process.process.wait()
    else:
        close_quietly(connection)
        assert process.stop() == 0
    return broker_factory(data_dir=data_dir)


def bound_queue(channel, names, exchange: str, routing_key: str = "k",
                arguments: dict | None = None, durable: bool = False) -> str:
    queue = names.queue()
    channel.queue_declare(queue, durable=durable)
    channel.queue_bind(queue, exchange, routing_key, arguments=arguments)
    return queue


def test_messages_arrive_in_due_order_and_never_early(chan, names):
    exchange = names.exchange()
    declare_delayed(chan, exchange)
    queue = bound_queue(chan, names, exchange)
    sent = {}
    for body, delay in ((b"third", 900), (b"first", 300), (b"now", 0), (b"second", 600)):
        sent[body] = (delayed_publish(chan, exchange, "k", body, delay), delay)
    received = receive(chan, queue, 4)
    assert [body for body, _ in received] == [b"now", b"first", b"second", b"third"]
    for body, at in received:
        published, delay = sent[body]
        assert at >= published + delay / 1000, (body, at - published)


@pytest.mark.parametrize("delay", [-5000, 0, "not a number", True])
def test_a_delay_that_is_not_positive_routes_at_once(chan, names, delay):
    exchange = names.exchange()
    declare_delayed(chan, exchange)
    queue = bound_queue(chan, names, exchange)
    delayed_publish(chan, exchange, "k", b"held", 3_600_000)
    delayed_publish(chan, exchange, "k", b"at-once", delay)
    assert [body for body, _ in receive(chan, queue, 1)] == [b"at-once"]
    # the hour-long one is still held: the queue got only the other
    assert chan.queue_declare(queue, passive=True).method.message_count == 0


@pytest.mark.parametrize("delay", ["250", Decimal("250.9")])
def test_string_and_float_delays_are_read_as_the_plugin_reads_them(chan, names, delay):
    exchange = names.exchange()
    declare_delayed(chan, exchange)
    queue = bound_queue(chan, names, exchange)
    published = delayed_publish(chan, exchange, "k", b"m", delay)
    [(_, at)] = receive(chan, queue, 1)
    assert at >= published + 0.25


@pytest.mark.parametrize("kind, routing_key, binding_key, arguments, headers", [
    ("direct", "k", "k", None, None),
    ("fanout", "anything", "", None, None),
    ("topic", "a.b.c", "a.#", None, None),
    ("headers", "", "", {"x-match": "all", "h": "v"}, {"h": "v"}),
])
def test_each_delayed_type_routes_as_that_type_when_due(chan, names, kind, routing_key,
                                                        binding_key, arguments, headers):
    exchange = names.exchange()
    declare_delayed(chan, exchange, kind)
    queue = bound_queue(chan, names, exchange, binding_key, arguments)
    unmatched = bound_queue(chan, names, exchange, "other.key" if kind != "fanout" else "",
                            {"x-match": "all", "h": "other"} if kind == "headers" else None)
    published = delayed_publish(chan, exchange, routing_key, b"m", 200, headers)
    [(body, at)] = receive(chan, queue, 1)
    assert body == b"m" and at >= published + 0.2
    expected_in_unmatched = 1 if kind == "fanout" else 0
    assert chan.queue_declare(unmatched, passive=True).method.message_count == \
        expected_in_unmatched


def test_routing_uses_the_bindings_at_due_time(chan, names):
    exchange = names.exchange()
    declare_delayed(chan, exchange)
    early = bound_queue(chan, names, exchange)
    delayed_publish(chan, exchange, "k", b"m", 500)
    chan.queue_unbind(early, exchange, "k")
    late = bound_queue(chan, names, exchange)
    assert [body for body, _ in receive(chan, late, 1)] == [b"m"]
    assert chan.queue_declare(early, passive=True).method.message_count == 0


@pytest.mark.parametrize("arguments", [{}, {"x-delayed-type": "nonsense"},
                                       {"x-delayed-type": "x-delayed-message"}])
def test_a_missing_or_invalid_delayed_type_is_refused_with_406(conn, chan, names,
                                                               arguments):
    error = expect_channel_error(conn, chan, 406, lambda: chan.exchange_declare(
        names.exchange(), "x-delayed-message", arguments=arguments))
    assert "Invalid argument, 'x-delayed-type' must be an existing exchange type" in \
        error.reply_text


def test_confirms_ack_held_messages(chan, names):
    exchange = names.exchange()
    declare_delayed(chan, exchange, durable=True)
    queue = bound_queue(chan, names, exchange, durable=True)
    chan.confirm_delivery()
    published = delayed_publish(chan, exchange, "k", b"m", 300, delivery_mode=PERSISTENT)
    [(_, at)] = receive(chan, queue, 1)   # basic_publish returned: it was confirmed
    assert at >= published + 0.3


def test_mandatory_unroutable_is_returned_at_publish_and_routable_is_held(chan, names):
    exchange = names.exchange()
    declare_delayed(chan, exchange)
    queue = bound_queue(chan, names, exchange, "bound")
    chan.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as info:
        delayed_publish(chan, exchange, "unbound", b"lost", 60_000, mandatory=True)
    [returned] = info.value.messages
    assert returned.method.reply_code == 312 and returned.body == b"lost"
    published = delayed_publish(chan, exchange, "bound", b"kept", 200, mandatory=True)
    [(body, at)] = receive(chan, queue, 1)
    assert body == b"kept" and at >= published + 0.2


def test_deleting_the_exchange_drops_its_held_messages(chan, names):
    exchange = names.exchange()
    declare_delayed(chan, exchange)
    queue = bound_queue(chan, names, exchange)
    delayed_publish(chan, exchange, "k", b"dropped", 300)
    chan.exchange_delete(exchange)
    declare_delayed(chan, exchange)
    chan.queue_bind(queue, exchange, "k")
    marker = delayed_publish(chan, exchange, "k", b"marker", 600)
    [(body, at)] = receive(chan, queue, 1)
    assert body == b"marker" and at >= marker + 0.6


def test_alternate_exchange_takes_what_nothing_routes_when_due(chan, names):
    alternate = names.exchange()
    chan.exchange_declare(alternate, "fanout")
    caught = bound_queue(chan, names, alternate, "")
    exchange = names.exchange()
    chan.exchange_declare(exchange, "x-delayed-message",
                          arguments={"x-delayed-type": "direct",
                                     "alternate-exchange": alternate})
    published = delayed_publish(chan, exchange, "nowhere", b"m", 200)
    [(body, at)] = receive(chan, caught, 1)
    assert body == b"m" and at >= published + 0.2


def durable_delayed_to_target(broker_factory, data_dir: str):
    """A broker on `data_dir` with a durable delayed exchange "delayed" bound with key
    "k" to the durable queue "target"; (process, connection, confirming channel)."""
    process = broker_factory(data_dir=data_dir)
    connection = connect(process)
    channel = connection.channel()
    declare_delayed(channel, "delayed", durable=True)
    channel.queue_declare("target", durable=True)
    channel.queue_bind("target", "delayed", "k")
    channel.confirm_delivery()
    return process, connection, channel


@pytest.mark.parametrize("stop", ["restart", "kill"])
def test_held_persistent_messages_survive_a_restart_and_kill_9(broker_factory, tmp_path,
                                                               stop):
    data_dir = str(tmp_path / "data")
    process, connection, channel = durable_delayed_to_target(broker_factory, data_dir)
    sent = {}
    for body, delay in ((b"late", 4000), (b"early", 2000)):
        sent[body] = (delayed_publish(channel, "delayed", "k", body, delay,
                                      delivery_mode=PERSISTENT), delay)
    restarted = stop_and_restart(broker_factory, process, connection, data_dir, stop)
    connection = connect(restarted)
    try:
        received = receive(connection.channel(), "target", 2)
    finally:
        close_quietly(connection)
    assert [body for body, _ in received] == [b"early", b"late"]
    for body, at in received:
        published, delay = sent[body]
        assert at >= published + delay / 1000


@pytest.mark.parametrize("stop", ["restart", "kill"])
def test_held_bodies_come_back_from_the_store_file_intact(broker_factory, tmp_path, stop):
    data_dir = str(tmp_path / "data")
    process, connection, channel = durable_delayed_to_target(broker_factory, data_dir)
    large = bytes(range(256)) * 800          # 200 KiB, over several frames
    delayed_publish(channel, "delayed", "k", large, 2500, delivery_mode=PERSISTENT)
    delayed_publish(channel, "delayed", "k", b"transient", 1500)
    delayed_publish(channel, "delayed", "k", b"small", 2000, delivery_mode=PERSISTENT)
    restarted = stop_and_restart(broker_factory, process, connection, data_dir, stop)
    connection = connect(restarted)
    try:
        received = receive_full(connection.channel(), "target", 2)
    finally:
        close_quietly(connection)
    # the transient message (due first) was not kept across the restart
    assert [body for _, _, body, _ in received] == [b"small", large]
    assert [properties.headers["x-delay"] for _, properties, _, _ in received] == \
        [-2000, -2500]


def test_a_released_message_carries_x_delay_negated(chan, names):
    exchange = names.exchange()
    declare_delayed(chan, exchange)
    queue = bound_queue(chan, names, exchange)
    delayed_publish(chan, exchange, "k", b"m", "250", headers={"other": "kept"})
    [(_, properties, _, _)] = receive_full(chan, queue, 1)
    assert properties.headers == {"other": "kept", "x-delay": -250}


@pytest.mark.parametrize("path", ["exchange binding", "alternate exchange"])
def test_a_message_reaching_a_delayed_exchange_on_the_way_is_delayed(chan, names, path):
    delayed = names.exchange()
    declare_delayed(chan, delayed)
    queue = bound_queue(chan, names, delayed)
    front = names.exchange()
    if path == "exchange binding":
        chan.exchange_declare(front, "direct")
        chan.exchange_bind(delayed, front, "k")
    else:
        chan.exchange_declare(front, "direct", arguments={"alternate-exchange": delayed})
    chan.confirm_delivery()
    published = delayed_publish(chan, front, "k", b"m", 300, mandatory=True)
    [(method, properties, body, at)] = receive_full(chan, queue, 1)
    assert body == b"m" and at >= published + 0.3
    assert method.exchange == front and properties.headers["x-delay"] == -300


def test_a_mandatory_message_nothing_past_the_delayed_exchange_routes_is_returned(
        chan, names):
    delayed = names.exchange()
    declare_delayed(chan, delayed)
    front = names.exchange()
    chan.exchange_declare(front, "fanout")
    chan.exchange_bind(delayed, front)
    chan.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as info:
        delayed_publish(chan, front, "unbound", b"lost", 60_000, mandatory=True)
    [returned] = info.value.messages
    assert (returned.method.reply_code, returned.method.exchange, returned.body) == \
        (312, front, b"lost")


def test_a_transaction_holds_its_delayed_messages_at_commit_and_rollback_holds_none(
        chan, names):
    exchange = names.exchange()
    declare_delayed(chan, exchange)
    queue = bound_queue(chan, names, exchange)
    chan.tx_select()
    delayed_publish(chan, exchange, "k", b"rolled back", 100)
    chan.tx_rollback()
    delayed_publish(chan, exchange, "k", b"committed", 100)
    # Not synchronisation: the time under test. The 100 ms delay elapses between the
    # publish and the commit, so a message wrongly held from its publish would be
    # queued by now and delivered before commit + 100 ms.
    time.sleep(0.5)
    assert chan.queue_declare(queue, passive=True).method.message_count == 0
    committed = time.time()
    chan.tx_commit()
    received = receive(chan, queue, 1)
    assert [body for body, _ in received] == [b"committed"]
    assert received[0][1] >= committed + 0.1
    chan.tx_commit()
    assert chan.queue_declare(queue, passive=True).method.message_count == 0


def test_cc_and_bcc_routing_keys_are_kept_until_due(chan, names):
    exchange = names.exchange()
    declare_delayed(chan, exchange)
    queues = {key: bound_queue(chan, names, exchange, key) for key in ("k", "cc", "bcc")}
    published = delayed_publish(chan, exchange, "k", b"m", 200,
                                headers={"CC": ["cc"], "BCC": ["bcc"]})
    for key, queue in queues.items():
        [(_, properties, body, at)] = receive_full(chan, queue, 1)
        assert body == b"m" and at >= published + 0.2, key
        assert properties.headers["CC"] == ["cc"] and "BCC" not in properties.headers
