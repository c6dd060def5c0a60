"""Client flakes: a test of a third-party client's own suite (amqp091-go's, run by
tests/integration/test_go_client_suite.py) that fails now and then because of a race
inside the client, not because of the broker.

Such a test must neither turn a run red nor be hidden. The suite's module lists each known
race (`ClientRace`: the test, the upstream reference showing the race is in the client,
the evidence that it fails against RabbitMQ). `judge_go_run` reads a `go test -v` run:
every selected test passed, or the only failures are listed races accepted against this
broker, each run again once alone and passing then; anything else fails. Each accepted
flake is a `ClientFlake`, printed as a `CLIENT FLAKE: ...` line and recorded on the test's
report (`record`), and tests/conftest.py lists and counts them at the end of the session
(and in the file named by WARREN_CLIENT_FLAKES, which scripts/test.sh reads for its
per-run count).

Which broker a flake is accepted against: a race inside the client shows against RabbitMQ
too, so every entry names a RabbitMQ run it failed in. A failure against Warren is accepted
only when the entry says why that run cannot be the broker's fault either (the test never
talks to the broker); a listed test that fails against Warren without that is a Warren bug
until it is shown failing against RabbitMQ, and fails the run (docs/testing.md,
"Client flakes").
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pytest

# The user property that carries a flake's line from a pytest-xdist worker to the
# controller's terminal summary.
USER_PROPERTY = "client_flake"
LINE_PREFIX = "CLIENT FLAKE: "

# `go test -v`'s result lines, "--- FAIL: TestName (0.01s)"; a subtest's is indented and
# named "TestName/sub", and counts for its top-level test.
_RESULT_LINE = re.compile(r"^\s*--- (PASS|FAIL|SKIP): ([^\s/]+)", re.MULTILINE)


@dataclass(frozen=True)
class ClientRace:
    """A test of a client's own suite known to fail now and then through a race inside
    the client. `reference`: the upstream issue or pull request, or the test's source
    file:line when there is none; `race`: the race, in one sentence; `seen_against_rabbitmq`:
    the RabbitMQ run it failed in (the evidence that the race is the client's);
    `accepted_against_warren`: why a failure in a run against Warren cannot be Warren's
    either, or "" when it can."""

    reference: str
    race: str
    seen_against_rabbitmq: str
    accepted_against_warren: str = ""

    def __post_init__(self):
        if not (self.reference and self.race and self.seen_against_rabbitmq):
            raise ValueError("a client race needs its upstream reference, the race and the "
                             "RabbitMQ run it failed in")

    def accepted_against(self, broker_product: str) -> bool:
        """Whether one failure of this test in a run against `broker_product` ("RabbitMQ
        3.10.8", "Warren") may be taken for the client's race."""
        if broker_product.startswith("RabbitMQ"):
            return True
        return broker_product.startswith("Warren") and bool(self.accepted_against_warren)


@dataclass(frozen=True)
class GoTestRun:
    """One run of a Go test binary with -test.v: its exit status and its output."""

    exit_status: int
    output: str

    def results(self, outcome: str) -> set[str]:
        """The top-level tests whose result line says `outcome` (PASS, FAIL or SKIP)."""
        return {name for result, name in _RESULT_LINE.findall(self.output)
                if result == outcome}

    def passed_alone(self, test: str) -> bool:
        """It ran `test` alone, and `test` passed."""
        return (self.exit_status == 0 and self.results("PASS") == {test}
                and not self.results("FAIL"))


@dataclass(frozen=True)
class ClientFlake:
    """A listed test that failed once and passed when run again alone."""

    client: str
    test: str
    reference: str
    broker_product: str

    @property
    def line(self) -> str:
        return (f"{LINE_PREFIX}{self.client} {self.test} ({self.reference}) failed once "
                f"against {self.broker_product}, passed on rerun")


class SuiteFailed(AssertionError):
    """The client's suite failed for a reason other than an accepted client flake."""


def judge_go_run(client: str, selected: Sequence[str], run: GoTestRun,
                 rerun: Callable[[str], GoTestRun], races: Mapping[str, ClientRace],
                 broker_product: str) -> list[ClientFlake]:
    """The flakes of a run of the `selected` tests of `client`'s suite against
    `broker_product`, [] when every test passed. Only failed tests listed in `races` and
    accepted against this broker are run again, once each, alone (`rerun(name)`); raises
    SuiteFailed when any other test failed or did not run, when the run failed with no
    failed test (a panic, a timeout, the suite's own checks after its tests), or when a
    rerun failed too."""
    failed = run.results("FAIL")
    not_run = set(selected) - run.results("PASS") - failed
    if not_run:
        raise SuiteFailed(f"not run: {sorted(not_run)}\n{run.output[-6000:]}")
    if not failed:
        if run.exit_status != 0:
            raise SuiteFailed(f"exit status {run.exit_status} with no failed test\n"
                              f"{run.output[-6000:]}")
        return []
    not_accepted = sorted(name for name in failed
                          if name not in races or not races[name].accepted_against(broker_product))
    if not_accepted:
        raise SuiteFailed(f"failed: {not_accepted}\n{run.output[-6000:]}")
    flakes = []
    for name in sorted(failed):
        again = rerun(name)
        if not again.passed_alone(name):
            raise SuiteFailed(f"{name} failed twice (a known client race, "
                              f"{races[name].reference}: {races[name].race}), the second "
                              f"time alone:\n"
                              f"{again.output[-6000:]}")
        flakes.append(ClientFlake(client, name, races[name].reference, broker_product))
    return flakes


def record(request: pytest.FixtureRequest, flakes: Sequence[ClientFlake]) -> None:
    """Print each flake's line and attach it to the test's report, for the session's
    summary (tests/conftest.py)."""
    for flake in flakes:
        print(flake.line)
        request.node.user_properties.append((USER_PROPERTY, flake.line))


def flake_lines(reports) -> list[str]:
    """The flake lines recorded on these test reports (on the call phase's: the teardown's
    report carries the test's user properties too)."""
    return [value for report in reports if getattr(report, "when", None) == "call"
            for name, value in report.user_properties if name == USER_PROPERTY]
