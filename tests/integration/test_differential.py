"""The differential sweep: every scenario of differential_scenarios.py played against
Warren (its own broker) and RabbitMQ (the `rabbitmq_node` fixture: WARREN_TEST_BROKER or
a throw-away node) in the same test; the transcripts must agree method by method, except
where a scenario declares a documented difference."""

import pytest

from tests.support.differential import differences_between, play
from tests.support.differential_scenarios import SCENARIOS


@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_warren_answers_as_rabbitmq(scenario, warren_node, rabbitmq_node):
    warren = play(scenario, warren_node)
    rabbitmq = play(scenario, rabbitmq_node)
    found = differences_between(scenario, warren, rabbitmq)
    if scenario.unfixed:
        assert found, f"{scenario}: Warren now answers as RabbitMQ: drop unfixed= " \
                      f"({scenario.unfixed}) and its entry in docs/compatibility.md"
        return
    assert not found, f"{scenario}: Warren differs from RabbitMQ\n" + "\n".join(found)
