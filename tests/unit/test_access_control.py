"""The core's access-control model (broker/core/access_control.py): RabbitMQ's pattern
rules, authentication, and the generation that tells caches a decision may be stale."""

import pytest

from broker.core.access_control import AccessControl, TopicPermission, User
from broker.core.passwords import SHA256_ALGORITHM, hash_password


@pytest.fixture
def access():
    access = AccessControl()
    access.add_user("alice", "s3cret", ("management",))
    return access


def test_patterns_are_unanchored_searches(access):
    access.set_permissions("alice", "/", "^tmp-", "log", ".*")
    assert access.permits("alice", "/", "configure", "tmp-1")
    assert not access.permits("alice", "/", "configure", "x-tmp-1")
    assert access.permits("alice", "/", "write", "app.log.errors")   # anywhere in it
    assert access.permits("alice", "/", "read", "")


def test_an_empty_pattern_allows_only_the_empty_name(access):
    """RabbitMQ reads "" as "^$": it denies every named resource."""
    access.set_permissions("alice", "/", "", "", "")
    assert not access.permits("alice", "/", "configure", "q")
    assert access.permits("alice", "/", "write", "")


def test_no_permissions_on_a_vhost_deny_everything_and_the_vhost(access):
    access.set_permissions("alice", "other", ".*", ".*", ".*")
    assert not access.permits("alice", "/", "read", "q")
    assert not access.may_open("alice", "/")
    assert access.may_open("alice", "other")
    assert not access.permits("nobody", "other", "read", "q")


def test_authenticate_checks_the_hash_and_refuses_users_without_a_password(access):
    assert access.authenticate("alice", "s3cret") == access.users["alice"]
    assert access.authenticate("alice", "wrong") is None
    assert access.authenticate("nobody", "s3cret") is None
    access.put_user(User("cert-only", "", "", ()))
    assert access.authenticate("cert-only", "") is None
    access.put_user(User("bob", hash_password("pw"), SHA256_ALGORITHM, ("monitoring",)))
    assert access.authenticate("bob", "pw").tags == ("monitoring",)


def test_every_change_moves_the_generation(access):
    seen = [access.generation]
    changes = [
        lambda: access.set_permissions("alice", "/", ".*", ".*", ".*"),
        lambda: access.set_topic_permission("alice", "/", TopicPermission("t", "^a", "")),
        lambda: access.clear_topic_permissions("alice", "/", "t"),
        lambda: access.clear_permissions("alice", "/"),
        lambda: access.add_user("bob", "pw"),
        lambda: access.remove_user("bob"),
        lambda: access.forget_vhost("/"),
    ]
    for change in changes:
        change()
        assert access.generation > seen[-1]
        seen.append(access.generation)


def test_removing_a_user_or_vhost_forgets_their_grants(access):
    access.set_permissions("alice", "/", ".*", ".*", ".*")
    access.set_permissions("alice", "v", ".*", ".*", ".*")
    access.set_topic_permission("alice", "v", TopicPermission("t", "^a", "^b"))
    access.forget_vhost("v")
    assert not access.may_open("alice", "v") and ("alice", "v") not in (
        access.topic_permissions)
    access.remove_user("alice")
    assert "alice" not in access.users and not access.may_open("alice", "/")
