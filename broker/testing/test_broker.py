"""A Warren broker for a test suite: started on a free loopback port with its data in a
directory of the caller's, in this process (a thread running the trio server) or as a
subprocess, with the test hooks on. `new_vhost()` gives each test its own vhost and user.
"""

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass

from broker.config import ServeSettings

from .control_client import ControlClient
from .test_vhost import TestVhost, amqp_url

log = logging.getLogger("warren.testing")

THREAD, SUBPROCESS = "thread", "subprocess"
MODES = (THREAD, SUBPROCESS)
START_TIMEOUT = 60.0   # seconds; a start takes well under one on an idle machine


class BrokerStartFailed(Exception):
    """The test broker did not come up; the text has its error or its log."""


@dataclass(frozen=True)
class Listening:
    """Where a started broker listens."""

    host: str
    port: int
    management_port: int | None
    control_socket: str


class TestBroker:
    """One Warren broker for a test session.

    `mode` is "thread" (the default: the server runs on a thread of this process) or
    "subprocess" (`warren serve --ephemeral --testing`, so that SIGKILL can be tested).
    `data_dir` defaults to a new temporary directory, removed by `stop()`. A restart
    keeps the data directory and the ports, so clients can reconnect to the same
    address."""

    __test__ = False   # not a test class, whatever pytest thinks of its name

    def __init__(self, data_dir: str | None = None, mode: str = THREAD,
                 host: str = "127.0.0.1", management: bool = True,
                 rabbitmq_line: str | None = None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self.rabbitmq_line = rabbitmq_line   # None: Warren's default line
        self.host = host
        self.management = management
        self._own_data_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="warren-test-")
        self._socket_dir: str | None = None   # when the data directory's path is too long
        self.control_socket = self._control_socket_path()
        self._runner: _ThreadRunner | _ProcessRunner | None = None
        self._listening: Listening | None = None

    # -- life cycle ------------------------------------------------------------

    def start(self) -> "TestBroker":
        """Start the broker; returns once it accepts connections."""
        if self._runner is not None:
            raise RuntimeError("the test broker is already running")
        previous = self._listening
        runner_type = _ThreadRunner if self.mode == THREAD else _ProcessRunner
        self._runner = runner_type(self.host, self.data_dir, self.control_socket,
                                   self.management,
                                   previous.port if previous else 0,
                                   previous.management_port if previous else None,
                                   self.rabbitmq_line)
        try:
            self._listening = self._runner.start()
        except Exception:   # a failed start cleans up; an interrupted one is for stop()
            self._runner = None
            raise
        return self

    def stop(self) -> None:
        """Stop the broker (gracefully: connections are closed with 320) and remove
        the data directory if it is the broker's own."""
        self._shut_down(kill=False)
        if self._own_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    def _control_socket_path(self) -> str:
        """control.sock in the data directory, or in a short temporary directory when
        that path is longer than a Unix socket path may be (deep pytest tmp paths)."""
        from broker.server.control import CONTROL_SOCKET_NAME, MAX_SOCKET_PATH

        path = os.path.join(self.data_dir, CONTROL_SOCKET_NAME)
        if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
            return path
        self._socket_dir = tempfile.mkdtemp(prefix="warren-")
        return os.path.join(self._socket_dir, CONTROL_SOCKET_NAME)

    def restart(self, kill: bool = False) -> None:
        """Stop and start again on the same data directory and ports. `kill` ends a
        subprocess broker with SIGKILL (a crash) instead of a graceful stop."""
        if kill and self.mode != SUBPROCESS:
            raise ValueError("restart(kill=True) needs a subprocess broker "
                             "(mode='subprocess'): a thread cannot be killed")
        self._shut_down(kill=kill)
        self.start()

    def _shut_down(self, kill: bool) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.stop(kill)

    def __enter__(self) -> "TestBroker":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- where it is -----------------------------------------------------------

    @property
    def listening(self) -> Listening:
        if self._listening is None:
            raise RuntimeError("the test broker has not been started")
        return self._listening

    @property
    def port(self) -> int:
        return self.listening.port

    @property
    def management_url(self) -> str | None:
        port = self.listening.management_port
        return None if port is None else f"http://{self.host}:{port}"

    @property
    def url(self) -> str:
        """The default vhost as guest (guest may log in from loopback only)."""
        return amqp_url(self.host, self.port, "/", "guest", "guest")

    @property
    def control(self) -> ControlClient:
        return ControlClient(self.listening.control_socket)

    def new_vhost(self, prefix: str = "test", rabbitmq_line: str | None = None) -> TestVhost:
        """A new vhost with a new user that may do anything in it and nothing
        elsewhere; `TestVhost.remove()` deletes both. The vhost behaves as
        `rabbitmq_line` ("3.10", "4.0", "4.3"; default the broker's line)."""
        suffix = uuid.uuid4().hex[:12]
        vhost, user = f"{prefix}-{suffix}", f"{prefix}-user-{suffix}"
        password = uuid.uuid4().hex
        self.control.call("test.create_sandbox", vhost=vhost, user=user, password=password,
                          rabbitmq_line=rabbitmq_line)
        return TestVhost.on_test_broker(self, vhost, user, password)


class _ThreadRunner:
    """The server on a thread of this process."""

    def __init__(self, host: str, data_dir: str, control_socket: str, management: bool,
                 port: int, management_port: int | None, rabbitmq_line: str | None):
        from broker.server.node import Node   # the server's imports only when used

        settings = ServeSettings(host=host, port=port, data_dir=data_dir,
                                 control_socket=control_socket)
        if rabbitmq_line is not None:
            settings.rabbitmq = rabbitmq_line
        settings.management.port = ((management_port or "auto") if management else 0)
        self.node = Node(settings, testing=True)
        self._started = threading.Event()
        self._error: Exception | None = None
        self.node.server.on_listening = lambda server: self._started.set()
        self._thread = threading.Thread(target=self._run, name="warren-test-broker",
                                        daemon=True)

    def start(self) -> Listening:
        self._thread.start()
        self._started.wait(START_TIMEOUT)
        if self._error is not None or not self._started.is_set():
            self._thread.join(1.0)
            raise BrokerStartFailed(f"the test broker did not start: {self._error!r}")
        server = self.node.server
        return Listening(server.host, server.port,
                         server.management.port if server.management else None,
                         server.control.path if server.control else "")

    def _run(self) -> None:
        from broker.server.node import run_until_stopped

        try:
            run_until_stopped(self.node)
        except Exception as error:   # the thread's end: reported by start(), or logged
            if self._started.is_set():
                log.error("event=test_broker_failed", exc_info=error)
            self._error = error
            self._started.set()

    def stop(self, kill: bool) -> None:
        if self._thread.is_alive():
            self.node.server.request_stop()
            self._thread.join()


class _ProcessRunner:
    """`warren serve --ephemeral --testing` on our data directory."""

    def __init__(self, host: str, data_dir: str, control_socket: str, management: bool,
                 port: int, management_port: int | None, rabbitmq_line: str | None):
        self.command = [sys.executable, "-m", "broker", "serve", "--ephemeral", "--testing",
                        "--host", host, "--port", str(port), "--data-dir", data_dir,
                        "--control-socket", control_socket,
                        "--management-port",
                        str(management_port or "auto") if management else "0"]
        if rabbitmq_line is not None:
            self.command += ["--rabbitmq", rabbitmq_line]
        self.process: subprocess.Popen | None = None

    def start(self) -> Listening:
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.process.stdout is not None and self.process.stderr is not None
        line = _read_line(self.process.stdout, START_TIMEOUT)
        if not line:
            self.stop(kill=True)
            raise BrokerStartFailed("the test broker did not start:\n"
                                    + self.process.stderr.read())
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        addresses = json.loads(line)
        management_url = addresses["management_url"]
        return Listening(addresses["host"], addresses["port"],
                         int(management_url.rsplit(":", 1)[1]) if management_url else None,
                         addresses["control_socket"] or "")

    def _drain_stderr(self) -> None:
        """The broker's warnings go to this process's stderr (pytest shows them with
        a failing test's output)."""
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            sys.stderr.write(line)

    def stop(self, kill: bool) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        self.process.wait()


def _read_line(stream, timeout: float) -> str:
    """The first line of `stream`, or "" if none came within `timeout` seconds."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return lines[0] if lines else ""
