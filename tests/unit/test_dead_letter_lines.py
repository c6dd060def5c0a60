"""The x-death bookkeeping of dead-lettering under each RabbitMQ line: 3.10 reads the
x-death header a client published as the message's history; 4.0 and 4.3 read only the
history the broker wrote (a DeadLetteredMessage) and add x-last-death-*. What the real
nodes answered is in tests/integration/test_dead_lettering.py's line tests."""

import datetime

import pytest
from pamqp import commands

from amqp_codec import decode_properties, encode_properties
from broker.core.dead_letter import dead_letter_message, out_of_cycles
from broker.core.message import (DeadLetteredMessage, Message, PagedOutPlaceholders,
                                 SenderRoutedMessage)
from broker.core.rabbitmq_lines import LINE_3_10, LINE_4_0, LINE_4_3

NOW = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)
LINES_4 = [LINE_4_0, LINE_4_3]


def headers(message: Message) -> dict:
    """The message's headers, without the x-death entries' times."""
    found = dict(decode_properties(message.properties).headers or {})
    if "x-death" in found:
        found["x-death"] = [{key: value for key, value in death.items() if key != "time"}
                            for death in found["x-death"]]
    return found


def death(queue: str, reason: str, count: int, exchange: str = "",
          routing_keys: tuple = ()) -> dict:
    return {"count": count, "queue": queue, "reason": reason, "exchange": exchange,
            "routing-keys": list(routing_keys or [queue])}


def published(**header_values) -> Message:
    """A message a client published to the default exchange with routing key 'work'."""
    properties = encode_properties(commands.Basic.Properties(headers=header_values))
    return Message("", "work", properties, b"m")


def rejected_from_work(message: Message, line) -> DeadLetteredMessage | None:
    """The message rejected from queue 'work', dead-lettered to 'dlx' with key 'dead'."""
    return dead_letter_message(message, "work", "rejected", "dlx", "dead", NOW, line)


def test_the_first_death_under_3_10_sets_no_last_death_headers():
    dead = rejected_from_work(published(app="x"), LINE_3_10)
    assert headers(dead) == {
        "app": "x", "x-death": [death("work", "rejected", 1, routing_keys=("work",))],
        "x-first-death-reason": "rejected", "x-first-death-queue": "work",
        "x-first-death-exchange": ""}


@pytest.mark.parametrize("line", LINES_4, ids=lambda line: line.name)
def test_the_first_death_under_4_x_sets_the_last_death_headers_too(line):
    dead = rejected_from_work(published(app="x"), line)
    assert headers(dead) == {
        "app": "x", "x-death": [death("work", "rejected", 1)],
        "x-first-death-reason": "rejected", "x-first-death-queue": "work",
        "x-first-death-exchange": "", "x-last-death-reason": "rejected",
        "x-last-death-queue": "work", "x-last-death-exchange": ""}


def republished(dead: Message) -> Message:
    """What a consumer re-publishes: the dead-lettered message's properties, as a new
    message of its own to queue 'work'."""
    return Message("", "work", dead.properties, dead.body)


def test_3_10_continues_the_count_of_a_republished_message():
    first = rejected_from_work(published(app="x"), LINE_3_10)
    again = rejected_from_work(republished(first), LINE_3_10)
    assert headers(again)["x-death"] == [death("work", "rejected", 2)]


@pytest.mark.parametrize("line", LINES_4, ids=lambda line: line.name)
def test_4_x_starts_a_fresh_history_for_a_republished_message(line):
    first = rejected_from_work(published(app="x"), line)
    again = rejected_from_work(republished(first), line)
    assert headers(again)["x-death"] == [death("work", "rejected", 1)]


CLIENT_HISTORY = {
    "x-death": [death("elsewhere", "expired", 5, "x", ("k",)),
                death("work", "rejected", 2)],
    "x-first-death-reason": "expired", "x-first-death-queue": "elsewhere",
    "x-first-death-exchange": "x", "x-last-death-reason": "maxlen",
    "x-last-death-queue": "q0", "x-last-death-exchange": "x0"}


def test_3_10_reads_a_client_history_and_keeps_its_first_and_last_death_headers():
    dead = rejected_from_work(published(**CLIENT_HISTORY), LINE_3_10)
    assert headers(dead) == {**CLIENT_HISTORY, "x-death": [
        death("work", "rejected", 3), death("elsewhere", "expired", 5, "x", ("k",))]}


@pytest.mark.parametrize("line", LINES_4, ids=lambda line: line.name)
def test_4_x_replaces_a_client_history_and_its_first_and_last_death_headers(line):
    dead = rejected_from_work(published(**CLIENT_HISTORY), line)
    assert headers(dead) == {
        "x-death": [death("work", "rejected", 1)],
        "x-first-death-reason": "rejected", "x-first-death-queue": "work",
        "x-first-death-exchange": "", "x-last-death-reason": "rejected",
        "x-last-death-queue": "work", "x-last-death-exchange": ""}


@pytest.mark.parametrize("line", LINES_4, ids=lambda line: line.name)
def test_4_x_counts_on_in_a_cycle_of_the_broker_own(line):
    """work -(rejected)-> dlx -> 'dead' -(expired)-> back to work, twice: the history the
    broker wrote goes on; x-first-death stays the first, x-last-death follows."""
    message = published(app="y")
    for _ in range(2):
        message = rejected_from_work(message, line)
        message = dead_letter_message(message, "dead", "expired", "dlx", "work", NOW, line)
    assert headers(message) == {
        "app": "y",
        "x-death": [death("dead", "expired", 2, "dlx", ("dead",)),
                    death("work", "rejected", 2)],
        "x-first-death-reason": "rejected", "x-first-death-queue": "work",
        "x-first-death-exchange": "", "x-last-death-reason": "expired",
        "x-last-death-queue": "dead", "x-last-death-exchange": "dlx"}


class Named:
    """A queue the dead-lettered message is routed to, as out_of_cycles sees it."""

    def __init__(self, name: str):
        self.name = name


def entered(message: Message, *queues: str) -> list[str]:
    """Which of `queues` the dead-lettered `message` may enter (out_of_cycles)."""
    return [queue.name for queue in out_of_cycles(message, [Named(name) for name in queues])]


def test_3_10_a_client_history_can_close_a_cycle():
    message = published(**{"x-death": [death("work", "expired", 1)]})
    dead = dead_letter_message(message, "wait", "expired", "dlx", "work", NOW, LINE_3_10)
    assert entered(dead, "work", "log") == ["log"]


@pytest.mark.parametrize("line", LINES_4, ids=lambda line: line.name)
def test_4_x_sees_no_cycle_in_a_client_history(line):
    message = published(**{"x-death": [death("work", "expired", 1)]})
    dead = dead_letter_message(message, "wait", "expired", "dlx", "work", NOW, line)
    assert headers(dead)["x-death"] == [death("wait", "expired", 1, "", ("work",))]
    assert entered(dead, "work", "log") == ["work", "log"]


@pytest.mark.parametrize("line", [LINE_3_10, *LINES_4], ids=lambda line: line.name)
def test_a_cycle_is_the_deaths_back_to_the_target_queue(line):
    """Dropped for a target queue in the history when no death from the newest to that
    queue's is a rejection; one before it does not count (RabbitMQ's is_cycle)."""
    message = published()
    message = dead_letter_message(message, "work", "expired", "", "work", NOW, line)
    assert entered(message, "work") == []                    # into itself at once
    message = rejected_from_work(published(), line)          # [work rejected]
    message = dead_letter_message(message, "a", "expired", "", "b", NOW, line)
    message = dead_letter_message(message, "b", "maxlen", "", "a", NOW, line)
    assert entered(message, "a", "b", "work") == ["work"]    # [b, a] automatic
    message = dead_letter_message(message, "work", "rejected", "", "b", NOW, line)
    assert entered(message, "a", "b", "work") == ["a", "b", "work"]


def test_the_mark_survives_paging_and_new_delivery_counts():
    """The copies a queue makes of a message it holds (a placeholder while the body is
    paged out, the body read back, a quorum queue's counts) stay the broker's."""
    dead = rejected_from_work(published(), LINE_4_3)
    placeholder = PagedOutPlaceholders().placeholder(
        dead.exchange, dead.routing_key, dead.properties, 1, dead.dead_lettered())
    copies = [placeholder, placeholder.with_body(b"m"), dead.with_properties(b"\x00\x00"),
              placeholder.with_properties(b"\x00\x00")]
    assert [copy.dead_lettered() for copy in copies] == [True] * 4
    assert not published().with_properties(b"\x00\x00").dead_lettered()


@pytest.mark.parametrize("line, keys", [(LINE_3_10, ["k1", "k2", "k2"]),
                                        (LINE_4_0, ["k2", "k2", "k1"]),
                                        (LINE_4_3, ["k2", "k2", "k1"])],
                         ids=lambda value: getattr(value, "name", ""))
def test_the_death_records_the_routing_keys_by_the_lines_rule(line, keys):
    """Key k1, CC [k2, k2], BCC [k3, k1] (the CC header stays, BCC was taken out): 4.x
    takes the first occurrence of each BCC key out of [k1, k2, k2, k3, k1]."""
    properties = encode_properties(commands.Basic.Properties(headers={"CC": ["k2", "k2"]}))
    message = SenderRoutedMessage("", "k1", properties, b"m", ("k2", "k2", "k3", "k1"))
    dead = dead_letter_message(message, "work", "rejected", "dlx", "dlk", NOW, line)
    assert headers(dead)["x-death"][0]["routing-keys"] == keys
