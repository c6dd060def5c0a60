"""Every queue.declare argument RabbitMQ knows, on each queue type, under each RabbitMQ
line (3.10, 4.0, 4.3: each case runs once per line it applies to, in a vhost of that
line), against Warren and (WARREN_TEST_BROKER, or the RabbitMQ run) a RabbitMQ node,
which runs the cases of its own line: a new queue either takes an argument or is
refused with RabbitMQ's 406 and text; a redeclaration compares only the arguments of the
queue's type, with RabbitMQ's "inequivalent arg" texts, and ignores the others.
docs/compatibility.md has the table these cases check; the tables below were measured
on RabbitMQ 3.10.8, 4.0.5 and 4.3.6 (each line's cases pass against its node).
"""

import pika
import pika.exceptions
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline: fixture)
    _test_deadline, close_quietly, connect, unique, wait_for_count,
)

PIKA_TEST_TIMEOUT = 120
LINES = ("3.10", "4.0", "4.3")
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
    "x-stream-filter-size-bytes": (32, 64, "signedint"),
    "x-consumer-timeout": (1000, 2000, "signedint"),
    "x-consumer-disconnected-timeout": (1000, 2000, "signedint"),
    "x-ha-policy": ("all", "nodes", "longstr"),      # unknown to every line: ignored
    "x-made-up": ("a", "b", "longstr"),
}
# What each queue type of RabbitMQ 3.10 takes (and compares on redeclaration); the
# other arguments some type takes are refused on a new queue of that type.
TAKES_3_10 = {
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
# What the later lines' types take besides.
ADDED = {"4.0": {"classic": {"x-queue-leader-locator"}},
         "4.3": {"classic": {"x-queue-leader-locator"},
                 "quorum": {"x-consumer-timeout", "x-consumer-disconnected-timeout"},
                 "stream": {"x-stream-filter-size-bytes"}}}
# Deprecated features a line denies: such a declaration closes the connection (541).
DENIED = {"4.3": {("classic", "x-queue-master-locator")}}


def takes(line, queue_type):
    return TAKES_3_10[queue_type] | ADDED.get(line, {}).get(queue_type, set())


def known(line):
    """The arguments some type of the line takes; the line ignores the others."""
    return set().union(*(takes(line, queue_type) for queue_type in TYPES))


def per_line(cases, lines=LINES):
    """pytest.params of (line, *case) for each line and each of `cases(line)`, marked
    for that line (a vhost of it; against a node, only the node's line runs)."""
    return [pytest.param(line, *case, marks=pytest.mark.warren_rabbitmq(line),
                         id="-".join([line, *map(str, case)]))
            for line in lines for case in cases(line)]


@pytest.fixture(scope="module")
def sweep_vhosts(warren_broker):
    """Per line, a vhost of it and a user of the session broker that the module's
    tests share (a `warren` vhost lives for one test only), made on first use."""
    made = {}

    def of(line):
        if line not in made:
            made[line] = warren_broker.new_vhost("argsweep", rabbitmq_line=line)
        return made[line]

    yield of
    for vhost in made.values():
        vhost.remove()


@pytest.fixture
def declare(sweep_vhosts, line):
    """declare(queue_type, arguments, name=None) -> None on success, else the 406 text
    (or 541 and its text's first line) with the queue's name as {q} and the vhost's as
    {v}, in a vhost of the test's `line`; the queues are deleted after."""
    target = sweep_vhosts(line)
    vhost = target.vhost
    state = {"connection": connect(target)}
    state["channel"] = state["connection"].channel()
    names = []

    def channel():
        if state["connection"].is_closed:
            state["connection"] = connect(target)
        if not state["channel"].is_open:
            state["channel"] = state["connection"].channel()
        return state["channel"]

    def run(queue_type, arguments, name=None):
        name = name or unique("sweep")
        names.append(name)
        try:
            channel().queue_declare(
                name, durable=True, arguments={**TYPES[queue_type], **arguments})
        except pika.exceptions.ChannelClosedByBroker as closed:
            assert closed.reply_code == 406
            return closed.reply_text.replace(name, "{q}").replace(vhost, "{v}")
        except pika.exceptions.ConnectionClosedByBroker as closed:
            return f"{closed.reply_code} {closed.reply_text.splitlines()[0]}"
        return None

    run.names = names
    run.vhost = vhost
    run.channel = channel
    yield run
    for name in names:
        channel().queue_delete(name)
    close_quietly(state["connection"])


def refused(text):
    return f"PRECONDITION_FAILED - {text}"


def new_queue_outcome(line, queue_type, argument):
    if (queue_type, argument) in DENIED.get(line, ()):
        feature = argument.removeprefix("x-").replace("-", "_")
        return f"541 INTERNAL_ERROR - Feature `{feature}` is deprecated."
    if argument not in known(line):
        return None
    if argument not in takes(line, queue_type):
        return refused(f"invalid arg '{argument}' for queue '{{q}}' in vhost '{{v}}' of "
                       f"queue type rabbit_{queue_type}_queue")
    if argument == "x-dead-letter-routing-key":
        return refused("invalid arg 'x-dead-letter-routing-key' for queue '{q}' in vhost "
                       "'{v}': routing_key_but_no_dlx_defined")
    return None


# -- a new queue -------------------------------------------------------------------------

@pytest.mark.parametrize("line, queue_type, argument", per_line(
    lambda line: [(queue_type, argument) for queue_type in TYPES for argument in VALUES]))
def test_a_new_queue_takes_or_refuses_each_argument(declare, line, queue_type, argument):
    """The argument alone on a new queue of the type: declared, or RabbitMQ's 406."""
    assert declare(queue_type, {argument: VALUES[argument][0]}) == \
        new_queue_outcome(line, queue_type, argument)


@pytest.mark.parametrize("line, queue_type", per_line(lambda line: [("classic",), ("quorum",)]))
def test_a_dead_letter_routing_key_with_an_exchange_is_taken(declare, line, queue_type):
    assert declare(queue_type, {"x-dead-letter-exchange": "dlx",
                                "x-dead-letter-routing-key": "rk"}) is None


# The value problems RabbitMQ words, and the lines that have each (a line taking the
# value answers Declare-Ok: None).
VALUE_PROBLEMS = [
    ("classic", {"x-queue-mode": "bogus"},
     {"3.10": "\"unsupported queue mode 'bogus'\"",
      "4.0": "\"unsupported queue mode 'bogus'\"", "4.3": None}),
    ("classic", {"x-queue-version": 3}, "\"unsupported queue version '3'\""),
    ("classic", {"x-max-length": "a"}, '"expected integer, got longstr"'),
    ("classic", {"x-expires": "a"}, '"expected integer, got longstr"'),
    ("classic", {"x-max-length-bytes": -1}, "{value_negative,-1}"),
    ("classic", {"x-dead-letter-exchange": "d", "x-dead-letter-routing-key": 5},
     "{unacceptable_type,signedint}"),
    ("quorum", {"x-queue-leader-locator": "bogus"}, "invalid_queue_locator_arg"),
    ("stream", {"x-queue-leader-locator": "bogus"}, "invalid_queue_locator_arg"),
    ("classic", {"x-queue-leader-locator": "bogus"},
     {"4.0": "invalid_queue_locator_arg", "4.3": "invalid_queue_locator_arg"}),
    ("quorum", {"x-dead-letter-strategy": "bogus"}, "invalid_dlx_strategy"),
    ("quorum", {"x-max-in-memory-length": -1}, "{value_negative,-1}"),
    ("quorum", {"x-max-in-memory-bytes": "a"}, '"expected integer, got longstr"'),
    ("quorum", {"x-quorum-initial-group-size": 0}, "{value_zero,0}"),
    ("stream", {"x-initial-cluster-size": "a"}, '"expected integer, got longstr"'),
    ("quorum", {"x-consumer-timeout": "a"}, {"4.3": '"expected integer, got longstr"'}),
    ("quorum", {"x-consumer-disconnected-timeout": -1}, {"4.3": "{value_negative,-1}"}),
]


def _value_problems(line):
    for queue_type, arguments, problem in VALUE_PROBLEMS:
        if isinstance(problem, dict):
            if line not in problem:
                continue
            problem = problem[line]
        yield queue_type, arguments, problem


@pytest.mark.parametrize("line, queue_type, arguments, problem",
                         per_line(lambda line: list(_value_problems(line))))
def test_an_unacceptable_value_is_refused_in_rabbitmqs_words(declare, line, queue_type,
                                                            arguments, problem):
    argument = [name for name in arguments if name != "x-dead-letter-exchange"][0]
    assert declare(queue_type, arguments) == (None if problem is None else refused(
        f"invalid arg '{argument}' for queue '{{q}}' in vhost '{{v}}': {problem}"))


OTHER_TYPES_ARGUMENTS = [
    ("quorum", {"x-max-priority": -1}, "x-max-priority"),
    ("stream", {"x-message-ttl": -1}, "x-message-ttl"),
    ("stream", {"x-single-active-consumer": 1}, "x-single-active-consumer"),
    ("classic", {"x-queue-leader-locator": "bogus"}, "x-queue-leader-locator"),
    ("classic", {"x-consumer-timeout": "a"}, "x-consumer-timeout"),
]


@pytest.mark.parametrize("line, queue_type, arguments, argument", per_line(
    lambda line: [case for case in OTHER_TYPES_ARGUMENTS
                  if case[2] in known(line) and case[2] not in takes(line, case[0])]))
def test_an_argument_of_another_type_is_refused_before_its_value_is_checked(
        declare, line, queue_type, arguments, argument):
    assert declare(queue_type, arguments) == refused(
        f"invalid arg '{argument}' for queue '{{q}}' in vhost '{{v}}' of queue type "
        f"rabbit_{queue_type}_queue")


@pytest.mark.parametrize("line, overflow", per_line(
    lambda line: [("reject-publish",), ("drop-head",)]))
def test_at_least_once_dead_lettering_is_taken_by_quorum_queues(declare, line, overflow):
    """With x-overflow reject-publish it applies; with drop-head RabbitMQ takes it and
    dead-letters at most once (tests/unit/test_at_least_once.py)."""
    assert declare("quorum", {"x-dead-letter-strategy": "at-least-once",
                              "x-overflow": overflow}) is None


# -- redeclaration -----------------------------------------------------------------------

def shown(line, argument, value):
    """A value as the line's refusal shows it (4.3 shows a stream's x-max-age in
    milliseconds)."""
    if argument == "x-max-age" and line == "4.3":
        return str(int(value[:-1]) * 86400 * 1000)
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def compared(line, queue_type):
    return sorted(takes(line, queue_type) - {"x-dead-letter-routing-key"}
                  - {argument for kind, argument in DENIED.get(line, ()) if kind == queue_type})


@pytest.mark.parametrize("line, queue_type, argument", per_line(
    lambda line: [(queue_type, argument) for queue_type in TYPES
                  for argument in compared(line, queue_type)]))
def test_a_redeclaration_compares_the_arguments_of_the_queues_type(declare, line,
                                                                   queue_type, argument):
    first, second, field_type = VALUES[argument]
    name = unique("sweep")
    assert declare(queue_type, {argument: first}, name) is None
    assert declare(queue_type, {argument: first}, name) is None
    prefix = f"inequivalent arg '{argument}' for queue '{{q}}' in vhost '{{v}}': "
    assert declare(queue_type, {argument: second}, name) == refused(
        f"{prefix}received '{shown(line, argument, second)}' but current is "
        f"'{shown(line, argument, first)}'")
    assert declare(queue_type, {}, name) == refused(
        f"{prefix}received none but current is the value "
        f"'{shown(line, argument, first)}' of type '{field_type}'")


@pytest.mark.parametrize("line, queue_type", per_line(
    lambda line: [(queue_type,) for queue_type in TYPES]))
def test_a_redeclaration_adding_a_compared_argument_is_refused(declare, line, queue_type):
    argument = "x-max-length-bytes"
    name = unique("sweep")
    assert declare(queue_type, {}, name) is None
    assert declare(queue_type, {argument: 1000}, name) == refused(
        f"inequivalent arg '{argument}' for queue '{{q}}' in vhost '{{v}}': received the "
        "value '1000' of type 'signedint' but current is none")


@pytest.mark.parametrize("line, queue_type, argument", per_line(
    lambda line: [(queue_type, argument) for queue_type in TYPES
                  for argument in sorted(set(VALUES) - takes(line, queue_type))]))
def test_a_redeclaration_ignores_the_arguments_the_type_does_not_take(
        declare, line, queue_type, argument):
    """Not compared and not validated: RabbitMQ answers Declare-Ok."""
    name = unique("sweep")
    assert declare(queue_type, {}, name) is None
    assert declare(queue_type, {argument: VALUES[argument][0]}, name) is None


@pytest.mark.parametrize("line", per_line(lambda line: [()]))
def test_a_redeclaration_is_compared_not_validated(declare, line):
    name = unique("sweep")
    assert declare("classic", {}, name) is None
    assert declare("classic", {"x-message-ttl": -1}, name) == refused(
        "inequivalent arg 'x-message-ttl' for queue '{q}' in vhost '{v}': received the "
        "value '-1' of type 'signedint' but current is none")


def _type_redeclarations(line):
    """3.10 compares what the declarations say; since 4.0 one without x-queue-type is
    of the default type, classic, and the refusal says so."""
    later = line != "3.10"
    return [
        ("classic", {"x-queue-type": "classic"}, None),
        ("classic", {"x-queue-type": "quorum"},
         "received 'quorum' but current is 'classic'" if later else
         "received the value 'quorum' of type 'longstr' but current is none"),
        ("quorum", {}, "received 'classic' but current is 'quorum'" if later else
         "received none but current is the value 'quorum' of type 'longstr'"),
        ("stream", {}, "received 'classic' but current is 'stream'" if later else
         "received none but current is the value 'stream' of type 'longstr'"),
        ("quorum", {"x-queue-type": "stream"}, "received 'stream' but current is 'quorum'"),
    ]


@pytest.mark.parametrize("line, declared, redeclared, outcome", per_line(_type_redeclarations))
def test_a_redeclaration_compares_the_queue_type(declare, line, declared, redeclared,
                                                 outcome):
    name = unique("sweep")
    assert declare(declared, {}, name) is None
    channel = declare.channel()
    try:
        channel.queue_declare(name, durable=True, arguments=redeclared)
        text = None
    except pika.exceptions.ChannelClosedByBroker as closed:
        text = closed.reply_text.split(": ", 1)[1]
    assert text == outcome


@pytest.mark.parametrize("line", per_line(lambda line: [()], lines=("4.3",)))
def test_4_3_compares_a_streams_max_age_as_a_duration(declare, line):
    """'24h' redeclares a stream of '1D' (4.3 compares milliseconds; 3.10 and 4.0 the
    text: the new-queue sweep shows theirs)."""
    name = unique("sweep")
    assert declare("stream", {"x-max-age": "1D"}, name) is None
    assert declare("stream", {"x-max-age": "24h"}, name) is None


# -- what the taken arguments do -----------------------------------------------------------

@pytest.mark.parametrize("line, queue_type", per_line(
    lambda line: [("classic",), ("quorum",)]))
def test_max_length_keeps_the_newest_messages(declare, line, queue_type):
    name = unique("sweep")
    assert declare(queue_type, {"x-max-length": 2}, name) is None
    channel = declare.channel()
    for body in (b"1", b"2", b"3"):
        channel.basic_publish("", name, body)
    assert wait_for_count(channel, name, 2) == 2
    assert channel.basic_get(name, auto_ack=True)[2] == b"2"


@pytest.mark.parametrize("line", per_line(lambda line: [()]))
def test_message_ttl_zero_drops_what_no_consumer_takes(declare, line):
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
                   "x-consumer-timeout": 1000, "x-stream-filter": "a",
                   "x-stream-match-unfiltered": True, "x-made-up": 1}
CONSUMER_TAKES = {
    "3.10": {"classic": {"x-priority", "x-cancel-on-ha-failover"},
             "quorum": {"x-priority"}, "stream": {"x-stream-offset"}},
    "4.0": {"classic": {"x-priority"}, "quorum": {"x-priority"},
            "stream": {"x-stream-offset", "x-stream-filter", "x-stream-match-unfiltered"}},
    "4.3": {"classic": {"x-priority"}, "quorum": {"x-priority", "x-consumer-timeout"},
            "stream": {"x-stream-offset", "x-stream-filter", "x-stream-match-unfiltered"}},
}


def consumer_known(line):
    return set().union(*CONSUMER_TAKES[line].values())


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


@pytest.mark.parametrize("line, queue_type, argument", per_line(
    lambda line: [(queue_type, argument) for queue_type in TYPES
                  for argument in CONSUMER_VALUES]))
def test_a_consumer_argument_is_taken_or_refused_by_the_queue_type(declare, line,
                                                                   queue_type, argument):
    """(An argument no type of the line takes is ignored.)"""
    expected = None
    if argument in consumer_known(line) and argument not in CONSUMER_TAKES[line][queue_type]:
        expected = refused(f"invalid arg '{argument}' for queue '{{q}}' in vhost '{{v}}' "
                           f"of queue type rabbit_{queue_type}_queue")
    assert consume(declare, queue_type, {argument: CONSUMER_VALUES[argument]}) == expected


CONSUMER_VALUE_PROBLEMS = [
    ("classic", {"x-priority": "a"}, '"expected integer, got longstr"', LINES),
    ("quorum", {"x-priority": "a"}, '"expected integer, got longstr"', LINES),
    ("classic", {"x-cancel-on-ha-failover": 1}, "{unacceptable_type,signedint}", ("3.10",)),
    ("quorum", {"x-consumer-timeout": "a"}, '"expected integer, got longstr"', ("4.3",)),
]


@pytest.mark.parametrize("line, queue_type, arguments, problem", per_line(
    lambda line: [case[:3] for case in CONSUMER_VALUE_PROBLEMS if line in case[3]]))
def test_an_unacceptable_consumer_value_is_refused_in_rabbitmqs_words(
        declare, line, queue_type, arguments, problem):
    [argument] = arguments
    assert consume(declare, queue_type, arguments) == refused(
        f"invalid arg '{argument}' for queue '{{q}}' in vhost '{{v}}': {problem}")


@pytest.mark.parametrize("line", per_line(lambda line: [()], lines=("4.0", "4.3")))
def test_x_cancel_on_ha_failover_is_ignored_since_4_0(declare, line):
    """Whatever its value (3.10 checks it on classic queues and refuses it on others)."""
    assert consume(declare, "classic", {"x-cancel-on-ha-failover": 1}) is None
