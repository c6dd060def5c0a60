"""Build and run the rabbitmq/amqp091-go interop program of interop/go/ for the interop tests.

The program is built once per test session with `go build` into a temporary directory
(the `go_interop` fixture), with the Go build cache in another temporary directory;
nothing prebuilt is used. It builds offline in GOPATH mode against Debian's
golang-github-rabbitmq-amqp091-go-dev (client 1.5.0, source under /usr/share/gocode).
`warren-go-interop SCENARIO HOST PORT [COUNT]` prints `RESULT key=value` lines, then
`DONE SCENARIO`; on a failed check `FAIL SCENARIO: reason`, and exits non-zero.

Test modules import the fixture by name:
    from tests.support.go_support import go_interop  # noqa: F401  (fixture)
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.interop_programs import ProgramRun, run_program

SOURCE_DIR = Path(__file__).resolve().parents[2] / "interop" / "go"
GOPATH = Path("/usr/share/gocode")
CLIENT_SOURCE = GOPATH / "src" / "github.com" / "rabbitmq" / "amqp091-go"
BUILD_TIMEOUT = 180.0
RUN_TIMEOUT = 30.0


class GoInterop:
    """The built program; `run` one scenario to completion."""

    def __init__(self, binary: Path):
        self.binary = binary

    def run(self, scenario: str, broker, *args, timeout: float = RUN_TIMEOUT) -> ProgramRun:
        """Run `scenario` against `broker` (anything with .host/.port); fails unless it
        exits with status 0 within `timeout` seconds."""
        command = [str(self.binary), scenario, broker.host, str(broker.port), *map(str, args)]
        run = run_program(command, scenario, timeout)
        assert f"DONE {scenario}" in run.stdout.splitlines(), run.describe()
        return run


def build_program(build_dir: Path) -> Path:
    """`go build` interop/go into build_dir, offline; return the binary's path."""
    binary = build_dir / "warren-go-interop"
    _go(["build", "-o", str(binary), "."], SOURCE_DIR, build_dir)
    return binary


def build_client_tests(build_dir: Path) -> Path:
    """`go test -c` amqp091-go's own tests with its `integration` build tag (Debian
    ships them with the client's source) into build_dir; return the test binary."""
    binary = build_dir / "amqp091-go.test"
    _go(["test", "-c", "-tags", "integration", "-o", str(binary),
         "github.com/rabbitmq/amqp091-go"], build_dir, build_dir)
    return binary


def _go(arguments: list[str], cwd: Path, build_dir: Path) -> None:
    """Run the go command offline in GOPATH mode, with its cache in build_dir."""
    go = shutil.which("go")
    assert go, "go not found: install Debian's golang-go"
    assert (CLIENT_SOURCE / "channel.go").exists(), (
        f"missing {CLIENT_SOURCE}: install Debian's golang-github-rabbitmq-amqp091-go-dev")
    env = {
        **os.environ,
        "GO111MODULE": "off",        # GOPATH mode: imports come from Debian's gocode tree
        "GOPATH": str(GOPATH),
        "GOCACHE": str(build_dir / "gocache"),
        "GOFLAGS": "",
        "GOPROXY": "off",            # never reach for the network
        "GOTOOLCHAIN": "local",      # newer go commands: never download a toolchain
        "GOENV": "off",              # ignore the user's `go env -w` settings
        "CGO_ENABLED": "0",          # no C compiler needed
    }
    done = subprocess.run([go, *arguments], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=BUILD_TIMEOUT)
    assert done.returncode == 0, f"go {arguments[0]} failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="session")
def go_interop(tmp_path_factory) -> GoInterop:
    """The interop/go program, built once per session."""
    return GoInterop(build_program(tmp_path_factory.mktemp("go-build")))
