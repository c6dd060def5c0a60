"""Definitions (RabbitMQ's JSON of users, vhosts, permissions, policies and topology)
over /api/definitions, at boot (--load-definitions), and between Warren and RabbitMQ 3.10
in both directions. The first tests run against either broker (its management API as
guest, `api`, for definitions are broker-wide: users and vhosts); the others need a Warren
beside a RabbitMQ node."""

import base64
import hashlib
import json
import os
import subprocess
import sys
import uuid

import pika
import pytest

SECTIONS = ("rabbit_version", "rabbitmq_version", "product_name", "product_version",
            "users", "vhosts", "permissions", "topic_permissions", "parameters",
            "global_parameters", "policies", "queues", "exchanges", "bindings")


def rabbit_hash(password: str, salt: bytes = b"\x01\x02\x03\x04") -> str:
    """RabbitMQ's rabbit_password_hashing_sha256 format: base64(salt + sha256(salt +
    password))."""
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def connect(address, user: str, password: str, vhost: str):
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=address.host, port=address.port, virtual_host=vhost,
        credentials=pika.PlainCredentials(user, password), connection_attempts=1))


def sample(suffix: str) -> dict:
    """Definitions touching every section Warren and RabbitMQ share."""
    user, vhost = f"defs-user-{suffix}", f"defs-vhost-{suffix}"
    return {
        "users": [{"name": user, "password_hash": rabbit_hash("secret"),
                   "hashing_algorithm": "rabbit_password_hashing_sha256",
                   "tags": ["management"], "limits": {}}],
        "vhosts": [{"name": vhost}],
        "permissions": [{"user": user, "vhost": vhost, "configure": ".*", "write": ".*",
                         "read": ".*"}],
        "topic_permissions": [{"user": user, "vhost": vhost, "exchange": "amq.topic",
                               "write": "^a", "read": ".*"}],
        "parameters": [],
        "policies": [{"vhost": vhost, "name": "cap", "pattern": "^capped",
                      "apply-to": "queues", "definition": {"max-length": 3},
                      "priority": 2}],
        "queues": [
            {"name": "capped", "vhost": vhost, "durable": True, "auto_delete": False,
             "arguments": {"x-message-ttl": 60000}},
            {"name": "replicated", "vhost": vhost, "durable": True, "auto_delete": False,
             "arguments": {"x-queue-type": "quorum"}}],
        "exchanges": [
            {"name": f"ex-{kind}", "vhost": vhost, "type": kind, "durable": True,
             "auto_delete": False, "internal": False, "arguments": {}}
            for kind in ("direct", "fanout", "topic", "headers")],
        "bindings": [
            {"source": "ex-direct", "vhost": vhost, "destination": "capped",
             "destination_type": "queue", "routing_key": "k", "arguments": {}},
            {"source": "ex-topic", "vhost": vhost, "destination": "ex-fanout",
             "destination_type": "exchange", "routing_key": "a.#", "arguments": {}},
            {"source": "ex-fanout", "vhost": vhost, "destination": "replicated",
             "destination_type": "queue", "routing_key": "", "arguments": {}}],
    }


def topology(api, vhost: str) -> dict:
    """What the API lists of a vhost, in a form two brokers can be compared by."""
    quoted = vhost.replace("/", "%2F")
    return {
        "queues": sorted((q["name"], q["durable"], q["auto_delete"],
                          json.dumps(q["arguments"], sort_keys=True))
                         for q in api.json(f"/api/definitions/{quoted}")["queues"]),
        "exchanges": sorted((e["name"], e["type"], e["durable"], e["internal"])
                            for e in api.json(f"/api/definitions/{quoted}")["exchanges"]),
        "bindings": sorted((b["source"], b["destination"], b["destination_type"],
                            b["routing_key"])
                           for b in api.json(f"/api/definitions/{quoted}")["bindings"]),
        "policies": sorted((p["name"], p["pattern"], p["apply-to"], p["priority"],
                            json.dumps(p["definition"], sort_keys=True))
                           for p in api.json(f"/api/policies/{quoted}")),
        "permissions": sorted((p["user"], p["configure"], p["write"], p["read"])
                              for p in api.json(f"/api/vhosts/{quoted}/permissions")),
        "topic_permissions": sorted(
            (p["user"], p["exchange"], p["write"], p["read"])
            for p in api.json(f"/api/vhosts/{quoted}/topic-permissions")),
    }


@pytest.fixture
def suffix():
    return uuid.uuid4().hex[:8]


def forget(api, suffix: str) -> None:
    api.delete(f"/api/users/defs-user-{suffix}")
    api.delete(f"/api/vhosts/defs-vhost-{suffix}")


def test_the_export_has_rabbitmqs_sections(api):
    exported = api.json("/api/definitions")
    assert set(SECTIONS) <= set(exported)
    assert all(isinstance(exported[key], list) for key in SECTIONS[4:])
    assert all(isinstance(exported[key], str) for key in SECTIONS[:4])
    guest = next(user for user in exported["users"] if user["name"] == "guest")
    assert guest["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    per_vhost = api.json("/api/definitions/%2F")
    assert {"rabbit_version", "parameters", "policies", "queues", "exchanges",
            "bindings"} <= set(per_vhost)
    assert "users" not in per_vhost
    assert all("vhost" not in queue for queue in per_vhost["queues"])


def test_imported_definitions_give_the_users_vhosts_and_topology(api, warren_broker, suffix):
    document = sample(suffix)
    try:
        assert api.post("/api/definitions", document).status_code == 204
        vhost, user = f"defs-vhost-{suffix}", f"defs-user-{suffix}"
        listed = topology(api, vhost)
        assert [q[0] for q in listed["queues"]] == ["capped", "replicated"]
        assert {e[0] for e in listed["exchanges"]} >= {
            "ex-direct", "ex-fanout", "ex-topic", "ex-headers"}
        assert ("ex-topic", "ex-fanout", "exchange", "a.#") in listed["bindings"]
        assert listed["policies"][0][:4] == ("cap", "^capped", "queues", 2)
        assert listed["topic_permissions"] == [(user, "amq.topic", "^a", ".*")]
        assert api.json(f"/api/users/{user}")["tags"] == ["management"]
        connection = connect(warren_broker, user, "secret", vhost)
        channel = connection.channel()
        channel.confirm_delivery()
        for number in range(5):
            channel.basic_publish("ex-direct", "k", str(number).encode())
        # the imported policy caps the queue at 3 messages
        assert channel.queue_declare("capped", passive=True).method.message_count == 3
        connection.close()
    finally:
        forget(api, suffix)


@pytest.mark.warren_only("RabbitMQ 3.10 accepts other hashing algorithms")
def test_an_unknown_hashing_algorithm_is_refused_before_anything_changes(api, suffix):
    document = sample(suffix)
    document["users"][0]["hashing_algorithm"] = "rabbit_password_hashing_md5"
    refused = api.post("/api/definitions", document)
    assert refused.status_code == 400
    assert refused.json()["error"] == "bad_request"
    assert "rabbit_password_hashing_md5" in refused.json()["reason"]
    assert api.get(f"/api/vhosts/defs-vhost-{suffix}").status_code == 404
    assert api.get(f"/api/users/defs-user-{suffix}").status_code == 404


@pytest.mark.warren_only("compares Warren with RabbitMQ itself")
def test_rabbitmqs_export_imports_into_warren_and_back(rabbitmq_node, broker_factory,
                                                       suffix):
    rabbit, warren = rabbitmq_node.management(), broker_factory().address()
    user, vhost = f"defs-user-{suffix}", f"defs-vhost-{suffix}"
    set_up_on_rabbitmq(rabbitmq_node, user, vhost)
    try:
        declare_topology(rabbitmq_node, vhost)
        exported = rabbit.json("/api/definitions")
        ours = warren.management()
        imported = ours.post("/api/definitions", exported)
        assert imported.status_code == 204, imported.text
        assert topology(ours, vhost) == topology(rabbit, vhost)
        assert ours.json(f"/api/users/{user}")["tags"] == ["monitoring", "policymaker"]
        connect(warren, user, "rabbit-pw", vhost).close()
        # and Warren's export back into RabbitMQ, after it forgot the vhost and user
        back = ours.json("/api/definitions")
        forget_on_rabbitmq(rabbitmq_node, user, vhost)
        back["users"] = [u for u in back["users"] if u["name"] == user]
        reimported = rabbit.post("/api/definitions", back)
        assert reimported.status_code in (200, 201, 204), reimported.text
        assert topology(rabbit, vhost) == topology(ours, vhost)
        connect(rabbitmq_node, user, "rabbit-pw", vhost).close()
    finally:
        forget_on_rabbitmq(rabbitmq_node, user, vhost)


def set_up_on_rabbitmq(node, user: str, vhost: str) -> None:
    """Users, vhost, permissions and a policy on the RabbitMQ node, with rabbitmqctl."""
    admin = node.admin()
    admin.add_user(user, "rabbit-pw", ("monitoring", "policymaker"))
    admin.add_vhost(vhost)
    admin.set_permissions(user, vhost, ".*", ".*", ".*")
    admin.set_permissions("guest", vhost, ".*", ".*", ".*")
    admin.set_topic_permissions(user, vhost, "amq.topic", "^a", "^b")
    admin.set_policy(vhost, "cap", "^capped", {"max-length": 3}, 1, "queues")


def declare_topology(address, vhost: str) -> None:
    connection = connect(address, "guest", "guest", vhost)
    channel = connection.channel()
    channel.queue_declare("capped", durable=True, arguments={"x-message-ttl": 60000})
    channel.queue_declare("replicated", durable=True,
                          arguments={"x-queue-type": "quorum", "x-max-length": 10})
    for kind in ("direct", "fanout", "topic", "headers"):
        channel.exchange_declare(f"ex-{kind}", kind, durable=True)
    channel.queue_bind("capped", "ex-direct", "k")
    channel.queue_bind("replicated", "ex-headers", "",
                       arguments={"x-match": "any", "kind": "a"})
    channel.exchange_bind("ex-fanout", "ex-topic", "a.#")
    channel.queue_bind("replicated", "ex-fanout")
    connection.close()


def forget_on_rabbitmq(node, user: str, vhost: str) -> None:
    api = node.management()
    api.delete(f"/api/users/{user}")
    api.delete(f"/api/vhosts/{vhost}")


@pytest.mark.warren_only("exports and imports between two Warren brokers")
def test_export_import_export_is_stable(broker_factory, suffix):
    first = broker_factory().address().management()
    second = broker_factory().address().management()
    assert first.post("/api/definitions", sample(suffix)).status_code == 204
    exported = first.json("/api/definitions")
    assert second.post("/api/definitions", exported).status_code == 204
    assert without_versions(second.json("/api/definitions")) == without_versions(exported)


def without_versions(definitions: dict) -> dict:
    """The definitions with their lists sorted (order is not part of the format)."""
    return {key: sorted(json.dumps(item, sort_keys=True) for item in value)
            for key, value in definitions.items() if isinstance(value, list)}


@pytest.mark.warren_only("Warren's --load-definitions")
@pytest.mark.parametrize("named_in", ["flag", "configuration file"])
def test_a_definitions_file_is_loaded_at_boot(broker_factory, tmp_path, suffix, named_in):
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps(sample(suffix)))
    if named_in == "flag":
        arguments = ("--load-definitions", str(path))
    else:   # RabbitMQ's key name, at the top level of the TOML file
        config = tmp_path / "warren.toml"
        config.write_text(f"load_definitions = {json.dumps(str(path))}\n")
        arguments = ("--config", str(config))
    warren = broker_factory(*arguments).address()
    vhost = f"defs-vhost-{suffix}"
    assert [q[0] for q in topology(warren.management(), vhost)["queues"]] == [
        "capped", "replicated"]
    connect(warren, f"defs-user-{suffix}", "secret", vhost).close()


@pytest.mark.warren_only("Warren's --load-definitions")
def test_an_invalid_definitions_file_stops_the_broker(tmp_path):
    path = tmp_path / "definitions.json"
    path.write_text('{"users": [{"name": "x", "password_hash": "not base64!"}]}')
    result = subprocess.run(
        [sys.executable, "-m", "broker", "serve", "--port", "0", "--management-port",
         "0", "--data-dir", str(tmp_path / "data"), "--load-definitions", str(path)],
        capture_output=True, text=True, timeout=60, env={**os.environ})
    assert result.returncode == 2
    assert f"cannot load definitions from {path}" in result.stderr
    assert "password_hash" in result.stderr
