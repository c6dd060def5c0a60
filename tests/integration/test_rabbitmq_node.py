"""`python tests/support/rabbitmq_node.py run -- COMMAND`, what scripts/test.sh runs the
integration tests against RabbitMQ with: COMMAND gets the throw-away node's address, name
and cookie, and its management API (RabbitAdmin reaches the node through it), the command's
exit status is the script's, and the node is gone afterwards, also when the script is
stopped with SIGTERM while the command runs.

A node of each RabbitMQ line (3.10, 4.0, 4.3) is the pinned version of RabbitMQ, by its
handshake and its management API; the 4.x lines' roots are made here on first use (a few
minutes on a fresh machine, then cached). A root that cannot be had, or is of another
version, gives an error that says why."""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import rabbitmq_node
from tests.support.management_client import ManagementApi

RUN = [sys.executable, str(Path(__file__).parents[1] / "support" / "rabbitmq_node.py"), "run", "--"]
DEADLINE = 180.0   # a node start (about 5 s idle, much more on a loaded machine) and a stop

# The harness runs no module of the compiled build: scripts/test.sh runs it on the
# pure-Python build only.
pytestmark = [pytest.mark.warren_only(
    "tests the test harness's throw-away RabbitMQ node, not WARREN_TEST_BROKER's broker"),
    pytest.mark.build_independent]

# Run inside the node's environment: reports what it sees, creates and deletes a vhost
# with RabbitAdmin (the management API, WARREN_TEST_MANAGEMENT), exits with status 5.
PROBE = """
import json, os, sys
sys.path.insert(0, {root!r})
from tests.support.broker_admin import RabbitAdmin
from tests.support.rabbitmq_node import amqp_handshake
admin = RabbitAdmin()
admin.add_vhost("run-probe")
admin.delete_vhost("run-probe")
port = int(os.environ["WARREN_TEST_BROKER"].rsplit(":", 1)[1])
print(json.dumps({{"broker": os.environ["WARREN_TEST_BROKER"],
                  "node": os.environ["RABBITMQ_NODENAME"],
                  "server": amqp_handshake(port)}}))
sys.exit(5)
"""


def node_environment() -> dict:
    """The environment of this test run without a broker or node of its own."""
    return {k: v for k, v in os.environ.items()
            if k not in ("WARREN_TEST_BROKER", "RABBITMQ_NODENAME", "RABBITMQ_ERLANG_COOKIE")}


def accepts_connections(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return False
    return True


def test_the_command_reaches_the_node_and_its_status_is_the_exit_status():
    probe = PROBE.format(root=str(Path(__file__).parents[2]))
    result = subprocess.run([*RUN, sys.executable, "-c", probe], env=node_environment(),
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 5, result.stderr
    seen = json.loads(result.stdout)
    assert seen["broker"].startswith("127.0.0.1:")
    assert seen["node"].startswith("warren-test-")
    assert seen["server"]["product"] == "RabbitMQ"
    assert not accepts_connections(seen["broker"])


def test_sigterm_stops_the_command_and_the_node():
    # The command prints the node's address once it runs: reading that line waits for it
    # (the line is empty if the runner ends first).
    command = f"echo $WARREN_TEST_BROKER && exec sleep {DEADLINE:.0f}"
    runner = subprocess.Popen([*RUN, "sh", "-c", command], env=node_environment(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        address = runner.stdout.readline().strip()
        assert address, f"the command did not start: {runner.stderr.read()}"
        assert accepts_connections(address)
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(DEADLINE) == 128 + signal.SIGTERM
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert "stopped by SIGTERM" in runner.stderr.read()
    assert not accepts_connections(address)


@pytest.fixture
def stop_signal_handlers():
    """StopSignals installs handlers in this process: the test's are restored after."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP,
                                                             signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_stop_signal_while_the_command_starts_still_kills_the_command(
        monkeypatch, stop_signal_handlers):
    """Under load the command can print its first line, and the runner get SIGTERM, before
    subprocess.Popen has returned in the runner: the signal waits for the Popen, so the
    command is killed instead of left running (it held the runner's stderr pipe open)."""
    started = []
    real_popen = subprocess.Popen

    def popen_interrupted_by_sigterm(command, env):
        process = real_popen(command, env=env)
        started.append(process)
        os.kill(os.getpid(), signal.SIGTERM)   # handled before Popen returns to the runner
        return process

    monkeypatch.setattr(rabbitmq_node.subprocess, "Popen", popen_interrupted_by_sigterm)
    stops = rabbitmq_node.StopSignals()
    with pytest.raises(rabbitmq_node.Stopped) as stopped:
        rabbitmq_node.run_command(["sleep", "60"], dict(os.environ), stops)
    assert stopped.value.signum == signal.SIGTERM
    assert started[0].wait(5) == -signal.SIGKILL


@pytest.mark.parametrize("line", list(rabbitmq_node.LINES))
def test_a_node_of_each_line_is_its_pinned_rabbitmq(line):
    pinned = rabbitmq_node.LINES[line].version
    node = rabbitmq_node.RabbitInstance(DEADLINE, node_prefix="line-check", management=True,
                                        line=line)
    try:
        node.start()
        assert (node.server["product"], node.server["version"]) == ("RabbitMQ", pinned)
        overview = ManagementApi(node.management_url).json("/api/overview")
        assert overview["rabbitmq_version"] == pinned
        environment = node.environment()
        assert environment["WARREN_TEST_RABBITMQ_LINE"] == line
        assert environment["WARREN_TEST_RABBITMQ_VERSION"] == pinned
        directory = node.base
    finally:
        node.stop()
    assert not accepts_connections(f"127.0.0.1:{node.port}")
    assert not directory.exists()


@pytest.fixture
def roots(tmp_path, monkeypatch) -> Path:
    """An empty roots cache, and this process taken for root (what a chroot needs)."""
    monkeypatch.setenv(rabbitmq_node.ROOTS_VARIABLE, str(tmp_path))
    monkeypatch.setattr(rabbitmq_node.os, "geteuid", lambda: 0)
    return tmp_path


STATUS_OF_4_3_7 = ("Package: rabbitmq-server\nStatus: install ok installed\n"
                   "Version: 4.3.7-1\n\n")   # a dpkg status file's entry


def test_a_cached_root_of_another_version_is_refused_saying_which(roots):
    status = roots / "4.3.6/var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text(STATUS_OF_4_3_7)
    with pytest.raises(rabbitmq_node.NodeError) as refused:
        rabbitmq_node.ready_root("4.3")
    assert "pinned to rabbitmq-server 4.3.6 but the cached root" in str(refused.value)
    assert "has 4.3.7" in str(refused.value)


@pytest.fixture
def debootstrap(tmp_path_factory, monkeypatch):
    """Puts a debootstrap of the test's own (a shell script's body) first on PATH; its
    arguments are those of the real one: options, suite, target directory, mirror."""
    def install(body: str) -> None:
        programs = tmp_path_factory.mktemp("programs")
        program = programs / "debootstrap"
        program.write_text(f"#!/bin/sh\n{body}\n")
        program.chmod(0o755)
        monkeypatch.setenv("PATH", f"{programs}:{os.environ['PATH']}")
    return install


def test_a_failed_debootstrap_says_why_and_leaves_no_root(roots, debootstrap):
    debootstrap("echo 'E: Failed getting release file' >&2; exit 1")
    interrupted = roots / ".4.3.6.partial-interrupted/usr/lib/rabbitmq"
    interrupted.mkdir(parents=True)   # what a killed debootstrap leaves
    with pytest.raises(rabbitmq_node.NodeError) as failed:
        rabbitmq_node.ready_root("4.3")
    assert "debootstrap of Debian sid for RabbitMQ 4.3.6 failed" in str(failed.value)
    assert "E: Failed getting release file" in str(failed.value)
    assert not any(path.is_dir() for path in roots.iterdir())   # no root, no half root


def test_a_suite_that_moved_on_is_refused_saying_which_version_it_has(roots, debootstrap):
    debootstrap(f'mkdir -p "$4/var/lib/dpkg"\n'
                f'printf "{STATUS_OF_4_3_7}" > "$4/var/lib/dpkg/status"')
    with pytest.raises(rabbitmq_node.NodeError) as refused:
        rabbitmq_node.ready_root("4.3")
    assert "pinned to rabbitmq-server 4.3.6 but Debian sid now has 4.3.7" in str(refused.value)
    assert not any(path.is_dir() for path in roots.iterdir())


def test_a_root_needs_root(roots, monkeypatch):
    monkeypatch.setattr(rabbitmq_node.os, "geteuid", lambda: 1000)
    with pytest.raises(rabbitmq_node.NodeError, match="needs root"):
        rabbitmq_node.ready_root("4.0")
