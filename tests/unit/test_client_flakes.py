"""The client-flake rule of tests/support/client_flakes.py, without Go: `go test -v` outputs are
made here, reruns are answered by a fake, and the verdict is checked."""

import pytest

from tests.support.client_flakes import (ClientFlake, ClientRace, GoTestRun, SuiteFailed, flake_lines,
                           judge_go_run)

RACY = "TestRacyInsideTheClient"
ON_THE_BROKER = "TestRacyAgainstTheBroker"
SELECTED = ["TestOne", "TestTwo", RACY, ON_THE_BROKER]
RACES = {
    RACY: ClientRace(reference="client_test.go:1", race="a 1 ms wait",
                     seen_against_rabbitmq="a RabbitMQ run",
                     accepted_against_warren="never talks to the broker"),
    ON_THE_BROKER: ClientRace(reference="issue 1", race="a close racing a publish",
                              seen_against_rabbitmq="a RabbitMQ run"),
}
RABBITMQ = "RabbitMQ 3.10.8"
WARREN = "Warren"


def go_output(passed=(), failed=()) -> str:
    """What a test binary run with -test.v prints for these results."""
    lines = []
    for name in passed:
        lines += [f"=== RUN   {name}", f"--- PASS: {name} (0.01s)"]
    for name in failed:
        lines += [f"=== RUN   {name}", f"    client_test.go:628: expected to close",
                  f"--- FAIL: {name} (0.00s)"]
    lines.append("FAIL" if failed else "PASS")
    return "\n".join(lines) + "\n"


def run_of(passed=(), failed=(), exit_status=None) -> GoTestRun:
    if exit_status is None:
        exit_status = 1 if failed else 0
    return GoTestRun(exit_status, go_output(passed, failed))


class Reruns:
    """Answers each rerun with a run where that test passes (or fails) alone."""

    def __init__(self, passing: bool = True):
        self.passing = passing
        self.asked: list[str] = []

    def __call__(self, name: str) -> GoTestRun:
        self.asked.append(name)
        return run_of(passed=[name]) if self.passing else run_of(failed=[name])


def everything_but(*names):
    return [name for name in SELECTED if name not in names]


def test_the_result_lines_name_top_level_tests_and_subtests_count_for_theirs():
    run = GoTestRun(1, "--- PASS: TestA (0.00s)\n--- FAIL: TestB (0.10s)\n"
                       "    --- FAIL: TestB/with_a_subtest (0.00s)\n"
                       "=== RUN   TestC\n--- SKIP: TestC (0.00s)\n")
    assert (run.results("PASS"), run.results("FAIL"), run.results("SKIP")) == (
        {"TestA"}, {"TestB"}, {"TestC"})


def test_a_run_where_every_test_passed_has_no_flakes_and_reruns_nothing():
    reruns = Reruns()
    assert judge_go_run("client", SELECTED, run_of(passed=SELECTED), reruns, RACES,
                        WARREN) == []
    assert reruns.asked == []


def test_a_listed_race_that_fails_once_is_rerun_alone_and_reported_as_a_flake():
    reruns = Reruns()
    run = run_of(passed=everything_but(RACY), failed=[RACY])
    flakes = judge_go_run("amqp091-go", SELECTED, run, reruns, RACES, RABBITMQ)
    assert reruns.asked == [RACY]
    assert flakes == [ClientFlake("amqp091-go", RACY, "client_test.go:1", RABBITMQ)]
    assert flakes[0].line == (f"CLIENT FLAKE: amqp091-go {RACY} (client_test.go:1) failed "
                              f"once against {RABBITMQ}, passed on rerun")


def test_a_listed_race_that_fails_twice_fails_the_run():
    run = run_of(passed=everything_but(RACY), failed=[RACY])
    with pytest.raises(SuiteFailed, match=f"{RACY} failed twice"):
        judge_go_run("client", SELECTED, run, Reruns(passing=False), RACES, RABBITMQ)


def test_a_rerun_that_ran_other_tests_or_exited_non_zero_is_no_pass():
    assert run_of(passed=[RACY]).passed_alone(RACY)
    assert not run_of(passed=[RACY, "TestOne"]).passed_alone(RACY)
    assert not run_of(passed=[RACY], exit_status=1).passed_alone(RACY)   # e.g. goleak
    assert not run_of(passed=[]).passed_alone(RACY)


def test_a_failed_test_that_is_not_listed_fails_the_run_and_nothing_is_rerun():
    reruns = Reruns()
    run = run_of(passed=everything_but("TestOne", RACY), failed=["TestOne", RACY])
    with pytest.raises(SuiteFailed, match=r"failed: \['TestOne'\]"):
        judge_go_run("client", SELECTED, run, reruns, RACES, RABBITMQ)
    assert reruns.asked == []


def test_a_race_seen_only_against_rabbitmq_that_fails_against_warren_fails_the_run():
    reruns = Reruns()
    run = run_of(passed=everything_but(ON_THE_BROKER), failed=[ON_THE_BROKER])
    with pytest.raises(SuiteFailed, match=ON_THE_BROKER):
        judge_go_run("client", SELECTED, run, reruns, RACES, WARREN)
    assert reruns.asked == []
    # the same failure against RabbitMQ is the client's
    assert len(judge_go_run("client", SELECTED, run, reruns, RACES, RABBITMQ)) == 1


def test_a_race_whose_entry_accepts_warren_is_a_flake_against_warren_and_nothing_else():
    run = run_of(passed=everything_but(RACY), failed=[RACY])
    assert len(judge_go_run("client", SELECTED, run, Reruns(), RACES, WARREN)) == 1
    with pytest.raises(SuiteFailed):
        judge_go_run("client", SELECTED, run, Reruns(), RACES, "SomeOtherBroker 1.0")


def test_two_listed_races_failing_in_one_run_are_rerun_each_alone():
    reruns = Reruns()
    run = run_of(passed=everything_but(RACY, ON_THE_BROKER), failed=[RACY, ON_THE_BROKER])
    flakes = judge_go_run("client", SELECTED, run, reruns, RACES, RABBITMQ)
    assert sorted(reruns.asked) == sorted([RACY, ON_THE_BROKER])
    assert {flake.test for flake in flakes} == {RACY, ON_THE_BROKER}


def test_tests_that_did_not_run_fail_the_run_even_beside_a_listed_race():
    # a panic or a timeout ends the binary: the tests after it have no result line
    run = run_of(passed=["TestOne"], failed=[RACY])
    with pytest.raises(SuiteFailed, match="not run: .*TestTwo"):
        judge_go_run("client", SELECTED, run, Reruns(), RACES, RABBITMQ)


def test_a_non_zero_exit_with_no_failed_test_fails_the_run():
    # e.g. the suite's goroutine leak check after its tests, which names no test
    run = run_of(passed=SELECTED, exit_status=1)
    with pytest.raises(SuiteFailed, match="exit status 1 with no failed test"):
        judge_go_run("client", SELECTED, run, Reruns(), RACES, RABBITMQ)


def test_a_race_needs_its_reference_its_explanation_and_its_rabbitmq_evidence():
    with pytest.raises(ValueError):
        ClientRace(reference="client_test.go:1", race="a 1 ms wait", seen_against_rabbitmq="")
    with pytest.raises(ValueError):
        ClientRace(reference="", race="a 1 ms wait", seen_against_rabbitmq="a RabbitMQ run")
    with pytest.raises(ValueError):
        ClientRace(reference="client_test.go:1", race="", seen_against_rabbitmq="a run")


class Report:
    def __init__(self, when, user_properties):
        self.when, self.user_properties = when, user_properties


def test_the_session_summary_counts_each_flake_once_from_its_call_report():
    line = "CLIENT FLAKE: client TestX (ref) failed once against Warren, passed on rerun"
    properties = [("client_flake", line), ("other", "value")]
    reports = [Report("setup", []), Report("call", properties),
               Report("teardown", properties), object()]   # (a warning report has no phase)
    assert flake_lines(reports) == [line]
