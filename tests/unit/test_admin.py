"""The admin operations (broker/core/admin.py) refuse what cannot be carried out, with an
AdminError that names the problem, and then change nothing: neither the live broker nor
the journal (nothing is recorded for the metadata store)."""

import base64
import hashlib

import pytest

from broker.core.admin import AdminError, Administration
from broker.core.broker import Broker
from broker.core.ports import SaveUser, SaveUserLimits, SaveVhost, SaveVhostLimits
from broker.core.quorum_queue import QuorumQueue
from broker.core.vhost import VhostMetadata

SALT = b"salt"
# The hash of "secret" in RabbitMQ's format: base64(salt + sha256(salt + password)).
SECRET_HASH = base64.b64encode(SALT + hashlib.sha256(SALT + b"secret").digest()).decode()


@pytest.fixture
def core_broker():
    core_broker = Broker()
    admin = Administration(core_broker)
    admin.add_user("alice", password="pw", tags=["monitoring"])
    admin.add_vhost("v")
    admin.set_permissions("alice", "v", "^a", "^b", "^c")
    core_broker.persistence.take_pending()     # the set-up is not what the tests check
    return core_broker


@pytest.fixture
def admin(core_broker):
    return Administration(core_broker)


def refused(core_broker: Broker, action, *words: str) -> str:
    """Run `action`, which must raise AdminError naming `words`, and check that the
    users, vhosts, permissions and limits and the journal are as they were."""
    before = snapshot(core_broker)
    writes = core_broker.persistence.writes
    with pytest.raises(AdminError) as info:
        action()
    text = str(info.value)
    for word in words:
        assert word in text, text
    assert snapshot(core_broker) == before
    assert core_broker.persistence.writes == writes
    return text


def last_recorded(core_broker: Broker):
    """The latest journal entry recorded (the journal is emptied)."""
    changes, _stores, _writes = core_broker.persistence.take_pending()
    return changes[-1]


def snapshot(core_broker: Broker) -> tuple:
    access = core_broker.access
    return (dict(access.users), set(core_broker.vhosts),
            {key: (p.configure, p.write, p.read) for key, p in access.permissions.items()},
            {key: dict(value) for key, value in access.topic_permissions.items()},
            dict(core_broker.limits.vhosts), dict(core_broker.limits.users))


# -- users ---------------------------------------------------------------------------

def test_a_duplicate_user_is_refused_and_keeps_its_password(core_broker, admin):
    refused(core_broker, lambda: admin.add_user("alice", password="other"), "alice",
            "already exists")
    assert core_broker.access.authenticate("alice", "pw") is not None


def test_a_user_needs_a_name(core_broker, admin):
    refused(core_broker, lambda: admin.add_user("", password="pw"), "non-empty name")


def test_a_password_and_a_hash_together_are_refused(core_broker, admin):
    refused(core_broker, lambda: admin.add_user("bob", password="pw", password_hash=SECRET_HASH),
            "not both")


@pytest.mark.parametrize("bad_hash, words", [
    ("not base64!", ("not base64",)),
    (base64.b64encode(b"too short").decode(), ("9 bytes", "36")),
])
def test_a_hash_not_in_rabbitmqs_format_is_refused(core_broker, admin, bad_hash, words):
    refused(core_broker, lambda: admin.add_user("bob", password_hash=bad_hash), *words)


def test_a_hash_in_rabbitmqs_format_logs_in_with_its_password(core_broker, admin):
    admin.add_user("bob", password_hash=SECRET_HASH)
    assert core_broker.access.authenticate("bob", "secret") is not None
    assert core_broker.access.authenticate("bob", "other") is None


def test_a_user_without_password_cannot_log_in_with_one(core_broker, admin):
    admin.add_user("bob")
    assert core_broker.access.authenticate("bob", "") is None


@pytest.mark.parametrize("operation", [
    lambda admin: admin.change_password("nobody", "pw"),
    lambda admin: admin.clear_password("nobody"),
    lambda admin: admin.set_user_tags("nobody", ["administrator"]),
    lambda admin: admin.delete_user("nobody"),
    lambda admin: admin.set_permissions("nobody", "v", ".*", ".*", ".*"),
    lambda admin: admin.clear_permissions("nobody", "v"),
    lambda admin: admin.set_topic_permissions("nobody", "v", "amq.topic", ".*", ".*"),
    lambda admin: admin.clear_topic_permissions("nobody", "v"),
    lambda admin: admin.set_user_limits("nobody", {"max-channels": 1}),
    lambda admin: admin.clear_user_limits("nobody"),
])
def test_operations_on_an_unknown_user_are_refused(core_broker, admin, operation):
    refused(core_broker, lambda: operation(admin), "no user 'nobody'")


def test_tags_are_any_strings_and_replace_the_old_ones(core_broker, admin):
    admin.set_user_tags("alice", ["impersonator", "my team", "policymaker"])
    assert core_broker.access.users["alice"].tags == ("impersonator", "my team", "policymaker")
    admin.set_user_tags("alice", "management, monitoring")    # the HTTP API's form
    assert core_broker.access.users["alice"].tags == ("management", "monitoring")
    admin.set_user_tags("alice", [])
    assert core_broker.access.users["alice"].tags == ()
    assert last_recorded(core_broker) == SaveUser(
        name="alice", password_hash=core_broker.access.users["alice"].password_hash,
        algorithm=core_broker.access.users["alice"].algorithm, tags=())


@pytest.mark.parametrize("tags", [[1], 5, {"a": 1}, None])
def test_tags_that_are_not_strings_are_refused(core_broker, admin, tags):
    refused(core_broker, lambda: admin.set_user_tags("alice", tags), "tags must be a list")
    refused(core_broker, lambda: admin.add_user("bob", password="pw", tags=tags),
            "tags must be a list")


# -- vhosts --------------------------------------------------------------------------

def test_a_duplicate_or_nameless_vhost_is_refused(core_broker, admin):
    refused(core_broker, lambda: admin.add_vhost("v"), "vhost 'v' already exists")
    refused(core_broker, lambda: admin.add_vhost(""), "non-empty name")


def test_vhost_metadata_is_kept_replaced_and_recorded(core_broker, admin):
    admin.add_vhost("described", "first", "a, b", "quorum")
    assert core_broker.vhosts["described"].metadata == VhostMetadata("first", ("a", "b"),
                                                                "quorum")
    assert last_recorded(core_broker) == SaveVhost("described", "first", ("a", "b"), "quorum")
    admin.update_vhost("described", "second", ["c"], "undefined")   # RabbitMQ's "none"
    assert core_broker.vhosts["described"].metadata == VhostMetadata("second", ("c",), None)
    assert last_recorded(core_broker) == SaveVhost("described", "second", ("c",), None)


@pytest.mark.parametrize("queue_type", ["bogus", "Quorum", ["quorum"]])
def test_a_default_queue_type_warren_lacks_is_refused(core_broker, admin, queue_type):
    refused(core_broker, lambda: admin.add_vhost("w", default_queue_type=queue_type),
            "invalid_queue_type", "classic, quorum, stream")
    refused(core_broker, lambda: admin.update_vhost("v", "d", (), queue_type),
            "invalid_queue_type")
    assert core_broker.vhosts["v"].metadata == VhostMetadata()


def test_a_vhost_description_is_a_string(core_broker, admin):
    refused(core_broker, lambda: admin.update_vhost("v", 5), "description is a string")


def test_durable_queues_declared_without_a_type_get_the_default_one(core_broker, admin):
    admin.update_vhost("v", default_queue_type="quorum")
    admin.declare_queue("v", "plain")
    admin.declare_queue("v", "plain")   # equivalent: the default applies again
    admin.declare_queue("v", "asked-classic", arguments={"x-queue-type": "classic"})
    admin.declare_queue("v", "transient", durable=False)
    admin.declare_queue("v", "auto-deleted", auto_delete=True)
    queues = core_broker.vhosts["v"].queues
    assert isinstance(queues["plain"], QuorumQueue)
    assert queues["plain"].arguments == {"x-queue-type": "quorum"}
    assert not any(isinstance(queues[name], QuorumQueue)
                   for name in ("asked-classic", "transient", "auto-deleted"))
    with pytest.raises(AdminError, match="inequivalent arg 'x-queue-type'"):
        admin.declare_queue("v", "plain", arguments={"x-queue-type": "classic"})


@pytest.mark.parametrize("operation", [
    lambda admin: admin.delete_vhost("nowhere"),
    lambda admin: admin.set_permissions("alice", "nowhere", ".*", ".*", ".*"),
    lambda admin: admin.clear_permissions("alice", "nowhere"),
    lambda admin: admin.set_topic_permissions("alice", "nowhere", "amq.topic", ".*", ".*"),
    lambda admin: admin.clear_topic_permissions("alice", "nowhere"),
    lambda admin: admin.set_vhost_limits("nowhere", {"max-queues": 1}),
    lambda admin: admin.clear_vhost_limits("nowhere"),
])
def test_operations_on_an_unknown_vhost_are_refused(core_broker, admin, operation):
    refused(core_broker, lambda: operation(admin), "no vhost 'nowhere'")


# -- permissions ---------------------------------------------------------------------

@pytest.mark.parametrize("patterns, access", [
    (("(", ".*", ".*"), "configure"),
    ((".*", "[a-", ".*"), "write"),
    ((".*", ".*", "*x"), "read"),
])
def test_an_invalid_regex_is_refused_and_the_old_permissions_stay(core_broker, admin,
                                                                  patterns, access):
    refused(core_broker, lambda: admin.set_permissions("alice", "v", *patterns),
            f"invalid {access} regular expression")
    assert core_broker.access.permits("alice", "v", "configure", "abc")


def test_an_invalid_topic_regex_is_refused(core_broker, admin):
    refused(core_broker, lambda: admin.set_topic_permissions("alice", "v", "amq.topic", "(",
                                                        ".*"), "invalid write")


# -- limits --------------------------------------------------------------------------

@pytest.mark.parametrize("limits, words", [
    ({"max-channels": 1}, ("unknown vhost limit 'max-channels'", "max-queues")),
    ({"foo": 1}, ("unknown vhost limit 'foo'",)),
    ({"max-queues": 1.5}, ("max-queues must be an integer", "1.5")),
    ({"max-queues": "3"}, ("must be an integer",)),
    ({"max-queues": True}, ("must be an integer",)),
    ({"max-connections": None}, ("must be an integer",)),
    ([], ("must be a JSON object",)),
    ("{}", ("must be a JSON object",)),
])
def test_vhost_limits_are_validated_as_rabbitmq_does(core_broker, admin, limits, words):
    admin.set_vhost_limits("v", {"max-queues": 5})
    refused(core_broker, lambda: admin.set_vhost_limits("v", limits), *words)
    assert core_broker.limits.vhosts["v"] == {"max-queues": 5}


@pytest.mark.parametrize("limits, words", [
    ({"max-queues": 1}, ("unknown user limit 'max-queues'", "max-channels")),
    ({"max-channels": 2.0}, ("max-channels must be an integer",)),
])
def test_user_limits_are_validated_as_rabbitmq_does(core_broker, admin, limits, words):
    refused(core_broker, lambda: admin.set_user_limits("alice", limits), *words)


def test_vhost_limits_replace_the_old_ones_and_negative_values_are_kept(core_broker, admin):
    admin.set_vhost_limits("v", {"max-connections": 2, "max-queues": 3})
    admin.set_vhost_limits("v", {"max-queues": -1})
    assert core_broker.limits.vhosts["v"] == {"max-queues": -1}
    assert last_recorded(core_broker) == SaveVhostLimits(vhost="v",
                                                              limits={"max-queues": -1})
    admin.clear_vhost_limits("v")
    assert "v" not in core_broker.limits.vhosts
    assert last_recorded(core_broker) == SaveVhostLimits(vhost="v", limits={})


def test_user_limits_merge_and_clear_one_at_a_time(core_broker, admin):
    admin.set_user_limits("alice", {"max-connections": 2})
    admin.set_user_limits("alice", {"max-channels": 0})
    assert core_broker.limits.users["alice"] == {"max-connections": 2, "max-channels": 0}
    assert last_recorded(core_broker) == SaveUserLimits(
        user="alice", limits={"max-connections": 2, "max-channels": 0})
    admin.clear_user_limits("alice", "max-channels")
    assert core_broker.limits.users["alice"] == {"max-connections": 2}
    admin.clear_user_limits("alice", "max-queues")     # not set: nothing changes
    assert core_broker.limits.users["alice"] == {"max-connections": 2}
    admin.clear_user_limits("alice", "all")
    assert "alice" not in core_broker.limits.users
    assert last_recorded(core_broker) == SaveUserLimits(user="alice", limits={})
