"""Stream queues (x-queue-type=stream) through the RabbitMQ Java client (5.0.0).

interop/java/StreamReplay.java (compiled once per session by java_support) declares a
durable stream, publishes STREAM_COUNT messages with publisher confirms (body
"stream-OFFSET") and replays it through basic.consume with x-stream-offset "first", a
numeric offset, two consumers at once, and a timestamp; then checks basic.get and
auto-ack consumers are refused, and deletes the stream. It runs once for this module;
each test asserts on one scenario's `RESULT key=value` lines.

With WARREN_TEST_BROKER=host:port the tests run against that broker; RabbitMQ 3.10 is the
reference. Note that RabbitMQ refuses an auto-ack consumer on a stream with a connection
error (540 NOT_IMPLEMENTED), not with a 406 channel error. The program is given a host
and a port and logs in as guest on `/` (interop/java/README.md): the module takes the
plugin's session broker (`warren_broker`).
"""

import pytest

from tests.support.java_support import java_programs  # noqa: F401  (fixture)

STREAM_COUNT = 10_000
BATCH2_COUNT = 100   # StreamReplay.BATCH2


@pytest.fixture(scope="module")
def stream_run(warren_broker, java_programs):
    return java_programs.run("StreamReplay", warren_broker, STREAM_COUNT, timeout=120)


def assert_replay(run, name: str, first: int, count: int) -> None:
    """Consumer `name` got offsets first..first+count-1, in order, each with its body."""
    assert run.as_int(f"{name}_count") == count
    assert run.as_int(f"{name}_first_offset") == first
    assert run.as_int(f"{name}_last_offset") == first + count - 1
    assert run[f"{name}_in_order"] == "true"
    assert run[f"{name}_bodies_match"] == "true"
    assert run[f"{name}_header_type"] == "Long"   # x-stream-offset: a long ('l') header
    assert run.as_int(f"{name}_redelivered") == 0


def test_replay_from_first(stream_run):
    assert stream_run["declared_queue"] == "true"
    assert stream_run.as_int("published") == STREAM_COUNT
    assert_replay(stream_run, "first", 0, STREAM_COUNT)


def test_replay_from_numeric_offset(stream_run):
    middle = STREAM_COUNT // 2
    assert_replay(stream_run, "offset", middle, STREAM_COUNT - middle)


def test_two_consumers_at_different_offsets_at_once(stream_run):
    assert stream_run["concurrent_both_started"] == "true"
    assert_replay(stream_run, "concurrent_first", 0, STREAM_COUNT)
    assert_replay(stream_run, "concurrent_tail", STREAM_COUNT - 10, 10)


def test_replay_from_timestamp(stream_run):
    # Batch 2 (offsets STREAM_COUNT..) was published after the wall-clock second ticked
    # over; x-stream-offset = that second must start inside batch 2 and run to its end.
    assert stream_run["timestamp_batch2_published_after_boundary"] == "true"
    assert stream_run.as_int("timestamp_batch2_start") == STREAM_COUNT
    assert stream_run.as_int("timestamp_batch2_count") == BATCH2_COUNT
    first = stream_run.as_int("timestamp_first_offset")
    end = STREAM_COUNT + BATCH2_COUNT
    assert STREAM_COUNT <= first < end
    assert_replay(stream_run, "timestamp", first, end - first)


def test_basic_get_closes_connection_540(stream_run):
    queue = stream_run["queue"]
    assert stream_run.as_int("get_reply_code") == 540
    # RabbitMQ's text; Warren appends what to do instead, in parentheses.
    assert stream_run["get_reply_text"].startswith(
        f"NOT_IMPLEMENTED - basic.get not supported by stream queues queue '{queue}' "
        "in vhost '/'")
    assert stream_run["get_method"] == "60.70"   # basic.get
    assert stream_run["get_hard"] == "true"      # a connection error
    assert stream_run["get_connection_open"] == "false"


def test_auto_ack_consumer_closes_connection_540(stream_run):
    queue = stream_run["queue"]
    assert stream_run.as_int("autoack_reply_code") == 540
    text = stream_run["autoack_reply_text"]   # (per line: tests/unit/test_stream_lines.py)
    assert text.startswith("NOT_IMPLEMENTED - automatic acknowledgement not supported by "
                           "stream") and f"queue '{queue}' in vhost '/'" in text
    assert stream_run["autoack_method"] == "60.20"   # basic.consume
    assert stream_run["autoack_hard"] == "true"
    assert stream_run["autoack_connection_open"] == "false"
    # Those two ran on connections of their own: the main one is unaffected.
    assert stream_run["main_connection_open"] == "true"


def test_stream_deleted(stream_run):
    queue = stream_run["queue"]
    assert stream_run["deleted"] == "true"
    assert stream_run.as_int("deleted_passive_reply_code") == 404
    assert stream_run["deleted_passive_reply_text"] == (
        f"NOT_FOUND - no queue '{queue}' in vhost '/'")
    assert stream_run["deleted_passive_hard"] == "false"
