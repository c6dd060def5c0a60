"""Running the client interop programs (Java, Go): they print `RESULT key=value` lines,
exit 0 on success, and the tests assert on the results."""

import subprocess
from dataclasses import dataclass, field


def parse_results(lines) -> dict:
    """`RESULT key=value` lines as a dict of strings (the value is the rest of the line)."""
    results = {}
    for line in lines:
        if line.startswith("RESULT "):
            key, _, value = line[len("RESULT "):].partition("=")
            results[key] = value
    return results


@dataclass
class ProgramRun:
    """A finished program: exit code, output, and its RESULT lines as `results`."""

    command: list
    returncode: int
    stdout: str
    stderr: str
    results: dict = field(default_factory=dict)

    def __getitem__(self, key: str) -> str:
        assert key in self.results, f"no RESULT {key}=...\n{self.describe()}"
        return self.results[key]

    def as_int(self, key: str) -> int:
        return int(self[key])

    def describe(self) -> str:
        return (f"command: {' '.join(self.command)}\nexit code: {self.returncode}\n"
                f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr[-8000:]}")


def run_program(command: list, name: str, timeout: float) -> ProgramRun:
    """Run `command` to completion; fails unless it exits with status 0 in time."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as expired:
        run = ProgramRun(command, -1, output_text(expired.stdout),
                         output_text(expired.stderr))
        raise AssertionError(f"{name} still running after {timeout} s\n"
                             + run.describe()) from None
    run = ProgramRun(command, done.returncode, done.stdout, done.stderr,
                     parse_results(done.stdout.splitlines()))
    assert run.returncode == 0, run.describe()
    return run


def output_text(data) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
