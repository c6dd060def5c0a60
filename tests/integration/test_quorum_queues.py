"""Quorum queues as pika sees them, against Warren and (WARREN_TEST_BROKER) RabbitMQ
3.10: what a declaration may be, the x-delivery-count header, the delivery limit from
the argument, a policy and an operator policy, and what a message past it becomes.

RabbitMQ handles a nack or a channel close asynchronously, so a message that comes
back is waited for (with a deadline) rather than expected at once.
"""

import time

import pika
import pika.exceptions
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, conn, chan: fixtures)
    WAIT, _test_deadline, chan, close_quietly, conn, connect, unique, wait_for_count,
)

PIKA_TEST_TIMEOUT = 120   # rabbitmqctl takes about a second per call
QUORUM = {"x-queue-type": "quorum"}
COUNT = "x-delivery-count"


@pytest.fixture
def space(broker_admin, warren):
    """A fresh vhost (so policies reach only this test's queues), the broker's admin
    operations and a channel in it."""
    connection = pika.BlockingConnection(warren.connection_parameters())
    try:
        yield broker_admin, warren.vhost, connection, connection.channel()
    finally:
        close_quietly(connection)


def quorum(channel, name, **arguments):
    channel.queue_declare(name, durable=True, arguments={**QUORUM, **arguments})


def next_message(channel, queue):
    """Basic.Get (unacked) of the next message, waiting for one to be there."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        method, properties, body = channel.basic_get(queue)
        if method is not None:
            return method, properties.headers or {}, body
        channel.connection.process_data_events(time_limit=0.01)
    raise AssertionError(f"nothing in {queue}")


def counts_until_gone(channel, queue, expected_deliveries):
    """Get the queue's only message and nack it back until it is gone; the
    x-delivery-count each delivery carried."""
    counts = []
    for _ in range(expected_deliveries):
        method, headers, _ = next_message(channel, queue)
        counts.append(headers[COUNT])
        channel.basic_nack(method.delivery_tag, requeue=True)
    assert wait_for_count(channel, queue, 0) == 0
    assert channel.basic_get(queue)[0] is None
    return counts


# -- declarations ------------------------------------------------------------------------

@pytest.mark.parametrize("server_named, kwargs, words", [
    (True, {"durable": True}, "Cannot declare a server-named queue for type "
                              "rabbit_quorum_queue"),
    (False, {"durable": False},
     "invalid property 'non-durable' for queue '{q}' in vhost '{v}'"),
    (False, {"durable": True, "exclusive": True},
     "invalid property 'exclusive-owner' for queue '{q}' in vhost '{v}'"),
    (False, {"durable": True, "auto_delete": True},
     "invalid property 'auto-delete' for queue '{q}' in vhost '{v}'"),
    (False, {"durable": True, "exclusive": True, "auto_delete": True},
     "invalid property 'auto-delete' for queue '{q}' in vhost '{v}'"),
    (False, {"durable": False, "arguments": {"x-max-priority": 3}},
     "invalid arg 'x-max-priority' for queue '{q}' in vhost '{v}' of queue type "
     "rabbit_quorum_queue"),
    (False, {"durable": True, "arguments": {"x-queue-mode": "lazy", "x-max-priority": 1}},
     "invalid arg 'x-queue-mode' for queue '{q}' in vhost '{v}' of queue type "
     "rabbit_quorum_queue"),
    (False, {"durable": True, "arguments": {"x-max-age": "1D"}},
     "invalid arg 'x-max-age' for queue '{q}' in vhost '{v}' of queue type "
     "rabbit_quorum_queue"),
    (False, {"durable": True, "arguments": {"x-max-length": -1}},
     "invalid arg 'x-max-length' for queue '{q}' in vhost '{v}': {{value_negative,-1}}"),
])
def test_a_quorum_queue_rabbitmq_refuses_is_a_406(warren, server_named, kwargs, words):
    name = "" if server_named else unique("qq")
    kwargs = dict(kwargs)
    arguments = {**QUORUM, **kwargs.pop("arguments", {})}
    connection = connect(warren)
    try:
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.queue_declare(name, arguments=arguments, **kwargs)
        assert (closed.value.reply_code, closed.value.reply_text) == (
            406, "PRECONDITION_FAILED - " + words.format(q=name, v=warren.vhost))
        if name:
            assert not _exists(connection, name)
    finally:
        close_quietly(connection)


def _exists(connection, name):
    channel = connection.channel()
    try:
        channel.queue_declare(name, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False


def test_a_classic_queue_refuses_x_delivery_limit(warren):
    name = unique("classic")
    connection = connect(warren)
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            connection.channel().queue_declare(name, arguments={"x-delivery-limit": 1})
        assert (closed.value.reply_code, closed.value.reply_text) == (
            406, f"PRECONDITION_FAILED - invalid arg 'x-delivery-limit' for queue "
                 f"'{name}' in vhost '{warren.vhost}' of queue type rabbit_classic_queue")
    finally:
        close_quietly(connection)


def test_redeclaring_with_another_delivery_limit_or_type_is_a_406(space):
    _, _, connection, channel = space
    quorum(channel, "q", **{"x-delivery-limit": 2})
    quorum(channel, "q", **{"x-delivery-limit": 2})
    assert channel.queue_declare("q", passive=True).method.queue == "q"
    for arguments, key in (({**QUORUM, "x-delivery-limit": 3}, "x-delivery-limit"),
                           ({"x-delivery-limit": 2}, "x-queue-type")):
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.queue_declare("q", durable=True, arguments=arguments)
        assert closed.value.reply_code == 406
        assert closed.value.reply_text.startswith(
            f"PRECONDITION_FAILED - inequivalent arg '{key}' for queue 'q'")


# -- the delivery count ------------------------------------------------------------------

@pytest.mark.warren_rabbitmq("3.10")   # 3.10's quorum delivery counting
def test_every_delivery_carries_the_count_of_returns_before_it(space):
    """0 on the first delivery (a publisher's own x-delivery-count is replaced), one
    more after each nack with requeue, Basic.Recover and channel close."""
    _, _, connection, channel = space
    quorum(channel, "q")
    channel.basic_publish("", "q", b"m", pika.BasicProperties(
        headers={"app": "kept", COUNT: 7}))
    method, headers, body = next_message(channel, "q")
    assert (method.redelivered, headers, body) == (False, {"app": "kept", COUNT: 0}, b"m")
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, headers, _ = next_message(channel, "q")
    assert (method.redelivered, headers) == (True, {"app": "kept", COUNT: 1})
    channel.basic_recover(requeue=True)
    assert next_message(channel, "q")[1][COUNT] == 2
    channel.close()
    channel = connection.channel()
    method, headers, _ = next_message(channel, "q")
    assert headers[COUNT] == 3
    channel.basic_ack(method.delivery_tag)


@pytest.mark.warren_rabbitmq("3.10")   # 3.10's quorum delivery counting
def test_a_consumer_sees_the_count_and_a_closed_connection_counts(space, warren):
    _, _, connection, channel = space
    quorum(channel, "q")
    channel.basic_publish("", "q", b"m")
    other = pika.BlockingConnection(warren.connection_parameters())
    try:
        other_channel = other.channel()
        method, headers, _ = next_message(other_channel, "q")
        assert headers[COUNT] == 0
    finally:
        other.close()
    seen = []
    channel.basic_consume("q", lambda ch, method, properties, body: seen.append(
        (method.redelivered, properties.headers[COUNT])), auto_ack=True)
    deadline = time.monotonic() + WAIT
    while not seen and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.05)
    assert seen == [(True, 1)]


@pytest.mark.warren_rabbitmq("3.10")   # 3.10's quorum delivery counting
def test_a_message_that_comes_back_goes_behind_those_published_after_it(space):
    """RabbitMQ 3.10's quorum queues put returns at the back (classic queues put them
    back at their place); several coming back at once keep their order."""
    _, _, _, channel = space
    quorum(channel, "q")
    for body in (b"1", b"2", b"3", b"4", b"5"):
        channel.basic_publish("", "q", body)
    next_message(channel, "q")
    second, _, _ = next_message(channel, "q")
    channel.basic_nack(second.delivery_tag, multiple=True, requeue=True)
    order = []
    for _ in range(5):
        method, headers, body = next_message(channel, "q")
        order.append((body, method.redelivered, headers[COUNT]))
        channel.basic_ack(method.delivery_tag)
    assert order == [(b"3", False, 0), (b"4", False, 0), (b"5", False, 0),
                     (b"1", True, 1), (b"2", True, 1)]


def test_a_classic_queue_adds_no_count(space):
    _, _, _, channel = space
    channel.queue_declare("classic")
    channel.basic_publish("", "classic", b"m")
    method, headers, _ = next_message(channel, "classic")
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, headers, _ = next_message(channel, "classic")
    assert (method.redelivered, headers) == (True, {})


# -- the delivery limit ------------------------------------------------------------------

@pytest.mark.warren_rabbitmq("3.10")   # 3.10's quorum delivery counting
def test_past_the_limit_a_message_is_dead_lettered_with_reason_delivery_limit(space):
    _, _, _, channel = space
    channel.exchange_declare("dlx", "fanout")
    channel.queue_declare("dead")
    channel.queue_bind("dead", "dlx")
    quorum(channel, "q", **{"x-delivery-limit": 2, "x-dead-letter-exchange": "dlx"})
    channel.basic_publish("", "q", b"poison", pika.BasicProperties(
        headers={"app": "kept"}))
    assert counts_until_gone(channel, "q", 3) == [0, 1, 2]
    method, headers, body = next_message(channel, "dead")
    assert body == b"poison" and COUNT not in headers
    (death,) = headers["x-death"]
    assert {key: death[key] for key in ("count", "reason", "queue", "exchange",
                                        "routing-keys")} == {
        "count": 1, "reason": "delivery_limit", "queue": "q", "exchange": "",
        "routing-keys": ["q"]}
    assert (headers["app"], headers["x-first-death-reason"],
            headers["x-first-death-queue"]) == ("kept", "delivery_limit", "q")


@pytest.mark.warren_rabbitmq("3.10")   # 3.10's quorum delivery counting
def test_past_the_limit_a_message_is_dropped_without_a_dead_letter_exchange(space):
    _, _, _, channel = space
    quorum(channel, "q", **{"x-delivery-limit": 0})
    channel.basic_publish("", "q", b"poison")
    channel.basic_publish("", "q", b"fine")
    method, headers, body = next_message(channel, "q")
    assert (body, headers[COUNT]) == (b"poison", 0)
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, headers, body = next_message(channel, "q")
    assert (body, headers[COUNT]) == (b"fine", 0)
    channel.basic_ack(method.delivery_tag)
    assert wait_for_count(channel, "q", 0) == 0


@pytest.mark.warren_rabbitmq("3.10")   # 3.10's quorum delivery counting
def test_a_delivery_limit_policy_applies_changes_and_clears_on_a_live_queue(space):
    admin, vhost, _, channel = space
    quorum(channel, "q")
    channel.basic_publish("", "q", b"m")
    method, headers, _ = next_message(channel, "q")     # no limit yet: count 0 ...
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, headers, _ = next_message(channel, "q")     # ... and 1
    admin.set_policy(vhost, "limit", "^q$", {"delivery-limit": 3})
    channel.basic_nack(method.delivery_tag, requeue=True)
    assert counts_until_gone(channel, "q", 2) == [2, 3]
    admin.set_policy(vhost, "limit", "^q$", {"delivery-limit": 1})
    channel.basic_publish("", "q", b"m")
    assert counts_until_gone(channel, "q", 2) == [0, 1]
    admin.clear_policy(vhost, "limit")
    channel.basic_publish("", "q", b"m")
    for count in range(5):     # no limit: it keeps coming back
        method, headers, _ = next_message(channel, "q")
        assert headers[COUNT] == count
        channel.basic_nack(method.delivery_tag, requeue=True)
    method, headers, _ = next_message(channel, "q")
    assert headers[COUNT] == 5
    channel.basic_ack(method.delivery_tag)


@pytest.mark.warren_rabbitmq("3.10")   # 3.10's quorum delivery counting
def test_the_lowest_of_argument_policy_and_operator_policy_limits(space):
    admin, vhost, _, channel = space
    quorum(channel, "q", **{"x-delivery-limit": 2})
    admin.set_policy(vhost, "limit", "^q$", {"delivery-limit": 4})
    channel.basic_publish("", "q", b"m")
    assert counts_until_gone(channel, "q", 3) == [0, 1, 2]       # the argument
    admin.set_operator_policy(vhost, "cap", "^q$", {"delivery-limit": 1})
    channel.basic_publish("", "q", b"m")
    assert counts_until_gone(channel, "q", 2) == [0, 1]          # the operator policy
    admin.clear_operator_policy(vhost, "cap")
    quorum(channel, "p")
    admin.set_policy(vhost, "limit", "^[pq]$", {"delivery-limit": 0})
    channel.basic_publish("", "p", b"m")
    assert counts_until_gone(channel, "p", 1) == [0]             # the policy


def test_a_delivery_limit_policy_passes_classic_queues_over(space):
    """The policy does not match a classic queue, so the next policy applies."""
    admin, vhost, _, channel = space
    channel.queue_declare("classic")
    admin.set_policy(vhost, "limit", ".*", {"delivery-limit": 0}, priority=5)
    admin.set_policy(vhost, "length", ".*", {"max-length": 1})
    channel.basic_publish("", "classic", b"a")
    channel.basic_publish("", "classic", b"b")
    assert wait_for_count(channel, "classic", 1) == 1
    method, headers, body = next_message(channel, "classic")
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, headers, body = next_message(channel, "classic")
    assert (body, method.redelivered, headers) == (b"b", True, {})


# -- restart (Warren: broker_factory always starts Warren) -------------------------------

@pytest.mark.warren_only("restarts its own broker (broker_factory)")
def test_a_quorum_queue_and_its_limit_survive_a_restart(broker_factory, tmp_path):
    """The queue comes back a quorum queue with its messages, still counting and
    limiting deliveries: a count goes on from where it was before the restart."""
    data_dir = str(tmp_path / "data")
    broker = broker_factory("--rabbitmq", "3.10", data_dir=data_dir)
    connection = connect(broker)
    channel = connection.channel()
    quorum(channel, "q", **{"x-delivery-limit": 1})
    channel.confirm_delivery()
    channel.basic_publish("", "q", b"m", pika.BasicProperties(delivery_mode=2))
    method, headers, _ = next_message(channel, "q")
    channel.basic_nack(method.delivery_tag, requeue=True)
    close_quietly(connection)
    assert broker.stop() == 0

    broker = broker_factory("--rabbitmq", "3.10", data_dir=data_dir)
    connection = connect(broker)
    try:
        channel = connection.channel()
        assert counts_until_gone(channel, "q", 1) == [1]
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.queue_declare("q", durable=True, arguments={"x-delivery-limit": 1})
        assert "inequivalent arg 'x-queue-type'" in closed.value.reply_text
    finally:
        close_quietly(connection)


def counts_after_each_return(channel) -> list:
    """(x-delivery-count, x-acquired-count) of one quorum message at its first delivery
    and after a reject, a nack, its channel closed, and a recover, all with requeue."""
    channel.queue_declare("counted", durable=True, arguments={"x-queue-type": "quorum"})
    channel.confirm_delivery()
    channel.basic_publish("", "counted", b"m")
    connection = channel.connection
    seen = []

    def get(on):
        assert wait_for_count(on, "counted", 1) == 1
        method, properties, _ = on.basic_get("counted")
        headers = properties.headers or {}
        seen.append((headers.get("x-delivery-count"), headers.get("x-acquired-count")))
        return method.delivery_tag

    channel.basic_reject(get(channel), requeue=True)
    channel.basic_nack(get(channel), requeue=True)
    get(channel)
    channel.close()
    channel = connection.channel()
    get(channel)
    channel.basic_recover(requeue=True)
    channel.basic_ack(get(channel))
    return seen


@pytest.mark.warren_rabbitmq("4.0")
def test_quorum_counts_under_4_0(chan):
    """Measured on RabbitMQ 4.0.5: no count at first, then one more per return."""
    assert counts_after_each_return(chan) == [(None, None), (1, None), (2, None),
                                              (3, None), (4, None)]


@pytest.mark.warren_rabbitmq("4.3")
def test_quorum_counts_under_4_3(chan):
    """Measured on RabbitMQ 4.3.6: x-delivery-count counts failed deliveries (a reject, a
    closed channel), x-acquired-count every return."""
    assert counts_after_each_return(chan) == [(None, None), (1, 1), (1, 2), (2, 3), (2, 4)]


# -- delivery order: returns first, priorities (per line) --------------------------------

def order_after_returns(channel, **arguments) -> list:
    """Publish 1-7, get 1-5, reject 4, nack 2, nack multiple up to 5 (1, 3 and 5), all
    with requeue: the order the seven come in afterwards."""
    quorum(channel, "ordered", **arguments)
    channel.confirm_delivery()
    for number in range(1, 8):
        channel.basic_publish("", "ordered", str(number).encode())
    tags = {}
    for _ in range(5):
        method, _, body = next_message(channel, "ordered")
        tags[body] = method.delivery_tag
    channel.basic_reject(tags[b"4"], requeue=True)
    channel.basic_nack(tags[b"2"], requeue=True)
    channel.basic_nack(tags[b"5"], multiple=True, requeue=True)
    assert wait_for_count(channel, "ordered", 7) == 7
    return [next_message(channel, "ordered")[2].decode() for _ in range(7)]


def test_under_3_10_a_delivery_limit_puts_returns_first(chan):
    """Measured on RabbitMQ 3.10.8: with a delivery limit, returned messages go before
    the ready ones, in the order they came back (without one, at the back)."""
    assert order_after_returns(chan, **{"x-delivery-limit": 100}) == [
        "4", "2", "1", "3", "5", "6", "7"]


@pytest.mark.warren_rabbitmq("4.0")
def test_returns_go_first_under_4_0(chan):
    """Measured on RabbitMQ 4.0.5."""
    assert order_after_returns(chan) == ["4", "2", "1", "3", "5", "6", "7"]


@pytest.mark.warren_rabbitmq("4.3")
def test_returns_go_first_under_4_3(chan):
    """Measured on RabbitMQ 4.3.6."""
    assert order_after_returns(chan) == ["4", "2", "1", "3", "5", "6", "7"]


MIXED_PRIORITIES = [None, 0, 1, 4, 5, 9, 10, 31, 32, 255, 3, 7, None, 5, 30, 6]


def priority_order(channel) -> list[int]:
    """One message per priority of MIXED_PRIORITIES (None: no property) to a quorum
    queue with no consumer, then all of them got: their indexes in delivery order."""
    quorum(channel, "prioritised")
    channel.confirm_delivery()
    for index, priority in enumerate(MIXED_PRIORITIES):
        channel.basic_publish("", "prioritised", str(index).encode(),
                              pika.BasicProperties(priority=priority))
    return [int(next_message(channel, "prioritised")[2])
            for _ in MIXED_PRIORITIES]


@pytest.mark.warren_rabbitmq("4.0")
def test_priorities_under_4_0(chan):
    """Measured on RabbitMQ 4.0.5: priorities above 4 are high, the rest normal; every
    third message is the older of the two heads."""
    assert priority_order(chan) == [4, 5, 0, 6, 7, 1, 8, 9, 2, 11, 13, 3, 14, 15, 10, 12]


@pytest.mark.warren_rabbitmq("4.3")
def test_priorities_under_4_3(chan):
    """Measured on RabbitMQ 4.3.6: 32 strict priorities (above 31 counts as 31, none as
    4), publication order within one."""
    assert priority_order(chan) == [7, 8, 9, 14, 6, 5, 11, 15, 4, 13, 0, 3, 12, 10, 2, 1]


@pytest.mark.warren_only("restarts its own broker (broker_factory)")
def test_returns_stay_first_across_a_restart(broker_factory, tmp_path):
    """Under 4.3, messages handed back are still delivered first, in the order they
    came back, after a restart."""
    data_dir = str(tmp_path / "data")
    broker = broker_factory("--rabbitmq", "4.3", data_dir=data_dir)
    connection = connect(broker)
    channel = connection.channel()
    quorum(channel, "q")
    channel.confirm_delivery()
    for body in (b"1", b"2", b"3"):
        channel.basic_publish("", "q", body, pika.BasicProperties(delivery_mode=2))
    first, _, _ = next_message(channel, "q")
    second, _, _ = next_message(channel, "q")
    channel.basic_nack(second.delivery_tag, requeue=True)
    channel.basic_nack(first.delivery_tag, requeue=True)
    assert wait_for_count(channel, "q", 3) == 3
    close_quietly(connection)
    assert broker.stop() == 0

    broker = broker_factory("--rabbitmq", "4.3", data_dir=data_dir)
    connection = connect(broker)
    try:
        channel = connection.channel()
        assert [next_message(channel, "q")[2] for _ in range(3)] == [b"2", b"1", b"3"]
    finally:
        close_quietly(connection)
