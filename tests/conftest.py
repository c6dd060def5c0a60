"""Shared fixtures: the session's Warren broker, started by the `warren` pytest plugin
(broker/testing/pytest_plugin.py) as a subprocess with the test hooks on, and a
throwaway PostgreSQL server (`postgres_server`, tests/support/postgres_support.py).

Set WARREN_TEST_BROKER=host:port and WARREN_TEST_MANAGEMENT=http://host:port to run the
integration tests against another broker (for example RabbitMQ on 127.0.0.1:5673 with
its management API on 15673) and compare behaviour: the plugin's differential mode
(--amqp-broker, as guest), so the `warren` fixture's vhost is made on that broker too.

The differential runner (tests/support/differential.py) needs both brokers at once, of
each RabbitMQ line: `warren_nodes(line)` always starts Warren, `rabbitmq_nodes(line)` is
the WARREN_TEST_BROKER broker or, when that is unset, a throw-away RabbitMQ node of the
line (tests/support/rabbitmq_node.py).

Every hypothesis test runs under the "warren" profile, loaded here before any test module
is imported (a `settings` object takes its unset values from the profile loaded when it is
made): no per-example deadline, because a loaded machine is no reason for a test to fail
(examples write files, talk to a broker, or build large frames). A test's own `@settings`
set only what differs (max_examples, health checks).
"""

import os

import pytest
from hypothesis import settings

from broker.build import BuildMismatch, check_expected_build
from broker.testing.test_broker import SUBPROCESS, TestBroker
from tests.support.broker_address import BrokerAddress
from tests.support.broker_admin import RabbitAdmin, WarrenAdmin
from tests.support.broker_process import BrokerProcess
from tests.support.client_flakes import flake_lines
from tests.support.management_client import ManagementApi
from tests.support.rabbitmq_node import (DEFAULT_LINE, LINES, RABBITMQ_SERVER, SYSTEM,
                                        NodeError, RabbitInstance)
from tests.support.postgres_support import postgres_server  # noqa: F401  (session fixture)

settings.register_profile("warren", deadline=None)
settings.load_profile("warren")

WARREN_ONLY = pytest.StashKey[list]()   # (test id, reason) of the tests not run


def pytest_configure(config):
    """The plugin's broker for this suite: a subprocess (as a deployed Warren runs, and so
    that the test process's threads do not slow it), or WARREN_TEST_BROKER's broker.
    With WARREN_EXPECT_BUILD (scripts/test.sh's compiled run) the session stops unless
    the modules it imports are that build (the brokers it starts check it too)."""
    try:
        check_expected_build()
    except BuildMismatch as mismatch:
        raise pytest.UsageError(str(mismatch)) from None
    if config.getoption("--warren-mode") is None:
        config.option.warren_mode = SUBPROCESS
    address = os.environ.get("WARREN_TEST_BROKER")
    if not address or config.getoption("--amqp-broker"):
        return
    management = os.environ.get("WARREN_TEST_MANAGEMENT")
    if not management:
        raise pytest.UsageError(
            f"WARREN_TEST_BROKER={address} needs WARREN_TEST_MANAGEMENT=http://host:port, "
            "that broker's management API: each test's vhost and user are made through it")
    config.option.amqp_broker = f"amqp://guest:guest@{address}/"
    config.option.amqp_management = management


def pytest_collection_modifyitems(config, items):
    """Against another broker (WARREN_TEST_BROKER), tests marked warren_only are not run,
    nor, against a node of a known RabbitMQ line (WARREN_TEST_RABBITMQ_LINE, which
    tests/support/rabbitmq_node.py sets), tests marked for another line
    (warren_rabbitmq): they are deselected, and the summary lists each with its
    reason."""
    if _external_broker() is None:
        return
    node_line = os.environ.get("WARREN_TEST_RABBITMQ_LINE")
    kept, warren_only = [], []
    for item in items:
        marker = item.get_closest_marker("warren_only")
        line = item.get_closest_marker("warren_rabbitmq")
        if marker is None and (line is None or node_line is None
                               or line.args[0] == node_line):
            kept.append(item)
            continue
        if marker is None:
            warren_only.append((item.nodeid, f"a test of RabbitMQ {line.args[0]}; the node "
                                             f"is of the {node_line} line"))
            continue
        if not marker.args:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.warren_only needs a reason")
        warren_only.append((item.nodeid, marker.args[0]))
    if warren_only:
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
        config.stash[WARREN_ONLY] = warren_only


def pytest_terminal_summary(terminalreporter, config):
    warren_only = config.stash.get(WARREN_ONLY, [])
    if warren_only:
        terminalreporter.section(
            f"not run against {os.environ['WARREN_TEST_BROKER']}: Warren-only tests and "
            "tests of another RabbitMQ line")
        for nodeid, reason in warren_only:
            terminalreporter.write_line(f"{nodeid}: {reason}")
    if not hasattr(config, "workerinput"):   # the controller's, under pytest-xdist
        _summarise_client_flakes(terminalreporter)


def _summarise_client_flakes(terminalreporter):
    """List the client flakes of the session (tests/support/client_flakes.py), and write them, one
    a line, to the file WARREN_CLIENT_FLAKES names (scripts/test.sh counts them per run)."""
    lines = flake_lines(report for reports in terminalreporter.stats.values()
                        for report in reports)
    if lines:
        terminalreporter.section(f"client flakes: {len(lines)} (a client's own test failed "
                                 "once and passed when run again alone)")
        for line in lines:
            terminalreporter.write_line(line)
    flakes_file = os.environ.get("WARREN_CLIENT_FLAKES")
    if flakes_file:
        with open(flakes_file, "w") as written:
            written.writelines(f"{line}\n" for line in lines)


# Test modules that share one pytest-xdist work unit under --dist loadfile, so that they
# run one after another on one worker: the Spark modules (the Python runner's connect-back
# timeout is a fixed 10 s, and a Spark worker misses it when two Spark sessions load the
# machine).
ONE_AT_A_TIME_PREFIX = "test_spark_"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile with the Spark modules as one work unit (scripts/test.sh)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SparkModulesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            if module.rsplit("/", 1)[-1].startswith(ONE_AT_A_TIME_PREFIX):
                return ONE_AT_A_TIME_PREFIX
            return module

        def _assign_work_unit(self, node) -> None:
            # the Spark unit, the longest, goes first: xdist orders the units by their
            # number of tests, which put it late and left the other worker idle at the end
            if ONE_AT_A_TIME_PREFIX in self.workqueue:
                self.workqueue.move_to_end(ONE_AT_A_TIME_PREFIX, last=False)
            super()._assign_work_unit(node)

    return SparkModulesTogether(config, log)

def _external_broker():
    value = os.environ.get("WARREN_TEST_BROKER")
    if not value:
        return None
    host, port = value.rsplit(":", 1)
    return BrokerAddress(host, int(port),
                         management_url=os.environ.get("WARREN_TEST_MANAGEMENT"))


@pytest.fixture
def api(warren_broker):
    """The session broker's management HTTP API, as guest, an administrator
    (tests/support/management_client.py)."""
    return ManagementApi(warren_broker.management_url, "guest", "guest")


@pytest.fixture(scope="session")
def broker_admin(warren_broker):
    """Admin operations on the session broker, for what a test sets on its `warren` vhost
    and user or on others of its own (limits, tags, permissions, policies, users):
    Warren's control socket, or the management HTTP API of the broker under test in
    differential mode (tests/support/broker_admin.py)."""
    if isinstance(warren_broker, TestBroker):
        return WarrenAdmin(warren_broker.control_socket)
    return RabbitAdmin(warren_broker.management_url)


@pytest.fixture
def broker_factory(tmp_path_factory):
    """Start dedicated brokers: `broker_factory(*extra_args)` returns a started BrokerProcess
    (keyword arguments other than data_dir go to BrokerProcess, e.g. plain_listener)."""
    started = []

    def start(*extra_args, data_dir=None, **options):
        data_dir = data_dir or str(tmp_path_factory.mktemp("warren-data"))
        broker = BrokerProcess(data_dir=data_dir, extra_args=extra_args, **options).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.kill()


@pytest.fixture(scope="module")
def broker_of_the_module(tmp_path_factory, pytestconfig):
    """A Warren test broker for one module, for the modules that move the broker's clock
    (virtual time: `warren.advance`, "test.advance"): the clock stays ahead, and tests run
    later on the same pytest-xdist worker compare stream timestamps with the wall clock
    on the session broker. Such a module overrides `warren_broker` with it."""
    broker = TestBroker(data_dir=str(tmp_path_factory.mktemp("module-broker")),
                        mode=pytestconfig.getoption("--warren-mode"),
                        rabbitmq_line=pytestconfig.getoption("--warren-rabbitmq")
                        or pytestconfig.getini("warren_rabbitmq"))
    broker.start()
    yield broker
    broker.stop()


RABBITMQ_START_TIMEOUT = 120.0   # a node starts in about 4 s on an idle 2-core machine


class PerLine:
    """A broker per RabbitMQ line, started on first use and kept for the session (a
    test may hold one line's address while another line's tests run)."""

    def __init__(self, start, stop):
        self._start, self._stop = start, stop
        self._running: dict = {}

    def of(self, line: str):
        if line not in self._running:
            self._running[line] = self._start(line)
        return self._running[line][0]

    def close(self) -> None:
        for _, running in self._running.values():
            self._stop(running)
        self._running.clear()


@pytest.fixture(scope="session")
def rabbitmq_node(rabbitmq_nodes):
    """RabbitMQ of the suite's line (WARREN_TEST_RABBITMQ_LINE, default 3.10) for the
    session, for tests comparing with one node: rabbitmq_nodes' (a BrokerAddress)."""
    return rabbitmq_nodes(os.environ.get("WARREN_TEST_RABBITMQ_LINE") or DEFAULT_LINE)


@pytest.fixture(scope="session")
def warren_nodes(tmp_path_factory):
    """The differential runner's Warren side, whatever WARREN_TEST_BROKER says:
    `warren_nodes(line)` is the address (a BrokerAddress) of a Warren broker behaving
    as that RabbitMQ line, for the session."""
    def start(line):
        process = BrokerProcess(
            data_dir=str(tmp_path_factory.mktemp(f"warren-differential-{line}")),
            extra_args=("--rabbitmq", line)).start()
        return process.address(), process

    brokers = PerLine(start, lambda process: process.kill())
    yield brokers.of
    brokers.close()


@pytest.fixture(scope="session")
def rabbitmq_nodes():
    """The differential runner's RabbitMQ side: `rabbitmq_nodes(line)` is the address (a
    BrokerAddress) of WARREN_TEST_BROKER's broker if set, else of a throw-away node of
    that line's pinned rabbitmq-server (own node name, loopback ports, data and cookie;
    the 4.x lines' roots are made on first use, tests/support/rabbitmq_node.py), stopped
    at the end. Fails (never skips) when the node cannot be had."""
    external = _external_broker()
    if external is not None:
        yield lambda line: external
        return

    def start(line):
        if line not in LINES:
            pytest.fail(f"WARREN_TEST_RABBITMQ_LINE={line}: the RabbitMQ lines are "
                        f"{', '.join(LINES)}", pytrace=False)
        if LINES[line].suite == SYSTEM and not os.access(RABBITMQ_SERVER, os.X_OK):
            pytest.fail(f"{RABBITMQ_SERVER} not found: the differential tests compare "
                        "Warren with RabbitMQ 3.10 too; install Debian's rabbitmq-server "
                        "(scripts/test.sh does) or set WARREN_TEST_BROKER=host:port to use "
                        "a running RabbitMQ", pytrace=False)
        node = RabbitInstance(RABBITMQ_START_TIMEOUT, node_prefix="warren-test",
                              management=True, line=line)
        try:
            node.start()
        except NodeError as error:
            node.stop()
            pytest.fail(f"the throw-away RabbitMQ {line} node did not start: {error}",
                        pytrace=False)
        return BrokerAddress("127.0.0.1", node.port, management_url=node.management_url), node

    nodes = PerLine(start, lambda node: node.stop())
    yield nodes.of
    nodes.close()
