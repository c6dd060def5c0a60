"""assert_clean: opt-in (a marker, an ini option or a command-line flag), the `warren`
fixture's teardown fails naming what the test left in its vhost."""

import pytest

from pytester_runs import run_pytest

pytest_plugins = ["pytester"]

# Each test runs in a pytest of its own (pytester), against that run's Warren.
CONNECT = """
import pika
import pytest

def connect(warren, name):
    return pika.BlockingConnection(warren.connection_parameters(
        client_properties={"connection_name": name}))
"""


def run_suite(pytester: pytest.Pytester, tests: str, *args: str,
              ini: str = "") -> pytest.RunResult:
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(CONNECT + tests)
    return run_pytest(pytester, *args)


def test_a_test_that_cleans_up_passes(pytester):
    result = run_suite(pytester, """
@pytest.mark.warren_assert_clean
def test_round_trip(warren):
    connection = connect(warren, "tidy")
    channel = connection.channel()
    channel.queue_declare("orders")
    channel.basic_publish("", "orders", b"one")
    method, _, body = channel.basic_get("orders")
    channel.basic_ack(method.delivery_tag)
    connection.close()
""")
    result.assert_outcomes(passed=1)


def test_an_unacked_delivery_is_reported_in_teardown(pytester):
    result = run_suite(pytester, """
@pytest.mark.warren_assert_clean
def test_forgets_to_ack(warren):
    channel = connect(warren, "leaky-app").channel()
    channel.queue_declare("orders")
    channel.basic_publish("", "orders", b"one")
    channel.basic_publish("", "orders", b"two")
    assert channel.basic_get("orders")[2] == b"one"
""")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_forgets_to_ack*",
        "*the test left these in vhost 'test-*",
        "*- 1 unacked delivery from queue 'orders' (basic.get) on channel 1 of "
        "connection 'leaky-app'",
        "*- 1 ready message(s) in queue 'orders'",
        "*- open connection 'leaky-app' (127.0.0.1:*) with open channel(s) 1",
        "*ack or reject what the test consumed*",
    ])


def test_a_consumer_unacked_delivery_names_the_consumer(pytester):
    result = run_suite(pytester, """
@pytest.mark.warren_assert_clean
def test_consumes_without_ack(warren):
    channel = connect(warren, "worker").channel()
    channel.queue_declare("jobs")
    channel.basic_publish("", "jobs", b"job")
    for method, _, body in channel.consume("jobs", consumer_tag="job-worker"):
        break
""")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([
        "*- 1 unacked delivery from queue 'jobs' (consumer 'job-worker') on channel 1 "
        "of connection 'worker'",
    ])


def test_ready_messages_are_reported_with_the_ini_option(pytester):
    result = run_suite(pytester, """
def test_publishes_and_leaves(warren):
    connection = connect(warren, "publisher")
    channel = connection.channel()
    channel.queue_declare("orders")
    channel.queue_declare("invoices")
    for body in (b"1", b"2", b"3"):
        channel.basic_publish("", "orders", body)
    connection.close()
""", ini="warren_assert_clean = true")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*- 3 ready message(s) in queue 'orders'"])
    result.stdout.no_fnmatch_line("*invoices*")
    result.stdout.no_fnmatch_line("*open connection*")


def test_open_channels_are_reported_with_the_flag(pytester):
    result = run_suite(pytester, """
def test_leaves_channels_open(warren):
    connection = connect(warren, "chatty")
    connection.channel()
    connection.channel()
""", "--warren-assert-clean")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([
        "*- open connection 'chatty' (127.0.0.1:*) with open channel(s) 1, 2",
    ])


def test_without_opting_in_leftovers_are_not_checked(pytester):
    result = run_suite(pytester, """
def test_leaves_channels_open(warren):
    connect(warren, "chatty").channel()
""")
    result.assert_outcomes(passed=1)


def test_assert_clean_called_in_a_test_fails_it(warren):
    import pika

    connection = pika.BlockingConnection(warren.connection_parameters())
    connection.channel().queue_declare("orders")
    connection.close()
    warren.assert_clean()
    channel = pika.BlockingConnection(warren.connection_parameters()).channel()
    channel.basic_publish("", "orders", b"left")
    with pytest.raises(AssertionError) as failure:
        warren.assert_clean()
    assert "- 1 ready message(s) in queue 'orders'" in str(failure.value)
    channel.connection.close()
