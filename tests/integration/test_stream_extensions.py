"""Stream-queue behaviour of Warren that RabbitMQ 3.10 does not share: run against Warren
only (not with WARREN_TEST_BROKER pointing at RabbitMQ).

Differences:
- basic.nack and basic.reject on a stream delivery only return credit (RabbitMQ >= 3.13;
  3.10 closes the connection with 540), so pika's BlockingChannel.cancel(), which rejects
  the deliveries it still holds, keeps the connection.
- 'last' is the last message of the stream (RabbitMQ: the first message of the last
  chunk, which is the same only when messages were published one at a time).
- Declare-Ok's message_count is the number of messages in the stream (RabbitMQ 3.10: an
  estimate).
- A malformed consumer argument, or an x-max-age not starting with a digit, closes the
  channel with 406 (RabbitMQ 3.10: connection error 541 for x-stream-offset 'foo' or
  true and x-max-age 'foo'; a malformed interval such as '7d' is 406 in both and tested
  in test_streams.py).

Extensions:
- Server-side offset tracking as LavinMQ has it: a consumer with
  `x-stream-automatic-offset-tracking: true` (or `x-stream-offset: null`) is named by its
  consumer tag; the broker stores the offset below which it acked everything, and a
  tracking consumer of that name resumes after it, whatever x-stream-offset it asks for.
- `x-stream-end-offset: N`: deliver [start, N), then cancel the consumer (Basic.Cancel).
- Retention (`x-max-length-bytes`, `x-max-age`) deletes whole old segments from the
  broker's periodic flush, after the writes.
"""

import pathlib
import time

import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn, names: fixtures)
    WAIT, _test_deadline, chan, close_quietly, conn, connect, expect_channel_error, names,
    wait_until,
)
from tests.support.stream_helpers import (
    QUIET, Reader, STREAM, confirm_channel, declare_stream, filled_stream,
    next_delivery, nothing_more, publish_confirmed, stream_offset, texts,
)

pytestmark = pytest.mark.warren_only(
    "Warren's stream behaviour that RabbitMQ 3.10 does not share (docs/streams.md, differences)")

TRACKING = "x-stream-automatic-offset-tracking"
END = "x-stream-end-offset"
# How long retention may take to show: it runs from the flush every 0.2 s.
RETENTION_WAIT = 10.0


# --- Differences ---------------------------------------------------------------------


@pytest.mark.parametrize("settle", [
    lambda channel, tag: channel.basic_nack(tag),
    lambda channel, tag: channel.basic_nack(tag, requeue=False),
    lambda channel, tag: channel.basic_reject(tag),
    lambda channel, tag: channel.basic_reject(tag, requeue=False),
], ids=["nack", "nack-no-requeue", "reject", "reject-no-requeue"])
def test_nack_and_reject_only_return_credit(conn, chan, names, settle):
    queue, _ = filled_stream(conn, names, 5)
    chan.basic_qos(prefetch_count=1)
    messages = chan.consume(queue, arguments={"x-stream-offset": "first"},
                            inactivity_timeout=QUIET)
    method, properties, _ = next_delivery(messages)
    assert stream_offset(properties) == 0
    settle(chan, method.delivery_tag)
    # The credit comes back; the message is not delivered again.
    method, properties, body = next_delivery(messages)
    assert (stream_offset(properties), body, method.redelivered) == (1, b"m1", False)
    assert nothing_more(messages)
    chan.basic_ack(method.delivery_tag)
    _, properties, _ = next_delivery(messages)
    assert stream_offset(properties) == 2
    assert chan.is_open and conn.is_open


def test_blocking_cancel_with_pending_deliveries_keeps_the_connection(conn, chan, names):
    queue, _ = filled_stream(conn, names, 50)
    chan.basic_qos(prefetch_count=20)
    messages = chan.consume(queue, arguments={"x-stream-offset": "first"},
                            inactivity_timeout=QUIET)
    method, properties, _ = next_delivery(messages)
    assert stream_offset(properties) == 0
    chan.basic_ack(method.delivery_tag)
    # pika holds the rest of the window, and rejects it on cancel().
    assert wait_until(conn, lambda: chan.get_waiting_message_count() >= 19)
    assert chan.cancel() == 0
    assert chan.is_open and conn.is_open
    assert chan.queue_declare(queue, passive=True).method.consumer_count == 0
    # Nothing was removed or changed.
    reader = Reader(conn, queue, "first")
    assert reader.read(50) == texts("m", 50)


def test_last_is_the_last_message_even_of_a_batch(conn, chan, names):
    queue = declare_stream(chan, names)
    for body in texts("m", 50):            # no confirms: the broker may write them together
        chan.basic_publish("", queue, body.encode())
    assert Reader(conn, queue, "first").read(50) == texts("m", 50)
    reader = Reader(conn, queue, "last")
    publish_confirmed(confirm_channel(conn), queue, ["sentinel"])
    assert reader.read(2) == ["m49", "sentinel"]
    assert reader.offsets == [49, 50]


def test_declare_ok_message_count_is_the_number_of_messages(conn, chan, names):
    queue, publisher = filled_stream(conn, names, 25)
    passive = chan.queue_declare(queue, passive=True).method
    assert (passive.message_count, passive.consumer_count) == (25, 0)
    active = chan.queue_declare(queue, durable=True, arguments=STREAM).method
    assert (active.message_count, active.consumer_count) == (25, 0)
    reader = Reader(conn, queue, "first")
    assert reader.read(25) == texts("m", 25)
    # Reading and acking removes nothing.
    passive = chan.queue_declare(queue, passive=True).method
    assert (passive.message_count, passive.consumer_count) == (25, 1)
    publish_confirmed(publisher, queue, ["more"])
    assert chan.queue_declare(queue, passive=True).method.message_count == 26


@pytest.mark.parametrize("arguments, named", [
    ({"x-stream-offset": "foo"}, "x-stream-offset"),
    ({"x-stream-offset": True}, "x-stream-offset"),
    ({"x-stream-offset": ["first"]}, "x-stream-offset"),
    ({END: -1}, END),
    ({END: "10"}, END),
    ({END: True}, END),
    ({TRACKING: "yes"}, TRACKING),
])
def test_malformed_consumer_arguments_are_406(conn, chan, names, arguments, named):
    queue = declare_stream(chan, names)
    chan.basic_qos(prefetch_count=10)
    error = expect_channel_error(conn, chan, 406, lambda: chan.basic_consume(
        queue, lambda *args: None, arguments=arguments))
    assert "PRECONDITION_FAILED" in error.reply_text
    assert f"invalid arg '{named}'" in error.reply_text


@pytest.mark.parametrize("age", ["foo", "", "D", "-1D"])
def test_max_age_not_starting_with_a_digit_is_406(conn, chan, names, age):
    # RabbitMQ 3.10 crashes on these: connection error 541 INTERNAL_ERROR.
    queue = names.queue("stream")
    error = expect_channel_error(conn, chan, 406, lambda: chan.queue_declare(
        queue, durable=True, arguments={**STREAM, "x-max-age": age}))
    assert f"invalid arg 'x-max-age' for queue '{queue}'" in error.reply_text
    assert "invalid_max_age" in error.reply_text


# --- Server-side offset tracking -------------------------------------------------------

TRACK_FROM_FIRST = {TRACKING: True, "x-stream-offset": "first"}
TRACK_LAVINMQ = {"x-stream-offset": None}     # null offset: tracking, from 'first'


def read_and_ack_up_to(connection, queue, tag, arguments, count, last_acked):
    """A tracking consumer named `tag` reads `count` messages, acks offsets up to
    `last_acked` (multiple) and cancels; returns the offsets it was given."""
    reader = Reader(connection, queue, consumer_tag=tag, ack=False, prefetch=count,
                    arguments=arguments)
    assert reader.wait_for(count)
    start = reader.offsets[0]
    reader.channel.basic_ack(
        reader.deliveries[last_acked - start].method.delivery_tag, multiple=True)
    offsets = reader.offsets
    reader.close()              # Cancel-Ok: the acks before it were processed
    return offsets


@pytest.mark.parametrize("arguments", [TRACK_FROM_FIRST, TRACK_LAVINMQ],
                         ids=["tracking-argument", "null-offset"])
def test_tracking_consumer_resumes_after_its_last_acked_offset(warren, conn, names,
                                                               arguments):
    queue, _ = filled_stream(conn, names, 20)
    assert read_and_ack_up_to(conn, queue, "reader", arguments, 20, 9) == list(range(20))
    other = connect(warren)
    try:
        reader = Reader(other, queue, consumer_tag="reader", arguments=arguments)
        assert reader.read(10) == texts("m", 10, start=10)
        assert reader.offsets == list(range(10, 20))
    finally:
        close_quietly(other)


@pytest.mark.parametrize("offset", ["first", "next", "last", 0, "1h"])
def test_a_stored_offset_overrides_x_stream_offset(conn, names, offset):
    queue, publisher = filled_stream(conn, names, 20)
    read_and_ack_up_to(conn, queue, "reader", TRACK_FROM_FIRST, 20, 11)
    reader = Reader(conn, queue, offset, consumer_tag="reader", arguments={TRACKING: True})
    publish_confirmed(publisher, queue, ["sentinel"])
    assert reader.read(9) == texts("m", 8, start=12) + ["sentinel"]
    assert reader.offsets == list(range(12, 21))


def test_without_a_stored_offset_tracking_starts_at_x_stream_offset(conn, names):
    queue, publisher = filled_stream(conn, names, 10)
    reader = Reader(conn, queue, "next", consumer_tag="fresh", arguments={TRACKING: True})
    publish_confirmed(publisher, queue, ["new"])
    assert reader.read(1) == ["new"]
    assert reader.offsets == [10]


def test_tracking_stores_only_what_was_acked_without_a_gap(conn, names):
    queue, _ = filled_stream(conn, names, 10)
    reader = Reader(conn, queue, consumer_tag="reader", ack=False, arguments=TRACK_FROM_FIRST)
    assert reader.wait_for(10)
    for delivery in reader.deliveries[:3] + reader.deliveries[4:6]:   # not offset 3
        reader.channel.basic_ack(delivery.method.delivery_tag)
    reader.close()
    again = Reader(conn, queue, consumer_tag="reader", arguments=TRACK_FROM_FIRST)
    assert again.read(7) == texts("m", 7, start=3)
    assert again.offsets == list(range(3, 10))


def test_tracked_offsets_belong_to_their_consumer_name(conn, names):
    queue, _ = filled_stream(conn, names, 20)
    read_and_ack_up_to(conn, queue, "alpha", TRACK_FROM_FIRST, 20, 4)
    read_and_ack_up_to(conn, queue, "beta", TRACK_FROM_FIRST, 20, 14)
    alpha = Reader(conn, queue, consumer_tag="alpha", arguments=TRACK_FROM_FIRST)
    beta = Reader(conn, queue, consumer_tag="beta", arguments=TRACK_FROM_FIRST)
    assert alpha.read(15) == texts("m", 15, start=5)
    assert beta.read(5) == texts("m", 5, start=15)
    # A consumer that does not track starts where it asks, whatever its name.
    plain = Reader(conn, queue, "first", consumer_tag="alpha-untracked")
    assert plain.read(20) == texts("m", 20)


def test_an_untracked_consumer_does_not_resume(conn, names):
    queue, _ = filled_stream(conn, names, 10)
    first = Reader(conn, queue, "first", consumer_tag="plain")
    assert first.read(10) == texts("m", 10)
    first.close()
    again = Reader(conn, queue, 2, consumer_tag="plain")
    assert again.read(8) == texts("m", 8, start=2)


def test_tracked_offsets_survive_a_restart(broker_factory, tmp_path):
    data_dir = str(tmp_path / "data")
    broker = broker_factory(data_dir=data_dir)
    connection = connect(broker)
    publisher = confirm_channel(connection)
    publisher.queue_declare("tracked", durable=True, arguments=STREAM)
    publish_confirmed(publisher, "tracked", texts("m", 20))
    read_and_ack_up_to(connection, "tracked", "reader", TRACK_FROM_FIRST, 20, 6)
    connection.close()
    assert broker.stop() == 0
    broker = broker_factory(data_dir=data_dir)
    connection = connect(broker)
    try:
        reader = Reader(connection, "tracked", consumer_tag="reader",
                        arguments=TRACK_FROM_FIRST)
        assert reader.read(13) == texts("m", 13, start=7)
        assert reader.offsets == list(range(7, 20))
    finally:
        close_quietly(connection)


# --- End offsets -----------------------------------------------------------------------


def test_end_offset_ends_the_consume_generator(conn, chan, names):
    queue, _ = filled_stream(conn, names, 10)
    chan.basic_qos(prefetch_count=10)
    offsets = []
    for method, properties, _ in chan.consume(
            queue, arguments={"x-stream-offset": "first", END: 5}, inactivity_timeout=WAIT):
        assert method is not None, f"no delivery and no cancel after {offsets}"
        offsets.append(stream_offset(properties))
        chan.basic_ack(method.delivery_tag)
    # The loop ended: the broker cancelled the consumer.
    assert offsets == [0, 1, 2, 3, 4]
    assert chan.is_open and conn.is_open
    assert chan.queue_declare(queue, passive=True).method.consumer_count == 0


@pytest.mark.parametrize("prefetch", [100, 2])
def test_end_offset_cancels_the_consumer_after_the_last_offset(conn, names, prefetch):
    queue, _ = filled_stream(conn, names, 20)
    reader = Reader(conn, queue, 3, prefetch=prefetch, arguments={END: 8})
    assert reader.read(5) == texts("m", 5, start=3)
    assert wait_until(conn, lambda: reader.cancels)
    # Deliveries come before the Basic.Cancel on the channel: there are no more.
    assert reader.offsets == [3, 4, 5, 6, 7]
    assert [method.consumer_tag for method in reader.cancels] == [reader.tag]
    assert reader.tag not in reader.channel.consumer_tags
    assert reader.channel.is_open


def test_end_offset_beyond_the_tail_waits_for_new_messages(conn, names):
    queue, publisher = filled_stream(conn, names, 3)
    reader = Reader(conn, queue, "first", arguments={END: 6})
    assert reader.read(3) == ["m0", "m1", "m2"]
    assert reader.cancels == []
    publish_confirmed(publisher, queue, texts("m", 5, start=3))
    assert reader.read(6) == texts("m", 6)
    assert wait_until(conn, lambda: reader.cancels)
    assert reader.offsets == list(range(6))


@pytest.mark.parametrize("offset, end", [(8, 5), (5, 5), ("first", 0), ("next", 10)])
def test_end_offset_at_or_before_the_start_cancels_at_once(conn, names, offset, end):
    queue, _ = filled_stream(conn, names, 10)
    reader = Reader(conn, queue, offset, arguments={END: end})
    assert wait_until(conn, lambda: reader.cancels)
    assert reader.deliveries == []
    assert reader.channel.is_open


# --- Retention -------------------------------------------------------------------------

BODY_SIZE = 100
SEGMENT_BYTES = 2000
MAX_BYTES = 10_000


def numbered(offset: int) -> str:
    """A BODY_SIZE-character body naming its offset."""
    return f"{offset:06d}".ljust(BODY_SIZE, ".")


def read_whole_stream(connection, queue, last: int, start="first") -> list:
    """Offsets and texts of one read of `queue` from `start` up to offset `last`:
    [(offset, text), ...] (the reader's channel is closed afterwards)."""
    reader = Reader(connection, queue, start)
    try:
        assert wait_until(connection, lambda: last in reader.offsets), reader.offsets
        return list(zip(reader.offsets, reader.texts))
    finally:
        reader.close()


def is_retained_tail(read: list, last: int) -> bool:
    """Whether a read starts after offset 0 and holds every offset from there to `last`,
    each with its own body."""
    first = read[0][0]
    return (first > 0 and [offset for offset, _ in read] == list(range(first, last + 1))
            and all(text == numbered(offset) for offset, text in read))


def within_max_bytes(read: list) -> bool:
    """Whether the messages of a read fit in MAX_BYTES (their bodies alone: the records
    on disk are larger, so this holds for any log within the limit)."""
    return len(read) * BODY_SIZE <= MAX_BYTES


def wait_for_retention(connection, queue, last: int, settled) -> list:
    """Read the stream from 'first' until `settled(read)` says retention has done its
    work (polled: retention runs from the broker's periodic flush after writes, and a
    read may see it half done); returns the last read."""
    deadline = time.monotonic() + RETENTION_WAIT
    while True:
        read = read_whole_stream(connection, queue, last)
        if settled(read) or time.monotonic() >= deadline:
            return read
        connection.process_data_events(time_limit=0.05)


def segment_bytes_on_disk(data_dir: pathlib.Path) -> int:
    """Bytes of the stream segment files (`*.seg`) of the only queue in `data_dir`: what
    x-max-length-bytes limits (docs/storage-format.md, "Retention"). A file retention
    deletes during the count is left out, so the count is never below the size the log
    had when it ended."""
    total = 0
    for segment in (data_dir / "queues").glob("*/*.seg"):
        try:
            total += segment.stat().st_size
        except FileNotFoundError:
            pass
    return total


def test_max_length_bytes_deletes_whole_old_segments(broker_factory, tmp_path):
    data_dir = tmp_path / "data"
    connection = connect(broker_factory(data_dir=str(data_dir)))
    try:
        publisher = confirm_channel(connection)
        publisher.queue_declare("retained", durable=True, arguments={
            **STREAM, "x-max-length-bytes": MAX_BYTES,
            "x-stream-max-segment-size-bytes": SEGMENT_BYTES})
        publish_confirmed(publisher, "retained", [numbered(offset) for offset in range(500)])
        # Retention has run once the segment files are within the limit again (they are
        # over it once the 500 confirmed messages are on disk); with no more writes the
        # log stays as it is.
        assert wait_until(connection, lambda: segment_bytes_on_disk(data_dir) <= MAX_BYTES,
                          RETENTION_WAIT), segment_bytes_on_disk(data_dir)
        read = read_whole_stream(connection, "retained", 499)
        assert is_retained_tail(read, 499), [offset for offset, _ in read]
        assert within_max_bytes(read), len(read)
        first = read[0][0]
        declared = publisher.queue_declare("retained", passive=True)
        assert declared.method.message_count == 500 - first
        # An offset retention removed reads from the first one kept; offsets go on at 500.
        reader = Reader(connection, "retained", 0)
        publish_confirmed(publisher, "retained", ["after retention"])
        assert wait_until(connection, lambda: "after retention" in reader.texts)
        # (This write may set retention off again while the reader reads.)
        assert reader.offsets[0] >= first
        assert reader.offsets == list(range(reader.offsets[0], 501))
    finally:
        close_quietly(connection)


def test_max_age_deletes_segments_whose_messages_are_all_older(conn, names):
    publisher = confirm_channel(conn)
    queue = declare_stream(publisher, names, **{"x-max-age": "1s",
                                                "x-stream-max-segment-size-bytes": SEGMENT_BYTES})
    publish_confirmed(publisher, queue, [numbered(offset) for offset in range(100)])
    # Age retention runs after a write: once every message is more than a second old,
    # one more message (in the newest segment, which stays) sets it off.
    published = time.time()
    while time.time() < published + 1.2:
        conn.process_data_events(time_limit=0.05)
    publish_confirmed(publisher, queue, [numbered(100)])
    read = wait_for_retention(conn, queue, 100, lambda read: is_retained_tail(read, 100))
    assert is_retained_tail(read, 100), [offset for offset, _ in read]
