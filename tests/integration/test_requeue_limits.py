"""x-max-length enforced when delivered messages come back (reject, nack, recover,
channel close): drop-head dead-letters the requeued ones, which are the oldest
(reason maxlen); reject-publish keeps them over the limit. Differential: run also with
WARREN_TEST_BROKER=127.0.0.1:5673."""

import pika
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline: fixture)
    _test_deadline, close_quietly, get_all, publish_bodies, wait_for_count,
)


def give_back(channel, tags, how):
    if how == "reject":
        for tag in tags:
            channel.basic_reject(tag)
    elif how == "nack":
        channel.basic_nack(0, multiple=True)
    elif how == "recover":
        channel.basic_recover(requeue=True)
    else:
        channel.close()


@pytest.mark.parametrize("how", ["reject", "nack", "recover", "close"])
@pytest.mark.parametrize("overflow", ["drop-head", "reject-publish"])
def test_requeue_over_max_length(warren, overflow, how):
    connection = pika.BlockingConnection(warren.connection_parameters())
    consumer = pika.BlockingConnection(warren.connection_parameters())
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("dead")
        channel.queue_declare("q", arguments={
            "x-max-length": 2, "x-overflow": overflow, "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dead"})
        publish_bodies(channel, "", "q", ["m1", "m2"])
        taker = consumer.channel()
        tags = [taker.basic_get("q")[0].delivery_tag for _ in range(2)]
        publish_bodies(channel, "", "q", ["m3", "m4"])
        give_back(taker, tags, how)
        if overflow == "drop-head":
            assert wait_for_count(channel, "dead", 2) == 2
            kept = [(b"m3", False), (b"m4", False)]
        else:
            assert wait_for_count(channel, "q", 4) == 4
            kept = [(b"m1", True), (b"m2", True), (b"m3", False), (b"m4", False)]
        assert [(body, m.redelivered) for m, _, body in get_all(channel, "q")] == kept
        dead = get_all(channel, "dead")
        assert [(body, p.headers["x-death"][0]["reason"], p.headers["x-death"][0]["count"])
                for _, p, body in dead] == (
            [(b"m1", "maxlen", 1), (b"m2", "maxlen", 1)] if overflow == "drop-head" else [])
    finally:
        close_quietly(consumer)
        close_quietly(connection)


def test_requeue_over_max_length_bytes_drops_the_requeued_head(warren):
    connection = pika.BlockingConnection(warren.connection_parameters())
    consumer = pika.BlockingConnection(warren.connection_parameters())
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("q", arguments={"x-max-length-bytes": 4})
        publish_bodies(channel, "", "q", ["aa", "bb"])
        taker = consumer.channel()
        tag = taker.basic_get("q")[0].delivery_tag
        publish_bodies(channel, "", "q", ["cc"])
        taker.basic_reject(tag)
        assert wait_for_count(channel, "q", 2) == 2
        assert [body for _, _, body in get_all(channel, "q")] == [b"bb", b"cc"]
    finally:
        close_quietly(consumer)
        close_quietly(connection)
