"""Every queue.declare argument RabbitMQ 3.10 knows, on each queue type, against Warren
and (WARREN_TEST_BROKER) RabbitMQ: a new queue either takes it or is refused with
RabbitMQ's 406 and text; a redeclaration compares only the arguments of the queue's
type, with RabbitMQ's "inequivalent arg" texts, and ignores the others.
docs/compatibility.md has the table these cases check.
"""

import pika
import pika.exceptions
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline: fixture)
    _test_deadline, close_quietly, connect, unique, wait_for_count,
)

PIKA_TEST_TIMEOUT = 120
TYPES = {"classic": {}, "quorum": {"x-queue-type": "quorum"},
         "stream": {"x-queue-type": "stream"}}
# Two acceptable values of each argument, and its AMQP field type as pika sends it.
VALUES = {
    "x-message-ttl": (1000, 2000, "signedint"),
    "x-expires": (100000, 200000, "signedint"),
    "x-max-length": (10, 20, "signedint"),
    "x-max-length-bytes": (1000, 2000, "signedint"),
    "x-overflow": ("reject-publish", "drop-head", "longstr"),
    "x-dead-letter-exchange": ("dlx", "dlx2", "longstr"),
    "x-dead-letter-routing-key": ("rk", "rk2", "longstr"),
    "x-dead-letter-strategy": ("at-most-once", "at-least-once", "longstr"),
    "x-max-priority": (5, 6, "signedint"),
    "x-queue-mode": ("lazy", "default", "longstr"),
    "x-queue-version": (2, 1, "signedint"),
    "x-queue-master-locator": ("client-local", "min-masters", "longstr"),
    "x-queue-leader-locator": ("client-local", "balanced", "longstr"),
    "x-single-active-consumer": (True, False, "bool"),
    "x-max-in-memory-length": (10, 20, "signedint"),
    "x-max-in-memory-bytes": (1000, 2000, "signedint"),
    "x-delivery-limit": (3, 4, "signedint"),
    "x-quorum-initial-group-size": (1, 3, "signedint"),
    "x-max-age": ("1D", "2D", "longstr"),
    "x-stream-max-segment-size-bytes": (1000000, 2000000, "signedint"),
    "x-initial-cluster-size": (1, 3, "signedint"),
    "x-ha-policy": ("all", "nodes", "longstr"),      # unknown to RabbitMQ 3.10: ignored
    "x-made-up": ("a", "b", "longstr"),
}
# What each queue type of RabbitMQ 3.10 takes (and compares on redeclaration); the
# other known arguments are refused on a new queue of that type.
TAKES = {
    "classic": {"x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes",
                "x-overflow", "x-dead-letter-exchange", "x-dead-letter-routing-key",
                "x-max-priority", "x-queue-mode", "x-queue-version",
                "x-queue-master-locator", "x-single-active-consumer"},
    "quorum": {"x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes",
               "x-overflow", "x-dead-letter-exchange", "x-dead-letter-routing-key",
               "x-dead-letter-strategy", "x-queue-leader-locator",
               "x-single-active-consumer", "x-max-in-memory-length",
               "x-max-in-memory-bytes", "x-delivery-limit", "x-quorum-initial-group-size"},
    "stream": {"x-max-length-bytes", "x-queue-leader-locator", "x-max-age",
               "x-stream-max-segment-size-bytes", "x-initial-cluster-size"},
}
IGNORED = {"x-ha-policy", "x-made-up"}


@pytest.fixture(scope="module")
def sweep_vhost(warren_broker):
    """A vhost and user of the session broker that the module's tests share (a `warren`
    vhost lives for one test only)."""
    made = warren_broker.new_vhost("argsweep")
    yield made
    made.remove()


@pytest.fixture
def declare(sweep_vhost):
    """declare(queue_type, arguments, name=None) -> None on success, else the 406 text
    with the queue's name as {q} and the vhost's as {v}; the queues are deleted after."""
    vhost = sweep_vhost.vhost
    connection = connect(sweep_vhost)
    state = {"channel": connection.channel()}
    names = []

    def run(queue_type, arguments, name=None):
        name = name or unique("sweep")
        names.append(name)
        if not state["channel"].is_open:
            state["channel"] = connection.channel()
        try:
            state["channel"].queue_declare(
                name, durable=True, arguments={**TYPES[queue_type], **arguments})
        except pika.exceptions.ChannelClosedByBroker as closed:
            assert closed.reply_code == 406
            return closed.reply_text.replace(name, "{q}").replace(vhost, "{v}")
        return None

    run.names = names
    run.vhost = vhost
    run.channel = lambda: state["channel"] if state["channel"].is_open else connection.channel()
    yield run
    channel = connection.channel()
    for name in names:
        channel.queue_delete(name)
    close_quietly(connection)


def refused(text):
    return f"PRECONDITION_FAILED - {text}"


def new_queue_outcome(queue_type, argument):
    if argument in IGNORED:
        return None
    if argument not in TAKES[queue_type]:
        return refused(f"invalid arg '{argument}' for queue '{{q}}' in vhost '{{v}}' of "
                       f"queue type rabbit_{queue_type}_queue")
    if argument == "x-dead-letter-routing-key":
        return refused("invalid arg 'x-dead-letter-routing-key' for queue '{q}' in vhost "
                       "'{v}': routing_key_but_no_dlx_defined")
    return None


# -- a new queue -------------------------------------------------------------------------

@pytest.mark.parametrize("queue_type", TYPES)
@pytest.mark.parametrize("argument", VALUES)
def test_a_new_queue_takes_or_refuses_each_argument(declare, queue_type, argument):
    """The argument alone on a new queue of the type: declared, or RabbitMQ's 406."""
    assert declare(queue_type, {argument: VALUES[argument][0]}) == \
        new_queue_outcome(queue_type, argument)


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_a_dead_letter_routing_key_with_an_exchange_is_taken(declare, queue_type):
    assert declare(queue_type, {"x-dead-letter-exchange": "dlx",
                                "x-dead-letter-routing-key": "rk"}) is None


@pytest.mark.parametrize("queue_type, arguments, problem", [
    ("classic", {"x-queue-mode": "bogus"}, "\"unsupported queue mode 'bogus'\""),
    ("classic", {"x-queue-version": 3}, "\"unsupported queue version '3'\""),
    ("classic", {"x-dead-letter-exchange": "d", "x-dead-letter-routing-key": 5},
     "{unacceptable_type,signedint}"),
    ("quorum", {"x-queue-leader-locator": "bogus"}, "invalid_queue_locator_arg"),
    ("stream", {"x-queue-leader-locator": "bogus"}, "invalid_queue_locator_arg"),
    ("quorum", {"x-dead-letter-strategy": "bogus"}, "invalid_dlx_strategy"),
    ("quorum", {"x-max-in-memory-length": -1}, "{value_negative,-1}"),
    ("quorum", {"x-max-in-memory-bytes": "a"}, '"expected integer, got longstr"'),
    ("quorum", {"x-quorum-initial-group-size": 0}, "{value_zero,0}"),
    ("stream", {"x-initial-cluster-size": "a"}, '"expected integer, got longstr"'),
])
def test_an_unacceptable_value_is_refused_in_rabbitmqs_words(declare, queue_type,
                                                            arguments, problem):
    argument = [name for name in arguments if name != "x-dead-letter-exchange"][0]
    assert declare(queue_type, arguments) == refused(
        f"invalid arg '{argument}' for queue '{{q}}' in vhost '{{v}}': {problem}")


@pytest.mark.parametrize("queue_type, arguments, argument", [
    ("quorum", {"x-max-priority": -1}, "x-max-priority"),
    ("stream", {"x-message-ttl": -1}, "x-message-ttl"),
    ("stream", {"x-single-active-consumer": 1}, "x-single-active-consumer"),
    ("classic", {"x-queue-leader-locator": "bogus"}, "x-queue-leader-locator"),
])
def test_an_argument_of_another_type_is_refused_before_its_value_is_checked(
        declare, queue_type, arguments, argument):
    assert declare(queue_type, arguments) == refused(
        f"invalid arg '{argument}' for queue '{{q}}' in vhost '{{v}}' of queue type "
        f"rabbit_{queue_type}_queue")


@pytest.mark.parametrize("overflow", ["reject-publish", "drop-head"])
def test_at_least_once_dead_lettering_is_taken_by_quorum_queues(declare, overflow):
    """With x-overflow reject-publish it applies; with drop-head RabbitMQ takes it and
    dead-letters at most once (tests/unit/test_at_least_once.py)."""
    assert declare("quorum", {"x-dead-letter-strategy": "at-least-once",
                              "x-overflow": overflow}) is None


# -- redeclaration -----------------------------------------------------------------------

def shown(value):
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def compared(queue_type):
    return sorted(TAKES[queue_type] - {"x-dead-letter-routing-key"})


@pytest.mark.parametrize("queue_type, argument", [
    (queue_type, argument) for queue_type in TYPES for argument in compared(queue_type)])
def test_a_redeclaration_compares_the_arguments_of_the_queues_type(declare, queue_type,
                                                                   argument):
    first, second, field_type = VALUES[argument]
    name = unique("sweep")
    assert declare(queue_type, {argument: first}, name) is None
    assert declare(queue_type, {argument: first}, name) is None
    prefix = f"inequivalent arg '{argument}' for queue '{{q}}' in vhost '{{v}}': "
    assert declare(queue_type, {argument: second}, name) == refused(
        f"{prefix}received '{shown(second)}' but current is '{shown(first)}'")
    assert declare(queue_type, {}, name) == refused(
        f"{prefix}received none but current is the value '{shown(first)}' of type "
        f"'{field_type}'")


@pytest.mark.parametrize("queue_type", TYPES)
def test_a_redeclaration_adding_a_compared_argument_is_refused(declare, queue_type):
    argument = "x-max-length-bytes"
    name = unique("sweep")
    assert declare(queue_type, {}, name) is None
    assert declare(queue_type, {argument: 1000}, name) == refused(
        f"inequivalent arg '{argument}' for queue '{{q}}' in vhost '{{v}}': received the "
        "value '1000' of type 'signedint' but current is none")


@pytest.mark.parametrize("queue_type, argument", [
    (queue_type, argument) for queue_type in TYPES
    for argument in sorted(set(VALUES) - TAKES[queue_type])])
def test_a_redeclaration_ignores_the_arguments_the_type_does_not_take(
        declare, queue_type, argument):
    """Not compared and not validated: RabbitMQ answers Declare-Ok."""
    name = unique("sweep")
    assert declare(queue_type, {}, name) is None
    assert declare(queue_type, {argument: VALUES[argument][0]}, name) is None


def test_a_redeclaration_is_compared_not_validated(declare):
    name = unique("sweep")
    assert declare("classic", {}, name) is None
    assert declare("classic", {"x-message-ttl": -1}, name) == refused(
        "inequivalent arg 'x-message-ttl' for queue '{q}' in vhost '{v}': received the "
        "value '-1' of type 'signedint' but current is none")


@pytest.mark.parametrize("declared, redeclared, outcome", [
    ("classic", {"x-queue-type": "classic"}, None),
    ("classic", {"x-queue-type": "quorum"},
     "received the value 'quorum' of type 'longstr' but current is none"),
    ("quorum", {}, "received none but current is the value 'quorum' of type 'longstr'"),
    ("quorum", {"x-queue-type": "stream"}, "received 'stream' but current is 'quorum'"),
])
def test_a_redeclaration_compares_the_queue_type(declare, declared, redeclared, outcome):
    name = unique("sweep")
    assert declare(declared, {}, name) is None
    channel = declare.channel()
    try:
        channel.queue_declare(name, durable=True, arguments=redeclared)
        text = None
    except pika.exceptions.ChannelClosedByBroker as closed:
        text = closed.reply_text.split(": ", 1)[1]
    assert text == outcome


# -- what the taken arguments do -----------------------------------------------------------

@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_max_length_keeps_the_newest_messages(declare, queue_type):
    name = unique("sweep")
    assert declare(queue_type, {"x-max-length": 2}, name) is None
    channel = declare.channel()
    for body in (b"1", b"2", b"3"):
        channel.basic_publish("", name, body)
    assert wait_for_count(channel, name, 2) == 2
    assert channel.basic_get(name, auto_ack=True)[2] == b"2"


def test_message_ttl_zero_drops_what_no_consumer_takes(declare):
    """(A classic queue: RabbitMQ's quorum queues expire messages lazily, so one with
    TTL 0 may still be fetched there.)"""
    name = unique("sweep")
    assert declare("classic", {"x-message-ttl": 0}, name) is None
    channel = declare.channel()
    channel.basic_publish("", name, b"gone")
    assert wait_for_count(channel, name, 0) == 0
    assert channel.basic_get(name, auto_ack=True)[0] is None


# -- basic.consume -------------------------------------------------------------------------

CONSUMER_VALUES = {"x-priority": 5, "x-cancel-on-ha-failover": True,
                   "x-stream-offset": "first", "x-credit": {"credit": 1, "drain": False},
                   "x-made-up": 1}
CONSUMER_TAKES = {"classic": {"x-priority", "x-cancel-on-ha-failover"},
                  "quorum": {"x-priority"}, "stream": {"x-stream-offset"}}
CONSUMER_IGNORED = {"x-credit", "x-made-up"}


def consume(declare, queue_type, arguments):
    """Basic.Consume on a new queue of the type: None if consumed, else the 406 text."""
    name = unique("sweep")
    assert declare(queue_type, {}, name) is None
    channel = declare.channel()
    channel.basic_qos(prefetch_count=10)   # streams need one
    try:
        channel.basic_cancel(channel.basic_consume(name, lambda *_: None,
                                                   arguments=arguments))
    except pika.exceptions.ChannelClosedByBroker as closed:
        assert closed.reply_code == 406
        return closed.reply_text.replace(name, "{q}").replace(declare.vhost, "{v}")
    return None


@pytest.mark.parametrize("queue_type", TYPES)
@pytest.mark.parametrize("argument", CONSUMER_VALUES)
def test_a_consumer_argument_is_taken_or_refused_by_the_queue_type(declare, queue_type,
                                                                   argument):
    expected = None
    if argument not in CONSUMER_IGNORED and argument not in CONSUMER_TAKES[queue_type]:
        expected = refused(f"invalid arg '{argument}' for queue '{{q}}' in vhost '{{v}}' "
                           f"of queue type rabbit_{queue_type}_queue")
    assert consume(declare, queue_type, {argument: CONSUMER_VALUES[argument]}) == expected


@pytest.mark.parametrize("queue_type, arguments, problem", [
    ("classic", {"x-priority": "a"}, '"expected integer, got longstr"'),
    ("quorum", {"x-priority": "a"}, '"expected integer, got longstr"'),
    ("classic", {"x-cancel-on-ha-failover": 1}, "{unacceptable_type,signedint}"),
])
def test_an_unacceptable_consumer_value_is_refused_in_rabbitmqs_words(
        declare, queue_type, arguments, problem):
    [argument] = arguments
    assert consume(declare, queue_type, arguments) == refused(
        f"invalid arg '{argument}' for queue '{{q}}' in vhost '{{v}}': {problem}")
