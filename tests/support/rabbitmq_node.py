"""Throw-away RabbitMQ nodes of the three RabbitMQ lines Warren's profiles follow, for
comparisons: bench/compare.py measures against one, the test suite's differential runner
(tests/support/differential.py) replays its scenarios on one, and the integration tests
run against one (the RabbitMQ run). Nothing is shared with a system node (own node name,
ports, data, logs, config and Erlang cookie).

Each line is a pinned rabbitmq-server package of Debian (LINES):

- "3.10": 3.10.8, Debian 12's own package on this host (/usr/lib/rabbitmq/bin/rabbitmq-server);
- "4.0": 4.0.5 from Debian 13 (trixie), and "4.3": 4.3.6 from Debian unstable (sid),
  each in a root directory of its own made once with debootstrap (as root) and cached
  (WARREN_RABBITMQ_ROOTS, default ~/.cache/warren/rabbitmq-roots/<version>); the node runs
  chrooted into it. A root whose rabbitmq-server is not the pinned version is refused
  with a NodeError that says what to do.

As a command, it runs another command beside a throw-away node and stops the node
afterwards, whatever happens (scripts/test.sh runs the integration tests so), or makes a
line's root ahead of time (--line: 3.10, the default, 4.0 or 4.3):

    python tests/support/rabbitmq_node.py run --line 4.3 -- python -m pytest tests/integration
    python tests/support/rabbitmq_node.py provision --line 4.3

`run --config "consumer_timeout = 1000"` adds a rabbitmq.conf line (repeatable).

The command's environment names the node: WARREN_TEST_BROKER (host:port of its AMQP
listener), WARREN_TEST_MANAGEMENT (its management HTTP API, what tests/support/broker_admin.py's
RabbitAdmin talks to) and WARREN_TEST_PROMETHEUS, RABBITMQ_NODENAME and
RABBITMQ_ERLANG_COOKIE (what `rabbitmqctl -n NODE --erlang-cookie COOKIE` needs to reach
it by hand), WARREN_TEST_RABBITMQ_LINE and WARREN_TEST_RABBITMQ_VERSION (the line, and the
version the node's Connection.Start reported). The exit status is the command's, or 1
when the node does not start.
"""

import argparse
import base64
import fcntl
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
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
HOST = "127.0.0.1"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
SYSTEM = "system"   # a line whose package is the host's own
ROOTS_VARIABLE = "WARREN_RABBITMQ_ROOTS"
DEBOOTSTRAP_TIMEOUT = 1800.0   # a root takes 1-2 minutes; a stalled mirror must not hang a run
CHROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

logger = logging.getLogger(__name__)


class NodeError(Exception):
    """A broker did not start (missing package, exited, no handshake in time), or a line's
    root could not be had (not root, no debootstrap, debootstrap failed, another version)."""


@dataclass(frozen=True)
class Line:
    """A RabbitMQ line: the rabbitmq-server version its nodes must be, and the Debian
    suite that has that version (SYSTEM: the host's own package)."""
    name: str
    version: str
    suite: str


LINES = {line.name: line for line in (
    Line("3.10", "3.10.8", SYSTEM),     # Debian 12 (bookworm)
    Line("4.0", "4.0.5", "trixie"),     # Debian 13
    Line("4.3", "4.3.6", "sid"),        # Debian unstable
)}
DEFAULT_LINE = "3.10"   # the RabbitMQ run's (pyproject.toml's warren_rabbitmq)


def line_of(name: str) -> Line:
    try:
        return LINES[name]
    except KeyError:
        raise NodeError(f"unknown RabbitMQ line {name!r}: the lines are "
                        f"{', '.join(LINES)}") from None


def roots_directory() -> Path:
    """Where the lines' roots are cached: WARREN_RABBITMQ_ROOTS, or
    ~/.cache/warren/rabbitmq-roots."""
    configured = os.environ.get(ROOTS_VARIABLE)
    return Path(configured) if configured else Path.home() / ".cache/warren/rabbitmq-roots"


def upstream_version(debian_version: str) -> str:
    """3.10.8 of Debian's 3.10.8-1.1 (no epoch, no Debian revision)."""
    version = debian_version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def installed_version(root: Path) -> str | None:
    """The upstream version of the rabbitmq-server package installed in `root` (its dpkg
    status file), or None when it is not installed there."""
    try:
        status = (root / "var/lib/dpkg/status").read_text(errors="replace")
    except OSError:
        return None
    for paragraph in status.split("\n\n"):
        fields = {}
        for entry in paragraph.splitlines():
            key, colon, value = entry.partition(":")
            if colon and not entry[:1].isspace():
                fields[key] = value.strip()
        if (fields.get("Package") == "rabbitmq-server"
                and fields.get("Status", "").endswith(" installed") and "Version" in fields):
            return upstream_version(fields["Version"])
    return None


def check_pinned_version(line: Line, root: Path, fresh: bool = False) -> None:
    """Refuse a root (or for SYSTEM the host) whose rabbitmq-server is not the line's
    pinned version, saying what to do; `fresh`: a root debootstrap has just made."""
    found = installed_version(root)
    if found == line.version:
        return
    pin = f"line {line.name} is pinned to rabbitmq-server {line.version}"
    repin = (f"pin the new version in LINES (tests/support/rabbitmq_node.py) and check the "
             f"{line.name} profile against it")
    if line.suite == SYSTEM:
        if found is None:
            raise NodeError(f"rabbitmq-server is not installed on this host: {pin}, Debian "
                            f"12's package (apt-get install rabbitmq-server; scripts/test.sh "
                            f"does)")
        raise NodeError(f"{pin} but this host's package is {found}: line {line.name} needs "
                        f"Debian 12's (bookworm) rabbitmq-server on the host")
    if fresh:
        raise NodeError(f"{pin} but Debian {line.suite} now has {found or 'no rabbitmq-server'}: "
                        f"{repin}, or place a root holding {line.version} at "
                        f"{roots_directory() / line.version} by hand")
    raise NodeError(f"{pin} but the cached root {root} has {found or 'no rabbitmq-server'}: "
                    f"unmount {root}/proc and remove {root} to make it again from Debian "
                    f"{line.suite}, or {repin}")


def ready_root(name: str) -> Path:
    """The root directory a node of line `name` runs in ("/" for the host's package):
    made with debootstrap the first time (into a temporary directory beside it, renamed
    into place when complete and of the pinned version), with /proc mounted and the
    host's /etc/hosts copied in (without it the node's epmd lookup of localhost fails).
    Under a file lock: pytest-xdist workers and parallel scripts may ask at once."""
    line = line_of(name)
    if line.suite == SYSTEM:
        check_pinned_version(line, Path("/"))
        return Path("/")
    if os.geteuid() != 0:
        raise NodeError(f"RabbitMQ {line.version} (line {line.name}) runs in a chroot, "
                        f"which needs root: run as root, or use line {DEFAULT_LINE}")
    roots = roots_directory()
    roots.mkdir(parents=True, exist_ok=True)
    root = roots / line.version
    with open(roots / f"{line.version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not root.is_dir():
            _provision(line, root)
        check_pinned_version(line, root)
        if not (root / "proc/self").exists():
            _run_or_fail(["mount", "-t", "proc", "proc", str(root / "proc")],
                         f"mounting /proc in {root}")
        hosts = root / "etc/.hosts.warren"
        shutil.copyfile("/etc/hosts", hosts)
        os.replace(hosts, root / "etc/hosts")   # a node starting meanwhile reads a whole file
    return root


def _run_or_fail(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise NodeError(f"{what} failed (exit status {result.returncode}): "
                        f"{(result.stderr or result.stdout).strip()}")


def _provision(line: Line, root: Path) -> None:
    """debootstrap the line's suite with rabbitmq-server into a directory beside `root`,
    and rename it into place once it is complete and holds the pinned version."""
    debootstrap = _debootstrap_command()
    for leftover in root.parent.glob(f".{line.version}.partial-*"):
        _remove_partial(leftover)   # an interrupted run's (we hold the lock)
    partial = Path(tempfile.mkdtemp(prefix=f".{line.version}.partial-", dir=root.parent))
    log_path = root.parent / f"{line.version}.debootstrap.log"
    print(f"rabbitmq_node: making the root of RabbitMQ {line.version} (Debian {line.suite}) "
          f"in {root} with debootstrap (1-2 minutes; log in {log_path})", file=sys.stderr)
    command = [debootstrap, "--variant=minbase",
               "--include=rabbitmq-server,ca-certificates", line.suite, str(partial),
               DEBIAN_MIRROR]
    try:
        with open(log_path, "wb") as log:
            try:
                status = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL,
                                        timeout=DEBOOTSTRAP_TIMEOUT).returncode
            except subprocess.TimeoutExpired:
                status = None
        if status != 0:
            ended = (f"exit status {status}" if status is not None
                     else f"no end within {DEBOOTSTRAP_TIMEOUT:.0f} s")
            raise NodeError(f"debootstrap of Debian {line.suite} for RabbitMQ {line.version} "
                            f"failed ({ended}); {' '.join(command)}\n"
                            f"--- {log_path} (tail) ---\n{_tail(log_path)}"
                            f"{_debootstrap_log_tail(partial)}")
        check_pinned_version(line, partial, fresh=True)
        for package in (partial / "var/cache/apt/archives").glob("*.deb"):
            package.unlink()   # 80-90 MB the node never reads
        partial.chmod(0o755)   # mkdtemp's 0700 is no root directory's mode
        partial.rename(root)
    finally:
        if partial.exists():
            _remove_partial(partial)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _debootstrap_log_tail(target: Path) -> str:
    """debootstrap's own log in the target, which says more than its output."""
    own = target / "debootstrap/debootstrap.log"
    return f"\n--- {own} (tail) ---\n{_tail(own)}" if own.exists() else ""


def _remove_partial(path: Path) -> None:
    """Remove an incomplete root, after unmounting what debootstrap left mounted in it
    (removing the files of a mounted /proc, /sys or bound /dev would go to the host's)."""
    prefix = str(path.resolve()) + "/"
    with open("/proc/mounts") as mounts:
        points = [fields[1] for fields in (entry.split() for entry in mounts)
                  if fields[1].startswith(prefix)]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
    with open("/proc/mounts") as mounts:
        if any(entry.split()[1].startswith(prefix) for entry in mounts):
            logger.warning("%s still has file systems mounted: left in place", path)
            return
    shutil.rmtree(path, ignore_errors=True)


def _debootstrap_command() -> str:
    """debootstrap's path, installed with apt-get when missing (apt-get update first
    when the install fails, as on a machine whose package lists are empty)."""
    found = shutil.which("debootstrap", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if found:
        return found
    print("rabbitmq_node: installing debootstrap (apt-get)", file=sys.stderr)
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "debootstrap"]
    try:
        result = subprocess.run(install, capture_output=True, text=True, env=environment)
        if result.returncode != 0:
            subprocess.run(["apt-get", "update"], capture_output=True, env=environment)
            result = subprocess.run(install, capture_output=True, text=True, env=environment)
    except OSError as error:   # no apt-get: not a Debian host
        raise NodeError(f"debootstrap is missing and apt-get cannot run ({error}): "
                        "install debootstrap by hand") from None
    found = shutil.which("debootstrap", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if result.returncode != 0 or not found:
        output = "\n".join((result.stdout + result.stderr).splitlines()[-10:])
        raise NodeError(f"debootstrap is missing and `apt-get install -y debootstrap` did not "
                        f"install it (exit status {result.returncode}); install it by hand\n"
                        f"{output}")
    return found


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
    """A throw-away RabbitMQ node of a line (LINES): own node name, AMQP and distribution
    ports (loopback), data, logs, config and Erlang cookie in a temporary directory. Runs in
    the foreground as a child of this script (as the current user; chrooted into the line's
    root for the 4.x lines, with its directory inside that root); SIGTERM stops it cleanly."""

    name = "RabbitMQ"

    def __init__(self, start_timeout: float, server_script: str = RABBITMQ_SERVER,
                 extra_config: str = "", node_prefix: str = "bench",
                 advanced_config: str = "[].", management: bool = False,
                 line: str = DEFAULT_LINE):
        self.start_timeout = start_timeout
        self.line = line_of(line)
        # "/" for the host's package; the node sees its files relative to it
        self.root: Path | None = None
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
        if self.line.suite == SYSTEM:
            if not os.access(self.server_script, os.X_OK):
                raise NodeError(f"{self.server_script} not found: install Debian's "
                                "rabbitmq-server")
            if self.server_script == RABBITMQ_SERVER:
                check_pinned_version(self.line, Path("/"))
            self.root = Path("/")
            self.base = Path(tempfile.mkdtemp(prefix="rabbitmq-compare-"))
            command = [self.server_script]
        else:
            self.root = ready_root(self.line.name)
            self.base = Path(tempfile.mkdtemp(prefix="rabbitmq-compare-", dir=self.root / "tmp"))
            command = ["chroot", str(self.root), RABBITMQ_SERVER]
        inside = self._inside   # the node's view of its directory
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
        if self.line.suite != SYSTEM:
            env["PATH"] = CHROOT_PATH   # the root's programs, not the host's virtualenv
        env.update({
            "HOME": inside,                                  # its own .erlang.cookie
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_MNESIA_BASE": f"{inside}/mnesia",
            "RABBITMQ_LOG_BASE": f"{inside}/log",
            "RABBITMQ_CONFIG_FILE": f"{inside}/rabbitmq.conf",
            "RABBITMQ_ADVANCED_CONFIG_FILE": f"{inside}/advanced.config",
            "RABBITMQ_ENABLED_PLUGINS_FILE": f"{inside}/enabled_plugins",
            "RABBITMQ_PLUGINS_EXPAND_DIR": f"{inside}/plugins-expand",
            "RABBITMQ_PID_FILE": f"{inside}/rabbitmq.pid",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        })
        self.out_path = self.base / "console.log"
        out = open(self.out_path, "wb")
        started = time.perf_counter()
        try:
            self.shell = subprocess.Popen(command, env=env, stdout=out,
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

    @property
    def _inside(self) -> str:
        """The node's directory as the node sees it (relative to its root)."""
        return "/" + str(self.base.relative_to(self.root))

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
        """The management plugin starts after the AMQP listener: wait until its API
        answers. Its port opens before the API can serve: a 4.3.6 node answered
        /api/overview with 500 just after, so the wait is for a 200 there."""
        deadline = started + self.start_timeout
        overview = urllib.request.Request(
            f"{self.management_url}/api/overview",
            headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
        last = None
        while True:
            try:
                with urllib.request.urlopen(overview, timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (OSError, urllib.error.HTTPError) as error:   # refused, 500, reset
                last = error
            if not self.alive() or time.perf_counter() > deadline:
                raise NodeError(f"RabbitMQ node {self.node}: the management API on "
                                f"{self.management_port} did not answer /api/overview with "
                                f"200 (last: {last!r})\n"
                                f"--- console (tail) ---\n{self.log_tail()}")
            time.sleep(0.1)   # polling an API the node serves when it is ready

    def _find_beam(self):
        """beam.smp, a child of the rabbitmq-server shell (or the shell itself after exec;
        chroot execs the shell, so the chain is the same inside a root)."""
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
                       "RABBITMQ_ERLANG_COOKIE": self.cookie,
                       "WARREN_TEST_RABBITMQ_LINE": self.line.name,
                       "WARREN_TEST_RABBITMQ_VERSION": self.server.get("version", "")}
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


def run_beside_node(command: list[str], start_timeout: float, line: str = DEFAULT_LINE,
                    config: tuple[str, ...] = ()) -> int:
    """Start a node of `line` (with `config`, more rabbitmq.conf lines), run `command`
    with the node's environment, stop the node."""
    node = RabbitInstance(start_timeout, node_prefix="warren-test", management=True, line=line,
                          extra_config="".join(f"{setting}\n" for setting in config))
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


def provision(line: str) -> int:
    """Make `line`'s root (if not made yet) and print its path and rabbitmq-server version."""
    try:
        root = ready_root(line)
    except NodeError as error:
        print(f"rabbitmq_node: {error}", file=sys.stderr)
        return 1
    print(f"{root} {installed_version(root)}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Run a command beside a throw-away RabbitMQ node of a RabbitMQ line "
                    "(Debian's rabbitmq-server), stopping the node afterwards; or make a "
                    "line's root ahead of time.")
    subcommands = parser.add_subparsers(dest="subcommand", required=True)
    lines = ", ".join(f"{line.name} ({line.version}, "
                      f"{'this host' if line.suite == SYSTEM else 'Debian ' + line.suite})"
                      for line in LINES.values())
    run = subcommands.add_parser(
        "run", help="start a node, run COMMAND with WARREN_TEST_BROKER, RABBITMQ_NODENAME "
                    "and RABBITMQ_ERLANG_COOKIE naming it, stop the node; exit with "
                    "COMMAND's status")
    run.add_argument("--line", choices=list(LINES), default=DEFAULT_LINE,
                     help=f"the RabbitMQ line: {lines} (default {DEFAULT_LINE})")
    run.add_argument("--start-timeout", type=float, default=120.0,
                     help="seconds the node may take to accept AMQP (default 120)")
    run.add_argument("--config", action="append", default=[], metavar="SETTING",
                     help="a rabbitmq.conf line for the node (e.g. 'consumer_timeout = "
                          "1000'); repeatable")
    run.add_argument("command", nargs=argparse.REMAINDER,
                     help="the command, after --")
    make = subcommands.add_parser(
        "provision", help=f"make a line's root in {ROOTS_VARIABLE} (default "
                          "~/.cache/warren/rabbitmq-roots) if not made yet, as root; "
                          "print its path and rabbitmq-server version")
    make.add_argument("--line", choices=list(LINES), required=True,
                      help=f"the RabbitMQ line: {lines}")
    args = parser.parse_args(argv)
    if args.subcommand == "provision":
        return provision(args.line)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("run needs a command after --")
    return run_beside_node(command, args.start_timeout, args.line, tuple(args.config))


if __name__ == "__main__":
    sys.exit(main())
