"""Refusal texts that RabbitMQ changed between its lines, under each line (from
RabbitMQ's source, v3.10.8, v4.0.5, v4.3.5, and measured on 3.10.8 and 4.3.6)."""

import pytest
from pamqp import commands

from broker.core.access_control import AccessControl, ChannelAccess
from broker.core.errors import ChannelError, ConnectionFailure
from broker.core.handshake import header_refusal
from broker.core.limits import Limits
from broker.core.rabbitmq_lines import LINE_3_10, LINE_4_0, LINE_4_3, Profile
from test_core_streams import StreamBroker

LINES = [LINE_3_10, LINE_4_0, LINE_4_3]


def refused(check) -> str:
    with pytest.raises(ChannelError) as info:
        check()
    return info.value.reply_text


@pytest.mark.parametrize("line, prefix", [
    (LINE_3_10, "access"), (LINE_4_0, "{} access"), (LINE_4_3, "{} access")],
    ids=lambda value: getattr(value, "name", ""))
def test_since_4_0_a_403_names_the_permission_missing(line, prefix):
    access = AccessControl()
    access.add_user("u", "pw")
    access.set_permissions("u", "v", "", "", "")
    channel = ChannelAccess(access, "u", "v", line.access_refusal_names_permission)
    for kind, check in (("configure", channel.configure), ("write", channel.write),
                        ("read", channel.read)):
        assert refused(lambda: check("queue", "q")) == (
            f"ACCESS_REFUSED - {prefix.format(kind)} to queue 'q' in vhost 'v' refused "
            "for user 'u'")


@pytest.mark.parametrize("line, shown", [(LINE_3_10, "(2)"), (LINE_4_0, "(2)"),
                                         (LINE_4_3, "2")],
                         ids=lambda value: getattr(value, "name", ""))
def test_4_3_shows_the_channel_limit_bare(line, shown):
    limits = Limits()
    limits.set_user_limits("u", {"max-channels": 2})
    limits.channel_opened("u")
    limits.channel_opened("u")
    with pytest.raises(ConnectionFailure) as info:
        limits.check_channel("u", line.limits_in_parentheses)
    assert info.value.reply_text == (
        f"NOT_ALLOWED - number of channels opened for user 'u' has reached the maximum "
        f"allowed user limit of {shown}")


@pytest.mark.parametrize("line, prefetch, auto_ack", [
    (LINE_3_10, "for 'queue 's' in vhost '/''", "by stream queues queue 's' in vhost '/'"),
    (LINE_4_0, "for stream queue 's' in vhost '/'", "by stream queue 's' in vhost '/'"),
    (LINE_4_3, "for stream queue 's' in vhost '/'", "by stream queue 's' in vhost '/'")],
    ids=lambda value: getattr(value, "name", ""))
def test_since_4_0_a_streams_consumer_refusals_name_the_stream(tmp_path, line, prefetch,
                                                              auto_ack):
    client = StreamBroker(tmp_path, profile=Profile(line)).client()
    client.method(1, commands.Queue.Declare(queue="s", durable=True,
                                            arguments={"x-queue-type": "stream"}))
    (_, close), = client.method(1, commands.Basic.Consume(queue="s"))
    assert close.reply_text.startswith(
        f"PRECONDITION_FAILED - consumer prefetch count is not set {prefetch} (")
    client.method(1, commands.Channel.CloseOk())
    client.open_channel(1)
    client.method(1, commands.Basic.Qos(prefetch_count=10))
    (_, close), = client.method(1, commands.Basic.Consume(queue="s", no_ack=True))
    assert close.reply_text.startswith(
        f"NOT_IMPLEMENTED - automatic acknowledgement not supported {auto_ack} (")


@pytest.mark.parametrize("line, refusal", [
    (LINE_3_10, "cannot declare queue 'q': queue limit in vhost '/' (0) is reached"),
    (LINE_4_0, "invalid arg 'x-max-length' for queue 'q' in vhost '/': "
               "\"expected integer, got longstr\""),
    (LINE_4_3, "invalid arg 'x-max-length' for queue 'q' in vhost '/': "
               "\"expected integer, got longstr\"")],
    ids=lambda value: getattr(value, "name", ""))
def test_since_4_0_the_queue_limit_comes_after_the_arguments(tmp_path, line, refusal):
    client = StreamBroker(tmp_path, profile=Profile(line)).client()
    client.broker.limits.set_vhost_limits("/", {"max-queues": 0})
    (_, close), = client.method(1, commands.Queue.Declare(
        queue="q", arguments={"x-max-length": "ten"}))
    assert close.reply_text == f"PRECONDITION_FAILED - {refusal}"


@pytest.mark.parametrize("seen, under_3_10, since_4_0", [
    (b"AMQP\x00\x00\x09\x00", "0-9-1", "0-9-1"),     # another 0-9 revision
    (b"AMQP\x00\x00\x0a", "0-9-1", "0-9-1"),         # a later 0-x
    (b"AMQP\x00\x00\x08", "0-9-1", "1.0"),           # 0-8
    (b"AMQP\x00\x01", "0-9-1", "1.0"),               # AMQP 1.0 without SASL
    (b"G", "0-9-1", "1.0"),                          # HTTP, TLS, anything else
])
def test_since_4_0_a_refused_protocol_header_gets_amqp_1_0s(seen, under_3_10, since_4_0):
    headers = {"0-9-1": b"AMQP\x00\x00\x09\x01", "1.0": b"AMQP\x03\x01\x00\x00"}
    assert header_refusal(seen, LINE_3_10.offers_amqp_1_0) == headers[under_3_10]
    for line in (LINE_4_0, LINE_4_3):
        assert header_refusal(seen, line.offers_amqp_1_0) == headers[since_4_0]
