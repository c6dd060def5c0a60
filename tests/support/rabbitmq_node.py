"""A throw-away RabbitMQ node for comparisons: bench/compare.py measures against it, and
the test suite's differential runner (tests/support/differential.py) replays its
scenarios on it. Debian's rabbitmq-server package provides the node; nothing is shared
with a system node (own node name, ports, data, logs, config and Erlang cookie).

As a command, it runs another command beside a throw-away node and stops the node
afterwards, whatever happens (scripts/test.sh runs the integration tests so):

    python tests/support/rabbitmq_node.py run -- python -m pytest tests/integration

The command's environment names the node: WARREN_TEST_BROKER (host:port of its AMQP
listener), WARREN_TEST_MANAGEMENT (its management HTTP API, what tests/support/broker_admin.py's
RabbitAdmin talks to) and WARREN_TEST_PROMETHEUS, and RABBITMQ_NODENAME and
RABBITMQ_ERLANG_COOKIE (what `rabbitmqctl -n NODE --erlang-cookie COOKIE` needs to reach
it by hand). The exit status is the command's, or 1 when the node does not start.
"""

import argparse
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
HOST = "127.0.0.1"

logger = logging.getLogger(__name__)


class NodeError(Exception):
    """A broker did not start (missing package, exited, no handshake in time)."""


def free_port() -> int:
    """A free port below the kernel's ephemeral range: the idle-connections scenario
    leaves a thousand client ports in TIME_WAIT there, and a broker started on one of
    them fails with EADDRINUSE."""
    for _ in range(100):
        port = random.randrange(20000, 32000)
        with socket.socket() as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
            return port
    raise NodeError("no free port found in 20000-32000")


def _another_free_port(*taken: int) -> int:
    port = free_port()
    while port in taken:
        port = free_port()
    return port


def pid_alive(pid: int | None) -> bool:
    return pid is not None and os.path.exists(f"/proc/{pid}")


def amqp_handshake(port: int, timeout: float = 2.0) -> dict:
    """A full AMQP handshake (connection.open-ok) with guest/guest; returns server properties."""
    import pika

    logging.getLogger("pika").setLevel(logging.CRITICAL)   # failed attempts are expected
    params = pika.ConnectionParameters(
        host=HOST, port=port, credentials=pika.PlainCredentials("guest", "guest"),
        connection_attempts=1, socket_timeout=timeout, stack_timeout=timeout,
        blocked_connection_timeout=timeout, heartbeat=0)
    connection = pika.BlockingConnection(params)
    try:
        props = dict(connection._impl.server_properties or {})
    finally:
        connection.close()
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in props.items()
            if k in ("product", "version", "platform")}


def wait_for_handshake(port: int, alive, timeout: float, what: str) -> dict:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if not alive():
            raise NodeError(f"{what} exited during start-up")
        try:
            return amqp_handshake(port)
        except Exception as error:  # refused, reset, handshake not finished yet
            last = error
            time.sleep(0.01)
    raise NodeError(f"{what}: no AMQP handshake on port {port} within {timeout:.0f} s "
                     f"(last error: {last!r})")


class RabbitInstance:
    """A throw-away RabbitMQ node: own node name, AMQP and distribution ports (loopback),
    data, logs, config and Erlang cookie in a temporary directory. Runs in the foreground as a
    child of this script (as the current user); SIGTERM stops it cleanly."""

    name = "RabbitMQ"

    def __init__(self, start_timeout: float, server_script: str = RABBITMQ_SERVER,
                 extra_config: str = "", node_prefix: str = "bench",
                 advanced_config: str = "[].", management: bool = False):
        self.start_timeout = start_timeout
        self.node_prefix = node_prefix   # the node is <prefix>-<AMQP port>@localhost
        self.server_script = server_script
        self.extra_config = extra_config   # more rabbitmq.conf lines (e.g. a TLS listener)
        # advanced.config: Erlang terms for settings rabbitmq.conf does not have
        self.advanced_config = advanced_config
        # The management and prometheus plugins, on free loopback ports, with statistics
        # collected every 500 ms (RabbitMQ's default is 5 s).
        self.management = management
        self.management_port = None
        self.prometheus_port = None
        self.base = None
        self.shell: subprocess.Popen | None = None
        self.beam_pid = None
        self.port = None
        self.startup_s = None
        self.server = {}
        self.node = None

    def start(self) -> "RabbitInstance":
        if not os.access(self.server_script, os.X_OK):
            raise NodeError(f"{self.server_script} not found: install Debian's rabbitmq-server")
        self.base = Path(tempfile.mkdtemp(prefix="rabbitmq-compare-"))
        self.port = free_port()
        dist_port = free_port()
        while dist_port == self.port:
            dist_port = free_port()
        self.node = f"{self.node_prefix}-{self.port}@localhost"
        (self.base / "enabled_plugins").write_text(
            "[rabbitmq_management,rabbitmq_prometheus].\n" if self.management else "[].\n")
        (self.base / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = {HOST}:{self.port}\nloopback_users.guest = true\n"
            + self._management_config() + self.extra_config)
        (self.base / "advanced.config").write_text(self.advanced_config + "\n")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update({
            "HOME": str(self.base),                          # its own .erlang.cookie
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.base / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(self.base / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(self.base / "rabbitmq.pid"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        })
        self.out_path = self.base / "console.log"
        out = open(self.out_path, "wb")
        started = time.perf_counter()
        try:
            self.shell = subprocess.Popen([self.server_script], env=env, stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          cwd=self.base, start_new_session=True)
        finally:
            out.close()
        try:
            self.server = wait_for_handshake(self.port, self.alive, self.start_timeout,
                                             f"RabbitMQ node {self.node}")
        except NodeError as error:
            raise NodeError(f"{error}\n--- console (tail) ---\n{self.log_tail()}") from None
        if self.management:
            self._wait_for_management(started)
        self.startup_s = time.perf_counter() - started
        self.beam_pid = self._find_beam()
        if self.beam_pid is None:
            raise NodeError(f"RabbitMQ node {self.node} accepts connections but no beam.smp "
                             f"process was found under pid {self.shell.pid}")
        return self

    def _management_config(self) -> str:
        if not self.management:
            return ""
        self.management_port = _another_free_port(self.port)
        self.prometheus_port = _another_free_port(self.port, self.management_port)
        return (f"management.tcp.ip = {HOST}\nmanagement.tcp.port = {self.management_port}\n"
                f"prometheus.tcp.ip = {HOST}\nprometheus.tcp.port = {self.prometheus_port}\n"
                "collect_statistics_interval = 500\n")

    @property
    def management_url(self) -> str | None:
        return f"http://{HOST}:{self.management_port}" if self.management else None

    def _wait_for_management(self, started: float) -> None:
        """The management plugin starts after the AMQP listener: wait for its port."""
        deadline = started + self.start_timeout
        while True:
            try:
                socket.create_connection((HOST, self.management_port), timeout=2).close()
                return
            except OSError:
                if not self.alive() or time.perf_counter() > deadline:
                    raise NodeError(f"RabbitMQ node {self.node}: the management plugin did "
                                    f"not listen on {self.management_port}\n"
                                    f"--- console (tail) ---\n{self.log_tail()}") from None
                time.sleep(0.1)   # polling a port the node opens when it is ready

    def _find_beam(self):
        """beam.smp, a child of the rabbitmq-server shell (or the shell itself after exec)."""
        wanted = {self.shell.pid}
        for _ in range(3):                 # sh -> (erl -> erlexec ->) beam.smp, via exec
            for stat in Path("/proc").glob("[0-9]*/stat"):
                try:
                    text = stat.read_text()
                except OSError:
                    continue
                comm = text[text.index("(") + 1:text.rindex(")")]
                ppid = int(text[text.rindex(")") + 2:].split()[1])
                pid = int(stat.parent.name)
                if comm == "beam.smp" and (ppid in wanted or pid in wanted):
                    return pid
                if ppid in wanted:
                    wanted.add(pid)
        return None

    @property
    def pid(self):
        return self.beam_pid

    @property
    def cookie(self) -> str:
        """The node's Erlang cookie, made by the node at its first start in its HOME."""
        return (self.base / ".erlang.cookie").read_text().strip()

    def environment(self) -> dict:
        """What a test run needs to reach this node: AMQP, its HTTP APIs, and
        rabbitmqctl."""
        environment = {"WARREN_TEST_BROKER": f"{HOST}:{self.port}",
                       "RABBITMQ_NODENAME": self.node,
                       "RABBITMQ_ERLANG_COOKIE": self.cookie}
        if self.management:
            environment["WARREN_TEST_MANAGEMENT"] = self.management_url
            environment["WARREN_TEST_PROMETHEUS"] = f"http://{HOST}:{self.prometheus_port}"
        return environment

    def alive(self) -> bool:
        return self.shell is not None and self.shell.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        chunks = []
        paths = [self.out_path] if self.base else []
        if self.base and (self.base / "log").is_dir():
            paths += sorted((self.base / "log").glob("*.log"))
        for path in paths:
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            chunks.append(f"[{path.name}]\n" + "\n".join(text))
        return "\n".join(chunks)

    def stop(self) -> None:
        try:
            if self.shell is not None and self.shell.poll() is None:
                self.shell.send_signal(signal.SIGTERM)   # the script's trap stops the node
                try:
                    self.shell.wait(30)
                except subprocess.TimeoutExpired:
                    logger.warning("RabbitMQ node %s did not stop within 30 s: killing it", self.node)
            if self.shell is not None:
                try:
                    os.killpg(self.shell.pid, signal.SIGKILL)   # leftovers of the session, if any
                except ProcessLookupError:
                    pass
                try:
                    self.shell.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            if pid_alive(self.beam_pid):
                os.kill(self.beam_pid, signal.SIGKILL)
        finally:
            if self.base:
                shutil.rmtree(self.base, ignore_errors=True)
                self.base = None


class Stopped(Exception):
    """SIGTERM, SIGHUP or SIGINT arrived while the node or the command ran."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class StopSignals:
    """Turns the stop signals into Stopped, except while a command is being started:
    a signal then waits until the command's Popen exists, so that the command is
    killed and not left running (under load the command can print its first line, and
    the runner be stopped, before subprocess.Popen has returned in the runner)."""

    def __init__(self):
        self._held = False
        self._pending = None
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._received)

    def _received(self, signum, _frame):
        if self._held:
            self._pending = signum
        else:
            raise Stopped(signum)

    def start(self, command: list[str], environment: dict) -> subprocess.Popen:
        """Popen(command), with a stop signal that came meanwhile raised only after."""
        self._held = True
        try:
            return subprocess.Popen(command, env=environment)
        finally:
            self._held = False

    def raise_pending(self) -> None:
        if self._pending is not None:
            raise Stopped(self._pending)

    @staticmethod
    def ignore() -> None:
        """A second signal must not leave the node running while it stops."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


def run_command(command: list[str], environment: dict, stops: StopSignals) -> int:
    """Run `command` to its end and return its status; a stop signal kills it."""
    process = stops.start(command, environment)
    try:
        stops.raise_pending()
        return process.wait()
    except BaseException:
        process.kill()
        process.wait()
        raise


def run_beside_node(command: list[str], start_timeout: float) -> int:
    """Start a node, run `command` with the node's environment, stop the node."""
    node = RabbitInstance(start_timeout, node_prefix="warren-test", management=True)
    stops = StopSignals()
    try:
        try:
            node.start()
        except NodeError as error:
            print(f"rabbitmq_node: the throw-away RabbitMQ node did not start: {error}",
                  file=sys.stderr)
            return 1
        print(f"rabbitmq_node: RabbitMQ {node.server.get('version', '?')} node {node.node} "
              f"on {HOST}:{node.port}, started in {node.startup_s:.1f} s", file=sys.stderr)
        return run_command(command, {**os.environ, **node.environment()}, stops)
    except Stopped as stopped:     # run_command has killed the command
        print(f"rabbitmq_node: stopped by {stopped}", file=sys.stderr)
        return 128 + stopped.signum
    finally:
        stops.ignore()
        node.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Run a command beside a throw-away RabbitMQ node (Debian's "
                    "rabbitmq-server), stopping the node afterwards.")
    subcommands = parser.add_subparsers(dest="subcommand", required=True)
    run = subcommands.add_parser(
        "run", help="start a node, run COMMAND with WARREN_TEST_BROKER, RABBITMQ_NODENAME "
                    "and RABBITMQ_ERLANG_COOKIE naming it, stop the node; exit with "
                    "COMMAND's status")
    run.add_argument("--start-timeout", type=float, default=120.0,
                     help="seconds the node may take to accept AMQP (default 120)")
    run.add_argument("command", nargs=argparse.REMAINDER,
                     help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("run needs a command after --")
    return run_beside_node(command, args.start_timeout)


if __name__ == "__main__":
    sys.exit(main())
