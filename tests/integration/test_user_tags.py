"""User tags, changed while the broker runs. The one tag that changes AMQP behaviour is
`impersonator`: its user may publish messages whose user_id names another user; anyone
else gets 406 for a user_id that is not their own. As in RabbitMQ, a connection keeps
the tags its user had when it logged in. Differential (WARREN_TEST_BROKER)."""

import pika
import pytest

from tests.support.pika_helpers import _test_deadline  # noqa: F401  (fixture)
from tests.support.pika_helpers import close_quietly, connect, expect_channel_error
from tests.support.tenants import tenant_of

PIKA_TEST_TIMEOUT = 120   # rabbitmqctl takes about a second per call


@pytest.fixture
def tenant(broker_admin, warren):
    return tenant_of(broker_admin, warren)


@pytest.fixture
def login(warren, tenant):
    """Open pika connections as the tenant's user; all closed after the test."""
    opened = []

    def open_connection() -> pika.BlockingConnection:
        connection = connect(warren, virtual_host=tenant.vhost,
                             credentials=pika.PlainCredentials(tenant.user,
                                                               tenant.password))
        opened.append(connection)
        return connection

    yield open_connection
    for connection in opened:
        close_quietly(connection)


def publish_as(channel, queue: str, user_id: str) -> None:
    channel.basic_publish("", queue, b"body", pika.BasicProperties(user_id=user_id))


def claimed_user_id(channel, queue: str) -> str:
    method, properties, _body = channel.basic_get(queue, auto_ack=True)
    assert method is not None, "the message was not queued"
    return properties.user_id


def refused_impersonation(connection, user: str, claimed: str) -> None:
    channel = connection.channel()
    error = expect_channel_error(connection, channel, 406,
                                 lambda: publish_as(channel, "", claimed))
    assert error.reply_text == (f"PRECONDITION_FAILED - user_id property set to "
                                f"'{claimed}' but authenticated user was '{user}'")


def test_without_the_tag_only_the_users_own_user_id_is_accepted(login, tenant):
    connection = login()
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    publish_as(channel, queue, tenant.user)
    assert claimed_user_id(channel, queue) == tenant.user
    refused_impersonation(connection, tenant.user, "somebody-else")


def test_an_impersonator_publishes_as_any_user_id(login, tenant):
    tenant.admin.set_user_tags(tenant.user, ["impersonator"])
    channel = login().channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    for claimed in ("guest", "no-such-user"):
        publish_as(channel, queue, claimed)
        assert claimed_user_id(channel, queue) == claimed


def test_a_connection_keeps_the_tags_of_its_login(login, tenant):
    before = login()
    tenant.admin.set_user_tags(tenant.user, ["impersonator"])
    refused_impersonation(before, tenant.user, "guest")     # logged in without it
    impersonating = login()
    tenant.admin.set_user_tags(tenant.user, ["monitoring"])
    channel = impersonating.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    publish_as(channel, queue, "guest")                      # logged in with it
    assert claimed_user_id(channel, queue) == "guest"
    refused_impersonation(login(), tenant.user, "guest")     # logged in without it


@pytest.mark.parametrize("tags", [
    ["administrator", "management", "policymaker", "monitoring"],
    ["Impersonator"],
    ["impersonator,monitoring"],         # one tag with a comma in it, not two
])
def test_no_other_tag_grants_impersonation(login, tenant, tags):
    tenant.admin.set_user_tags(tenant.user, tags)
    refused_impersonation(login(), tenant.user, "guest")
