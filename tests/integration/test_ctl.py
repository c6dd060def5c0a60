"""`warren ctl`, run as a subprocess against the test broker's management API: each
verb's effect (seen through the API or AMQP), both formatters, and the exit codes and
messages of failures. Runs against Warren and, with WARREN_TEST_BROKER and
WARREN_TEST_MANAGEMENT, against RabbitMQ's management plugin. The tests work as guest on
`/` of the session broker (`warren_broker`), not in a `warren` vhost: ctl's default vhost
is `/`, and its banners and rows name it."""

import json
import socket
import subprocess
import sys

import pika
import pytest
from tests.support.management_client import quoted
from tests.support.pika_helpers import close_quietly, connect, unique, wait_until

CTL_TIMEOUT = 120   # seconds a ctl subprocess may run before the test gives up on it


def run_ctl(url: str, *arguments: str, stdin: str | None = None,
            user: str = "guest", password: str = "guest") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "ctl", "--url", url, "--username", user,
         "--password", password, *arguments],
        input=stdin, capture_output=True, text=True, timeout=CTL_TIMEOUT)


@pytest.fixture
def ctl(warren_broker):
    assert warren_broker.management_url, "set WARREN_TEST_MANAGEMENT with WARREN_TEST_BROKER"
    return lambda *arguments, **options: run_ctl(warren_broker.management_url, *arguments,
                                                 **options)


@pytest.fixture
def guest_channel(warren_broker):
    connection = connect(warren_broker)
    yield connection.channel()
    close_quietly(connection)


def succeeded(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def failed(result: subprocess.CompletedProcess, exit_code: int, *words: str) -> None:
    assert result.returncode == exit_code, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.startswith("Error: "), result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def table(output: str) -> list[list[str]]:
    return [line.split("\t") for line in output.splitlines()]


def queue_with_messages(guest_channel, api, count: int) -> str:
    queue = unique("ctl-q")
    guest_channel.queue_declare(queue)
    for number in range(count):
        guest_channel.basic_publish("", queue, f"m{number}".encode())
    api.wait_for(f"/api/queues/%2F/{queue}", lambda info: info.get("messages") == count)
    return queue


# -- lists and formatters --------------------------------------------------------------

def test_list_queues_prints_a_banner_a_header_and_tab_separated_rows(ctl, guest_channel, api):
    queue = queue_with_messages(guest_channel, api, 2)
    try:
        lines = succeeded(ctl("list_queues", "name", "messages")).splitlines()
        assert lines[0] == "Listing queues for vhost / ..."
        assert lines[1] == "name\tmessages"
        assert f"{queue}\t2" in lines[2:]
    finally:
        guest_channel.queue_delete(queue)


def test_quiet_drops_the_banner_and_default_columns_are_name_and_messages(ctl, guest_channel,
                                                                         api):
    queue = queue_with_messages(guest_channel, api, 0)
    try:
        rows = table(succeeded(ctl("list_queues", "-q")))
        assert rows[0] == ["name", "messages"]
        assert [queue, "0"] in rows[1:]
    finally:
        guest_channel.queue_delete(queue)


def test_json_formatter_gives_objects_keyed_by_column_with_json_types(ctl, guest_channel):
    queue = unique("ctl-q")
    guest_channel.queue_declare(queue, durable=True)
    try:
        listed = json.loads(succeeded(ctl("--formatter", "json", "list_queues", "name",
                                          "durable", "auto_delete")))
        assert {"name": queue, "durable": True, "auto_delete": False} in listed
    finally:
        guest_channel.queue_delete(queue)


def test_an_unsupported_column_is_a_usage_error(ctl):
    failed(ctl("list_queues", "name", "no_such_item"), 64, "no_such_item",
           "not supported")


def test_list_exchanges_and_bindings_use_rabbitmqctls_columns(ctl, guest_channel):
    queue = unique("ctl-q")
    guest_channel.queue_declare(queue)
    guest_channel.queue_bind(queue, "amq.direct", routing_key="rk")
    try:
        exchanges = table(succeeded(ctl("-q", "list_exchanges")))
        assert exchanges[0] == ["name", "type"]
        assert ["amq.topic", "topic"] in exchanges
        bindings = table(succeeded(ctl("list_bindings", "-q")))
        assert bindings[0] == ["source_name", "source_kind", "destination_name",
                               "destination_kind", "routing_key", "arguments"]
        assert ["amq.direct", "exchange", queue, "queue", "rk"] in [row[:5] for row in bindings]
    finally:
        guest_channel.queue_delete(queue)


def test_connections_channels_and_consumers_are_listed(ctl, guest_channel, api):
    queue = unique("ctl-q")
    guest_channel.queue_declare(queue)
    tag = guest_channel.basic_consume(queue, lambda *delivery: None)
    try:
        # RabbitMQ lists channels and consumers once their statistics are collected
        api.wait_for("/api/channels", lambda channels: any(
            info.get("consumer_count") == 1 for info in channels))
        api.wait_for("/api/consumers", lambda consumers: any(
            info.get("consumer_tag") == tag for info in consumers))
        consumers = json.loads(succeeded(ctl("list_consumers", "--formatter", "json")))
        mine = [info for info in consumers if info["consumer_tag"] == tag]
        assert len(mine) == 1 and mine[0]["queue_name"] == queue
        assert mine[0]["ack_required"] is True and mine[0]["channel_pid"]
        connections = table(succeeded(ctl("list_connections", "-q")))
        assert connections[0] == ["user", "peer_host", "peer_port", "state"]
        assert any(row[0] == "guest" and row[3] == "running" for row in connections[1:])
        channels = table(succeeded(ctl("list_channels", "-q")))
        assert channels[0] == ["pid", "user", "consumer_count", "messages_unacknowledged"]
        assert any(row[1:3] == ["guest", "1"] for row in channels[1:])
    finally:
        guest_channel.queue_delete(queue)


# -- users, vhosts, permissions --------------------------------------------------------

def test_user_lifecycle(ctl, api):
    user = unique("ctl-user")
    try:
        succeeded(ctl("add_user", user, "first"))
        assert ["user", "tags"] == table(succeeded(ctl("-q", "list_users")))[0]
        assert [user, "[]"] in table(succeeded(ctl("-q", "list_users")))
        succeeded(ctl("set_user_tags", user, "monitoring", "policymaker"))
        who = api.as_user(user, "first").get("/api/whoami")
        assert who.status_code == 200, "set_user_tags must keep the password"
        assert sorted(who.json()["tags"]) == ["monitoring", "policymaker"]
        succeeded(ctl("change_password", user, "second"))
        assert api.as_user(user, "first").get("/api/whoami").status_code == 401
        assert api.as_user(user, "second").get("/api/whoami").status_code == 200
        assert sorted(api.json(f"/api/users/{user}")["tags"]) == ["monitoring",
                                                                   "policymaker"]
        failed(ctl("add_user", user, "third"), 65, user, "already exists")
        succeeded(ctl("delete_user", user))
        assert api.get(f"/api/users/{user}").status_code == 404
    finally:
        api.delete(f"/api/users/{user}")


def test_missing_users_exit_67_naming_the_user(ctl):
    for verb in (["delete_user"], ["change_password"], ["set_user_tags"]):
        arguments = [*verb, "ctl-no-such-user"] + (["pw"] if verb == ["change_password"]
                                                   else [])
        failed(ctl(*arguments), 67, '"ctl-no-such-user" does not exist', "list_users")


@pytest.mark.warren_only("RabbitMQ 3.10's management API ignores default_queue_type; "
                         "its rabbitmqctl sets it through the node")
def test_add_vhost_sets_the_default_queue_type(ctl, api):
    vhost = unique("ctl-vh")
    try:
        succeeded(ctl("add_vhost", vhost, "--default-queue-type", "quorum"))
        assert [vhost, "quorum"] in table(succeeded(ctl(
            "-q", "list_vhosts", "name", "default_queue_type")))
        failed(ctl("add_vhost", unique("ctl-vh"), "--default-queue-type", "bogus"), 64,
               "invalid choice", "quorum")
    finally:
        api.delete(f"/api/vhosts/{vhost}")


def test_vhost_permissions_and_topic_permissions(ctl, api):
    vhost, user = unique("ctl-vh"), unique("ctl-user")
    try:
        succeeded(ctl("add_vhost", vhost, "--description", "for ctl", "--tags", "t1,t2"))
        shown = api.json(f"/api/vhosts/{vhost}")
        assert (shown["description"], shown["tags"]) == ("for ctl", ["t1", "t2"])
        assert [vhost] in table(succeeded(ctl("-q", "list_vhosts")))
        assert [vhost, "for ctl", "[t1, t2]"] in table(succeeded(ctl(
            "-q", "list_vhosts", "name", "description", "tags")))
        succeeded(ctl("add_user", user, "pw"))
        succeeded(ctl("set_permissions", "-p", vhost, user, "^c", "^w", "^r"))
        rows = table(succeeded(ctl("-q", "list_permissions", "-p", vhost)))
        assert rows[0] == ["user", "configure", "write", "read"]
        assert [user, "^c", "^w", "^r"] in rows
        succeeded(ctl("set_topic_permissions", "-p", vhost, user, "amq.topic", "^w", "^r"))
        assert api.json(f"/api/topic-permissions/{vhost}/{user}") == [{
            "user": user, "vhost": vhost, "exchange": "amq.topic", "write": "^w",
            "read": "^r"}]
        succeeded(ctl("clear_permissions", "-p", vhost, user))
        assert api.get(f"/api/permissions/{vhost}/{user}").status_code == 404
        failed(ctl("clear_permissions", "-p", vhost, user), 65, user)
        failed(ctl("set_permissions", "-p", vhost, "ctl-no-such-user", ".*", ".*", ".*"),
               67, "ctl-no-such-user")
        succeeded(ctl("delete_vhost", vhost))
        assert api.get(f"/api/vhosts/{vhost}").status_code == 404
        failed(ctl("delete_vhost", vhost), 65, vhost, "does not exist")
    finally:
        api.delete(f"/api/vhosts/{vhost}")
        api.delete(f"/api/users/{user}")


# -- policies and limits ---------------------------------------------------------------

def test_policy_lifecycle(ctl, api):
    name = unique("ctl-pol")
    try:
        succeeded(ctl("set_policy", name, "^ctl-pol-", '{"max-length": 5}',
                      "--priority", "3", "--apply-to", "queues"))
        policy = api.json(f"/api/policies/%2F/{name}")
        assert (policy["pattern"], policy["definition"], policy["priority"],
                policy["apply-to"]) == ("^ctl-pol-", {"max-length": 5}, 3, "queues")
        listed = json.loads(succeeded(ctl("list_policies", "--formatter", "json")))
        assert {"vhost": "/", "name": name, "pattern": "^ctl-pol-", "apply-to": "queues",
                "definition": {"max-length": 5}, "priority": 3} in listed
        failed(ctl("set_policy", name, "^x", "{not json"), 65, "not valid JSON")
        succeeded(ctl("clear_policy", name))
        assert api.get(f"/api/policies/%2F/{name}").status_code == 404
        failed(ctl("clear_policy", name), 65, name, "does not exist")
    finally:
        api.delete(f"/api/policies/%2F/{name}")


def test_set_vhost_limits_replaces_the_vhosts_limits(ctl, api):
    vhost = unique("ctl-vh")
    api.put(f"/api/vhosts/{vhost}")
    try:
        succeeded(ctl("-p", vhost, "set_vhost_limits",
                      '{"max-connections": 10, "max-queues": 5}'))
        limits = api.json(f"/api/vhost-limits/{vhost}")
        assert limits[0]["value"] == {"max-connections": 10, "max-queues": 5}
        succeeded(ctl("-p", vhost, "set_vhost_limits", '{"max-queues": 7}'))
        assert api.json(f"/api/vhost-limits/{vhost}")[0]["value"] == {"max-queues": 7}
    finally:
        api.delete(f"/api/vhosts/{vhost}")


# -- queues and connections ------------------------------------------------------------

def test_purge_queue_empties_it(ctl, guest_channel, api):
    queue = queue_with_messages(guest_channel, api, 3)
    try:
        succeeded(ctl("purge_queue", queue))
        assert guest_channel.queue_declare(queue, passive=True).method.message_count == 0
        failed(ctl("purge_queue", unique("ctl-missing")), 65, "does not exist",
               "list_queues")
    finally:
        guest_channel.queue_delete(queue)


def test_delete_queue_honours_if_empty_and_reports_the_messages(ctl, guest_channel, api):
    queue = queue_with_messages(guest_channel, api, 2)
    try:
        failed(ctl("delete_queue", queue, "--if-empty"), 65, queue)
        assert guest_channel.queue_declare(queue, passive=True).method.message_count == 2
        output = succeeded(ctl("delete_queue", queue, "-u"))
        assert "Queue was successfully deleted with 2 messages" in output
        assert api.get(f"/api/queues/%2F/{queue}").status_code == 404
        failed(ctl("delete_queue", queue), 65, queue, "does not exist")
    finally:
        api.delete(f"/api/queues/%2F/{queue}")


def test_close_connection_closes_it_with_the_reason(ctl, warren_broker, api):
    label = unique("ctl-conn")
    connection = connect(warren_broker, client_properties={"connection_name": label})
    try:
        listed = api.wait_for("/api/connections", lambda connections: any(
            info.get("client_properties", {}).get("connection_name") == label
            for info in connections))
        name = next(info["name"] for info in listed
                    if info.get("client_properties", {}).get("connection_name") == label)
        succeeded(ctl("close_connection", name, "maintenance"))
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match="maintenance"):
            wait_until(connection, lambda: not connection.is_open)
        failed(ctl("close_connection", name, "again"), 65, name, "list_connections")
    finally:
        close_quietly(connection)


# -- definitions -----------------------------------------------------------------------

def test_export_then_import_definitions(ctl, guest_channel, api, tmp_path):
    exported, imported = unique("ctl-exp"), unique("ctl-imp")
    guest_channel.queue_declare(exported, durable=True)
    try:
        target = tmp_path / "definitions.json"
        succeeded(ctl("export_definitions", str(target)))
        definitions = json.loads(target.read_text())
        assert exported in [queue["name"] for queue in definitions["queues"]]
        assert json.loads(succeeded(ctl("export_definitions", "-")))["queues"]
        document = {"queues": [{"name": imported, "vhost": "/", "durable": True,
                                "auto_delete": False, "arguments": {}}]}
        succeeded(ctl("import_definitions", "-", stdin=json.dumps(document)))
        assert api.get(f"/api/queues/%2F/{imported}").status_code == 200
        failed(ctl("import_definitions", str(tmp_path / "absent.json")), 65, "absent.json")
    finally:
        guest_channel.queue_delete(exported)
        api.delete(f"/api/queues/%2F/{imported}")


# -- node, connection failures and usage -----------------------------------------------

def test_ping_status_and_await_startup_succeed_on_a_running_broker(ctl):
    assert succeeded(ctl("ping")).splitlines()[-1] == "Ping succeeded"
    status = succeeded(ctl("status"))
    assert status.startswith("Status of node ") and "Listeners:" in status
    assert json.loads(succeeded(ctl("status", "--formatter", "json", "-q")))["node_name"]
    succeeded(ctl("await_startup", "--timeout", "30"))


def test_a_wrong_password_exits_77(ctl):
    failed(ctl("ping", password="wrong"), 77, "refused user 'guest'", "--password")


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_an_unreachable_broker_exits_69():
    url = closed_port_url()
    failed(run_ctl(url, "ping"), 69, url, "Connection refused")
    failed(run_ctl(url, "list_queues"), 69, "could not reach")


def test_await_startup_gives_up_after_its_timeout_with_75():
    failed(run_ctl(closed_port_url(), "await_startup", "--timeout", "1"), 75,
           "did not answer within 1 s")


def test_a_silent_server_is_a_timeout_75():
    with socket.socket() as silent:   # listens, never answers: the request times out
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        failed(run_ctl(url, "list_users", "--timeout", "1"), 75, "no answer within 1 s",
               "--timeout")


def test_usage_errors_exit_64(ctl):
    failed(ctl("no_such_verb"), 64, "no_such_verb", "--help")
    failed(ctl(), 64, "No verb")
    failed(ctl("add_user", "only-a-name"), 64, "password")


def test_names_with_slashes_and_spaces_travel_quoted(ctl, api):
    """Names with '/' and spaces travel quoted: a queue in vhost "/" named "a/b c"."""
    name = "ctl a/b " + unique("q")
    api.put(f"/api/queues/%2F/{quoted(name)}", {"durable": False})
    try:
        succeeded(ctl("purge_queue", name))
        succeeded(ctl("delete_queue", name))
        assert api.get(f"/api/queues/%2F/{quoted(name)}").status_code == 404
    finally:
        api.delete(f"/api/queues/%2F/{quoted(name)}")


def test_listing_a_missing_vhost_exits_65_naming_the_request(ctl):
    vhost = unique("ctl-no-vh")
    failed(ctl("list_queues", "-p", vhost), 65, f"/api/queues/{vhost}", "404", "-p")


def test_the_client_imports_nothing_of_the_broker():
    """warrenctl works on a machine with only the client: no broker core, server or trio."""
    probe = ("import sys, broker.ctl.command; print(sorted(m for m in sys.modules "
             "if m.startswith(('broker.core', 'broker.server', 'trio', 'sqlalchemy'))))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=CTL_TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
