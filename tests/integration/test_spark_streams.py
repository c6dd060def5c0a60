"""The ``amqp`` PySpark data source reading stream queues (option startingOffset):
exactly-once offset ranges into a checkpointed Parquet sink.

Same setup as test_spark_source.py: one shared local[2] SparkSession (spark_support.py),
queries one at a time, trigger(availableNow=True) whose end is the synchronisation point.
The crash test runs its first query in a process of its own (spark_support.py as a
script) and kills that process group with SIGKILL once some batches are committed.
Against RabbitMQ: WARREN_TEST_BROKER=127.0.0.1:5673.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pika
import pytest

from broker.testing.control_client import ControlClient
from tests.support.pika_helpers import (  # noqa: F401  (names: fixture)
    amqp_url, close_quietly, connect, names,
)
from spark.amqp.offsets import OffsetError, StreamOffset, parse_stream_offset
from spark.amqp.stream_client import StreamProbe
from spark.amqp.stream_queue_reader import StreamRange, share, split_ranges
from tests.support.spark_support import spark_session, start_stream_to_parquet  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow   # Spark sessions and queries: tens of seconds

QUERY_TIMEOUT = 120  # seconds for one availableNow query
KILL_AFTER_COMMITS = 3
SUBPROCESS_TIMEOUT = 180  # seconds for the subprocess to commit KILL_AFTER_COMMITS batches
# How long retention may take to show: it runs from the broker's flush every 0.2 s.
RETENTION_WAIT = 10.0
SPARK_SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support",
                             "spark_support.py")


def declare_stream(target, names) -> str:
    stream = names.queue("spark-stream")
    connection = connect(target)
    try:
        connection.channel().queue_declare(stream, durable=True,
                                           arguments={"x-queue-type": "stream"})
    finally:
        close_quietly(connection)
    return stream


def publish(target, stream: str, numbers) -> None:
    """Publish body "<stream>:<n>" (message_id n) for each n, confirmed."""
    connection = connect(target)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for n in numbers:
            channel.basic_publish("", stream, f"{stream}:{n}".encode(),
                                  pika.BasicProperties(message_id=str(n)))
    finally:
        close_quietly(connection)


def run(spark, warren, stream, tmp_path, name="run", **kwargs):
    """An availableNow query into Parquet at tmp_path/name/{data,checkpoint}; returns
    the finished query."""
    query = start_stream_to_parquet(spark, amqp_url(warren), stream, tmp_path / name / "data",
                                    tmp_path / name / "checkpoint", **kwargs)
    assert query.awaitTermination(QUERY_TIMEOUT), "availableNow query did not finish"
    return query


def parquet_rows(spark, path):
    """(queue, offset, body, message_id) of every row of the Parquet sink output (read
    through its _spark_metadata log, as any reader of a streaming file sink does)."""
    return [(r.queue, r.offset, bytes(r.body).decode(), r.message_id) for r in
            spark.read.parquet(str(path)).select("queue", "offset", "body", "message_id")
            .collect()]


def assert_exactly(rows, stream: str, offsets) -> None:
    """`rows` are exactly the messages of `stream` at `offsets`, each once, each row
    carrying the message published at that offset (offset n has body stream:n)."""
    got = sorted(offset for queue, offset, _, _ in rows if queue == stream)
    assert got == list(offsets), f"{stream}: {len(got)} rows, expected {len(offsets)}"
    for queue, offset, body, message_id in rows:
        if queue == stream:
            assert (body, message_id) == (f"{stream}:{offset}", str(offset))


def input_rows(query):
    return [p["numInputRows"] for p in query.recentProgress]


def numbered_files(directory):
    """The batch ids with a file in a checkpoint directory (offsets/, commits/)."""
    if not os.path.isdir(directory):
        return []
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


def last_logged_offset(checkpoint):
    """The source offset of the newest batch in the checkpoint's offset log."""
    batch = numbered_files(checkpoint / "offsets")[-1]
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    return json.loads(lines[-1])


def test_offsets_limits_and_ranges():
    """Pure planning logic (no broker): offset JSON, the per-trigger budget shared
    between streams, and ranges cut per partition."""
    offset = StreamOffset.of({"s2": 80, "s1": 120})
    assert offset.to_dict() == {"version": 1, "kind": "stream",
                                "offsets": {"s1": 120, "s2": 80}}
    assert json.dumps(offset.to_dict()) == json.dumps(
        parse_stream_offset(json.loads(json.dumps(offset.to_dict())), ["s1", "s2"]).to_dict())
    with pytest.raises(OffsetError, match="use a new checkpointLocation"):
        parse_stream_offset(offset.to_dict(), ["s1"])
    with pytest.raises(OffsetError, match="plain queue"):
        parse_stream_offset({"version": 1, "kind": "queue", "queue": "q", "run": "r",
                             "seq": 1}, ["q"])
    assert share({"a": 10, "b": 3, "c": 0}, 8) == {"a": 5, "b": 3, "c": 0}
    assert share({"a": 10, "b": 3}, None) == {"a": 10, "b": 3}
    assert sum(share({"a": 5, "b": 5, "c": 5}, 7).values()) == 7
    assert split_ranges({"a": 0, "b": 5}, {"a": 100, "b": 5}, 30) == [
        StreamRange("a", 0, 25), StreamRange("a", 25, 50), StreamRange("a", 50, 75),
        StreamRange("a", 75, 100)]


def test_stream_from_first_into_parquet(spark_session, warren, names, tmp_path):
    """availableNow from 'first' reads every message once, in batches of
    maxMessagesPerTrigger, each split into ranges of maxMessagesPerPartition."""
    stream = declare_stream(warren, names)
    publish(warren, stream, range(250))
    query = run(spark_session, warren, stream, tmp_path, per_trigger=100,
                maxMessagesPerPartition=40)
    assert input_rows(query) == [100, 100, 50]
    rows = parquet_rows(spark_session, tmp_path / "run" / "data")
    assert_exactly(rows, stream, range(250))
    assert last_logged_offset(tmp_path / "run" / "checkpoint") == {
        "version": 1, "kind": "stream", "offsets": {stream: 250}}
    # The stream keeps its messages: a second query from 'first' reads them all again.
    again = run(spark_session, warren, stream, tmp_path, name="again")
    assert input_rows(again) == [250]
    first = (spark_session.read.parquet(str(tmp_path / "again" / "data"))
             .orderBy("offset").first())
    assert (first.redelivered, first.offset, first.queue) == (False, 0, stream)
    assert first.headers["x-stream-offset"] == "0"


def test_exactly_once_after_a_kill_mid_stream(spark_session, warren, names, tmp_path):
    """A query killed (SIGKILL, driver and executors) after some batches, restarted from
    its checkpoint after more messages came: every offset exactly once, no gap."""
    stream = declare_stream(warren, names)
    first_part, second_part = 300, 120
    publish(warren, stream, range(first_part))
    output, checkpoint = tmp_path / "data", tmp_path / "checkpoint"
    log_path = tmp_path / "subprocess.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, SPARK_SUPPORT, "stream-to-parquet", amqp_url(warren), stream,
             str(output), str(checkpoint), "10"],
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            # Killed, its JVM cleans nothing up: keep its scratch files in tmp_path.
            env={**os.environ, "SPARK_LOCAL_DIRS": str(tmp_path / "spark-local")})
    try:
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT
        # Kill while a batch is planned (in the offset log) but not committed, after at
        # least KILL_AFTER_COMMITS committed ones: the restart must run it again.
        while not (len(numbered_files(checkpoint / "offsets"))
                   > len(numbered_files(checkpoint / "commits")) >= KILL_AFTER_COMMITS):
            assert process.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the Python driver, its JVM and workers
        process.wait()
    committed = numbered_files(checkpoint / "commits")
    planned = numbered_files(checkpoint / "offsets")
    assert KILL_AFTER_COMMITS <= len(committed) < first_part // 10, "not killed mid-stream"

    publish(warren, stream, range(first_part, first_part + second_part))
    query = start_stream_to_parquet(spark_session, amqp_url(warren), stream, output,
                                    checkpoint, per_trigger=100)
    assert query.awaitTermination(QUERY_TIMEOUT)
    rows = parquet_rows(spark_session, output)
    assert_exactly(rows, stream, range(first_part + second_part))
    # The batch planned before the kill but not committed (unless its commit made it in
    # the moment before the kill) ran again with its logged offsets: 10 rows, or none
    # if the file sink had already logged its files (the sink then skips it).
    replayed = len(planned) - len(committed)
    assert replayed <= 1
    assert all(rows in (0, 10) for rows in input_rows(query)[:replayed])


def test_two_streams_in_one_query(spark_session, warren, names, tmp_path):
    """queue="s1, s2": rows of both streams with their own offsets; maxMessagesPerTrigger
    is shared between them; the offset has one entry per stream."""
    one, two = declare_stream(warren, names), declare_stream(warren, names)
    publish(warren, one, range(40))
    publish(warren, two, range(25))
    query = run(spark_session, warren, f"{one}, {two}", tmp_path, per_trigger=30,
                maxMessagesPerPartition=10)
    assert sum(input_rows(query)) == 65
    assert max(input_rows(query)) == 30
    rows = parquet_rows(spark_session, tmp_path / "run" / "data")
    assert_exactly(rows, one, range(40))
    assert_exactly(rows, two, range(25))
    assert last_logged_offset(tmp_path / "run" / "checkpoint") == {
        "version": 1, "kind": "stream", "offsets": dict(sorted({one: 40, two: 25}.items()))}

    # The checkpoint belongs to these two streams: another set is refused.
    with pytest.raises(Exception, match="use a new checkpointLocation"):
        run(spark_session, warren, one, tmp_path)


def test_starting_offset_number_and_last(spark_session, warren, names, tmp_path):
    stream = declare_stream(warren, names)
    publish(warren, stream, range(20))
    run(spark_session, warren, stream, tmp_path, name="number", starting_offset=12)
    assert_exactly(parquet_rows(spark_session, tmp_path / "number" / "data"), stream,
                   range(12, 20))
    run(spark_session, warren, stream, tmp_path, name="last", starting_offset="last")
    assert_exactly(parquet_rows(spark_session, tmp_path / "last" / "data"), stream, [19])


def test_starting_offset_next_is_resolved_once(spark_session, warren, names, tmp_path):
    """'next' is the tail when the query first starts; a restart from the checkpoint
    reads from there, not from the tail at the restart."""
    stream = declare_stream(warren, names)
    publish(warren, stream, range(10))
    query = run(spark_session, warren, stream, tmp_path, starting_offset="next")
    assert input_rows(query) == [0]  # one empty batch: it checkpoints the resolved start
    publish(warren, stream, range(10, 15))
    query = run(spark_session, warren, stream, tmp_path, starting_offset="next")
    assert input_rows(query) == [5]
    assert_exactly(parquet_rows(spark_session, tmp_path / "run" / "data"), stream,
                   range(10, 15))


def test_stream_options_are_checked(spark_session, warren, names, tmp_path):
    url = amqp_url(warren)
    plain = names.queue("spark-plain")
    connection = connect(warren)
    try:
        channel = connection.channel()
        channel.queue_declare(plain)
        channel.basic_publish("", plain, b"x")
    finally:
        close_quietly(connection)
    with pytest.raises(Exception, match="must be first, last, next or an offset"):
        run(spark_session, warren, plain, tmp_path, name="bad", starting_offset="soon")
    with pytest.raises(Exception, match="not a stream queue"):
        run(spark_session, warren, plain, tmp_path, name="plain")
    with pytest.raises(Exception, match="stream queues are read with readStream"):
        (spark_session.read.format("amqp").option("url", url).option("queue", plain)
         .option("startingOffset", "first").load().collect())


@pytest.mark.warren_rabbitmq("4.3")   # a line with stream filtering: Warren filters
def test_a_filtered_stream_read_takes_the_messages_of_its_values(spark_session, warren,
                                                                 names, tmp_path):
    """Option filter: only the messages tagged (x-stream-filter-value) with one of its
    values become rows; batches and ranges still cut the offsets of every message."""
    stream = declare_stream(warren, names)
    tags = ["red", "blue", None, "green"]
    connection = connect(warren)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for n in range(100):
            tag = tags[n % 4]
            channel.basic_publish("", stream, f"{stream}:{n}".encode(), pika.BasicProperties(
                message_id=str(n), headers=None if tag is None else {
                    "x-stream-filter-value": tag}))
    finally:
        close_quietly(connection)
    query = run(spark_session, warren, stream, tmp_path, per_trigger=40,
                maxMessagesPerPartition=15, filter="red,green")
    assert input_rows(query) == [20, 20, 10]
    rows = parquet_rows(spark_session, tmp_path / "run" / "data")
    assert_exactly(rows, stream, [n for n in range(100) if tags[n % 4] in ("red", "green")])
    assert last_logged_offset(tmp_path / "run" / "checkpoint")["offsets"] == {stream: 100}


def declare_short_stream(warren, names) -> str:
    """A stream that keeps about 10,000 bytes, in segments of 2,000 (Warren's retention
    deletes whole old segments from its periodic flush after writes)."""
    stream = names.queue("spark-short")
    connection = connect(warren)
    try:
        connection.channel().queue_declare(stream, durable=True, arguments={
            "x-queue-type": "stream", "x-max-length-bytes": 10_000,
            "x-stream-max-segment-size-bytes": 2_000})
    finally:
        close_quietly(connection)
    return stream


def wait_for_head_above(warren, stream: str, offset: int) -> int:
    """Poll the stream's oldest offset until retention removed `offset`; returns it."""
    probe = StreamProbe(amqp_url(warren), "test retention")
    try:
        deadline = time.monotonic() + RETENTION_WAIT
        while (head := probe.head(stream)) is None or head <= offset:
            assert time.monotonic() < deadline, f"retention kept offset {offset} ({head})"
            publish(warren, stream, [])  # (a round trip while the flush runs)
    finally:
        probe.close()
    return head


@pytest.mark.warren_only("RabbitMQ 3.10 applies x-max-length-bytes per large segment")
def test_offsets_removed_by_retention_fail_the_query_unless_told_otherwise(
        spark_session, warren, names, tmp_path):
    """failOnDataLoss: offsets the query must read that retention removed fail the
    batch with an error that names them and the option (default), or are skipped."""
    stream = declare_short_stream(warren, names)
    publish(warren, stream, range(600))
    head = wait_for_head_above(warren, stream, 0)
    with pytest.raises(Exception, match=r"offsets 0 to \d+ of stream .* were removed by the "
                                        r"stream's retention.*failOnDataLoss"):
        run(spark_session, warren, stream, tmp_path, name="fail", starting_offset=0)
    query = run(spark_session, warren, stream, tmp_path, name="skip", starting_offset=0,
                failOnDataLoss="false")
    rows = parquet_rows(spark_session, tmp_path / "skip" / "data")
    # Retention may have moved on between the probe and the read, never back.
    first = min(offset for _, offset, _, _ in rows)
    assert first >= head
    assert_exactly(rows, stream, range(first, 600))
    assert sum(input_rows(query)) == 600 - first


@pytest.mark.warren_only("moves the test broker's clock (virtual time) between two "
                         "publishes instead of waiting for the next second")
def test_starting_timestamp_reads_from_the_first_message_at_or_after_it(
        spark_session, broker_factory, names, tmp_path):
    """startingTimestamp (milliseconds since the epoch) selects stream mode and starts
    every stream at its first message published in that second or later (AMQP
    timestamps, as x-stream-offset takes them, are whole seconds). On a broker of its
    own: the advanced clock stays ahead (tests/conftest.py, broker_of_the_module)."""
    broker = broker_factory("--testing")
    stream = declare_stream(broker, names)
    publish(broker, stream, range(10))
    control = ControlClient(broker.control_socket)
    stamped_by = time.time() + control.call("test.advance", seconds=0)   # broker time
    control.call("test.advance", seconds=2)   # the next messages: two seconds later
    second = int(stamped_by) + 1
    publish(broker, stream, range(10, 15))
    moment = second * 1000 + 999  # any millisecond of that second
    query = (spark_session.readStream.format("amqp").option("url", amqp_url(broker))
             .option("queue", stream).option("startingTimestamp", moment).load()
             .writeStream.format("parquet").option("path", str(tmp_path / "data"))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT), "availableNow query did not finish"
    assert_exactly(parquet_rows(spark_session, tmp_path / "data"), stream, range(10, 15))
