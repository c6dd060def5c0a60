"""The differential sweep: every scenario of differential_scenarios.py played, under each
RabbitMQ line (`compared_lines`), against Warren behaving as that line
(its own broker) and RabbitMQ of that line (the `rabbitmq_nodes` fixture:
WARREN_TEST_BROKER or a throw-away node) in the same test; the transcripts must agree
method by method, except where a scenario declares a documented difference."""

import pytest

from tests.support.differential import compared_lines, differences_between, play
from tests.support.differential_scenarios import SCENARIOS


@pytest.mark.parametrize("line, scenario", [
    (line, scenario) for line in compared_lines() for scenario in SCENARIOS],
    ids=lambda value: f"rabbitmq-{value}" if isinstance(value, str) else str(value))
def test_warren_answers_as_rabbitmq(line, scenario, warren_nodes, rabbitmq_nodes):
    warren = play(scenario, warren_nodes(line))
    rabbitmq = play(scenario, rabbitmq_nodes(line))
    found = differences_between(scenario, warren, rabbitmq, line)
    if scenario.unfixed:
        assert found, f"{scenario}: Warren now answers as RabbitMQ: drop unfixed= " \
                      f"({scenario.unfixed}) and its entry in docs/compatibility.md"
        return
    assert not found, f"{scenario}: Warren differs from RabbitMQ\n" + "\n".join(found)
