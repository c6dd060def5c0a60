"""Stream filtering with pika (docs/streams.md, "Filtering"): a publisher tags messages
with the `x-stream-filter-value` header; a stream consumer's `x-stream-filter` (a string
or an array of strings) and `x-stream-match-unfiltered` choose what it gets; a stream's
`x-stream-filter-size-bytes` is checked. RabbitMQ has it since 3.13: the tests of the
4.0 and 4.3 lines run on vhosts of those lines (against a RabbitMQ node, those of the
node's line); under the 3.10 line the three arguments are unknown ones.

Exactness. RabbitMQ filters whole chunks with a Bloom filter, so its consumers may get
messages that do not match; Warren filters each message. Here every message is published
on its own and confirmed before the next, so in RabbitMQ each is a chunk of its own, and
a chunk passes the filter when its one value does, or when the Bloom filter mistakes it
for one of the consumer's values: two bit positions of 128 that are a fixed function of
the value (Erlang's phash2), so whether two values collide is decided once for all, and
the values used here do not (as the runs against 4.0.5 and 4.3.6 show). Under those
conditions the tests assert the exact deliveries against RabbitMQ too. What only
Warren's per-message filtering gives (several messages of one chunk) and Warren's
differences are in the Warren-only tests at the end.

A reader knows where a stream ends: it waits for the deliveries it expects and then for
a sentinel published last, which must be the next delivery (nothing else came between).
"""

import pika
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (_test_deadline, chan, conn, names: fixtures)
    _test_deadline, chan, conn, expect_channel_error, expect_connection_error, names,
)
from tests.support.stream_helpers import STREAM, Reader, confirm_channel, declare_stream

VALUE = "x-stream-filter-value"
FILTER = "x-stream-filter"
MATCH_UNFILTERED = "x-stream-match-unfiltered"
SIZE = "x-stream-filter-size-bytes"
# The messages of most tests: tagged, untagged (None) and tagged with "" (which RabbitMQ
# counts as untagged).
TAGS = ["red", "blue", None, "green", "", "red", "blue"]
SENTINEL = "sentinel"


def lines(*names):
    """Parameters running a test under each of these RabbitMQ lines."""
    return pytest.mark.parametrize("line", [
        pytest.param(name, marks=pytest.mark.warren_rabbitmq(name)) for name in names])


FILTERING_LINES = lines("4.0", "4.3")


def body(index, tag):
    return f"{index}:{tag}"


def publish_tagged(channel, queue, tags, start=0):
    """Publish one message per tag (None: no header), each confirmed before the next;
    returns their bodies."""
    bodies = []
    for index, tag in enumerate(tags, start):
        headers = None if tag is None else {VALUE: tag}
        channel.basic_publish("", queue, body(index, tag).encode(),
                              pika.BasicProperties(headers=headers))
        bodies.append(body(index, tag))
    return bodies


def stream_with(conn, names, tags=TAGS, **arguments):
    """A stream holding one message per tag; returns (queue, publishing channel)."""
    publisher = confirm_channel(conn)
    queue = declare_stream(publisher, names, **arguments)
    publish_tagged(publisher, queue, tags)
    return queue, publisher


def read_all(conn, queue, publisher, expected, sentinel_tag, **arguments):
    """Consume from the first offset with `arguments`, and assert the deliveries are
    `expected` (bodies) and then the sentinel (tagged `sentinel_tag`), nothing else."""
    reader = Reader(conn, queue, offset="first", arguments=arguments)
    sentinel = publish_tagged(publisher, queue, [sentinel_tag], start=len(TAGS))
    assert reader.read(len(expected) + 1) == expected + sentinel
    return reader


def bodies_of(tags, wanted):
    return [body(index, tag) for index, tag in enumerate(tags) if wanted(tag)]


# --- Filtering (4.0 and 4.3) -----------------------------------------------------------


@FILTERING_LINES
def test_a_consumer_gets_the_messages_of_its_filter_value(conn, names, line):
    queue, publisher = stream_with(conn, names)
    read_all(conn, queue, publisher, bodies_of(TAGS, lambda tag: tag == "red"), "red",
             **{FILTER: "red"})


@FILTERING_LINES
def test_a_consumer_gets_the_messages_of_any_of_its_values(conn, names, line):
    queue, publisher = stream_with(conn, names)
    read_all(conn, queue, publisher,
             bodies_of(TAGS, lambda tag: tag in ("red", "green")), "green",
             **{FILTER: ["red", "green"]})


@FILTERING_LINES
@pytest.mark.parametrize("match_unfiltered", [True, False])
def test_match_unfiltered_adds_the_messages_without_a_value(conn, names, line,
                                                            match_unfiltered):
    untagged = (None, "")
    queue, publisher = stream_with(conn, names)
    read_all(conn, queue, publisher,
             bodies_of(TAGS, lambda tag: tag == "blue"
                       or (match_unfiltered and tag in untagged)), "blue",
             **{FILTER: "blue", MATCH_UNFILTERED: match_unfiltered})


@FILTERING_LINES
def test_a_consumer_without_a_filter_gets_every_message(conn, names, line):
    queue, publisher = stream_with(conn, names)
    read_all(conn, queue, publisher, bodies_of(TAGS, lambda tag: True), None,
             **{MATCH_UNFILTERED: False})


@FILTERING_LINES
def test_an_empty_filter_value_selects_the_messages_without_one(conn, names, line):
    queue, publisher = stream_with(conn, names)
    read_all(conn, queue, publisher, bodies_of(TAGS, lambda tag: tag in (None, "")),
             None, **{FILTER: ""})


@FILTERING_LINES
@pytest.mark.parametrize("given", [5, True, b"red"], ids=["integer", "boolean", "bytes"])
def test_a_filter_that_is_not_a_string_or_array_filters_nothing(conn, names, line,
                                                                given):
    # RabbitMQ reads only a long string or an array; pika sends bytes as a byte array.
    queue, publisher = stream_with(conn, names)
    read_all(conn, queue, publisher, bodies_of(TAGS, lambda tag: True), None,
             **{FILTER: given})


@FILTERING_LINES
def test_an_array_filter_keeps_only_its_strings(conn, names, line):
    queue, publisher = stream_with(conn, names)
    read_all(conn, queue, publisher, bodies_of(TAGS, lambda tag: tag == "green"),
             "green", **{FILTER: ["green", 5, True]})


@FILTERING_LINES
def test_a_filtered_consumer_keeps_up_with_new_messages(conn, names, line):
    publisher = confirm_channel(conn)
    queue = declare_stream(publisher, names)
    reader = Reader(conn, queue, offset="next", prefetch=1, arguments={FILTER: "red"})
    sent = publish_tagged(publisher, queue, ["blue", "red", "blue", "blue", "red"])
    assert reader.read(2) == [sent[1], sent[4]]


@FILTERING_LINES
@pytest.mark.parametrize("size", [16, 255])
def test_a_stream_takes_filter_sizes_16_to_255(chan, names, line, size):
    queue = declare_stream(chan, names, **{SIZE: size})
    assert chan.queue_declare(queue, durable=True,
                              arguments={**STREAM, SIZE: size}).method.queue == queue


# --- What is refused (4.0 and 4.3) -----------------------------------------------------


@pytest.mark.parametrize("line, size, text", [
    pytest.param("4.3", 15, "Invalid value for x-stream-filter-size-bytes",
                 marks=pytest.mark.warren_rabbitmq("4.3")),
    pytest.param("4.3", 256, "Invalid value for x-stream-filter-size-bytes",
                 marks=pytest.mark.warren_rabbitmq("4.3")),
    pytest.param("4.3", -1, "{value_negative,-1}", marks=pytest.mark.warren_rabbitmq("4.3")),
    pytest.param("4.3", "32", '"expected integer, got longstr"',
                 marks=pytest.mark.warren_rabbitmq("4.3")),
    # 4.0.5 checks the value only, in words with two spaces
    pytest.param("4.0", 15, "Invalid value for  x-stream-filter-size-bytes",
                 marks=pytest.mark.warren_rabbitmq("4.0")),
    pytest.param("4.0", "32", "Invalid value for  x-stream-filter-size-bytes",
                 marks=pytest.mark.warren_rabbitmq("4.0")),
])
def test_a_filter_size_out_of_range_is_406(conn, chan, names, line, size, text):
    queue = names.queue("stream")
    error = expect_channel_error(conn, chan, 406, lambda: chan.queue_declare(
        queue, durable=True, arguments={**STREAM, SIZE: size}))
    assert error.reply_text.startswith("PRECONDITION_FAILED - ")
    assert error.reply_text.endswith(text)
    if line == "4.3" and (isinstance(size, str) or size < 0):   # the type's checks
        assert f"invalid arg '{SIZE}' for queue '{queue}'" in error.reply_text


@pytest.mark.warren_rabbitmq("4.3")
@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_4_3_refuses_a_filter_size_on_other_queue_types(warren, conn, chan, names,
                                                        queue_type):
    queue = names.queue(queue_type)
    error = expect_channel_error(conn, chan, 406, lambda: chan.queue_declare(
        queue, durable=True, arguments={"x-queue-type": queue_type, SIZE: 32}))
    assert error.reply_text == (
        f"PRECONDITION_FAILED - invalid arg '{SIZE}' for queue '{queue}' in vhost "
        f"'{warren.vhost}' of queue type rabbit_{queue_type}_queue")


@pytest.mark.warren_rabbitmq("4.3")
def test_4_3_compares_the_filter_size_on_a_redeclaration(warren, conn, chan, names):
    queue = declare_stream(chan, names, **{SIZE: 32})
    error = expect_channel_error(conn, chan, 406, lambda: chan.queue_declare(
        queue, durable=True, arguments={**STREAM, SIZE: 64}))
    assert error.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg '{SIZE}' for queue '{queue}' in vhost "
        f"'{warren.vhost}': received '64' but current is '32'")


@pytest.mark.warren_rabbitmq("4.0")
def test_4_0_takes_the_filter_size_as_an_argument_of_no_queue_type(chan, names):
    # 4.0.5's stream does not list it: another type keeps it, a redeclaration ignores it
    classic = names.queue("classic")
    chan.queue_declare(classic, durable=True, arguments={SIZE: 32})
    queue = declare_stream(chan, names, **{SIZE: 32})
    chan.queue_declare(queue, durable=True, arguments={**STREAM, SIZE: 64})


@FILTERING_LINES
@pytest.mark.parametrize("argument, value", [(FILTER, "red"), (MATCH_UNFILTERED, True)])
def test_filter_arguments_on_a_classic_queue_are_406(warren, conn, chan, names, line,
                                                    argument, value):
    queue = names.queue("classic")
    chan.queue_declare(queue, durable=True)
    chan.basic_qos(prefetch_count=10)
    error = expect_channel_error(conn, chan, 406, lambda: chan.basic_consume(
        queue, lambda *_: None, arguments={argument: value}))
    assert error.reply_text == (
        f"PRECONDITION_FAILED - invalid arg '{argument}' for queue '{queue}' in vhost "
        f"'{warren.vhost}' of queue type rabbit_classic_queue")


# --- RabbitMQ 3.10: no filtering -------------------------------------------------------


@pytest.mark.warren_rabbitmq("3.10")
def test_3_10_ignores_the_filter_arguments(conn, names):
    queue, publisher = stream_with(conn, names, **{SIZE: 999})
    read_all(conn, queue, publisher, bodies_of(TAGS, lambda tag: True), "red",
             **{FILTER: "red", MATCH_UNFILTERED: False})


@pytest.mark.warren_rabbitmq("3.10")
def test_3_10_takes_the_filter_size_as_an_unknown_argument(conn, chan, names):
    classic = names.queue("classic")
    chan.queue_declare(classic, durable=True, arguments={SIZE: "any"})
    queue = declare_stream(chan, names, **{SIZE: 1})
    chan.queue_declare(queue, durable=True, arguments={**STREAM, SIZE: 2})
    chan.basic_qos(prefetch_count=10)
    chan.basic_consume(classic, lambda *_: None, arguments={FILTER: "red"})


# --- Warren only ---------------------------------------------------------------------


@pytest.mark.warren_only("RabbitMQ filters by chunk: it would deliver the whole chunk")
@pytest.mark.warren_rabbitmq("4.3")
def test_messages_of_one_chunk_are_filtered_one_by_one(conn, names):
    publisher = conn.channel()     # no confirms: RabbitMQ would write one chunk
    queue = declare_stream(publisher, names)
    tags = ["red", "blue"] * 50 + [None] * 10
    publish_tagged(publisher, queue, tags)
    reader = Reader(conn, queue, offset="first", prefetch=7, arguments={FILTER: "blue"})
    sentinel = publish_tagged(publisher, queue, ["blue"], start=len(tags))
    assert reader.read(51) == bodies_of(tags, lambda tag: tag == "blue") + sentinel


@pytest.mark.warren_only("RabbitMQ's stream reader crashes: connection error 541")
@pytest.mark.warren_rabbitmq("4.3")
@pytest.mark.parametrize("given", [[], [5]])
def test_an_array_filter_without_a_string_is_406(conn, chan, names, given):
    queue = declare_stream(chan, names)
    chan.basic_qos(prefetch_count=10)
    error = expect_channel_error(conn, chan, 406, lambda: chan.basic_consume(
        queue, lambda *_: None, arguments={FILTER: given}))
    assert f"invalid arg '{FILTER}' for consumer on queue '{queue}'" in error.reply_text


@pytest.mark.warren_only("RabbitMQ closes the publisher's connection with 541")
@pytest.mark.warren_rabbitmq("4.3")
def test_a_filter_value_that_is_not_a_string_matches_no_filter(conn, names):
    queue, publisher = stream_with(conn, names, tags=[5, "red", True])
    read_all(conn, queue, publisher, [body(1, "red")], "red",
             **{FILTER: ["red", "5"], MATCH_UNFILTERED: True})
