"""Message TTL, length limits and dead-lettering, as a pika user sees them."""

import time

import pika
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn: fixtures)
    _test_deadline, chan, conn, exclusive_queue, expect_channel_error, get_all,
    publish_bodies, unique, wait_for_bodies,
)


def dead_letter_setup(channel, **arguments):
    """A server-named dead-letter queue and a work queue that dead-letters into it."""
    dead = exclusive_queue(channel)
    work = channel.queue_declare(unique("work"), exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead,
        **arguments}).method.queue
    return work, dead


def test_expired_messages_move_to_the_dead_letter_queue_on_their_own(chan):
    work, dead = dead_letter_setup(chan, **{"x-message-ttl": 50})
    publish_bodies(chan, "", work, ["late"])
    assert wait_for_bodies(chan, dead, 1) == ["late"]
    assert get_all(chan, work) == []


def wait_for_message(channel, queue, timeout=10.0, auto_ack=True):
    """Basic.Get until a message arrives or `timeout` passes: (method, properties, body)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, properties, body = channel.basic_get(queue, auto_ack=auto_ack)
        if method is not None:
            return method, properties, body
        channel.connection.process_data_events(time_limit=0.01)
    raise AssertionError(f"no message in {queue} within {timeout} s")


def test_x_death_header_describes_the_expiry(chan):
    work, dead = dead_letter_setup(chan)
    chan.basic_publish("", work, b"m", pika.BasicProperties(expiration="20"))
    _method, properties, body = wait_for_message(chan, dead)
    (death,) = properties.headers["x-death"]
    assert (body, death["queue"], death["reason"], death["count"]) == (
        b"m", work, "expired", 1)
    assert death["original-expiration"] == "20"
    assert properties.expiration is None
    assert properties.headers["x-first-death-reason"] == "expired"


def test_rejected_messages_are_dead_lettered(chan):
    work, dead = dead_letter_setup(chan)
    publish_bodies(chan, "", work, ["a", "b"])
    method, _, _ = chan.basic_get(work)
    chan.basic_reject(method.delivery_tag, requeue=False)
    method, _, _ = chan.basic_get(work)
    chan.basic_nack(method.delivery_tag, requeue=False)
    assert [(body, props.headers["x-death"][0]["reason"])
            for _, props, body in get_all(chan, dead)] == [(b"a", "rejected"),
                                                           (b"b", "rejected")]


def deaths(headers: dict) -> list:
    """The x-death entries as (queue, reason, count), newest first."""
    return [(death["queue"], death["reason"], death["count"])
            for death in headers.get("x-death", [])]


def death_headers(headers: dict, which: str) -> tuple:
    """x-first-death-* or x-last-death-* (`which`): (reason, queue, exchange), or Nones."""
    return tuple(headers.get(f"x-{which}-death-{field}")
                 for field in ("reason", "queue", "exchange"))


def rejected_again_after_republish(channel) -> dict:
    """A message rejected into the dead-letter queue, which a consumer takes and
    re-publishes with its headers (its x-death too) to the same work queue, where it is
    rejected again: the headers the dead-letter queue's consumer then sees, and the work
    queue's name."""
    work, dead = dead_letter_setup(channel)
    properties = pika.BasicProperties(headers={"app": "x"})
    for republishing in (False, True):
        if republishing:
            assert deaths(properties.headers) == [(work, "rejected", 1)]
        channel.basic_publish("", work, b"m", properties)
        method, _, _ = wait_for_message(channel, work, auto_ack=False)
        channel.basic_reject(method.delivery_tag, requeue=False)
        _method, properties, _ = wait_for_message(channel, dead)
    return properties.headers, work


@pytest.mark.warren_rabbitmq("3.10")
def test_3_10_counts_on_from_the_x_death_of_a_republished_message(chan):
    """Measured on RabbitMQ 3.10.8: the client's x-death is the history."""
    headers, work = rejected_again_after_republish(chan)
    assert deaths(headers) == [(work, "rejected", 2)]
    assert death_headers(headers, "first") == ("rejected", work, "")
    assert death_headers(headers, "last") == (None, None, None)
    assert headers["app"] == "x"


LINES_4 = [pytest.param("4.0", marks=pytest.mark.warren_rabbitmq("4.0")),
           pytest.param("4.3", marks=pytest.mark.warren_rabbitmq("4.3"))]


@pytest.mark.parametrize("line", LINES_4)   # the vhost's line, by the marker
def test_4_x_starts_a_fresh_x_death_for_a_republished_message(chan, line):
    """Measured on RabbitMQ 4.0.5 and 4.3.6: a client's x-death is not read; the
    message's history starts again, and x-last-death-* name the death too."""
    headers, work = rejected_again_after_republish(chan)
    assert deaths(headers) == [(work, "rejected", 1)]
    assert death_headers(headers, "first") == ("rejected", work, "")
    assert death_headers(headers, "last") == ("rejected", work, "")
    assert headers["app"] == "x"


@pytest.mark.parametrize("line", LINES_4)
def test_4_x_counts_on_in_a_dead_letter_cycle_of_its_own(chan, line):
    """Rejected from `work` into `wait`, expired from `wait` back into `work`, twice, no
    client re-publishing: the history the broker keeps counts on (RabbitMQ 4.0.5 and
    4.3.6 alike)."""
    work = unique("work")
    wait = chan.queue_declare(unique("wait"), exclusive=True, arguments={
        "x-message-ttl": 20, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": work}).method.queue
    chan.queue_declare(work, exclusive=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": wait})
    chan.basic_publish("", work, b"m")
    for _ in range(2):
        method, _, _ = wait_for_message(chan, work, auto_ack=False)
        chan.basic_reject(method.delivery_tag, requeue=False)
    _method, properties, _ = wait_for_message(chan, work)
    headers = properties.headers
    assert deaths(headers) == [(wait, "expired", 2), (work, "rejected", 2)]
    assert death_headers(headers, "first") == ("rejected", work, "")
    assert death_headers(headers, "last") == ("expired", wait, "")


def test_an_automatic_cycle_ends_before_the_message_enters_a_queue_again(chan):
    """Expired from `first` into `second`, then from `second` towards `first` and `log`:
    the copy for `first` would close a cycle of expiries (no rejection in it) and is
    dropped, the copy for `log` (not in the history) is not: RabbitMQ 3.10.8, 4.0.5 and
    4.3.6 alike check the queue the message is routed to, per queue. The message passed
    through `first` and `second` once each and is gone (`first` has no TTL of its own:
    a copy that got there would stay)."""
    dlx, first, second, log = (unique(name) for name in ("dlx", "first", "second", "log"))
    chan.exchange_declare(dlx, "direct", auto_delete=True)
    chan.queue_declare(first, exclusive=True, arguments={
        "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "to-second"})
    chan.queue_declare(second, exclusive=True, arguments={
        "x-message-ttl": 10, "x-dead-letter-exchange": dlx,
        "x-dead-letter-routing-key": "to-first"})
    chan.queue_declare(log, exclusive=True)
    chan.queue_bind(first, dlx, "to-first")
    chan.queue_bind(second, dlx, "to-second")
    for key in ("to-first", "to-second"):
        chan.queue_bind(log, dlx, key)
    chan.basic_publish("", first, b"m", pika.BasicProperties(expiration="0"))
    copies = [wait_for_message(chan, log)[1].headers for _ in range(2)]
    assert [deaths(headers) for headers in copies] == [
        [(first, "expired", 1)], [(second, "expired", 1), (first, "expired", 1)]]
    assert get_all(chan, first) == [] and get_all(chan, second) == []
    assert get_all(chan, log) == []


def test_max_length_keeps_the_newest_and_dead_letters_the_rest(chan):
    work, dead = dead_letter_setup(chan, **{"x-max-length": 2})
    publish_bodies(chan, "", work, ["1", "2", "3", "4"])
    assert [body for _, _, body in get_all(chan, work)] == [b"3", b"4"]
    assert [body for _, _, body in get_all(chan, dead)] == [b"1", b"2"]


def test_reject_publish_overflow_nacks_the_publisher(chan):
    queue = chan.queue_declare(unique("full"), exclusive=True, arguments={
        "x-max-length": 1, "x-overflow": "reject-publish"}).method.queue
    chan.confirm_delivery()
    chan.basic_publish("", queue, b"fits")
    try:
        chan.basic_publish("", queue, b"refused")
        refused = False
    except pika.exceptions.NackError:
        refused = True
    assert refused
    assert [body for _, _, body in get_all(chan, queue)] == [b"fits"]


def test_invalid_queue_argument_is_406(conn, chan):
    error = expect_channel_error(conn, chan, 406, lambda: chan.queue_declare(
        unique("bad"), arguments={"x-max-length": -1}))
    assert "x-max-length" in error.reply_text


def test_x_expires_removes_an_unused_queue(conn, chan):
    # Publishing does not count as use (a passive declare would renew the lease), so
    # the test watches for its mandatory publishes to start coming back unroutable.
    queue = unique("expiring")
    chan.queue_declare(queue, arguments={"x-expires": 100})
    chan.confirm_delivery()
    deadline = time.monotonic() + 10
    gone = False
    while not gone and time.monotonic() < deadline:
        try:
            chan.basic_publish("", queue, b"probe", mandatory=True)
            conn.process_data_events(time_limit=0.05)
        except pika.exceptions.UnroutableError:
            gone = True
    assert gone
