"""A throwaway PostgreSQL server for the tests: initdb into a temporary directory,
pg_ctl start on a free loopback port (waiting with pg_ctl -w, bounded by -t), one
fresh database per test, pg_ctl stop and removal at the end of the session.

Needs the server binaries (Debian: `apt-get install postgresql`) and the psycopg
driver (`pip install "psycopg[binary]"`). initdb refuses to run as root, so under root
the server runs as the `postgres` user (the Debian package creates it) via runuser.
"""

import contextlib
import glob
import itertools
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SUPERUSER = "warren"
START_TIMEOUT_SECONDS = 60
PORT_ATTEMPTS = 3
SERVER_SETTINGS = ("-c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
                   " -c full_page_writes=off")


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries, driver or user needed by the tests are missing."""


@dataclass
class PostgresServer:
    """A running throwaway server; `database()` gives a fresh database per use."""

    bin_dir: Path
    base_dir: Path
    run_as: tuple[str, ...]
    port: int = 0
    start_seconds: float = 0.0
    _names: itertools.count = field(default_factory=lambda: itertools.count(1))

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "server.log"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    @contextlib.contextmanager
    def database(self):
        """Create a new empty database, yield its SQLAlchemy URL, drop it afterwards."""
        name = f"warren_test_{next(self._names)}"
        self._admin(f'CREATE DATABASE "{name}"')
        try:
            yield self.url(name)
        finally:
            self._admin(f'DROP DATABASE "{name}" WITH (FORCE)')

    def _admin(self, statement: str) -> None:
        import psycopg
        conninfo = f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname=postgres"
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as connection:
            connection.execute(statement)

    def _run(self, *command: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run([*self.run_as, *command], cwd=self.base_dir, timeout=timeout,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)

    def init(self) -> None:
        result = self._run(str(self.bin_dir / "initdb"), "-D", str(self.data_dir),
                           "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-locale",
                           "--no-sync", timeout=120)
        _check(result, "initdb")

    def start(self) -> None:
        """Start on a free port; retries on another port if one was taken meanwhile."""
        began = time.monotonic()
        for _ in range(PORT_ATTEMPTS):
            self.port = _free_loopback_port()
            options = f"-p {self.port} -k {self.base_dir} {SERVER_SETTINGS}"
            result = self._run(
                str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir),
                "-l", str(self.log_file), "-w", "-t", str(START_TIMEOUT_SECONDS),
                "-o", options, "start", timeout=START_TIMEOUT_SECONDS + 30)
            if result.returncode == 0:
                self.start_seconds = time.monotonic() - began
                return
        _check(result, "pg_ctl start", self.log_file)

    def stop(self) -> None:
        result = self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir),
                           "-m", "fast", "-w", "-t", str(START_TIMEOUT_SECONDS), "stop",
                           timeout=START_TIMEOUT_SECONDS + 30)
        _check(result, "pg_ctl stop", self.log_file)


def find_bin_dir() -> Path:
    """The directory of initdb and pg_ctl: on PATH, else Debian's newest version."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    candidates = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if not candidates:
        raise PostgresUnavailable(
            "PostgreSQL server binaries not found (no initdb on PATH nor in "
            "/usr/lib/postgresql/*/bin): apt-get install -y postgresql")
    newest = max(candidates, key=lambda path: int(re.search(r"/(\d+)/bin/", path)[1]))
    return Path(newest).parent


def _run_as_prefix() -> tuple[tuple[str, ...], pwd.struct_passwd | None]:
    """How to run the server: as ourselves, or (under root) as the postgres user."""
    if os.geteuid() != 0:
        return (), None
    try:
        account = pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresUnavailable(
            "running as root and there is no 'postgres' user for initdb "
            "(apt-get install -y postgresql creates it)") from None
    return ("runuser", "-u", "postgres", "--"), account


def start_server() -> PostgresServer:
    """initdb and start a server in a new temporary directory."""
    bin_dir = find_bin_dir()
    run_as, account = _run_as_prefix()
    base_dir = Path(tempfile.mkdtemp(prefix="warren-pg-"))
    if account is not None:
        os.chown(base_dir, account.pw_uid, account.pw_gid)
    server = PostgresServer(bin_dir=bin_dir, base_dir=base_dir, run_as=run_as)
    try:
        server.init()
        server.start()
    except BaseException:
        if (server.data_dir / "postmaster.pid").exists():
            with contextlib.suppress(PostgresUnavailable, subprocess.SubprocessError):
                server.stop()
        shutil.rmtree(base_dir, ignore_errors=True)
        raise
    return server


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server for the whole session (started on first use)."""
    server = start_server()
    try:
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(server.base_dir, ignore_errors=True)


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _check(result: subprocess.CompletedProcess, what: str, log_file: Path | None = None):
    if result.returncode == 0:
        return
    log = log_file.read_text(errors="replace") if log_file and log_file.exists() else ""
    raise PostgresUnavailable(
        f"{what} failed with exit code {result.returncode}:\n{result.stdout}"
        f"{result.stderr}{log}")
