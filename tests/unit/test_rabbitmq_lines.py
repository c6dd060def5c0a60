"""The RabbitMQ lines (broker/core/rabbitmq_lines.py): what a client sees fork by line
(3.10, 4.0, 4.3), chosen per broker and per vhost, the deprecated features as RabbitMQ's
configuration permits them, and the upgrade lint's notes."""

import pytest
from pamqp import commands

from broker.config import ConfigError, load_settings
from broker.core.admin import AdminError, Administration
from broker.core.broker import Broker
from broker.core.quorum_queue import delivery_limit
from broker.core.rabbitmq_lines import (GLOBAL_QOS, LINE_3_10, LINE_4_0, LINE_4_3,
                                        QUEUE_MASTER_LOCATOR, TRANSIENT_NONEXCL_QUEUES,
                                        Profile, UnknownLine, make_profile)
from broker.core.vhost import VhostMetadata

from tests.unit.core_harness import Client, close_code, deliveries


def client_under(line, permits=None, vhost_line=None) -> Client:
    broker = Broker(profile=Profile(line, permits or {}))
    if vhost_line is not None:
        broker.vhosts["/"].describe(VhostMetadata(rabbitmq_line=vhost_line))
    client = Client(broker)
    client.open_channel(1)
    return client


# -- identity ---------------------------------------------------------------------------

@pytest.mark.parametrize("line", [LINE_3_10, LINE_4_0, LINE_4_3])
def test_connection_start_says_the_rabbitmq_release_of_the_line_and_warren_in_platform(line):
    properties = Broker(profile=Profile(line), version="9.9.9").server_properties()
    assert (properties["product"], properties["version"]) == ("RabbitMQ", line.version)
    assert properties["platform"].startswith("Warren 9.9.9 ")


def test_the_default_line_is_4_3_with_its_deprecated_features_at_their_defaults():
    profile = Broker().profile
    assert profile.line is LINE_4_3
    assert not profile.permits_feature(GLOBAL_QOS)
    assert not profile.permits_feature(QUEUE_MASTER_LOCATOR)
    assert profile.permits_feature(TRANSIENT_NONEXCL_QUEUES)
    assert not profile.permits_feature("classic_queue_mirroring")   # removed


def test_permits_change_a_features_default_and_never_bring_back_a_removed_one():
    profile = make_profile("4.3", {GLOBAL_QOS: True, TRANSIENT_NONEXCL_QUEUES: False,
                                   "classic_queue_mirroring": True})
    assert profile.permits_feature(GLOBAL_QOS)
    assert not profile.permits_feature(TRANSIENT_NONEXCL_QUEUES)
    assert not profile.permits_feature("classic_queue_mirroring")


def test_a_line_without_deprecated_features_permits_everything():
    profile = make_profile("3.10", {GLOBAL_QOS: False})
    assert profile.permits_feature(GLOBAL_QOS)


@pytest.mark.parametrize("line, permits", [("3.11", {}), ("4.3", {"no_such": True}),
                                           ("4.3", {GLOBAL_QOS: "yes"})])
def test_unknown_lines_features_and_values_are_refused(line, permits):
    with pytest.raises(UnknownLine):
        make_profile(line, permits)


def test_the_configuration_file_names_the_line_and_rabbitmqs_permit_keys(tmp_path):
    path = tmp_path / "warren.toml"
    path.write_text('rabbitmq = "4.0"\n'
                    'deprecated_features.permit.global_qos = false\n')
    profile = load_settings(str(path), {}).profile()
    assert profile.line is LINE_4_0 and not profile.permits_feature(GLOBAL_QOS)
    assert load_settings(str(path), {"rabbitmq": "3.10"}).profile().line is LINE_3_10
    path.write_text('rabbitmq = "5.0"\n')
    with pytest.raises(ConfigError, match="3.10, 4.0, 4.3"):
        load_settings(str(path), {})
    path.write_text('deprecated_features.allow.global_qos = true\n')
    with pytest.raises(ConfigError, match="permit"):
        load_settings(str(path), {})


# -- per vhost --------------------------------------------------------------------------

def test_a_vhost_can_behave_as_another_line_than_the_broker():
    broker = Broker(profile=Profile(LINE_4_3, {GLOBAL_QOS: True}))
    admin = Administration(broker)
    admin.add_vhost("old", rabbitmq_line="3.10")
    admin.add_vhost("new")
    assert broker.vhosts["old"].profile.line is LINE_3_10
    assert broker.vhosts["old"].profile.permits == {GLOBAL_QOS: True}
    assert broker.vhosts["new"].profile is broker.profile
    admin.update_vhost("old", rabbitmq_line=None)
    assert broker.vhosts["old"].profile is broker.profile
    with pytest.raises(AdminError, match="rabbitmq_line"):
        admin.add_vhost("bad", rabbitmq_line="2.8")


# -- global qos -------------------------------------------------------------------------

def two_consumers_with_global_prefetch_1(client: Client) -> list:
    """Four messages in two queues, prefetch 1 global, a consumer on each queue."""
    for queue in ("a", "b"):
        client.declare_queue(1, queue, durable=True)
        for n in range(2):
            client.publish(1, "", queue, f"{queue}{n}".encode())
    client.method(1, commands.Basic.Qos(prefetch_count=1, global_=True))
    frames = client.method(1, commands.Basic.Consume(queue="a", consumer_tag="ca"))
    frames += client.method(1, commands.Basic.Consume(queue="b", consumer_tag="cb"))
    return deliveries(frames)


def test_global_qos_spans_the_channels_consumers_under_3_10_and_4_0():
    for line in (LINE_3_10, LINE_4_0):
        assert len(two_consumers_with_global_prefetch_1(client_under(line))) == 1


def test_global_qos_denied_under_4_3_limits_each_consumer():
    """As measured on 4.3.6: prefetch 1 global over two consumers delivers one to each."""
    assert len(two_consumers_with_global_prefetch_1(client_under(LINE_4_3))) == 2
    permitted = client_under(LINE_4_3, {GLOBAL_QOS: True})
    assert len(two_consumers_with_global_prefetch_1(permitted)) == 1


def test_global_qos_is_noted_with_what_the_later_line_does():
    client = client_under(LINE_3_10)
    two_consumers_with_global_prefetch_1(client)
    (note,) = client.broker.lint.of_vhost("/")
    assert note.topic == GLOBAL_QOS
    assert "RabbitMQ 4.3 denies it by default" in note.text
    assert "per consumer" in note.text
    denied = client_under(LINE_4_3)
    two_consumers_with_global_prefetch_1(denied)
    (note,) = denied.broker.lint.of_vhost("/")
    assert "denied under RabbitMQ 4.3" in note.text
    assert denied.broker.lint.used_features() == [GLOBAL_QOS]


def test_a_vhosts_own_line_decides_global_qos():
    client = client_under(LINE_4_3, vhost_line="3.10")
    assert len(two_consumers_with_global_prefetch_1(client)) == 1


# -- deprecated queue declarations ------------------------------------------------------

def test_transient_non_exclusive_queues_are_permitted_by_every_line_and_not_noted():
    for line in (LINE_3_10, LINE_4_0, LINE_4_3):
        client = client_under(line)
        assert client.declare_queue(1, "transient") == "transient"
        assert client.broker.lint.of_vhost("/") == []


def test_denied_transient_non_exclusive_queues_close_the_connection_with_541():
    client = client_under(LINE_4_3, {TRANSIENT_NONEXCL_QUEUES: False})
    replies = client.method(1, commands.Queue.Declare(queue="transient"))
    assert close_code(replies) == 541
    close = next(method for _, method in replies
                 if isinstance(method, commands.Connection.Close))
    assert close.reply_text.startswith(
        "INTERNAL_ERROR - Feature `transient_nonexcl_queues` is deprecated.")


def test_durable_or_exclusive_queues_are_not_transient_non_exclusive():
    client = client_under(LINE_4_3, {TRANSIENT_NONEXCL_QUEUES: False})
    assert client.declare_queue(1, "durable", durable=True) == "durable"
    assert client.declare_queue(1, "exclusive", exclusive=True) == "exclusive"
    assert client.broker.lint.of_vhost("/") == []


def test_queue_master_locator_is_refused_under_4_3_and_noted_under_4_0():
    arguments = {"x-queue-master-locator": "min-masters"}
    denied = client_under(LINE_4_3)
    replies = denied.method(1, commands.Queue.Declare(queue="q", durable=True,
                                                      arguments=arguments))
    assert close_code(replies) == 541
    permitted = client_under(LINE_4_0)
    assert permitted.declare_queue(1, "q", durable=True, arguments=arguments) == "q"
    (note,) = permitted.broker.lint.of_vhost("/")
    assert note.topic == QUEUE_MASTER_LOCATOR and "RabbitMQ 4.3" in note.text


# -- exchange types ---------------------------------------------------------------------

def test_an_unknown_exchange_type_closes_the_connection_under_3_10_and_the_channel_since_4_0():
    for line, code in ((LINE_3_10, 503), (LINE_4_0, 406), (LINE_4_3, 406)):
        client = client_under(line)
        replies = client.method(1, commands.Exchange.Declare(exchange="x",
                                                             exchange_type="no-such-type"))
        assert close_code(replies) == code
        close = next(method for _, method in replies if hasattr(method, "reply_text"))
        assert close.reply_text.endswith("unknown exchange type 'no-such-type'")


def test_x_local_random_exists_from_4_0_on():
    refused = client_under(LINE_3_10).method(1, commands.Exchange.Declare(
        exchange="r", exchange_type="x-local-random"))
    assert close_code(refused) == 503
    declared = client_under(LINE_4_0).method(1, commands.Exchange.Declare(
        exchange="r", exchange_type="x-local-random"))
    assert close_code(declared) is None


# -- quorum queues' delivery limit ------------------------------------------------------

@pytest.mark.parametrize("argument, policy, limit", [
    (None, None, 20), (5, None, 5), (None, 7, 7), (5, 7, 5), (-1, None, None),
    (-1, 7, 7), (5, -1, 5), (-2, -1, None), ("ten", None, 20), ("ten", 7, 7), (2.5, None, 20),
])
def test_the_4x_delivery_limit_follows_rabbitmq_4(argument, policy, limit):
    arguments = {} if argument is None else {"x-delivery-limit": argument}
    definition = {} if policy is None else {"delivery-limit": policy}
    assert delivery_limit(arguments, definition, 20) == limit


@pytest.mark.parametrize("argument, policy, limit", [
    (None, None, None), (5, 7, 5), (-1, None, -1), ("ten", 7, 7),
])
def test_the_3_10_delivery_limit_is_unchanged(argument, policy, limit):
    arguments = {} if argument is None else {"x-delivery-limit": argument}
    definition = {} if policy is None else {"delivery-limit": policy}
    assert delivery_limit(arguments, definition) == limit


def returns_until_gone(client: Client, returns: int) -> int:
    """Reject-requeue the one message of quorum queue q up to `returns` times; how
    many deliveries it had."""
    client.declare_queue(1, "q", durable=True, arguments={"x-queue-type": "quorum"})
    client.publish(1, "", "q", b"m")
    delivered = 0
    for _ in range(returns + 1):
        frames = client.method(1, commands.Basic.Get(queue="q"))
        if not any(isinstance(method, commands.Basic.GetOk) for _, method in frames):
            break
        delivered += 1
        client.method(1, commands.Basic.Reject(delivery_tag=delivered, requeue=True))
    return delivered


def test_a_quorum_queue_drops_a_message_after_its_20th_return_since_4_0():
    assert returns_until_gone(client_under(LINE_4_0), 25) == 21


def test_under_3_10_the_message_stays_and_the_lint_says_what_4_0_does():
    client = client_under(LINE_3_10)
    assert returns_until_gone(client, 25) == 26
    (note,) = client.broker.lint.of_vhost("/")
    assert note.topic == "quorum_delivery_limit" and "RabbitMQ 4.0" in note.text


# -- quorum queues' delivery counts (measured on 4.0.5 and 4.3.6: FIELD-NOTES) -----------

def counts_through_returns(line) -> list:
    """(x-delivery-count, x-acquired-count) of one quorum message at its first delivery
    and after a reject, a nack, a closed channel and a recover, all with requeue."""
    client = client_under(line)
    client.declare_queue(1, "q", durable=True, arguments={"x-queue-type": "quorum"})
    client.publish(1, "", "q", b"m")
    seen = []

    def get(channel: int) -> int:
        frames = client.method(channel, commands.Basic.Get(queue="q"))
        ok, header = [method for _, method in frames
                      if isinstance(method, commands.Basic.GetOk) or hasattr(method, "properties")][:2]
        headers = header.properties.headers or {}
        seen.append((headers.get("x-delivery-count"), headers.get("x-acquired-count")))
        return ok.delivery_tag

    tag = get(1)
    client.method(1, commands.Basic.Reject(delivery_tag=tag, requeue=True))
    tag = get(1)
    client.method(1, commands.Basic.Nack(delivery_tag=tag, requeue=True))
    get(1)
    client.method(1, commands.Channel.Close(reply_code=200, reply_text="bye"))
    client.open_channel(2)
    get(2)
    client.method(2, commands.Basic.Recover(requeue=True))
    get(2)
    return seen


def test_quorum_delivery_counts_by_line():
    assert counts_through_returns(LINE_3_10) == [(0, None), (1, None), (2, None), (3, None),
                                                 (4, None)]
    assert counts_through_returns(LINE_4_0) == [(None, None), (1, None), (2, None),
                                                (3, None), (4, None)]
    assert counts_through_returns(LINE_4_3) == [(None, None), (1, 1), (1, 2), (2, 3), (2, 4)]


def deliveries_before_the_limit(line, settle) -> int:
    client = client_under(line)
    client.declare_queue(1, "q", durable=True, arguments={"x-queue-type": "quorum",
                                                          "x-delivery-limit": 2})
    client.publish(1, "", "q", b"m")
    delivered = 0
    for _ in range(6):
        frames = client.method(1, commands.Basic.Get(queue="q"))
        ok = [method for _, method in frames if isinstance(method, commands.Basic.GetOk)]
        if not ok:
            break
        delivered += 1
        client.method(1, settle(ok[0].delivery_tag))
    return delivered


def test_under_4_3_a_nack_hands_the_message_back_without_counting_towards_the_limit():
    def reject(tag):
        return commands.Basic.Reject(delivery_tag=tag, requeue=True)

    def nack(tag):
        return commands.Basic.Nack(delivery_tag=tag, requeue=True)

    assert deliveries_before_the_limit(LINE_4_0, nack) == 3
    assert deliveries_before_the_limit(LINE_4_0, reject) == 3
    assert deliveries_before_the_limit(LINE_4_3, reject) == 3
    assert deliveries_before_the_limit(LINE_4_3, nack) == 6    # never dropped
