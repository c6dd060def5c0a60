"""The topology operations of broker/core/admin.py (exchanges, queues, bindings, purges),
which the management API calls as its caller and the operator calls with every right:
their effects, the journal entries of durable objects, and refusals that carry the AMQP
reply code a channel would have closed with."""

import pytest

from broker.core.admin import AdminError, Administration
from broker.core.broker import Broker
from broker.core.message import Message
from broker.core.ports import DeleteQueue, SaveBinding, SaveExchange, SaveQueue


@pytest.fixture
def core_broker():
    core_broker = Broker()
    admin = Administration(core_broker)
    admin.add_user("alice", password="pw", tags=["management"])
    admin.set_permissions("alice", "/", "^alice-", "^alice-", "^alice-")
    core_broker.persistence.take_pending()
    return core_broker


@pytest.fixture
def admin(core_broker):
    return Administration(core_broker)


def journal(core_broker):
    changes, _stores, _writes = core_broker.persistence.take_pending()
    return [type(entry) for entry in changes]


def test_the_operator_declares_binds_and_deletes_durable_objects(core_broker, admin):
    admin.declare_exchange("/", "orders", "topic")
    admin.declare_queue("/", "orders.eu", arguments={"x-max-length": 10})
    admin.bind("/", "orders", "queue", "orders.eu", "eu.#")
    assert journal(core_broker) == [SaveExchange, SaveQueue, SaveBinding]
    vhost = core_broker.vhosts["/"]
    assert [queue.name for queue in vhost.route(
        vhost.exchanges["orders"], Message("orders", "eu.fr", b"", b"x"), [])] == ["orders.eu"]
    admin.unbind("/", "orders", "queue", "orders.eu", "eu.#")
    assert admin.delete_queue("/", "orders.eu") == 0
    assert "orders.eu" not in vhost.queues
    assert DeleteQueue in journal(core_broker)


def test_a_user_is_held_to_its_permissions_with_rabbitmqs_reply_codes(admin):
    with pytest.raises(AdminError) as refused:
        admin.declare_queue("/", "bob-queue", user="alice")
    assert refused.value.reply_code == 403
    assert "access to queue 'bob-queue' in vhost '/' refused for user 'alice'" in str(
        refused.value)
    admin.declare_queue("/", "alice-queue", user="alice")
    with pytest.raises(AdminError) as inequivalent:
        admin.declare_queue("/", "alice-queue", durable=False, user="alice")
    assert inequivalent.value.reply_code == 406


def test_missing_objects_are_404(admin):
    for action in (lambda: admin.delete_queue("/", "nope"),
                   lambda: admin.purge_queue("/", "nope"),
                   lambda: admin.delete_exchange("/", "nope"),
                   lambda: admin.bind("/", "nope", "queue", "nope"),
                   lambda: admin.unbind("/", "amq.direct", "exchange", "amq.fanout", "k")):
        with pytest.raises(AdminError) as missing:
            action()
        assert missing.value.reply_code == 404


def test_purge_counts_the_ready_messages(core_broker, admin):
    admin.declare_queue("/", "work", durable=False)
    queue = core_broker.vhosts["/"].queues["work"]
    for body in (b"a", b"b"):
        queue.enqueue(Message("", "work", b"", body))
    assert admin.purge_queue("/", "work") == 2
    assert queue.message_count == 0
