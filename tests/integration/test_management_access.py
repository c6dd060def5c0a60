"""Users, vhosts, permissions, policies, limits and parameters over the management API.
Runs against Warren and, with WARREN_TEST_BROKER and WARREN_TEST_MANAGEMENT, against
RabbitMQ's management plugin: same fields, types, codes, bodies and effects.

The tests work as guest, an administrator, on the session broker (`warren_broker`,
`api`, `broker_admin`), not in a `warren` vhost: what they check is the API's
broker-wide view (users, vhosts, `/`), which a `warren` user, tagged `management`, does
not have."""

import urllib.parse
import uuid

import pika
import pika.exceptions
import pytest


@pytest.fixture
def names(api):
    """Unique user and vhost names for one test; whatever it created is deleted after."""
    suffix = uuid.uuid4().hex[:8]
    made = {"user": f"acc-user-{suffix}", "other": f"acc-other-{suffix}",
            "vhost": f"acc-vhost-{suffix}"}
    yield made
    for key in ("user", "other"):
        api.delete(f"/api/users/{made[key]}")
    api.delete(f"/api/vhosts/{made['vhost']}")


def connect(warren_broker, user, password, vhost="/"):
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=warren_broker.host, port=warren_broker.port, virtual_host=vhost,
        credentials=pika.PlainCredentials(user, password), connection_attempts=1))


def test_users_are_listed_with_rabbitmqs_fields(api):
    guest = next(user for user in api.json("/api/users") if user["name"] == "guest")
    assert set(guest) == {"name", "password_hash", "hashing_algorithm", "tags", "limits"}
    assert guest["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert guest["tags"] == ["administrator"]
    assert guest["limits"] == {}
    assert api.json("/api/users/guest") == guest


def test_a_user_created_over_http_logs_in_and_is_updated_then_deleted(api, warren_broker,
                                                                     names):
    user = names["user"]
    assert api.put(f"/api/users/{user}",
                   {"password": "pw1", "tags": "management,policymaker"}).status_code == 201
    assert api.json(f"/api/users/{user}")["tags"] == ["management", "policymaker"]
    assert api.put(f"/api/permissions/%2F/{user}",
                   {"configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
    connect(warren_broker, user, "pw1").close()
    assert api.put(f"/api/users/{user}",
                   {"password": "pw2", "tags": ["monitoring"]}).status_code == 204
    assert api.json(f"/api/users/{user}")["tags"] == ["monitoring"]
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(warren_broker, user, "pw1")
    connect(warren_broker, user, "pw2").close()
    assert api.delete(f"/api/users/{user}").status_code == 204
    assert api.get(f"/api/users/{user}").status_code == 404
    assert api.delete(f"/api/users/{user}").status_code == 404


def test_a_user_put_with_a_password_hash_logs_in_with_that_password(api, warren_broker,
                                                                    names):
    guest_hash = api.json("/api/users/guest")["password_hash"]   # guest's password: guest
    user = names["user"]
    assert api.put(f"/api/users/{user}", {"password_hash": guest_hash,
                                          "tags": ""}).status_code == 201
    assert api.json(f"/api/users/{user}")["password_hash"] == guest_hash
    api.put(f"/api/permissions/%2F/{user}", {"configure": "", "write": "", "read": ""})
    connect(warren_broker, user, "guest").close()


def test_a_user_put_needs_tags_and_a_base64_hash(api, names):
    user = names["user"]
    missing = api.put(f"/api/users/{user}", {"password": "pw"})
    assert missing.status_code == 400
    assert missing.json() == {"error": "bad_request", "reason": "tags_not_present"}
    assert api.put(f"/api/users/{user}", {"password_hash": "not base64!",
                                          "tags": ""}).status_code == 400
    assert api.get(f"/api/users/{user}").status_code == 404


def test_users_without_permissions_and_bulk_delete(api, names):
    for key in ("user", "other"):
        api.put(f"/api/users/{names[key]}", {"password": "pw", "tags": ""})
    api.put(f"/api/permissions/%2F/{names['other']}",
            {"configure": "", "write": "", "read": ""})
    unpermitted = {user["name"] for user in api.json("/api/users/without-permissions")}
    assert names["user"] in unpermitted and names["other"] not in unpermitted
    refused = api.post("/api/users/bulk-delete", {"no-users": []})
    assert refused.status_code == 400
    assert api.post("/api/users/bulk-delete",
                    {"users": [names["user"], names["other"]]}).status_code == 204
    listed = {user["name"] for user in api.json("/api/users")}
    assert not listed & {names["user"], names["other"]}


def test_a_vhost_is_created_listed_and_deleted(api, names):
    vhost = names["vhost"]
    assert api.put(f"/api/vhosts/{vhost}", {"description": "d"}).status_code == 201
    assert api.put(f"/api/vhosts/{vhost}").status_code == 204
    shown = api.json(f"/api/vhosts/{vhost}")
    assert shown["name"] == vhost
    assert isinstance(shown["description"], str) and isinstance(shown["tags"], list)
    assert shown["tracing"] is False
    assert list(shown["cluster_state"].values()) == ["running"]
    assert vhost in {listed["name"] for listed in api.json("/api/vhosts")}
    assert api.json("/api/vhosts/%2F")["name"] == "/"
    # RabbitMQ shows a vhost's message counts once it has a queue and its statistics
    # were collected
    assert api.put(f"/api/queues/{vhost}/counted", {}).status_code == 201
    counted = api.wait_for(f"/api/vhosts/{vhost}", lambda shown: "messages" in shown)
    assert [counted[key] for key in
            ("messages", "messages_ready", "messages_unacknowledged")] == [0, 0, 0]
    # RabbitMQ gives the creator every permission on the new vhost
    assert api.json(f"/api/permissions/{vhost}/guest")["configure"] == ".*"
    assert api.delete(f"/api/vhosts/{vhost}").status_code == 204
    assert api.get(f"/api/vhosts/{vhost}").status_code == 404
    assert api.delete(f"/api/vhosts/{vhost}").status_code == 404


def test_a_vhost_counts_the_ready_and_unacked_messages_of_its_queues(api, warren_broker,
                                                                     names):
    vhost = names["vhost"]
    api.put(f"/api/vhosts/{vhost}")
    connection = connect(warren_broker, "guest", "guest", vhost)
    try:
        channel = connection.channel()
        channel.queue_declare("counted")
        channel.confirm_delivery()
        for body in (b"one", b"two"):
            channel.basic_publish("", "counted", body)
        method, _properties, _body = channel.basic_get("counted", auto_ack=False)
        assert method is not None
        counts = ("messages", "messages_ready", "messages_unacknowledged")
        shown = api.wait_for(f"/api/vhosts/{vhost}", lambda answer: [
            answer.get(key) for key in counts] == [2, 1, 1])
        listed = next(each for each in api.json("/api/vhosts") if each["name"] == vhost)
        assert [listed[key] for key in counts] == [shown[key] for key in counts]
    finally:
        connection.close()


def test_permissions_are_set_listed_and_take_effect(api, warren_broker, names):
    user, vhost = names["user"], names["vhost"]
    api.put(f"/api/users/{user}", {"password": "pw", "tags": ""})
    api.put(f"/api/vhosts/{vhost}")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        connect(warren_broker, user, "pw", vhost)
    body = {"configure": "^own-", "write": ".*", "read": ".*"}
    assert api.put(f"/api/permissions/{vhost}/{user}", body).status_code == 201
    assert api.put(f"/api/permissions/{vhost}/{user}", body).status_code == 204
    expected = {"user": user, "vhost": vhost, **body}
    assert api.json(f"/api/permissions/{vhost}/{user}") == expected
    assert expected in api.json("/api/permissions")
    assert expected in api.json(f"/api/users/{user}/permissions")
    assert expected in api.json(f"/api/vhosts/{vhost}/permissions")
    connection = connect(warren_broker, user, "pw", vhost)
    channel = connection.channel()
    channel.queue_declare("own-queue", auto_delete=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_declare("other-queue")
    assert refused.value.reply_code == 403
    connection.close()
    assert api.delete(f"/api/permissions/{vhost}/{user}").status_code == 204
    assert api.get(f"/api/permissions/{vhost}/{user}").status_code == 404
    assert api.delete(f"/api/permissions/{vhost}/{user}").status_code == 404


def test_a_permission_for_a_missing_user_or_incomplete_body_is_refused(api, names):
    missing = api.put(f"/api/permissions/%2F/{names['user']}",
                      {"configure": ".*", "write": ".*", "read": ".*"})
    assert missing.status_code == 400
    assert missing.json() == {"error": "bad_request", "reason": "vhost_or_user_not_found"}
    incomplete = api.put("/api/permissions/%2F/guest", {"configure": ".*"})
    assert incomplete.status_code == 400
    assert incomplete.json()["reason"] == "[{key_missing,write},{key_missing,read}]"


def test_topic_permissions_are_set_listed_and_deleted(api, names):
    user, vhost = names["user"], names["vhost"]
    api.put(f"/api/users/{user}", {"password": "pw", "tags": ""})
    api.put(f"/api/vhosts/{vhost}")
    body = {"exchange": "amq.topic", "write": "^a", "read": ".*"}
    assert api.put(f"/api/topic-permissions/{vhost}/{user}", body).status_code == 201
    expected = {"user": user, "vhost": vhost, **body}
    assert api.json(f"/api/topic-permissions/{vhost}/{user}") == [expected]
    assert expected in api.json("/api/topic-permissions")
    assert api.json(f"/api/users/{user}/topic-permissions") == [expected]
    assert api.json(f"/api/vhosts/{vhost}/topic-permissions") == [expected]
    assert api.delete(f"/api/topic-permissions/{vhost}/{user}").status_code == 204
    assert api.get(f"/api/topic-permissions/{vhost}/{user}").status_code == 404


def test_a_policy_applies_to_a_matching_queue(api, warren_broker, names):
    vhost = names["vhost"]
    api.put(f"/api/vhosts/{vhost}")
    body = {"pattern": "^limited", "definition": {"max-length": 2}, "priority": 1,
            "apply-to": "queues"}
    assert api.put(f"/api/policies/{vhost}/cap", body).status_code == 201
    assert api.put(f"/api/policies/{vhost}/cap", body).status_code == 204
    expected = {"vhost": vhost, "name": "cap", **body}
    assert api.json(f"/api/policies/{vhost}/cap") == expected
    assert api.json(f"/api/policies/{vhost}") == [expected]
    assert expected in api.json("/api/policies")
    connection = connect(warren_broker, "guest", "guest", vhost)
    channel = connection.channel()
    channel.queue_declare("limited-queue")
    for number in range(5):
        channel.basic_publish("", "limited-queue", str(number).encode())
    channel.confirm_delivery()   # every publish before it has been routed
    assert channel.queue_declare("limited-queue", passive=True).method.message_count == 2
    connection.close()
    assert api.delete(f"/api/policies/{vhost}/cap").status_code == 204
    assert api.get(f"/api/policies/{vhost}/cap").status_code == 404
    assert api.delete(f"/api/policies/{vhost}/cap").status_code == 404


def test_policy_refusals_name_the_problem(api, names):
    vhost = names["vhost"]
    api.put(f"/api/vhosts/{vhost}")
    no_definition = api.put(f"/api/policies/{vhost}/p", {"pattern": "^q"})
    assert no_definition.status_code == 400
    assert no_definition.json()["reason"] == "[{key_missing,definition}]"
    unknown = api.put(f"/api/policies/{vhost}/p",
                      {"pattern": "^q", "definition": {"bogus": 1}})
    assert unknown.status_code == 400 and "not recognised" in unknown.json()["reason"]
    missing_vhost = api.put(f"/api/policies/{vhost}-gone/p",
                            {"pattern": "^q", "definition": {"max-length": 1}})
    assert missing_vhost.status_code == 404
    assert missing_vhost.json() == {"error": "not_found", "reason": "vhost_not_found"}


def test_operator_policies_are_set_listed_and_deleted(api, names):
    vhost = names["vhost"]
    api.put(f"/api/vhosts/{vhost}")
    body = {"pattern": "^q", "definition": {"max-length": 5}, "priority": 0,
            "apply-to": "queues"}
    assert api.put(f"/api/operator-policies/{vhost}/op", body).status_code == 201
    expected = {"vhost": vhost, "name": "op", **body}
    assert api.json(f"/api/operator-policies/{vhost}") == [expected]
    assert api.json(f"/api/operator-policies/{vhost}/op") == expected
    assert api.delete(f"/api/operator-policies/{vhost}/op").status_code == 204
    assert api.json(f"/api/operator-policies/{vhost}") == []


def test_vhost_limits_are_set_listed_cleared_and_enforced(api, warren_broker, names):
    vhost = names["vhost"]
    api.put(f"/api/vhosts/{vhost}")
    assert api.put(f"/api/vhost-limits/{vhost}/max-queues",
                   {"value": 1}).status_code == 204
    assert api.json(f"/api/vhost-limits/{vhost}") == [
        {"vhost": vhost, "value": {"max-queues": 1}}]
    assert {"vhost": vhost, "value": {"max-queues": 1}} in api.json("/api/vhost-limits")
    connection = connect(warren_broker, "guest", "guest", vhost)
    channel = connection.channel()
    channel.queue_declare("first", auto_delete=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_declare("second")
    assert refused.value.reply_code == 406
    connection.close()
    assert api.put(f"/api/vhost-limits/{vhost}/max-bogus",
                   {"value": 1}).status_code == 400
    assert api.delete(f"/api/vhost-limits/{vhost}/max-queues").status_code == 204
    assert api.json(f"/api/vhost-limits/{vhost}") == []


def test_user_limits_are_set_listed_and_cleared(api, names):
    user = names["user"]
    api.put(f"/api/users/{user}", {"password": "pw", "tags": ""})
    assert api.put(f"/api/user-limits/{user}/max-channels",
                   {"value": 3}).status_code == 204
    assert api.json(f"/api/user-limits/{user}") == [
        {"user": user, "value": {"max-channels": 3}}]
    assert api.json(f"/api/users/{user}")["limits"] == {"max-channels": 3}
    missing_value = api.put(f"/api/user-limits/{user}/max-channels", {})
    assert missing_value.json() == {"error": "bad_request",
                                    "reason": "[{key_missing,value}]"}
    assert api.delete(f"/api/user-limits/{user}/max-channels").status_code == 204
    assert api.json(f"/api/user-limits/{user}") == []


def test_parameters_of_unknown_components_are_refused(api):
    assert api.json("/api/parameters") == []
    refused = api.put("/api/parameters/shovel/%2F/x", {"value": {}})
    assert refused.status_code == 400
    assert refused.json()["reason"] == "Validation failed\n\ncomponent shovel not found\n"


def test_global_parameters_are_a_list_of_names_and_values(api):
    parameters = api.json("/api/global-parameters")
    assert parameters and all(set(item) == {"name", "value"} for item in parameters)


def test_a_management_user_may_not_manage_users_and_sees_only_its_vhosts(api, names):
    user, vhost = names["user"], names["vhost"]
    api.put(f"/api/users/{user}", {"password": "pw", "tags": "management"})
    api.put(f"/api/vhosts/{vhost}")
    limited = api.as_user(user, "pw")
    for path in ("/api/users", f"/api/users/{user}", "/api/permissions"):
        refused = limited.get(path)
        assert refused.status_code == 401, path
        assert refused.json() == {"error": "not_authorised",
                                  "reason": "Not administrator user"}
    assert limited.put(f"/api/vhosts/{vhost}-x").status_code == 401
    assert vhost not in {listed["name"] for listed in limited.json("/api/vhosts")}
    assert limited.json("/api/policies") == []
    refused = limited.get("/api/global-parameters")
    assert refused.status_code == 401
    assert refused.json() == {"error": "not_authorised",
                              "reason": "User not authorised to access object"}


def test_a_policymaker_sets_policies_only_in_its_vhosts(api, names):
    user, vhost = names["user"], names["vhost"]
    api.put(f"/api/users/{user}", {"password": "pw", "tags": "policymaker"})
    api.put(f"/api/vhosts/{vhost}")
    policymaker = api.as_user(user, "pw")
    body = {"pattern": "^q", "definition": {"max-length": 5}}
    refused = policymaker.put(f"/api/policies/{vhost}/p", body)
    assert refused.status_code == 401
    assert refused.json() == {"error": "not_authorised",
                              "reason": "User not authorised to access object"}
    api.put(f"/api/permissions/{vhost}/{user}", {"configure": "", "write": "", "read": ""})
    assert policymaker.put(f"/api/policies/{vhost}/p", body).status_code == 201
    assert policymaker.put(f"/api/operator-policies/{vhost}/p", body).status_code == 401
    assert policymaker.delete(f"/api/policies/{vhost}/p").status_code == 204


def test_names_with_slashes_and_spaces_are_one_path_segment_each(api, warren_broker):
    """A vhost "a/b …", a user "u/1 …" and a policy "p/1 …" travel as %2F-encoded
    segments: every path names exactly its objects, and the vhost "a" is not involved."""
    suffix = uuid.uuid4().hex[:8]
    vhost, user, policy = f"a/b {suffix}", f"u/1 {suffix}", f"p/1 {suffix}"
    v, u, p = (urllib.parse.quote(name, safe="") for name in (vhost, user, policy))
    try:
        assert api.put(f"/api/vhosts/{v}").status_code == 201
        assert api.json(f"/api/vhosts/{v}")["name"] == vhost
        assert api.get("/api/vhosts/a%2Fb").status_code == 404
        assert api.put(f"/api/users/{u}", {"password": "pw", "tags": ""}).status_code == 201
        assert api.json(f"/api/users/{u}")["name"] == user
        rights = {"configure": ".*", "write": ".*", "read": ".*"}
        assert api.put(f"/api/permissions/{v}/{u}", rights).status_code == 201
        assert api.json(f"/api/permissions/{v}/{u}") == {"user": user, "vhost": vhost,
                                                         **rights}
        assert user in [grant["user"] for grant in api.json(f"/api/vhosts/{v}/permissions")]
        assert [grant["vhost"] for grant in api.json(f"/api/users/{u}/permissions")] == [vhost]
        connect(warren_broker, user, "pw", vhost).close()
        body = {"pattern": "^q", "definition": {"max-length": 1}, "priority": 0,
                "apply-to": "queues"}
        assert api.put(f"/api/policies/{v}/{p}", body).status_code == 201
        assert api.json(f"/api/policies/{v}/{p}") == {"vhost": vhost, "name": policy,
                                                      **body}
        assert api.put(f"/api/vhost-limits/{v}/max-queues",
                       {"value": 5}).status_code == 204
        assert api.json(f"/api/vhost-limits/{v}") == [
            {"vhost": vhost, "value": {"max-queues": 5}}]
        exported = api.json(f"/api/definitions/{v}")
        assert [each["name"] for each in exported["policies"]] == [policy]
        assert api.delete(f"/api/policies/{v}/{p}").status_code == 204
        assert api.delete(f"/api/permissions/{v}/{u}").status_code == 204
        assert api.json(f"/api/users/{u}/permissions") == []
    finally:
        api.delete(f"/api/users/{u}")
        api.delete(f"/api/vhosts/{v}")
    assert api.get(f"/api/vhosts/{v}").status_code == 404


@pytest.mark.parametrize("line", [
    pytest.param("3.10", marks=pytest.mark.warren_rabbitmq("3.10")),
    pytest.param("4.3", marks=pytest.mark.warren_rabbitmq("4.3"))])
def test_4_3_refuses_a_topic_permission_for_a_missing_exchange(api, warren, line):
    """RabbitMQ 4.3 checks that the exchange exists (rabbit_auth_backend_internal,
    #16587): 400 with the reason as a term; 3.10 takes any name."""
    path = (f"/api/topic-permissions/{urllib.parse.quote(warren.vhost, safe='')}/"
            f"{urllib.parse.quote(warren.user, safe='')}")
    body = {"exchange": "no-such-x", "write": ".*", "read": ".*"}
    answer = api.put(path, body)
    if line == "3.10":
        assert answer.status_code in (201, 204)
    else:
        assert (answer.status_code, answer.json()) == (
            400, {"error": "bad_request", "reason": ["no_such_exchange", "no-such-x"]})
    assert api.put(path, {**body, "exchange": "amq.topic"}).status_code in (201, 204)
