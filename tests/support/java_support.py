"""Compile and run the RabbitMQ Java client programs of interop/java/ for the interop tests.

The programs are compiled once per test session with javac into a temporary directory
(the `java_programs` fixture); nothing prebuilt is used. Each program takes the broker's
host and port, prints `RESULT key=value` lines, `FAIL reason` on a failed check, and
exits non-zero on failure. The client is Debian's librabbitmq-client-java (5.0.0).

Test modules import the fixture by name:
    from tests.support.java_support import java_programs  # noqa: F401  (fixture)
"""

import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.support.interop_programs import ProgramRun, parse_results, run_program

SOURCE_DIR = Path(__file__).resolve().parents[2] / "interop" / "java"
JAVA_LIB = Path("/usr/share/java")
# Needed to compile and run; slf4j-simple is optional and only sends client logs to stderr.
REQUIRED_JARS = [JAVA_LIB / "amqp-client.jar", JAVA_LIB / "slf4j-api.jar"]
OPTIONAL_JARS = [JAVA_LIB / "slf4j-simple.jar"]
COMPILE_TIMEOUT = 120.0
RUN_TIMEOUT = 30.0
JVM_OPTIONS = ["-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]


class JavaProcess:
    """An interactive program: read its stdout line by line, write lines to its stdin."""

    def __init__(self, command: list):
        self.command = command
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.stdout_lines: list = []
        self.stderr_lines: list = []
        self._readers = [
            threading.Thread(target=self._pump, args=(self.process.stdout, True), daemon=True),
            threading.Thread(target=self._pump, args=(self.process.stderr, False), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _pump(self, stream, is_stdout: bool) -> None:
        for line in stream:
            if is_stdout:
                self.stdout_lines.append(line)
                self.lines.put(line.rstrip("\n"))
            else:
                self.stderr_lines.append(line)
        if is_stdout:
            self.lines.put(None)   # end of output

    def expect(self, wanted: str, timeout: float) -> None:
        """Wait until the program prints the line `wanted`; fail after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(remaining, 0))
            except queue.Empty:
                raise AssertionError(f"no line {wanted!r} within {timeout} s\n"
                                     + self.snapshot().describe()) from None
            if line is None:
                self.process.wait(timeout=5)
                raise AssertionError(f"program ended before printing {wanted!r}\n"
                                     + self.snapshot().describe())
            if line == wanted:
                return

    def send_line(self, line: str) -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def finish(self, timeout: float) -> ProgramRun:
        """Wait for the program to exit (killing it after `timeout`) and return its results;
        fails unless it exited with status 0."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"program still running after {timeout} s\n"
                                 + self.snapshot().describe()) from None
        for reader in self._readers:
            reader.join(timeout=5)
        run = self.snapshot()
        assert run.returncode == 0, run.describe()
        return run

    def snapshot(self) -> ProgramRun:
        stdout = "".join(self.stdout_lines)
        return ProgramRun(self.command, self.process.returncode, stdout, "".join(self.stderr_lines),
                       parse_results(stdout.splitlines()))

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


class JavaPrograms:
    """The compiled programs; `run` one to completion or `start` an interactive one."""

    def __init__(self, classpath: str):
        self.classpath = classpath

    def command(self, main_class: str, broker, *args) -> list:
        return ["java", *JVM_OPTIONS, "-cp", self.classpath, main_class,
                broker.host, str(broker.port), *map(str, args)]

    def run(self, main_class: str, broker, *args, timeout: float = RUN_TIMEOUT) -> ProgramRun:
        """Run `main_class` against `broker` (anything with .host/.port); fails unless it
        exits with status 0 within `timeout` seconds."""
        return run_program(self.command(main_class, broker, *args), main_class, timeout)

    def start(self, main_class: str, broker, *args) -> JavaProcess:
        return JavaProcess(self.command(main_class, broker, *args))


def compile_programs(build_dir: Path) -> str:
    """Compile every interop/java/*.java into `build_dir`; return the run classpath."""
    for tool in ("javac", "java"):
        assert shutil.which(tool), f"{tool} not found: install a JDK (default-jdk-headless)"
    missing = [str(jar) for jar in REQUIRED_JARS if not jar.exists()]
    assert not missing, (f"missing {missing}: install the RabbitMQ Java client "
                         "(Debian: librabbitmq-client-java)")
    sources = sorted(str(path) for path in SOURCE_DIR.glob("*.java"))
    assert sources, f"no Java sources in {SOURCE_DIR}"
    jars = [str(jar) for jar in REQUIRED_JARS]
    done = subprocess.run(["javac", "-encoding", "UTF-8", "-d", str(build_dir),
                           "-cp", os.pathsep.join(jars), *sources],
                          capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
    assert done.returncode == 0, f"javac failed:\n{done.stdout}\n{done.stderr}"
    jars += [str(jar) for jar in OPTIONAL_JARS if jar.exists()]
    return os.pathsep.join([str(build_dir), *jars])


@pytest.fixture(scope="session")
def java_programs(tmp_path_factory) -> JavaPrograms:
    """The interop/java programs, compiled once per session."""
    return JavaPrograms(compile_programs(tmp_path_factory.mktemp("java-classes")))
