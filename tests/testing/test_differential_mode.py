"""Differential mode: the plugin's `warren` fixture on RabbitMQ (the `rabbitmq_node`
fixture: a throw-away node with the management plugin, or WARREN_TEST_BROKER's), given
by --amqp-broker and --amqp-management. A small suite is run by pytest itself against
it: a pika test passes, a test using Warren's test hooks is skipped saying why, and
each test's vhost and user are gone afterwards."""

import socket

import pytest

pytest_plugins = ["pytester"]

SUITE = '''
import pika


def record(warren):
    with open("seen.txt", "a") as seen:
        seen.write(warren.vhost + " " + warren.user + "\\n")


def test_publish_and_get(warren):
    record(warren)
    connection = pika.BlockingConnection(warren.connection_parameters())
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("orders")
    channel.basic_publish("", "orders", b"order 1")
    method, properties, body = channel.basic_get("orders", auto_ack=True)
    assert body == b"order 1"
    connection.close()


def test_needs_the_test_hooks(warren):
    record(warren)
    warren.call("wait_until_acked", queue="orders")
'''


def amqp_broker_options(rabbitmq_node) -> list[str]:
    return [f"--amqp-broker=amqp://guest:guest@{rabbitmq_node.host}:{rabbitmq_node.port}/",
            f"--amqp-management={rabbitmq_node.management_url}"]


def test_a_suite_runs_against_rabbitmq_and_leaves_no_vhost_or_user(pytester, rabbitmq_node):
    api = rabbitmq_node.management()
    version = api.json("/api/overview")["rabbitmq_version"]
    pytester.makepyfile(test_orders=SUITE)

    result = pytester.runpytest(*amqp_broker_options(rabbitmq_node), "-rs")

    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([
        f"SKIPPED * wait_until_acked needs Warren's test hooks; the broker under test is "
        f"RabbitMQ {version} at {rabbitmq_node.host}:{rabbitmq_node.port}"])
    seen = [line.split() for line in (pytester.path / "seen.txt").read_text().splitlines()]
    assert len(seen) == 2 and seen[0] != seen[1]
    vhosts = {vhost["name"] for vhost in api.json("/api/vhosts")}
    users = {user["name"] for user in api.json("/api/users")}
    for vhost, user in seen:
        assert vhost not in vhosts and user not in users


def test_each_test_user_is_confined_to_its_own_vhost(pytester, rabbitmq_node):
    pytester.makepyfile(test_confined='''
import pika
import pytest


def test_the_default_vhost_is_refused(warren):
    parameters = warren.connection_parameters()
    parameters.virtual_host = "/"
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        pika.BlockingConnection(parameters)
''')
    result = pytester.runpytest(*amqp_broker_options(rabbitmq_node))
    result.assert_outcomes(passed=1)


def test_a_broker_without_management_api_fails_the_session_naming_the_option(
        pytester, rabbitmq_node):
    with socket.socket() as closed:           # bound, never listening: refuses at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        pytester.makepyfile(test_nothing="def test_nothing(warren):\n    pass\n")
        result = pytester.runpytest(
            f"--amqp-broker=amqp://guest:guest@{rabbitmq_node.host}:{rabbitmq_node.port}/",
            f"--amqp-management=http://127.0.0.1:{port}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        f"*--amqp-broker: the management API of the broker at {rabbitmq_node.host}:"
        f"{rabbitmq_node.port} does not answer at http://127.0.0.1:{port}*"
        f"--amqp-management=http://host:port"])


def test_a_user_the_management_api_refuses_fails_the_session_asking_for_an_administrator(
        pytester, rabbitmq_node):
    pytester.makepyfile(test_nothing="def test_nothing(warren):\n    pass\n")
    result = pytester.runpytest(
        f"--amqp-broker=amqp://guest:wrong@{rabbitmq_node.host}:{rabbitmq_node.port}/",
        f"--amqp-management={rabbitmq_node.management_url}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        f"*--amqp-broker: the management API at {rabbitmq_node.management_url} refuses "
        f"user 'guest': give an administrator's name and password in --amqp-broker=*"])
