"""Stream filtering (broker/core/stream_filter.py): which messages a filter matches, how
the consumer and declaration arguments are read and refused under each RabbitMQ line,
and filtered consumers in the core (credit, end offsets, tracking)."""

import pytest
from pamqp import commands

from amqp_codec import encode_properties
from broker.core.errors import ChannelError
from broker.core.queue_types import KINDS_BY_LINE
from broker.core.rabbitmq_lines import LINE_3_10, LINE_4_0, LINE_4_3, Profile
from broker.core.stream_filter import (StreamFilter, check_filter_size, consumer_filter,
                                       filter_value)
from core_harness import close_code
from test_core_streams import (STREAM as STREAM_ARGUMENTS, StreamBroker, consume,
                               declare_stream, offsets_and_bodies)

VALUE = "x-stream-filter-value"


def tagged(value=None, **headers) -> bytes:
    """A property block whose x-stream-filter-value header is `value` (none: absent)."""
    if value is not None:
        headers[VALUE] = value
    return encode_properties(commands.Basic.Properties(headers=headers or None,
                                                       content_type="text/plain"))


# --- which messages a filter matches ---------------------------------------------------


@pytest.mark.parametrize("properties, expected", [
    (tagged("a"), "a"),
    (tagged(), None),
    (tagged(other="x"), None),
    (tagged(""), None),                    # RabbitMQ counts "" as no filter value
    (tagged(5), 5),
    (tagged(other=f"{VALUE} inside a value"), None),
    (b"\x20\x00\x00\x00\x00\x30", None),   # headers cut short: not readable
])
def test_filter_value_of_a_message(properties, expected):
    assert filter_value(properties) == expected


def test_a_filter_matches_its_values_exactly():
    wanted = StreamFilter(frozenset(["a", "c"]), match_unfiltered=False)
    assert [wanted.matches(tagged(v)) for v in ("a", "b", "c", "ab", "A")] == [
        True, False, True, False, False]
    assert not wanted.matches(tagged())
    assert not wanted.matches(tagged(""))


def test_match_unfiltered_adds_the_untagged_messages():
    wanted = StreamFilter(frozenset(["a"]), match_unfiltered=True)
    assert [wanted.matches(p) for p in (tagged("a"), tagged("b"), tagged(), tagged(""))] \
        == [True, False, True, True]


def test_a_value_that_is_not_a_string_matches_no_filter():
    wanted = StreamFilter(frozenset(["5"]), match_unfiltered=True)
    assert not wanted.matches(tagged(5))
    assert not wanted.matches(tagged(True))


def test_an_empty_filter_value_stands_for_the_untagged_messages():
    wanted = StreamFilter(frozenset([""]), match_unfiltered=False)
    assert [wanted.matches(p) for p in (tagged("a"), tagged(), tagged(""))] == [
        False, True, True]


# --- the consumer's arguments --------------------------------------------------------


@pytest.mark.parametrize("arguments, values, match_unfiltered", [
    ({"x-stream-filter": "a"}, {"a"}, False),
    ({"x-stream-filter": ["a", "b"]}, {"a", "b"}, False),
    ({"x-stream-filter": ["a", 5, True]}, {"a"}, False),    # non-strings left out
    ({"x-stream-filter": "a", "x-stream-match-unfiltered": True}, {"a"}, True),
    ({"x-stream-filter": "a", "x-stream-match-unfiltered": "true"}, {"a"}, False),
    ({"x-stream-filter": ["", "a"]}, {"a"}, True),
])
def test_consumer_filter_reads_the_arguments_as_rabbitmq(arguments, values,
                                                         match_unfiltered):
    wanted = consumer_filter(arguments, "s")
    assert wanted is not None
    assert (wanted.values, wanted.match_unfiltered) == (values, match_unfiltered)


@pytest.mark.parametrize("arguments", [
    {}, {"x-stream-filter": 5}, {"x-stream-filter": bytearray(b"a")},
    {"x-stream-match-unfiltered": True},
])
def test_no_filter_unless_a_string_or_an_array(arguments):
    assert consumer_filter(arguments, "s") is None


@pytest.mark.parametrize("given", [[], [5, False]])
def test_an_array_without_a_string_is_406(given):
    with pytest.raises(ChannelError) as error:
        consumer_filter({"x-stream-filter": given}, "s")
    assert error.value.reply_code == 406
    assert "invalid arg 'x-stream-filter' for consumer on queue 's'" in error.value.reply_text


# --- the filter size, per line -------------------------------------------------------


def size_refusal(value, line) -> str | None:
    try:
        check_filter_size({"x-stream-filter-size-bytes": value}, "s", "v", line)
    except ChannelError as error:
        assert error.reply_code == 406
        return error.reply_text.removeprefix("PRECONDITION_FAILED - ")
    return None


@pytest.mark.parametrize("line", [LINE_4_0, LINE_4_3])
@pytest.mark.parametrize("size", [16, 32, 255])
def test_filter_sizes_16_to_255_are_taken(line, size):
    assert size_refusal(size, line) is None


def test_filter_size_refusals_under_4_3():
    assert size_refusal(15, LINE_4_3) == "Invalid value for x-stream-filter-size-bytes"
    assert size_refusal(256, LINE_4_3) == "Invalid value for x-stream-filter-size-bytes"
    assert size_refusal(-1, LINE_4_3) == (
        "invalid arg 'x-stream-filter-size-bytes' for queue 's' in vhost 'v': "
        "{value_negative,-1}")
    assert size_refusal("abc", LINE_4_3) == (
        "invalid arg 'x-stream-filter-size-bytes' for queue 's' in vhost 'v': "
        '"expected integer, got longstr"')
    assert size_refusal(True, LINE_4_3).endswith('"expected integer, got bool"')


@pytest.mark.parametrize("size", [15, 256, -1, "abc", True])
def test_filter_size_refusals_under_4_0_have_one_text(size):
    assert size_refusal(size, LINE_4_0) == "Invalid value for  x-stream-filter-size-bytes"


def test_which_lines_take_the_filtering_arguments():
    old, middle, new = (KINDS_BY_LINE[line.name].by_type
                        for line in (LINE_3_10, LINE_4_0, LINE_4_3))
    filtering = {"x-stream-filter", "x-stream-match-unfiltered"}
    assert not filtering & set(old["stream"].consumer_arguments)
    assert "x-stream-filter-size-bytes" not in old["stream"].known_arguments
    assert filtering <= set(middle["stream"].consumer_arguments)
    assert filtering <= middle["classic"].known_consumer_arguments
    assert not filtering & set(middle["classic"].consumer_arguments)
    assert "x-stream-filter-size-bytes" not in middle["stream"].known_arguments  # 4.0.5's
    assert "x-stream-filter-size-bytes" in new["stream"].queue_arguments
    assert "x-stream-filter-size-bytes" in new["classic"].known_arguments
    assert "x-stream-filter-size-bytes" not in new["classic"].queue_arguments


# --- filtered consumers in the core --------------------------------------------------


def publish_tagged(client, values, name="s"):
    for index, value in enumerate(values):
        client.publish(1, "", name, f"{index}:{value}".encode(),
                       properties=commands.Basic.Properties(
                           headers=None if value is None else {VALUE: value}))


@pytest.fixture
def filtering(tmp_path):
    return StreamBroker(tmp_path)    # Warren's default line, 4.3


def filtered_offsets(streams, values, prefetch=10, tag="c", **arguments):
    client = streams.client()
    declare_stream(client)
    publish_tagged(client, values)
    streams.commit()
    frames = consume(client, prefetch=prefetch, tag=tag,
                     **{"x-stream-offset": "first", **arguments})
    return client, [offset for offset, _ in offsets_and_bodies(frames)]


def test_a_filtered_consumer_gets_only_its_values(filtering):
    _, offsets = filtered_offsets(filtering, ["a", "b", None, "c", "", "a"],
                                  **{"x-stream-filter": ["a", "c"]})
    assert offsets == [0, 3, 5]


def test_skipped_messages_take_no_credit(filtering):
    values = ["b"] * 600 + ["a"] + ["b"] * 600 + ["a", "a"]
    client, offsets = filtered_offsets(filtering, values, prefetch=1,
                                       **{"x-stream-filter": "a"})
    assert offsets == [600]
    frames = client.method(1, commands.Basic.Ack(delivery_tag=1))
    assert [offset for offset, _ in offsets_and_bodies(frames)] == [1201]


def test_a_filtered_consumer_is_cancelled_at_its_end_offset(filtering):
    _, offsets = filtered_offsets(filtering, ["a", "b", "b", "b"],
                                  **{"x-stream-filter": "a", "x-stream-end-offset": 4})
    assert offsets == [0]
    queue = filtering.broker.vhosts["/"].queues["s"]
    assert len(queue.consumers) == 0


def test_a_tracking_filtered_consumer_resumes_past_what_it_skipped(filtering):
    arguments = {"x-stream-filter": "a", "x-stream-automatic-offset-tracking": True}
    client, offsets = filtered_offsets(filtering, ["b", "a", "b", "a", "b"], tag="r",
                                       **arguments)
    assert offsets == [1, 3]
    client.method(1, commands.Basic.Ack(delivery_tag=2, multiple=True))
    client.method(1, commands.Basic.Cancel(consumer_tag="r"))
    publish_tagged(client, ["a"])
    filtering.commit()
    other = filtering.client()
    frames = consume(other, tag="r", **{"x-stream-offset": "first", **arguments})
    assert [offset for offset, _ in offsets_and_bodies(frames)] == [5]


def test_under_3_10_the_filter_arguments_are_unknown(tmp_path):
    streams = StreamBroker(tmp_path, profile=Profile(LINE_3_10))
    _, offsets = filtered_offsets(streams, ["a", "b", None],
                                  **{"x-stream-filter": [], "x-stream-filter-size-bytes": 1})
    assert offsets == [0, 1, 2]
    client = streams.client()
    client.method(1, commands.Queue.Declare(
        queue="s", durable=True, arguments={**STREAM_ARGUMENTS,
                                            "x-stream-filter-size-bytes": 999}))
    classic = client.method(1, commands.Queue.Declare(
        queue="c", durable=True, arguments={"x-stream-filter-size-bytes": 999}))
    assert close_code(classic) is None


@pytest.mark.parametrize("line, refused", [(LINE_4_0, False), (LINE_4_3, True)])
def test_the_filter_size_on_another_queue_type(tmp_path, line, refused):
    client = StreamBroker(tmp_path, profile=Profile(line)).client()
    replies = client.method(1, commands.Queue.Declare(
        queue="c", durable=True, arguments={"x-stream-filter-size-bytes": 32}))
    assert close_code(replies) == (406 if refused else None)


@pytest.mark.parametrize("line, refused", [(LINE_4_0, False), (LINE_4_3, True)])
def test_a_redeclaration_with_another_filter_size(tmp_path, line, refused):
    client = StreamBroker(tmp_path, profile=Profile(line)).client()
    declare_stream(client, **{"x-stream-filter-size-bytes": 32})
    replies = declare_stream(client, **{"x-stream-filter-size-bytes": 64})
    assert close_code(replies) == (406 if refused else None)


@pytest.mark.parametrize("line", [LINE_4_0, LINE_4_3])
def test_filter_arguments_on_a_classic_queue_are_406(tmp_path, line):
    client = StreamBroker(tmp_path, profile=Profile(line)).client()
    client.method(1, commands.Queue.Declare(queue="c", durable=True))
    replies = consume(client, name="c", **{"x-stream-filter": "a"})
    assert close_code(replies) == 406
