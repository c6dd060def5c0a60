"""What the queue types take, refuse and compare under each RabbitMQ line, where the
lines differ (measured on RabbitMQ 3.10.8, 4.0.5 and 4.3.6 with the same declarations;
tests/integration/test_argument_sweep.py plays the whole sweep against the real nodes)."""

import pytest
from pamqp import commands

from broker.core.rabbitmq_lines import LINE_3_10, LINE_4_0, LINE_4_3, Profile
from test_core_streams import StreamBroker

LINES = [LINE_3_10, LINE_4_0, LINE_4_3]
QUORUM = {"x-queue-type": "quorum"}
STREAM = {"x-queue-type": "stream"}


def client_of(tmp_path, line):
    return StreamBroker(tmp_path, profile=Profile(line)).client()


def declare(client, name: str, arguments: dict) -> str | None:
    """None when declared, else the 406's text (the channel is opened again)."""
    replies = client.method(1, commands.Queue.Declare(queue=name, durable=True,
                                                      arguments=arguments))
    (_, reply), = replies
    if isinstance(reply, commands.Queue.DeclareOk):
        return None
    assert reply.reply_code == 406
    client.method(1, commands.Channel.CloseOk())
    client.open_channel(1)
    return reply.reply_text.removeprefix("PRECONDITION_FAILED - ")


def consume(client, queue: str, arguments: dict) -> str | None:
    client.method(1, commands.Basic.Qos(prefetch_count=10))
    replies = client.method(1, commands.Basic.Consume(queue=queue, arguments=arguments))
    reply = replies[0][1]
    if isinstance(reply, commands.Basic.ConsumeOk):
        return None
    assert reply.reply_code == 406
    client.method(1, commands.Channel.CloseOk())
    client.open_channel(1)
    return reply.reply_text.removeprefix("PRECONDITION_FAILED - ")


def inequivalent(argument: str, difference: str) -> str:
    return f"inequivalent arg '{argument}' for queue 'q' in vhost '/': {difference}"


@pytest.mark.parametrize("line", LINES, ids=lambda line: line.name)
def test_classic_queues_take_a_leader_locator_since_4_0(tmp_path, line):
    client = client_of(tmp_path, line)
    outcome = declare(client, "q", {"x-queue-leader-locator": "balanced"})
    if line is LINE_3_10:
        assert outcome == ("invalid arg 'x-queue-leader-locator' for queue 'q' in vhost "
                           "'/' of queue type rabbit_classic_queue")
        return
    assert outcome is None
    assert declare(client, "q", {}) == inequivalent(
        "x-queue-leader-locator", "received none but current is the value 'balanced' of "
        "type 'longstr'")
    assert declare(client, "bad", {"x-queue-leader-locator": "bogus"}) == (
        "invalid arg 'x-queue-leader-locator' for queue 'bad' in vhost '/': "
        "invalid_queue_locator_arg")


@pytest.mark.parametrize("line, quorum_without_type, classic_as_quorum", [
    (LINE_3_10, "received none but current is the value 'quorum' of type 'longstr'",
     "received the value 'quorum' of type 'longstr' but current is none"),
    (LINE_4_0, "received 'classic' but current is 'quorum'",
     "received 'quorum' but current is 'classic'"),
    (LINE_4_3, "received 'classic' but current is 'quorum'",
     "received 'quorum' but current is 'classic'"),
], ids=lambda value: getattr(value, "name", ""))
def test_a_declaration_without_a_type_is_of_the_default_type_since_4_0(
        tmp_path, line, quorum_without_type, classic_as_quorum):
    client = client_of(tmp_path, line)
    assert declare(client, "q", QUORUM) is None
    assert declare(client, "q", {}) == inequivalent("x-queue-type", quorum_without_type)
    client.method(1, commands.Queue.Delete(queue="q"))
    assert declare(client, "q", {}) is None
    assert declare(client, "q", {"x-queue-type": "classic"}) is None
    assert declare(client, "q", QUORUM) == inequivalent("x-queue-type", classic_as_quorum)


@pytest.mark.parametrize("line", LINES, ids=lambda line: line.name)
def test_4_3_takes_any_queue_mode(tmp_path, line):
    client = client_of(tmp_path, line)
    outcome = declare(client, "q", {"x-queue-mode": "bogus"})
    if line is not LINE_4_3:
        assert outcome == ("invalid arg 'x-queue-mode' for queue 'q' in vhost '/': "
                           "\"unsupported queue mode 'bogus'\"")
        return
    assert outcome is None
    assert declare(client, "q", {"x-queue-mode": "lazy"}) == inequivalent(
        "x-queue-mode", "received 'lazy' but current is 'bogus'")


@pytest.mark.parametrize("line, changed, dropped, equal", [
    (LINE_3_10, "received '2D' but current is '1D'",
     "received none but current is the value '1D' of type 'longstr'", False),
    (LINE_4_3, "received '172800000' but current is '86400000'",
     "received none but current is the value '86400000' of type 'longstr'", True),
], ids=lambda value: getattr(value, "name", ""))
def test_4_3_compares_a_streams_max_age_in_milliseconds(tmp_path, line, changed, dropped,
                                                         equal):
    client = client_of(tmp_path, line)
    assert declare(client, "q", {**STREAM, "x-max-age": "1D"}) is None
    assert declare(client, "q", {**STREAM, "x-max-age": "2D"}) == inequivalent(
        "x-max-age", changed)
    assert declare(client, "q", STREAM) == inequivalent("x-max-age", dropped)
    same_age = declare(client, "q", {**STREAM, "x-max-age": "24h"})
    assert (same_age is None) == equal


@pytest.mark.parametrize("line", LINES, ids=lambda line: line.name)
def test_x_cancel_on_ha_failover_is_unknown_since_4_0(tmp_path, line):
    client = client_of(tmp_path, line)
    declare(client, "c", {})
    declare(client, "qq", QUORUM)
    on_classic = consume(client, "c", {"x-cancel-on-ha-failover": 1})
    on_quorum = consume(client, "qq", {"x-cancel-on-ha-failover": True})
    if line is LINE_3_10:
        assert on_classic == ("invalid arg 'x-cancel-on-ha-failover' for queue 'c' in vhost "
                              "'/': {unacceptable_type,signedint}")
        assert on_quorum == ("invalid arg 'x-cancel-on-ha-failover' for queue 'qq' in vhost "
                             "'/' of queue type rabbit_quorum_queue")
    else:
        assert on_classic is None and on_quorum is None


def test_4_3_takes_consumer_timeouts_on_quorum_queues_only(tmp_path):
    client = client_of(tmp_path, LINE_4_3)
    assert declare(client, "c", {"x-consumer-timeout": 1000}) == (
        "invalid arg 'x-consumer-timeout' for queue 'c' in vhost '/' of queue type "
        "rabbit_classic_queue")
    assert declare(client, "q", {**QUORUM, "x-consumer-timeout": 1000,
                                 "x-consumer-disconnected-timeout": 1000}) is None
    assert declare(client, "q", {**QUORUM, "x-consumer-timeout": 2000,
                                 "x-consumer-disconnected-timeout": 1000}) == inequivalent(
        "x-consumer-timeout", "received '2000' but current is '1000'")
    declare(client, "c", {})
    assert consume(client, "c", {"x-consumer-timeout": 1000}) == (
        "invalid arg 'x-consumer-timeout' for queue 'c' in vhost '/' of queue type "
        "rabbit_classic_queue")
    assert consume(client, "q", {"x-consumer-timeout": "a"}) == (
        "invalid arg 'x-consumer-timeout' for queue 'q' in vhost '/': "
        "\"expected integer, got longstr\"")


@pytest.mark.parametrize("argument", ["x-consumer-timeout", "x-consumer-disconnected-timeout"])
def test_4_3s_quorum_timeouts_are_non_negative_integers(tmp_path, argument):
    client = client_of(tmp_path, LINE_4_3)
    assert declare(client, "q", {**QUORUM, argument: "a"}) == (
        f"invalid arg '{argument}' for queue 'q' in vhost '/': "
        "\"expected integer, got longstr\"")
    assert declare(client, "q", {**QUORUM, argument: -1}) == (
        f"invalid arg '{argument}' for queue 'q' in vhost '/': {{value_negative,-1}}")
