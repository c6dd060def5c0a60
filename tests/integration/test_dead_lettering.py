"""Message TTL, length limits and dead-lettering, as a pika user sees them."""

import time

import pika

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


def wait_for_message(channel, queue, timeout=10.0):
    """Basic.Get until a message arrives or `timeout` passes: (method, properties, body)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
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
