"""Sender-selected distribution: the CC and BCC headers (arrays of long strings) add
routing keys a message is also routed with on the same exchange; each queue gets the
message once; BCC never reaches a consumer (nor a headers exchange's matching); a header
of another type refuses the publish with 406. Dead-lettered copies are routed with the
same keys again, unless x-dead-letter-routing-key replaces them (then CC goes too).
Differential (WARREN_TEST_BROKER=127.0.0.1:5673 runs it against RabbitMQ 3.10)."""

import pika
import pika.exceptions
import pytest

from tests.support.pika_helpers import _test_deadline, chan, conn, names  # noqa: F401  (fixtures)
from tests.support.pika_helpers import close_quietly, connect, expect_channel_error, wait_for_count

SENT_HEADERS = {"CC": ["k2", "k2", 5], "BCC": ["k3", "k1"], "other": "yes"}
DELIVERED_HEADERS = {"CC": ["k2", "k2", 5], "other": "yes"}


def bound_queues(channel, names, exchange: str, keys) -> dict:
    """A new queue bound to `exchange` with each key: key -> queue name."""
    queues = {}
    for key in keys:
        queue = names.queue()
        channel.queue_declare(queue)
        channel.queue_bind(queue, exchange, key)
        queues[key] = queue
    return queues


def publish(channel, exchange: str, routing_key: str, headers: dict, **kwargs) -> None:
    channel.basic_publish(exchange, routing_key, b"body",
                          pika.BasicProperties(headers=headers), **kwargs)


def take_all(channel, queue: str) -> list:
    """(routing key, headers) of every message in `queue`, taken off it."""
    taken = []
    while True:
        method, properties, _body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return taken
        taken.append((method.routing_key, properties.headers))


def test_direct_exchange_routes_by_cc_and_bcc_once_per_queue_without_bcc(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "direct")
    queues = bound_queues(chan, names, exchange, ["k1", "k2", "k3", "k4"])
    chan.confirm_delivery()
    publish(chan, exchange, "k1", SENT_HEADERS)
    for key in ("k1", "k2", "k3"):
        assert wait_for_count(chan, queues[key], 1) == 1
        assert take_all(chan, queues[key]) == [("k1", DELIVERED_HEADERS)]
    assert take_all(chan, queues["k4"]) == []


def test_topic_exchange_matches_every_key(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "topic")
    queues = bound_queues(chan, names, exchange, ["a.*", "#.z", "b.#", "none"])
    chan.confirm_delivery()
    publish(chan, exchange, "a.b", {"CC": ["c.z", "a.c"], "BCC": ["b.b"]})
    for key in ("a.*", "#.z", "b.#"):
        assert wait_for_count(chan, queues[key], 1) == 1
        assert take_all(chan, queues[key]) == [("a.b", {"CC": ["c.z", "a.c"]})]
    assert take_all(chan, queues["none"]) == []


def test_default_exchange_delivers_to_the_named_queues(chan, names):
    first, second, third = names.queue(), names.queue(), names.queue()
    for queue in (first, second, third):
        chan.queue_declare(queue)
    chan.confirm_delivery()
    publish(chan, "", first, {"CC": [second], "BCC": [third, first]})
    assert take_all(chan, first) == [(first, {"CC": [second]})]
    assert take_all(chan, second) == [(first, {"CC": [second]})]
    assert take_all(chan, third) == [(first, {"CC": [second]})]


def test_fanout_exchange_delivers_once(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "fanout")
    queues = bound_queues(chan, names, exchange, ["k1", "k2"])
    chan.confirm_delivery()
    publish(chan, exchange, "k1", SENT_HEADERS)
    for queue in queues.values():
        assert wait_for_count(chan, queue, 1) == 1
        assert take_all(chan, queue) == [("k1", DELIVERED_HEADERS)]


def test_headers_exchange_does_not_see_bcc(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "headers")
    by_other, by_bcc, by_cc = names.queue(), names.queue(), names.queue()
    for queue, arguments in ((by_other, {"other": "yes"}), (by_bcc, {"BCC": None}),
                             (by_cc, {"CC": None})):
        chan.queue_declare(queue)
        chan.queue_bind(queue, exchange, "", arguments=arguments)
    chan.confirm_delivery()
    publish(chan, exchange, "k1", SENT_HEADERS)
    for queue in (by_other, by_cc):
        assert wait_for_count(chan, queue, 1) == 1
        assert take_all(chan, queue) == [("k1", DELIVERED_HEADERS)]
    assert take_all(chan, by_bcc) == []


def test_mandatory_message_routed_only_by_cc_is_not_returned(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "direct")
    queues = bound_queues(chan, names, exchange, ["k2"])
    chan.confirm_delivery()
    publish(chan, exchange, "unbound", {"CC": ["k2"]}, mandatory=True)
    assert take_all(chan, queues["k2"]) == [("unbound", {"CC": ["k2"]})]


def test_unroutable_mandatory_message_is_returned_without_bcc(chan, names):
    exchange = names.exchange()
    chan.exchange_declare(exchange, "direct")
    chan.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as info:
        publish(chan, exchange, "unbound", {"CC": ["nope"], "BCC": ["neither"]},
                mandatory=True)
    [returned] = info.value.messages
    assert (returned.method.reply_code, returned.method.reply_text,
            returned.method.routing_key) == (312, "NO_ROUTE", "unbound")
    assert returned.properties.headers == {"CC": ["nope"]}


@pytest.mark.parametrize("header, value, type_name", [
    ("CC", "k2", "longstr"), ("CC", 5, "signedint"), ("BCC", {"a": 1}, "table"),
])
def test_header_that_is_not_an_array_refuses_the_publish(conn, chan, header, value,
                                                         type_name):
    error = expect_channel_error(conn, chan, 406,
                                 lambda: publish(chan, "", "any", {header: value}))
    assert error.reply_text == ("PRECONDITION_FAILED - invalid message: "
                                f'{{unacceptable_type_in_header,"{header}",{type_name}}}')


def dead_letter_setup(channel, names, arguments: dict, headers: dict = SENT_HEADERS):
    """A direct exchange with a queue on k1 that dead-letters to a second direct
    exchange, which has a queue on each of k1..k4 and dlk; a message published to it
    with key k1 and `headers` rejected: (source exchange, source queue, targets)."""
    source, target = names.exchange(), names.exchange()
    channel.exchange_declare(source, "direct")
    channel.exchange_declare(target, "direct")
    queue = names.queue()
    channel.queue_declare(queue, arguments={"x-dead-letter-exchange": target, **arguments})
    channel.queue_bind(queue, source, "k1")
    targets = bound_queues(channel, names, target, ["k1", "k2", "k3", "k4", "dlk"])
    channel.confirm_delivery()
    publish(channel, source, "k1", headers)
    method, _properties, _body = channel.basic_get(queue)
    channel.basic_reject(method.delivery_tag, requeue=False)
    return source, queue, targets


def without_last_death(headers: dict, exchange: str, queue: str) -> dict:
    """The headers without x-last-death-*, which RabbitMQ 4.x sets (to this death: the
    message was rejected from `queue`, published to `exchange`) and 3.10 does not."""
    last = {key: headers.pop(key) for key in list(headers) if key.startswith("x-last-death-")}
    assert last in ({}, {"x-last-death-exchange": exchange, "x-last-death-queue": queue,
                         "x-last-death-reason": "rejected"})
    return headers


# The routing-keys of the x-death entry for key k1 with SENT_HEADERS (CC [k2, k2, 5], BCC
# [k3, k1]), measured on each line: RabbitMQ 3.10.8 records the routing key and the CC
# keys; 4.0.5 and 4.3.6 the routing key, the CC and the BCC keys less the first
# occurrence of each BCC key (mc:record_death): k3 and the routing key k1 go.
DEATH_KEYS = [pytest.param(["k1", "k2", "k2"], marks=pytest.mark.warren_rabbitmq("3.10"),
                           id="3.10"),
              *(pytest.param(["k2", "k2", "k1"], marks=pytest.mark.warren_rabbitmq(line),
                             id=line) for line in ("4.0", "4.3"))]


@pytest.mark.parametrize("death_keys", DEATH_KEYS)
def test_dead_lettered_copy_is_routed_with_cc_and_bcc_keys_again(chan, names, death_keys):
    source, queue, targets = dead_letter_setup(chan, names, {})
    for key in ("k1", "k2", "k3"):
        assert wait_for_count(chan, targets[key], 1) == 1
        [(routing_key, headers)] = take_all(chan, targets[key])
        assert routing_key == "k1"
        [death] = headers.pop("x-death")
        assert death["routing-keys"] == death_keys
        assert (death["queue"], death["exchange"]) == (queue, source)
        assert without_last_death(headers, source, queue) == {
            **DELIVERED_HEADERS, "x-first-death-exchange": source,
            "x-first-death-queue": queue, "x-first-death-reason": "rejected"}
    assert take_all(chan, targets["k4"]) == [] and take_all(chan, targets["dlk"]) == []


@pytest.mark.parametrize("death_keys", DEATH_KEYS)
def test_dead_letter_routing_key_replaces_the_keys_and_drops_cc(chan, names, death_keys):
    source, queue, targets = dead_letter_setup(chan, names,
                                               {"x-dead-letter-routing-key": "dlk"})
    assert wait_for_count(chan, targets["dlk"], 1) == 1
    [(routing_key, headers)] = take_all(chan, targets["dlk"])
    assert routing_key == "dlk"
    [death] = headers.pop("x-death")
    assert death["routing-keys"] == death_keys
    if death_keys != ["k1", "k2", "k2"]:
        # RabbitMQ 4.x keeps the CC header (not followed: docs/compatibility.md, 4.0)
        headers.pop("CC", None)
    assert without_last_death(headers, source, queue) == {
        "other": "yes", "x-first-death-exchange": source, "x-first-death-queue": queue,
        "x-first-death-reason": "rejected"}
    for key in ("k1", "k2", "k3", "k4"):
        assert take_all(chan, targets[key]) == []


def test_x_death_routing_keys_keep_the_routing_key_first_when_bcc_does_not_repeat_it(
        chan, names):
    """Every line alike when no BCC key is the routing key or a CC key: the routing key,
    then the CC keys (under 4.x the BCC key k3 is added and taken out again)."""
    _source, _queue, targets = dead_letter_setup(
        chan, names, {"x-dead-letter-routing-key": "dlk"}, {"CC": ["k2"], "BCC": ["k3"]})
    assert wait_for_count(chan, targets["dlk"], 1) == 1
    [(_routing_key, headers)] = take_all(chan, targets["dlk"])
    assert headers["x-death"][0]["routing-keys"] == ["k1", "k2"]


@pytest.mark.warren_only("restarts a Warren broker of its own (broker_factory)")
def test_stored_message_keeps_cc_only_and_is_dead_lettered_by_it(broker_factory,
                                                                tmp_path):
    """Warren only (it restarts its broker): BCC is taken out before the message is
    stored; read back after a restart, its dead-lettered copy still follows CC."""
    data_dir = str(tmp_path / "data")
    process = broker_factory(data_dir=data_dir)
    connection = connect(process)
    channel = connection.channel()
    channel.exchange_declare("source", "direct", durable=True)
    channel.exchange_declare("target", "direct", durable=True)
    channel.queue_declare("held", durable=True,
                          arguments={"x-dead-letter-exchange": "target"})
    channel.queue_bind("held", "source", "k1")
    for key in ("k1", "k2"):
        channel.queue_declare(key, durable=True)
        channel.queue_bind(key, "target", key)
    channel.confirm_delivery()
    channel.basic_publish("source", "k1", b"body", pika.BasicProperties(
        headers={"CC": ["k2"], "BCC": ["k3"]}, delivery_mode=2))
    connection.close()
    assert process.stop() == 0
    process = broker_factory(data_dir=data_dir)
    connection = connect(process)
    try:
        channel = connection.channel()
        method, properties, _body = channel.basic_get("held")
        assert properties.headers == {"CC": ["k2"]}
        channel.basic_reject(method.delivery_tag, requeue=False)
        for key in ("k1", "k2"):
            assert wait_for_count(channel, key, 1) == 1
    finally:
        close_quietly(connection)


def test_bound_and_alternate_exchanges_route_with_every_key(chan, names):
    source, downstream, alternate = names.exchange(), names.exchange(), names.exchange()
    chan.exchange_declare(alternate, "direct")
    chan.exchange_declare(downstream, "direct")
    chan.exchange_declare(source, "direct", arguments={"alternate-exchange": alternate})
    chan.exchange_bind(downstream, source, "k2")
    via_binding = bound_queues(chan, names, downstream, ["k2", "k3"])
    via_alternate = bound_queues(chan, names, alternate, ["k4"])
    chan.confirm_delivery()
    publish(chan, source, "k1", {"CC": ["k2"], "BCC": ["k3"]})
    # reached through the k2 binding, the downstream exchange routes with k1, k2, k3
    for key in ("k2", "k3"):
        assert wait_for_count(chan, via_binding[key], 1) == 1
    publish(chan, source, "none", {"CC": ["k4"]}, mandatory=True)
    assert take_all(chan, via_alternate["k4"]) == [("none", {"CC": ["k4"]})]
