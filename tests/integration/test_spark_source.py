"""The ``amqp`` PySpark data source (spark/amqp/) against a real broker.

One SparkSession for the module (spark_support.py); queries run one at a time. Streaming
tests use trigger(availableNow=True), whose end (awaitTermination) is the
synchronisation point; messages are checked with pika, waiting for deliveries with a
deadline, never for a fixed time. Against RabbitMQ: WARREN_TEST_BROKER=127.0.0.1:5673.
"""

import datetime
import json
import threading

import pika
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType, IntegerType, MapType, StringType, StructField, StructType, TimestampType,
)

from tests.support.pika_helpers import (  # noqa: F401  (names: fixture)
    amqp_url, close_quietly, connect, names, wait_for_count, wait_until,
)
from spark.amqp.messages import ARROW_SCHEMA
from spark.amqp.schema import SCHEMA
from spark.examples.pipeline import parse_args, start_pipeline
from tests.support.spark_support import (  # noqa: F401  (spark_session: fixture)
    assert_example_pipeline_published, example_pipeline_bodies,
    example_pipeline_expected, spark_session,
)

pytestmark = pytest.mark.slow   # Spark sessions and queries: tens of seconds

QUERY_TIMEOUT = 120  # seconds for one availableNow query
WAIT = 30.0  # seconds to wait for messages to arrive or come back to a queue


def declare(warren, queue: str, arguments=None) -> None:
    connection = connect(warren)
    try:
        connection.channel().queue_declare(queue, arguments=arguments)
    finally:
        close_quietly(connection)


def publish(warren, routing_key: str, messages, exchange: str = "") -> None:
    """Publish (body, properties) pairs with confirms."""
    connection = connect(warren)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for body, properties in messages:
            channel.basic_publish(exchange, routing_key, body, properties)
    finally:
        close_quietly(connection)


def wait_for_ready(warren, queue: str, count: int) -> None:
    """Wait until `queue` has `count` ready messages: after a query ended, the messages
    its reader held come back when the broker notices the connection closed."""
    connection = connect(warren)
    try:
        assert wait_for_count(connection.channel(), queue, count, timeout=WAIT) == count
    finally:
        close_quietly(connection)


def publish_ids(warren, queue: str, ids) -> None:
    publish(warren, queue, [(json.dumps({"id": i}).encode(),
                             pika.BasicProperties(message_id=str(i))) for i in ids])


def drain_exactly(warren, queue: str, count: int):
    """Consume (auto-ack) until `count` messages came, then check the queue holds no more.

    Messages the Spark reader left unacknowledged come back to the queue when its
    connection closes, a moment after the query ended: hence the wait. Returns the
    (method, properties, body) triples.
    """
    connection = connect(warren)
    try:
        channel = connection.channel()
        got = []
        channel.basic_consume(queue, lambda ch, m, p, b: got.append((m, p, b)), auto_ack=True)
        wait_until(connection, lambda: len(got) >= count, timeout=WAIT)
        # Two round trips: every delivery sent before is in; then nothing may be left.
        channel.queue_declare(queue, passive=True)
        ready = channel.queue_declare(queue, passive=True).method.message_count
        connection.process_data_events(time_limit=0)
        assert (len(got), ready) == (count, 0), [b for _, _, b in got]
        return got
    finally:
        close_quietly(connection)


class BatchLog:
    """foreachBatch function recording (batch_id, [(message_id, redelivered)]) per call;
    raises after recording batch `fail_on`."""

    def __init__(self, fail_on=None):
        self.calls = []
        self.fail_on = fail_on

    def __call__(self, batch, batch_id):
        rows = batch.select("message_id", "redelivered").collect()
        self.calls.append((batch_id, [(int(r.message_id), r.redelivered) for r in rows]))
        if batch_id == self.fail_on:
            raise RuntimeError(f"injected failure in batch {batch_id}")

    def ids(self):
        return [i for _, rows in self.calls for i, _ in rows]

    def sizes(self):
        return [len(rows) for _, rows in self.calls]


def run_available_now(spark, warren, queue, checkpoint, sink, per_trigger=10, **options):
    reader = (spark.readStream.format("amqp")
              .option("url", amqp_url(warren))
              .option("queue", queue)
              .option("maxMessagesPerTrigger", per_trigger))
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (reader.load()
             .writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True)
             .start())
    assert query.awaitTermination(QUERY_TIMEOUT), "availableNow query did not finish"
    return query


def test_arrow_schema_is_what_spark_derives_from_the_schema():
    from pyspark.sql.pandas.types import to_arrow_schema

    assert to_arrow_schema(SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_stream_restarts_are_at_least_once(spark_session, warren, names, tmp_path):
    """No message is lost across a failed batch and two restarts from one checkpoint;
    what is read twice is exactly the failed batch (each completed run acknowledges its
    last batch before it stops), and the second copies are marked redelivered."""
    queue = names.queue("spark-alo")
    declare(warren, queue)
    checkpoint = tmp_path / "checkpoint"
    publish_ids(warren, queue, range(30))

    # Run 1: batch 1 fails after its rows were seen (so it counts as processed by the
    # sink, but the batch never completes).
    first = BatchLog(fail_on=1)
    with pytest.raises(StreamingQueryException, match="injected failure in batch 1"):
        run_available_now(spark_session, warren, queue, checkpoint, first)
    assert first.sizes() == [10, 10]
    wait_for_ready(warren, queue, 20)  # batch 0 was acknowledged, nothing else

    # Run 2: Spark replays batch 1 with the first run's offsets: no rows (its messages
    # were requeued and come again in later batches).
    second = BatchLog()
    run_available_now(spark_session, warren, queue, checkpoint, second)
    assert second.calls[0] == (1, [])
    assert sorted(second.ids()) == list(range(10, 30))

    # Run 3: only new messages (run 2 acknowledged its last batch when it found no more).
    publish_ids(warren, queue, range(30, 40))
    third = BatchLog()
    run_available_now(spark_session, warren, queue, checkpoint, third)

    runs = [first, second, third]
    seen = [i for run in runs for i in run.ids()]
    assert set(seen) == set(range(40)), "a message was lost"
    duplicates = len(seen) - len(set(seen))
    failed_batch = set(first.calls[1][1][i][0] for i in range(10))
    assert duplicates == len(failed_batch) == 10
    assert {i for i in seen if seen.count(i) > 1} == failed_batch
    assert sorted(third.ids()) == list(range(30, 40))
    # Every second copy is flagged redelivered. (A first copy may be flagged too: the
    # broker sets the flag on any message it delivered before, and a stopped reader can
    # hold prefetched messages it never handed to Spark.)
    copies = [(i, redelivered) for run in runs for _, rows in run.calls for i, redelivered in rows]
    first_seen = set()
    for i, redelivered in copies:
        assert redelivered or i not in first_seen, i
        first_seen.add(i)

    # And nothing is left in the queue for the next run.
    drain_exactly(warren, queue, 0)


def test_several_queues_are_read_at_least_once_with_one_consumer_each(
        spark_session, warren, names, tmp_path):
    """queue=a,b,c reads three queues: a batch takes an even share of
    maxMessagesPerTrigger from each (the queue column says which), each queue's
    deliveries are acknowledged on its own connection only when Spark completed the
    batch, so a failed batch comes back in every queue and nothing is lost."""
    queues = [names.queue(f"spark-multi-{n}") for n in "abc"]
    ids = {queues[0]: range(0, 12), queues[1]: range(12, 24), queues[2]: range(24, 30)}
    for queue in queues:
        declare(warren, queue)
        publish_ids(warren, queue, ids[queue])
    source_of = {i: queue for queue, numbers in ids.items() for i in numbers}
    checkpoint = tmp_path / "checkpoint"
    rows = []

    def recording(fail_on=None):
        def sink(batch, batch_id):
            found = [(batch_id, int(r.message_id), r.queue)
                     for r in batch.select("message_id", "queue").collect()]
            rows.extend(found)
            if batch_id == fail_on:
                raise RuntimeError(f"injected failure in batch {batch_id}")
        return sink

    with pytest.raises(StreamingQueryException, match="injected failure in batch 1"):
        run_available_now(spark_session, warren, ",".join(queues), checkpoint,
                          recording(fail_on=1), per_trigger=12)
    first_batch = [(i, queue) for batch_id, i, queue in rows if batch_id == 0]
    assert sorted(first_batch) == [(i, source_of[i]) for i in (0, 1, 2, 3, 12, 13, 14, 15,
                                                               24, 25, 26, 27)]
    failed = {i for batch_id, i, _ in rows if batch_id == 1}
    # Batch 0 was acknowledged in each queue; the failed batch 1 is back in all three.
    for queue, left in zip(queues, (8, 8, 2)):
        wait_for_ready(warren, queue, left)

    run_available_now(spark_session, warren, ",".join(queues), checkpoint, recording(),
                      per_trigger=12)
    seen = [i for _, i, _ in rows]
    assert set(seen) == set(range(30)), "a message was lost"
    assert {i for i in seen if seen.count(i) > 1} == failed
    assert len(seen) == 30 + len(failed)
    assert all(queue == source_of[i] for _, i, queue in rows)
    for queue in queues:
        drain_exactly(warren, queue, 0)


def test_available_now_reads_what_was_there_in_batches_of_max(spark_session, warren, names,
                                                               tmp_path):
    """availableNow reads the 25 messages ready at the start in batches of
    maxMessagesPerTrigger, and none of those published while it runs."""
    queue = names.queue("spark-now")
    declare(warren, queue)
    publish_ids(warren, queue, range(25))
    log = BatchLog()

    def sink(batch, batch_id):
        log(batch, batch_id)
        if batch_id == 0:
            publish_ids(warren, queue, range(100, 105))

    run_available_now(spark_session, warren, queue, tmp_path / "checkpoint", sink)
    assert log.sizes() == [10, 10, 5]
    assert sorted(log.ids()) == list(range(25))
    # Left in the queue: only the 5 late arrivals (the last batch was acknowledged).
    left = drain_exactly(warren, queue, 5)
    assert {int(p.message_id) for _, p, _ in left} == set(range(100, 105))


def test_first_batch_takes_at_most_a_thousand_messages(spark_session, warren, names,
                                                       tmp_path):
    """A query's first batch is cut at 1,000 messages (so that its rows are committed
    sooner); the next ones take maxMessagesPerTrigger."""
    queue = names.queue("spark-first")
    declare(warren, queue)
    publish_ids(warren, queue, range(2500))
    log = BatchLog()
    run_available_now(spark_session, warren, queue, tmp_path / "checkpoint", log,
                      per_trigger=1500)
    assert log.sizes() == [1000, 1500]
    assert log.ids() == list(range(2500))
    drain_exactly(warren, queue, 0)


def test_max_bytes_per_trigger_limits_each_batch_by_body_size(spark_session, warren,
                                                               names, tmp_path):
    """maxBytesPerTrigger caps the bodies of a batch (at least one message per batch, even
    one larger than the cap); maxMessagesPerTrigger still applies."""
    queue = names.queue("spark-bytes")
    declare(warren, queue)
    sizes = [100] * 7 + [500, 100]
    publish(warren, queue, [(b"x" * size, pika.BasicProperties(message_id=str(i)))
                            for i, size in enumerate(sizes)])
    log = BatchLog()
    run_available_now(spark_session, warren, queue, tmp_path / "checkpoint", log,
                      per_trigger=2, maxBytesPerTrigger=350)
    assert log.sizes() == [2, 2, 2, 1, 1, 1]
    assert log.ids() == list(range(9))


def test_running_query_acknowledges_completed_batches(spark_session, warren, names,
                                                     tmp_path):
    """A query with the default trigger: every batch is acknowledged when Spark polls
    for the next one; after stop() at most the last batch (completed an instant before
    the stop) comes back to the queue."""
    queue = names.queue("spark-run")
    declare(warren, queue)
    log = BatchLog()
    total = 30
    everything_seen = threading.Event()

    def sink(batch, batch_id):
        log(batch, batch_id)
        if len(log.ids()) >= total:
            everything_seen.set()

    query = (spark_session.readStream.format("amqp").option("url", amqp_url(warren))
             .option("queue", queue).option("maxMessagesPerTrigger", 10).load()
             .writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        publish_ids(warren, queue, range(total))
        assert everything_seen.wait(QUERY_TIMEOUT), log.calls
    finally:
        query.stop()
    assert sorted(log.ids()) == list(range(total))
    assert max(log.sizes()) <= 10
    last = {i for i, _ in log.calls[-1][1]}
    connection = connect(warren)
    try:
        channel = connection.channel()
        # The reader's consumer is gone once its connection closed, which requeued what
        # it held unacknowledged.
        assert wait_for_count(channel, queue, 0, field="consumer_count", timeout=WAIT) == 0
        left = set()
        while (message := channel.basic_get(queue, auto_ack=True))[0] is not None:
            left.add(int(message[1].message_id))
    finally:
        close_quietly(connection)
    assert left <= last


def test_source_rows_carry_the_message_properties(spark_session, warren, names):
    queue = names.queue("spark-props")
    declare(warren, queue)
    properties = pika.BasicProperties(
        content_type="application/json", headers={"tenant": "acme", "attempt": 3,
                                                  "urgent": True, "raw": b"\xffA"},
        message_id="m-1", correlation_id="c-1", timestamp=1767225600, delivery_mode=2)
    publish(warren, queue, [(b'{"a": 1}', properties)])
    rows = (spark_session.read.format("amqp").option("url", amqp_url(warren))
            .option("queue", queue).load().collect())
    assert rows == [Row(
        body=bytearray(b'{"a": 1}'), routing_key=queue, exchange="",
        content_type="application/json",
        headers={"tenant": "acme", "attempt": "3", "urgent": "true", "raw": "\\xffA"},
        message_id="m-1", correlation_id="c-1",
        timestamp=datetime.datetime(2026, 1, 1, 0, 0), delivery_mode=2, redelivered=False,
        queue=queue, offset=None)]


def test_batch_read_drains_and_acknowledges(spark_session, warren, names):
    queue = names.queue("spark-batch")
    declare(warren, queue)
    publish_ids(warren, queue, range(12))

    def reader():
        return (spark_session.read.format("amqp").option("url", amqp_url(warren))
                .option("queue", queue))

    first = reader().option("maxMessages", 5).load().collect()
    assert sorted(int(r.message_id) for r in first) == list(range(5))
    rest = reader().load().collect()
    assert sorted(int(r.message_id) for r in rest) == list(range(5, 12))
    assert not any(r.redelivered for r in first + rest)
    drain_exactly(warren, queue, 0)


def test_batch_write_round_trip(spark_session, warren, names):
    queue = names.queue("spark-write")
    declare(warren, queue)
    schema = StructType([
        StructField("body", BinaryType()), StructField("routing_key", StringType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("content_type", StringType()), StructField("message_id", StringType()),
        StructField("correlation_id", StringType()), StructField("timestamp", TimestampType()),
        StructField("delivery_mode", IntegerType()),
    ])
    stamp = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    rows = [(f"payload-{i}".encode(), queue, {"n": str(i)}, "text/plain", f"id-{i}",
             f"corr-{i}", stamp, 1 + i % 2) for i in range(20)]
    (spark_session.createDataFrame(rows, schema).repartition(3)
     .write.format("amqp").mode("append").option("url", amqp_url(warren)).save())

    got = drain_exactly(warren, queue, 20)
    by_id = {p.message_id: (p, b) for _, p, b in got}
    assert sorted(by_id) == sorted(f"id-{i}" for i in range(20))
    for i in range(20):
        properties, body = by_id[f"id-{i}"]
        assert body == f"payload-{i}".encode()
        assert properties.headers == {"n": str(i)}
        assert (properties.content_type, properties.correlation_id) == ("text/plain",
                                                                         f"corr-{i}")
        assert properties.timestamp == int(stamp.timestamp())
        assert properties.delivery_mode == 1 + i % 2

    # A string body, routed by the routingKey option (persistent by default).
    (spark_session.createDataFrame([("hello",), ("world",)], "body STRING")
     .write.format("amqp").mode("append").option("url", amqp_url(warren))
     .option("routingKey", queue).save())
    got = drain_exactly(warren, queue, 2)
    assert sorted(b for _, _, b in got) == [b"hello", b"world"]
    assert {p.delivery_mode for _, p, _ in got} == {2}


def test_stream_write_publishes_each_batch(spark_session, warren, names, tmp_path):
    source, target = names.queue("spark-in"), names.queue("spark-out")
    declare(warren, source)
    declare(warren, target)
    publish_ids(warren, source, range(15))
    query = (spark_session.readStream.format("amqp").option("url", amqp_url(warren))
             .option("queue", source).option("maxMessagesPerTrigger", 10).load()
             .select(F.concat(F.lit("seen:"), F.col("message_id")).alias("body"),
                     "message_id")
             .writeStream.format("amqp").option("url", amqp_url(warren))
             .option("routingKey", target)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT)
    assert [p["numInputRows"] for p in query.recentProgress] == [10, 5]
    got = drain_exactly(warren, target, 15)
    assert sorted(b for _, _, b in got) == sorted(f"seen:{i}".encode() for i in range(15))


def test_refused_publishes_fail_the_write(spark_session, warren, names):
    full = names.queue("spark-full")
    declare(warren, full, {"x-max-length": 1, "x-overflow": "reject-publish"})
    frame = spark_session.createDataFrame([("a",), ("b",), ("c",)], "body STRING").coalesce(1)
    with pytest.raises(Exception, match="Basic.Nack"):
        (frame.write.format("amqp").mode("append").option("url", amqp_url(warren))
         .option("routingKey", full).save())

    with pytest.raises(Exception, match="unroutable"):
        (frame.write.format("amqp").mode("append").option("url", amqp_url(warren))
         .option("exchange", "amq.direct").option("routingKey", names.queue("nobody"))
         .option("mandatory", "true").save())

    # The writer declares nothing: a missing exchange closes the channel (404).
    with pytest.raises(Exception, match="closed the channel.*404"):
        (frame.write.format("amqp").mode("append").option("url", amqp_url(warren))
         .option("exchange", names.queue("no-such-exchange")).option("routingKey", full)
         .save())


def test_invalid_options_are_rejected_before_reading(spark_session, warren, names, tmp_path):
    queue = names.queue("spark-opts")
    declare(warren, queue)
    url = amqp_url(warren)
    with pytest.raises(Exception, match="maxMessagesPerPartition.*applies to readStream "
                                        "on stream queues"):
        (spark_session.readStream.format("amqp").option("url", url).option("queue", queue)
         .option("maxMessagesPerPartition", 10).load()
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c1"))
         .start().awaitTermination(QUERY_TIMEOUT))
    with pytest.raises(Exception, match="must be greater than maxMessagesPerTrigger"):
        (spark_session.readStream.format("amqp").option("url", url).option("queue", queue)
         .option("maxMessagesPerTrigger", 100).option("prefetch", 50).load()
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c2"))
         .start().awaitTermination(QUERY_TIMEOUT))
    with pytest.raises(Exception, match="does not exist"):
        (spark_session.read.format("amqp").option("url", url)
         .option("queue", names.queue("missing")).load().collect())
    with pytest.raises(Exception, match="does not know column 'extra'"):
        (spark_session.createDataFrame([("a", 1)], "body STRING, extra INT")
         .write.format("amqp").mode("append").option("url", url).option("routingKey", queue)
         .save())


def test_example_pipeline(spark_session, warren, names, tmp_path):
    """spark/examples/pipeline.py: JSON events -> deduplicated per-minute aggregates with a
    watermark -> Parquet, and published to an exchange."""
    queue = names.queue("spark-events")
    declare(warren, queue)
    connection = connect(warren)
    try:
        channel = connection.channel()
        results = channel.queue_declare("", exclusive=True).method.queue
        routing_key = names.queue("aggregates")
        channel.queue_bind(results, "amq.topic", routing_key)
        bodies = example_pipeline_bodies()
        publish(warren, queue, [(body, None) for body in bodies])

        output = tmp_path / "out"
        args = parse_args(["--url", amqp_url(warren), "--queue", queue, "--output",
                           str(output), "--available-now", "--results-routing-key",
                           routing_key])
        query = start_pipeline(spark_session, args)
        assert query.awaitTermination(QUERY_TIMEOUT)

        expected = example_pipeline_expected()
        parquet = spark_session.read.parquet(str(output / "aggregates")).collect()
        assert {(r.window_start.isoformat(), r.kind): (r.events, r.amount)
                for r in parquet} == expected
        assert len(parquet) == len(expected)

        published = []
        channel.basic_consume(results, lambda ch, m, p, b: published.append((p, b)),
                              auto_ack=True)
        wait_until(connection, lambda: len(published) >= len(expected), timeout=WAIT)
        assert_example_pipeline_published(published)
    finally:
        close_quietly(connection)
