"""The pytest plugin (registered as `warren` through the pytest11 entry point when Warren
is installed): a test broker for the session and a fresh vhost and user per test.

    def test_orders(warren):
        connection = pika.BlockingConnection(warren.connection_parameters())
        ...

Fixtures:
- `warren_broker` (session): the TestBroker, started on a free port with its data under
  pytest's temporary directory; one per pytest-xdist worker.
- `warren` (function): a TestVhost, removed with everything in it at teardown.

RabbitMQ lines: `--warren-rabbitmq=3.10|4.0|4.3` (ini `warren_rabbitmq`) is the line the
session's broker behaves as (default Warren's, 4.3); the marker `warren_rabbitmq(line)`
gives one test's vhost its own line, so the same test can run under each line side by
side. The terminal summary has a section "Warren upgrade lint" naming each test whose
vhost did something another line refuses or treats otherwise (global qos under 3.10, a
denied deprecated feature under 4.3...), with what that line does.

Options: `--warren-mode=thread|subprocess` (ini `warren_mode`); `--warren-assert-clean`
(ini `warren_assert_clean = true`, or the marker `warren_assert_clean` per test): the
`warren` fixture calls `assert_clean()` at teardown. Differential mode:
`--amqp-broker=amqp://user:password@host:port/` (with `--amqp-management=http://host:port`,
default port 15672) runs the same tests against that broker instead (RabbitMQ): each
test's vhost and user are made through its management API, and a test using a helper
that needs Warren's test hooks is skipped with the reason. See docs/testing.md.
"""

import pytest

from .external_broker import ExternalBroker, ManagementUnavailable
from .test_broker import MODES, THREAD, TestBroker
from .test_vhost import NotOnThisBroker, TestVhost


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("warren", "Warren test broker")
    group.addoption("--warren-mode", choices=MODES, default=None,
                    help="run the session's Warren broker on a thread of the test "
                         "process (thread, the default) or as a subprocess")
    parser.addini("warren_mode", "thread or subprocess (as --warren-mode)",
                  default=THREAD)
    group.addoption("--warren-assert-clean", action="store_true", default=None,
                    help="after every test using `warren`, fail its teardown if it left "
                         "unacked deliveries, ready messages, channels or connections")
    parser.addini("warren_assert_clean", "true: as --warren-assert-clean", type="bool",
                  default=False)
    group.addoption("--warren-rabbitmq", default=None, metavar="LINE",
                    help="the RabbitMQ line the session's Warren broker behaves as: "
                         "3.10, 4.0 or 4.3 (default Warren's, 4.3)")
    parser.addini("warren_rabbitmq", "the RabbitMQ line (as --warren-rabbitmq)",
                  default=None)
    group.addoption("--amqp-broker", default=None, metavar="URL",
                    help="differential mode: run against the broker at "
                         "amqp://user:password@host:port/ (an administrator) instead "
                         "of a Warren test broker")
    group.addoption("--amqp-management", default=None, metavar="URL",
                    help="that broker's management HTTP API (default "
                         "http://<its host>:15672)")


EXTERNAL_BROKER = pytest.StashKey[ExternalBroker]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "warren_vhost_prefix(prefix): name the `warren` fixture's vhost and "
                   "user with this prefix")
    config.addinivalue_line(
        "markers", "warren_rabbitmq(line): the `warren` fixture's vhost behaves as this "
                   "RabbitMQ line (3.10, 4.0, 4.3)")
    config.addinivalue_line(
        "markers", "warren_assert_clean: after the test, fail its teardown if it left "
                   "anything in its `warren` vhost (warren.assert_clean())")


def pytest_sessionstart(session: pytest.Session) -> None:
    """In differential mode, check the other broker's management API before any test."""
    config = session.config
    amqp_url = config.getoption("--amqp-broker")
    if not amqp_url:
        return
    try:
        config.stash[EXTERNAL_BROKER] = ExternalBroker(
            amqp_url, config.getoption("--amqp-management")).start()
    except (ValueError, ManagementUnavailable) as error:
        raise pytest.UsageError(f"--amqp-broker: {error}") from None


@pytest.fixture(scope="session")
def warren_broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config):
    """The session's Warren test broker (one per xdist worker), or in differential
    mode the --amqp-broker broker (an ExternalBroker)."""
    external = pytestconfig.stash.get(EXTERNAL_BROKER, None)
    if external is not None:
        yield external
        return
    mode = pytestconfig.getoption("--warren-mode") or pytestconfig.getini("warren_mode")
    line = pytestconfig.getoption("--warren-rabbitmq") or pytestconfig.getini("warren_rabbitmq")
    broker = TestBroker(data_dir=str(tmp_path_factory.mktemp("warren-broker")), mode=mode,
                        rabbitmq_line=line)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def warren(warren_broker: TestBroker | ExternalBroker, request: pytest.FixtureRequest):
    """A fresh vhost and user for this test (a TestVhost); removed at teardown."""
    marker = request.node.get_closest_marker("warren_vhost_prefix")
    line = request.node.get_closest_marker("warren_rabbitmq")
    try:
        vhost = warren_broker.new_vhost(marker.args[0] if marker else "test",
                                        rabbitmq_line=line.args[0] if line else None)
    except NotOnThisBroker as reason:   # another RabbitMQ line than the other broker's
        pytest.skip(str(reason))
    yield vhost
    try:
        if vhost.has_test_hooks and _assert_clean_wanted(request):
            vhost.assert_clean()
    finally:
        try:
            if vhost.has_test_hooks:
                notes = vhost.upgrade_notes()
                if notes:   # reaches the summary through the report (pytest-xdist too)
                    request.node.user_properties.append((UPGRADE_LINT, notes))
        finally:
            vhost.remove()


def _assert_clean_wanted(request: pytest.FixtureRequest) -> bool:
    """The test is marked warren_assert_clean, or the suite asks for it. (In
    differential mode the check needs Warren's hooks and is not made.)"""
    config = request.config
    return bool(request.node.get_closest_marker("warren_assert_clean")
                or config.getoption("--warren-assert-clean")
                or config.getini("warren_assert_clean"))


UPGRADE_LINT = "warren_upgrade_lint"


# The notes of each test by node id, gathered from the reports (the controller's, under
# pytest-xdist) for the terminal summary.
_LINT_BY_TEST: dict[str, list] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, notes in report.user_properties:
        if name == UPGRADE_LINT and report.when == "teardown" and isinstance(notes, list):
            _LINT_BY_TEST[report.nodeid] = notes


def pytest_terminal_summary(terminalreporter) -> None:
    """The section "Warren upgrade lint": per test, what its vhost did that another
    RabbitMQ line refuses or treats otherwise."""
    if not _LINT_BY_TEST:
        return
    terminalreporter.write_sep("=", "Warren upgrade lint")
    for nodeid, notes in sorted(_LINT_BY_TEST.items()):
        terminalreporter.write_line(nodeid)
        for topic, text in notes:
            terminalreporter.write_line(f"    {topic}: {text}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A helper that needs Warren's internals, on another broker: skipped, with why."""
    try:
        return (yield)
    except NotOnThisBroker as reason:
        pytest.skip(str(reason))


__all__ = ["TestVhost", "warren", "warren_broker"]
