"""The pytest plugin and RabbitMQ lines: the session broker's line (--warren-rabbitmq, ini
warren_rabbitmq, default 4.3), a test's own line (the warren_rabbitmq marker), and the
"Warren upgrade lint" section of the terminal summary naming the test that did what
another line treats otherwise."""

import pytest

from pytester_runs import run_pytest

pytest_plugins = ["pytester"]

TESTS = """
import pika
import pytest

def server_version(warren):
    connection = pika.BlockingConnection(warren.connection_parameters())
    version = connection._impl.server_properties["version"]
    connection.close()
    return version.decode() if isinstance(version, bytes) else version

def global_prefetch_1_over_two_consumers(warren, expected):
    # How many of four messages in two queues a channel with prefetch 1 global and a
    # consumer on each queue receives, once `expected` have left the queues (each
    # queue's ready count answers after the broker sent what it will).
    connection = pika.BlockingConnection(warren.connection_parameters())
    channel = connection.channel()
    for queue in ("a", "b"):
        channel.queue_declare(queue, durable=True)
        for n in range(2):
            channel.basic_publish("", queue, b"m")
    channel.basic_qos(prefetch_count=1, global_qos=True)
    delivered = []
    for queue in ("a", "b"):
        channel.basic_consume(queue, lambda ch, method, props, body: delivered.append(body))
    observer = connection.channel()
    def ready():
        return sum(observer.queue_declare(q, passive=True).method.message_count
                   for q in ("a", "b"))
    while ready() != 4 - expected:
        connection.process_data_events(time_limit=0.05)
    connection.process_data_events(time_limit=0)
    connection.close()
    return len(delivered)
"""


def run_suite(pytester: pytest.Pytester, tests: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(TESTS + tests)
    return run_pytest(pytester, "-p", "no:cacheprovider", *args)


def test_the_session_broker_behaves_as_4_3_unless_told_otherwise(pytester):
    result = run_suite(pytester, """
def test_version(warren):
    print("VERSION", server_version(warren))
""", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*VERSION 4.3.6*"])
    result = run_pytest(pytester, "-p", "no:cacheprovider", "-s", "--warren-rabbitmq", "3.10")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*VERSION 3.10.8*"])


def test_a_marker_gives_one_tests_vhost_its_line_and_the_summary_names_the_test(pytester):
    result = run_suite(pytester, """
@pytest.mark.warren_rabbitmq("3.10")
def test_under_3_10(warren):
    assert global_prefetch_1_over_two_consumers(warren, 1) == 1

@pytest.mark.warren_rabbitmq("4.3")
def test_under_4_3(warren):
    assert global_prefetch_1_over_two_consumers(warren, 2) == 2

def test_nothing_deprecated(warren):
    assert server_version(warren) == "4.3.6"
""")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "*= Warren upgrade lint =*",
        "test_a_marker_gives_one_tests_vhost_its_line_and_the_summary_names_the_test.py"
        "::test_under_3_10",
        "    global_qos: global_qos used under RabbitMQ 3.10; RabbitMQ 4.3 denies it by "
        "default: Basic.Qos global=true sets a limit per consumer, as global=false does",
        "*::test_under_4_3",
        "    global_qos: global_qos is denied under RabbitMQ 4.3: *",
    ])
    assert "test_nothing_deprecated" not in result.stdout.str().split("upgrade lint")[1]
