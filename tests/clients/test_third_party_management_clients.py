"""Management API clients written for RabbitMQ, used unchanged: pyrabbit2 (PyPI) and
rabbitmqadmin (the HTTP API's command line tool that Debian's rabbitmq-server package
ships). Runs against Warren and, in the RabbitMQ run, against RabbitMQ's management
plugin: the same calls, the same results. The clients log in as guest, an administrator,
to the session broker (`warren_broker`, `api`): they make users and vhosts of their own."""

import json
import subprocess
import urllib.parse
import uuid

import pika
import pytest
from pyrabbit2.api import Client

RABBITMQADMIN = "/usr/bin/rabbitmqadmin"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(warren_broker):
    netloc = urllib.parse.urlsplit(warren_broker.management_url).netloc
    return Client(netloc, "guest", "guest", timeout=30)


def test_pyrabbit2_declares_publishes_gets_and_deletes(client, warren_broker):
    vhost, user = unique("pyrabbit-vhost"), unique("pyrabbit-user")
    assert client.is_alive()
    client.create_vhost(vhost)
    client.create_user(user, "s3cret", tags="management")
    client.set_vhost_permissions(vhost, user, ".*", ".*", ".*")
    try:
        client.create_exchange(vhost, "orders", "topic")
        client.create_queue(vhost, "orders.eu", durable=True)
        client.create_binding(vhost, "orders", "orders.eu", "eu.#")
        assert client.publish(vhost, "orders", "eu.fr", "bonjour")
        assert [m["payload"] for m in client.get_messages(vhost, "orders.eu")] == ["bonjour"]
        assert [(b["source"], b["routing_key"]) for b in
                client.get_queue_bindings(vhost, "orders.eu")] == [("", "orders.eu"),
                                                                 ("orders", "eu.#")]
        assert "orders.eu" in [queue["name"] for queue in client.get_queues(vhost)]
        assert user in [entry["name"] for entry in client.get_users()]

        credentials = pika.PlainCredentials(user, "s3cret")
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            warren_broker.host, warren_broker.port, vhost, credentials))
        try:
            connection.channel().basic_publish("orders", "eu.de", b"hallo")
        finally:
            connection.close()
        client.purge_queue(vhost, "orders.eu")
        assert client.get_messages(vhost, "orders.eu") == []
        client.delete_queue(vhost, "orders.eu")
        client.delete_exchange(vhost, "orders")
        assert "orders.eu" not in [queue["name"] for queue in client.get_queues(vhost)]
    finally:
        client.delete_user(user)
        client.delete_vhost(vhost)
    assert vhost not in client.get_vhost_names()


def closed_by(warren_broker, api, prefix: str, close) -> int:
    """Open a named pika connection, have `close(api_name)` close it through the API
    client under test, and return the reply code pika was closed with."""
    name = unique(prefix)
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        warren_broker.host, warren_broker.port, client_properties={"connection_name": name}))
    try:
        listed = api.wait_for("/api/connections", lambda connections: any(
            c.get("client_properties", {}).get("connection_name") == name
            for c in connections))
        close(next(c["name"] for c in listed
                   if c["client_properties"].get("connection_name") == name))
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            connection.process_data_events(time_limit=30)
            connection.sleep(30)
        return closed.value.reply_code
    finally:
        if connection.is_open:
            connection.close()


def test_pyrabbit2_closes_a_connection(client, warren_broker, api):
    # pyrabbit2 quotes the name itself
    assert closed_by(warren_broker, api, "pyrabbit-conn", client.delete_connection) == 320


def rabbitmqadmin(warren_broker, *arguments: str) -> str:
    url = urllib.parse.urlsplit(warren_broker.management_url)
    result = subprocess.run(
        [RABBITMQADMIN, "-H", url.hostname, "-P", str(url.port), "-u", "guest",
         "-p", "guest", *arguments], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, (arguments, result.stdout, result.stderr)
    return result.stdout


def test_rabbitmqadmin_declares_publishes_gets_lists_and_exports(warren_broker, tmp_path):
    queue = unique("admin-queue")
    rabbitmqadmin(warren_broker, "declare", "queue", f"name={queue}", "durable=true")
    try:
        rabbitmqadmin(warren_broker, "publish", "exchange=amq.default", f"routing_key={queue}",
                      "payload=hello")
        got = json.loads(rabbitmqadmin(warren_broker, "-f", "raw_json", "get",
                                       f"queue={queue}", "ackmode=ack_requeue_false"))
        assert [message["payload"] for message in got] == ["hello"]
        listed = json.loads(rabbitmqadmin(warren_broker, "-f", "raw_json", "list", "queues"))
        assert queue in [entry["name"] for entry in listed]
        assert "amq.topic" in rabbitmqadmin(warren_broker, "list", "exchanges")
        rabbitmqadmin(warren_broker, "export", str(tmp_path / "definitions.json"))
        exported = json.loads((tmp_path / "definitions.json").read_text())
        assert {"name": queue, "vhost": "/", "durable": True} .items() <= next(
            entry for entry in exported["queues"] if entry["name"] == queue).items()
    finally:
        rabbitmqadmin(warren_broker, "delete", "queue", f"name={queue}")
    listed = json.loads(rabbitmqadmin(warren_broker, "-f", "raw_json", "list", "queues"))
    assert queue not in [entry["name"] for entry in listed]


def test_rabbitmqadmin_manages_a_vhost_named_with_a_slash(warren_broker, tmp_path):
    """Every verb in a vhost "admin/…" (rabbitmqadmin quotes it as one segment; not a
    space: its `list` writes one as "+", which neither broker reads as a space); get's
    count is sent as the string "1"; a vhost's export imported back restores it."""
    vhost, user = f"admin/{unique('vhost')}", unique("admin-user")
    def in_vhost(*arguments: str) -> str:
        return rabbitmqadmin(warren_broker, "-V", vhost, *arguments)
    rabbitmqadmin(warren_broker, "declare", "vhost", f"name={vhost}")
    try:
        rabbitmqadmin(warren_broker, "declare", "user", f"name={user}", "password=pw", "tags=")
        rabbitmqadmin(warren_broker, "declare", "permission", f"vhost={vhost}", f"user={user}",
                      "configure=.*", "write=.*", "read=.*")
        in_vhost("declare", "exchange", "name=orders", "type=topic", "durable=true")
        in_vhost("declare", "queue", "name=orders.eu", "durable=true",
                 'arguments={"x-max-length": 7}')
        in_vhost("declare", "binding", "source=orders", "destination=orders.eu",
                 "routing_key=eu.#")
        in_vhost("declare", "policy", "name=cap/1", "pattern=^orders",
                 'definition={"max-length": 10}', "priority=1", "apply-to=queues")
        in_vhost("publish", "exchange=orders", "routing_key=eu.fr", "payload=bonjour",
                 'properties={"delivery_mode": 2}')
        got = json.loads(in_vhost("-f", "raw_json", "get", "queue=orders.eu", "count=1",
                                  "ackmode=ack_requeue_true"))
        assert [message["payload"] for message in got] == ["bonjour"]
        in_vhost("purge", "queue", "name=orders.eu")
        assert json.loads(in_vhost("-f", "raw_json", "get", "queue=orders.eu")) == []
        listed = json.loads(in_vhost("-f", "raw_json", "list", "queues"))
        assert [(q["name"], q["arguments"]) for q in listed] == [
            ("orders.eu", {"x-max-length": 7})]
        bindings = json.loads(in_vhost("-f", "raw_json", "list", "bindings"))
        assert ("orders", "orders.eu", "eu.#") in [
            (b["source"], b["destination"], b["routing_key"]) for b in bindings]
        permissions = json.loads(rabbitmqadmin(warren_broker, "-f", "raw_json", "list",
                                               "permissions"))
        assert (vhost, user) in [(p["vhost"], p["user"]) for p in permissions]

        exported = tmp_path / "vhost.json"
        in_vhost("export", str(exported))
        in_vhost("delete", "binding", "source=orders", "destination=orders.eu",
                 "destination_type=queue", "properties_key=eu.%23")
        in_vhost("delete", "queue", "name=orders.eu")
        in_vhost("delete", "exchange", "name=orders")
        in_vhost("delete", "policy", "name=cap/1")
        assert json.loads(in_vhost("-f", "raw_json", "list", "queues")) == []
        in_vhost("import", str(exported))
        restored = json.loads(in_vhost("-f", "raw_json", "list", "policies"))
        assert [(p["name"], p["definition"]) for p in restored] == [
            ("cap/1", {"max-length": 10})]
        restored = json.loads(in_vhost("-f", "raw_json", "list", "bindings"))
        assert ("orders", "orders.eu", "eu.#") in [
            (b["source"], b["destination"], b["routing_key"]) for b in restored]
    finally:
        rabbitmqadmin(warren_broker, "delete", "user", f"name={user}")
        rabbitmqadmin(warren_broker, "delete", "vhost", f"name={vhost}")
    vhosts = json.loads(rabbitmqadmin(warren_broker, "-f", "raw_json", "list", "vhosts"))
    assert vhost not in [entry["name"] for entry in vhosts]


def test_rabbitmqadmin_closes_a_connection(warren_broker, api):
    assert closed_by(warren_broker, api, "admin-conn", lambda target: rabbitmqadmin(
        warren_broker, "close", "connection", f"name={target}")) == 320
