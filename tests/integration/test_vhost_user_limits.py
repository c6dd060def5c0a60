"""Vhost limits (max-connections, max-queues) and user limits (max-connections,
max-channels), set at run time through the admin operations, refused with RabbitMQ's
reply code, text, class and method. Differential: with WARREN_TEST_BROKER=127.0.0.1:5673
the same tests run against RabbitMQ, set up with rabbitmqctl.

Each test has its own vhost and user (tests/support/tenants.py)."""

import pytest
from pamqp import commands

from tests.support.bystander import RunningBystander
from tests.support.tenants import (OpenRefused, close_connection, open_as, open_tenant, opens_in_time,
                                   refusal_of_open, reopen_after_close, reply_to, tenant_of)



@pytest.fixture
def tenant(broker_admin, warren):
    return tenant_of(broker_admin, warren)


def refusal(warren, tenant, vhost=None):
    return refusal_of_open(warren, tenant.user, tenant.password, vhost or tenant.vhost)


def still_works(client, channel: int = 1) -> bool:
    reply = reply_to(client, channel, commands.Exchange.Declare(exchange="amq.direct",
                                                                passive=True))
    return isinstance(reply, commands.Exchange.DeclareOk)


# -- vhost max-connections -----------------------------------------------------------

def test_vhost_connection_limit_refuses_the_next_open_with_530(warren, tenant):
    tenant.admin.set_vhost_limits(tenant.vhost, {"max-connections": 2})
    first, second = open_tenant(warren, tenant), open_tenant(warren, tenant)
    close = refusal(warren, tenant)
    assert (close.reply_code, close.class_id, close.method_id) == (530, 10, 40)
    assert close.reply_text == (f"NOT_ALLOWED - access to vhost '{tenant.vhost}' refused "
                                f"for user '{tenant.user}': connection limit (2) is reached")
    close_connection(first)
    third = opens_in_time(warren, tenant.user, tenant.password, tenant.vhost)
    for client in (second, third):
        client.close()


def test_zero_allows_no_connection_and_a_negative_limit_none(warren, tenant):
    tenant.admin.set_vhost_limits(tenant.vhost, {"max-connections": 0})
    assert refusal(warren, tenant).reply_text.endswith("connection limit (0) is reached")
    tenant.admin.set_vhost_limits(tenant.vhost, {"max-connections": -1})
    clients = [open_tenant(warren, tenant) for _ in range(3)]
    for client in clients:
        client.close()


def test_a_lowered_connection_limit_closes_no_open_connection(warren, tenant):
    clients = [open_tenant(warren, tenant) for _ in range(2)]
    clients[0].open_channel(1)
    tenant.admin.set_vhost_limits(tenant.vhost, {"max-connections": 1})
    assert refusal(warren, tenant).reply_code == 530
    assert still_works(clients[0])
    for client in clients:
        client.close()


def test_an_unknown_vhost_is_not_found_before_any_limit(warren, tenant):
    tenant.admin.set_user_limits(tenant.user, {"max-connections": 0})
    close = refusal(warren, tenant, vhost=tenant.vhost + "-missing")
    assert (close.reply_code, close.reply_text) == (
        530, f"NOT_ALLOWED - vhost {tenant.vhost}-missing not found")


def test_limits_are_checked_before_access_to_the_vhost(warren, tenant):
    admin = tenant.admin
    admin.clear_permissions(tenant.user, tenant.vhost)
    admin.set_vhost_limits(tenant.vhost, {"max-connections": 0})
    admin.set_user_limits(tenant.user, {"max-connections": 0})
    assert refusal(warren, tenant).reply_text.endswith(
        f"refused for user '{tenant.user}': connection limit (0) is reached")
    admin.clear_vhost_limits(tenant.vhost)
    assert refusal(warren, tenant).reply_text == (
        f"NOT_ALLOWED - connection refused for user '{tenant.user}': user connection "
        "limit (0) is reached")
    admin.clear_user_limits(tenant.user, "max-connections")
    assert refusal(warren, tenant).reply_text == (
        f"NOT_ALLOWED - access to vhost '{tenant.vhost}' refused for user '{tenant.user}'")


# -- user max-connections ------------------------------------------------------------

def test_user_connection_limit_counts_the_users_connections_on_every_vhost(warren, tenant):
    tenant.admin.set_permissions(tenant.user, "/", ".*", ".*", ".*")
    tenant.admin.set_user_limits(tenant.user, {"max-connections": 2})
    first = open_tenant(warren, tenant)
    second = open_as(warren, tenant.user, tenant.password, "/")
    close = refusal(warren, tenant)
    assert (close.reply_code, close.class_id, close.method_id) == (530, 10, 40)
    assert close.reply_text == (f"NOT_ALLOWED - connection refused for user "
                                f"'{tenant.user}': user connection limit (2) is reached")
    close_connection(second)
    opens_in_time(warren, tenant.user, tenant.password, tenant.vhost).close()
    first.close()


# -- user max-channels ---------------------------------------------------------------

# The limit as the 530 shows it: in parentheses up to 4.0, bare since 4.3.
SHOWN_LIMIT = pytest.mark.parametrize("line, shown", [
    pytest.param("3.10", "({})", marks=pytest.mark.warren_rabbitmq("3.10")),
    pytest.param("4.3", "{}", marks=pytest.mark.warren_rabbitmq("4.3"))])


@SHOWN_LIMIT
def test_user_channel_limit_closes_the_connection_with_530(warren, tenant, line, shown):
    tenant.admin.set_user_limits(tenant.user, {"max-channels": 2})
    first = open_tenant(warren, tenant)
    first.open_channel(1)
    second = open_tenant(warren, tenant)
    second.open_channel(1)
    second.send_method(2, commands.Channel.Open())
    close = second.wait_for_connection_close()
    assert (close.reply_code, close.class_id, close.method_id) == (530, 0, 0)
    assert close.reply_text == (f"NOT_ALLOWED - number of channels opened for user "
                                f"'{tenant.user}' has reached the maximum allowed user "
                                f"limit of {shown.format(2)}")
    assert still_works(first)
    first.close()
    second.close()


def test_a_lowered_channel_limit_closes_no_open_channel(warren, tenant):
    client = open_tenant(warren, tenant)
    client.open_channel(1)
    client.open_channel(2)
    tenant.admin.set_user_limits(tenant.user, {"max-channels": 1})
    assert still_works(client, 1) and still_works(client, 2)
    client.send_method(3, commands.Channel.Open())
    assert client.wait_for_connection_close().reply_code == 530
    client.close()


@SHOWN_LIMIT
def test_zero_channels_refuses_the_first(warren, tenant, line, shown):
    tenant.admin.set_user_limits(tenant.user, {"max-channels": 0})
    client = open_tenant(warren, tenant)
    client.send_method(1, commands.Channel.Open())
    assert client.wait_for_connection_close().reply_text.endswith(
        f"maximum allowed user limit of {shown.format(0)}")
    client.close()


# -- vhost max-queues ----------------------------------------------------------------

def declare(client, queue: str, **kwargs):
    return reply_to(client, 1, commands.Queue.Declare(queue=queue, **kwargs))


def test_queue_limit_counts_exclusive_and_server_named_queues(warren, tenant):
    tenant.admin.set_vhost_limits(tenant.vhost, {"max-queues": 2})
    client = open_tenant(warren, tenant)
    client.open_channel(1)
    assert isinstance(declare(client, "q1"), commands.Queue.DeclareOk)
    assert isinstance(declare(client, "", exclusive=True), commands.Queue.DeclareOk)
    close = declare(client, "q3")
    assert isinstance(close, commands.Channel.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (406, 50, 10)
    assert close.reply_text == ("PRECONDITION_FAILED - cannot declare queue 'q3': queue "
                                f"limit in vhost '{tenant.vhost}' (2) is reached")
    reopen_after_close(client, 1)
    close = declare(client, "")
    assert close.reply_text.startswith("PRECONDITION_FAILED - cannot declare queue "
                                       "'amq.gen-")     # the name it would have had
    reopen_after_close(client, 1)
    assert isinstance(declare(client, "q3", exclusive=True), commands.Channel.Close)
    client.close()


def test_existing_queues_can_be_redeclared_past_the_limit(warren, tenant):
    client = open_tenant(warren, tenant)
    client.open_channel(1)
    declare(client, "q1")
    declare(client, "q2")
    tenant.admin.set_vhost_limits(tenant.vhost, {"max-queues": 1})
    assert isinstance(declare(client, "q1"), commands.Queue.DeclareOk)
    assert isinstance(declare(client, "q2", passive=True), commands.Queue.DeclareOk)
    reply_to(client, 1, commands.Queue.Delete(queue="q2"))
    assert isinstance(declare(client, "q3"), commands.Channel.Close)   # 1 of 1
    reopen_after_close(client, 1)
    reply_to(client, 1, commands.Queue.Delete(queue="q1"))
    assert isinstance(declare(client, "q3"), commands.Queue.DeclareOk)
    client.close()


@pytest.mark.parametrize("line", [
    pytest.param("3.10", marks=pytest.mark.warren_rabbitmq("3.10")),
    pytest.param("4.3", marks=pytest.mark.warren_rabbitmq("4.3"))])
def test_the_queue_limit_is_checked_before_the_queue_arguments_up_to_3_x(warren, tenant,
                                                                         line):
    """(4.0 and later check the arguments first.)"""
    tenant.admin.set_vhost_limits(tenant.vhost, {"max-queues": 0})
    client = open_tenant(warren, tenant)
    client.open_channel(1)
    close = declare(client, "q", arguments={"x-max-length": "ten"})
    limit = ("PRECONDITION_FAILED - cannot declare queue 'q': queue limit in vhost "
             f"'{tenant.vhost}' (0) is reached")
    argument = ("PRECONDITION_FAILED - invalid arg 'x-max-length' for queue 'q' in vhost "
                f"'{tenant.vhost}': \"expected integer, got longstr\"")
    assert close.reply_text == (limit if line == "3.10" else argument)
    client.close()


# -- a flood past the limit (Warren) ---------------------------------------------------

@pytest.mark.warren_only("attacks a Warren broker of its own (broker_factory)")
def test_a_connection_flood_past_the_vhost_limit_leaves_the_broker_serving(broker_factory):
    warren = broker_factory()
    admin = warren.admin()
    admin.add_vhost("flooded")
    admin.set_permissions("guest", "flooded", ".*", ".*", ".*")
    admin.set_vhost_limits("flooded", {"max-connections": 5})
    with RunningBystander(warren):
        held, refused = [], 0
        for _ in range(200):
            try:
                held.append(open_as(warren, "guest", "guest", "flooded"))
            except OpenRefused as refusal_:
                assert refusal_.close.reply_code == 530
                refused += 1
        assert (len(held), refused) == (5, 195)
        assert all(still_works_after_channel(client) for client in held)
        for client in held:
            client.close()
    assert warren.process.poll() is None


def still_works_after_channel(client) -> bool:
    client.open_channel(1)
    return still_works(client)
