"""Users and vhosts managed while the broker runs, end to end: through Warren's control
socket (or rabbitmqctl against RabbitMQ with WARREN_TEST_BROKER, where the behaviour
compares), then seen by AMQP clients. And (Warren) everything set at run time survives
a restart and a kill -9 of the broker."""

import pika
import pytest
from pamqp import commands

from tests.support.pika_helpers import _test_deadline, close_quietly  # noqa: F401  (fixture)
from tests.support.tenants import (close_connection, open_as, open_tenant, refusal_of_open,
                                   reopen_after_close, reply_to, tenant_of)

PIKA_TEST_TIMEOUT = 120   # rabbitmqctl takes about a second per call

LOGIN_REFUSED = ("ACCESS_REFUSED - Login was refused using authentication mechanism "
                 "PLAIN. For details see the broker logfile.")


@pytest.fixture
def tenant(broker_admin, warren):
    return tenant_of(broker_admin, warren)


def test_a_user_added_while_the_broker_runs_logs_in_at_once(warren, tenant):
    admin = tenant.admin
    admin.add_user(tenant.user + "-new", "fresh")
    try:
        admin.set_permissions(tenant.user + "-new", tenant.vhost, ".*", ".*", ".*")
        client = open_as(warren, tenant.user + "-new", "fresh", tenant.vhost)
        client.open_channel(1)
        client.close()
    finally:
        admin.delete_user(tenant.user + "-new")


def test_a_changed_password_applies_to_the_next_login(warren, tenant):
    before = open_tenant(warren, tenant)
    before.open_channel(1)
    tenant.admin.change_password(tenant.user, "changed")
    close = refusal_of_open(warren, tenant.user, tenant.password, tenant.vhost)
    assert (close.reply_code, close.reply_text) == (403, LOGIN_REFUSED)
    open_as(warren, tenant.user, "changed", tenant.vhost).close()
    reply = reply_to(before, 1, commands.Exchange.Declare(exchange="amq.direct",
                                                          passive=True))
    assert isinstance(reply, commands.Exchange.DeclareOk)     # the open one carries on
    before.close()


def test_a_deleted_user_is_disconnected_with_320_and_others_are_not(warren, tenant):
    doomed = open_tenant(warren, tenant)
    doomed.open_channel(1)
    bystander = open_as(warren, "guest", "guest", "/")
    tenant.admin.delete_user(tenant.user)
    close = doomed.wait_for_connection_close()
    assert (close.reply_code, close.reply_text) == (
        320, f"CONNECTION_FORCED - user '{tenant.user}' is deleted")
    bystander.open_channel(1)
    close_connection(bystander)
    assert refusal_of_open(warren, tenant.user, tenant.password,
                           tenant.vhost).reply_code == 403
    doomed.close()


def test_a_deleted_vhost_disconnects_its_connections_with_320(warren, tenant):
    doomed = open_tenant(warren, tenant)
    tenant.admin.set_permissions(tenant.user, "/", ".*", ".*", ".*")
    elsewhere = open_as(warren, tenant.user, tenant.password, "/")
    tenant.admin.delete_vhost(tenant.vhost)
    close = doomed.wait_for_connection_close()
    # RabbitMQ 3.10 races its vhost's shutdown against the deletion: it sends either
    # text (measured: "is down" about one run in four); Warren always says "deleted".
    states = ("deleted",) if warren.has_test_hooks else ("deleted", "down")
    assert close.reply_code == 320
    assert close.reply_text in [f"CONNECTION_FORCED - vhost '{tenant.vhost}' is {state}"
                                for state in states]
    elsewhere.open_channel(1)                      # the user's other vhost is untouched
    close_connection(elsewhere)
    assert refusal_of_open(warren, tenant.user, tenant.password, tenant.vhost) \
        .reply_text == f"NOT_ALLOWED - vhost {tenant.vhost} not found"
    doomed.close()


# -- survives a restart (Warren) ---------------------------------------------------------

def set_up_at_run_time(admin, warren) -> None:
    """A vhost with a durable queue and limits; a user with tags, permissions, limits
    and a changed password; and a user and a vhost deleted again."""
    admin.add_vhost("kept")
    admin.add_user("keeper", "first", tags=["impersonator"])
    admin.set_permissions("keeper", "kept", ".*", ".*", ".*")
    admin.change_password("keeper", "second")
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        warren.host, warren.port, "kept", pika.PlainCredentials("keeper", "second")))
    connection.channel().queue_declare("durable-q", durable=True)
    connection.close()
    admin.set_vhost_limits("kept", {"max-connections": 1, "max-queues": 1})
    admin.set_user_limits("keeper", {"max-channels": 1})
    admin.add_user("gone", "pw")
    admin.set_permissions("gone", "kept", ".*", ".*", ".*")
    admin.delete_user("gone")
    admin.add_vhost("gone-vhost")
    admin.delete_vhost("gone-vhost")


def check_after_restart(warren) -> None:
    assert refusal_of_open(warren, "keeper", "first", "kept").reply_code == 403
    assert refusal_of_open(warren, "gone", "pw", "kept").reply_code == 403
    assert refusal_of_open(warren, "keeper", "second", "/").reply_text == (
        "NOT_ALLOWED - access to vhost '/' refused for user 'keeper'")
    assert refusal_of_open(warren, "guest", "guest", "gone-vhost").reply_text == (
        "NOT_ALLOWED - vhost gone-vhost not found")
    client = open_as(warren, "keeper", "second", "kept")
    assert refusal_of_open(warren, "keeper", "second", "kept").reply_text.endswith(
        "connection limit (1) is reached")
    client.open_channel(1)
    close = reply_to(client, 1, commands.Queue.Declare(queue="another"))
    assert close.reply_text.endswith("queue limit in vhost 'kept' (1) is reached")
    reopen_after_close(client, 1)
    client.send_method(2, commands.Channel.Open())
    assert client.wait_for_connection_close().reply_text.endswith(
        "maximum allowed user limit of 1")   # (the broker's line: Warren's default, 4.3)
    client.close()
    impersonation_works(warren)


def impersonation_works(warren) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        warren.host, warren.port, "kept", pika.PlainCredentials("keeper", "second")))
    try:
        channel = connection.channel()
        channel.basic_publish("", "durable-q", b"x", pika.BasicProperties(user_id="guest"))
        method, properties, _body = channel.basic_get("durable-q", auto_ack=True)
        assert method is not None and properties.user_id == "guest"
    finally:
        close_quietly(connection)


@pytest.mark.warren_only("restarts and kills a Warren broker of its own (broker_factory)")
@pytest.mark.parametrize("end", ["stop", "kill -9"])
def test_what_is_set_at_run_time_survives_the_broker(broker_factory, tmp_path, end):
    data_dir = str(tmp_path / "data")
    warren = broker_factory(data_dir=data_dir)
    set_up_at_run_time(warren.admin(), warren)
    if end == "stop":
        assert warren.stop() == 0
    else:
        warren.kill()
    warren = broker_factory(data_dir=data_dir)
    check_after_restart(warren)

