"""Throughput of the amqp PySpark source next to a raw pika consumer on the same machine.

Measures, on one queue filled with --messages messages of --size bytes each:

1. raw pika: one BlockingConnection consumer, manual acks, the prefetch the source uses
   (2 x --max-per-trigger), one multiple-ack per --max-per-trigger messages;
2. the stream source: ``readStream.format("amqp")`` with trigger(availableNow=True) and
   maxMessagesPerTrigger=--max-per-trigger into the no-op sink (``format("noop")``);
3. the batch source: ``read.format("amqp")`` into the no-op sink.

and, on one stream queue (x-queue-type=stream) filled with the same messages:

4. raw pika: one consumer from offset "first", prefetch --stream-prefetch, a multiple
   ack every half prefetch, until the last offset arrived;
5. the stream-queue source (exactly-once offset ranges): ``readStream.format("amqp")``
   with startingOffset=first, trigger(availableNow=True),
   maxMessagesPerTrigger=--stream-max-per-trigger and
   maxMessagesPerPartition=--stream-max-per-partition into the no-op sink; the
   partitions of a batch are read in parallel by the executors (--master).

The queue is refilled before each run. SparkSession start-up is not timed. Stream
figures: "wall" is rows / time from query start to its end; "in batches" leaves out
the time between batches; "batches 2..n" also leaves out the first batch (Spark's
warm-up); "first batch" is the time from the query's start to the end of its first
batch with rows. The batch figure is rows / time of the read-and-write job. --scenarios
chooses queue, stream or both (default).

    python3 bench/spark_source_throughput.py --start-warren            # a fresh Warren
    python3 bench/spark_source_throughput.py --port 5673               # RabbitMQ
    python3 bench/spark_source_throughput.py --url amqp://u:p@host:5672/%2F

Needs pika and pyspark[sql] (see docs/spark.md). Prints a table (and a JSON line with
--json).
"""

import argparse
import datetime
import json
import os
import queue as queue_module
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pika

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # spark.amqp (fill_stream) without installing the project
    sys.path.insert(0, REPO)
LISTENING = re.compile(r"event=listening .*host=(\S+) port=(\d+)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="AMQP URL (default amqp://guest:guest@HOST:PORT/%%2F)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5672)
    parser.add_argument("--start-warren", action="store_true",
                        help="start a Warren broker (temporary data dir, free port) for the run")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100, help="body size in bytes")
    parser.add_argument("--max-per-trigger", type=int, default=30_000,
                        help="the plain-queue source's maxMessagesPerTrigger (its default)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--scenarios", default="queue,stream",
                        help="comma-separated: queue (plain queue), stream (stream queue)")
    parser.add_argument("--stream-max-per-trigger", type=int, default=100_000)
    parser.add_argument("--stream-max-per-partition", type=int, default=25_000)
    parser.add_argument("--stream-prefetch", type=int, default=2_000)
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    return parser.parse_args(argv)


def start_warren(data_dir: str):
    """Start `python -m broker serve` on a free port; returns (process, port)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "broker", "serve", "--port", "0", "--management-port", "0",
         "--data-dir", data_dir],
        cwd=REPO, stderr=subprocess.PIPE, text=True)
    found = queue_module.Queue()

    def drain():  # keep reading, or the broker blocks on a full stderr pipe
        for line in process.stderr:
            match = LISTENING.search(line)
            if match:
                found.put(int(match.group(2)))

    threading.Thread(target=drain, daemon=True).start()
    try:
        return process, found.get(timeout=30)
    except queue_module.Empty:
        process.kill()
        raise SystemExit("Warren did not start") from None


def fill(url: str, queue: str, count: int, size: int) -> float:
    """Publish `count` messages (no confirms), then wait until the queue holds them all;
    returns the publish rate."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    body = b"x" * size
    started = time.perf_counter()
    for n in range(count):
        channel.basic_publish("", queue, body, pika.BasicProperties(message_id=str(n)))
    while channel.queue_declare(queue, passive=True).method.message_count < count:
        connection.process_data_events(time_limit=0.05)
    elapsed = time.perf_counter() - started
    connection.close()
    return count / elapsed


def raw_pika_consume(url: str, queue: str, count: int, ack_every: int) -> float:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=min(2 * ack_every, 65535))
    state = {"n": 0}

    def on_message(ch, method, properties, body):
        state["n"] += 1
        if state["n"] % ack_every == 0 or state["n"] == count:
            ch.basic_ack(method.delivery_tag, multiple=True)

    started = time.perf_counter()
    channel.basic_consume(queue, on_message)
    while state["n"] < count:
        connection.process_data_events(time_limit=1)
    elapsed = time.perf_counter() - started
    connection.close()
    return count / elapsed


def spark_session(master: str):
    # Spark's Python workers import spark.amqp: make the checkout importable for them.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, REPO)
    from pyspark.sql import SparkSession

    from spark.amqp import register

    session = (SparkSession.builder.master(master).appName("warren-spark-bench")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def fill_stream(url: str, stream: str, count: int, size: int) -> float:
    """Publish `count` messages to `stream` (no confirms), then wait until the stream's
    tail reached them (found as the source finds it); returns the publish rate."""
    from spark.amqp.stream_client import StreamProbe

    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    body = b"x" * size
    started = time.perf_counter()
    for n in range(count):
        channel.basic_publish("", stream, body, pika.BasicProperties(message_id=str(n)))
    connection.process_data_events(time_limit=0)
    probe = StreamProbe(url, "bench fill")
    try:
        while (probe.tail(stream) or 0) < count:
            time.sleep(0.05)
    finally:
        probe.close()
    elapsed = time.perf_counter() - started
    connection.close()
    return count / elapsed


def raw_pika_stream_consume(url: str, stream: str, count: int, prefetch: int) -> float:
    """One consumer from offset 'first' until offset count - 1 arrived; closes the
    connection instead of cancelling (pika's cancel nacks, which RabbitMQ 3.10 refuses
    on streams)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    state = {"n": 0, "last": -1}
    ack_every = max(1, prefetch // 2)

    def on_message(ch, method, properties, body):
        state["n"] += 1
        state["last"] = properties.headers["x-stream-offset"]
        if state["n"] % ack_every == 0:
            ch.basic_ack(method.delivery_tag, multiple=True)

    started = time.perf_counter()
    channel.basic_consume(stream, on_message, arguments={"x-stream-offset": "first"})
    while state["last"] < count - 1:
        connection.process_data_events(time_limit=1)
    elapsed = time.perf_counter() - started
    connection.close()
    return count / elapsed


def spark_stream(spark, url: str, queue: str, count: int, per_trigger: int, **options):
    checkpoint = tempfile.mkdtemp(prefix="warren-spark-bench-")
    started = time.perf_counter()
    started_at = time.time()
    reader = (spark.readStream.format("amqp").option("url", url).option("queue", queue)
              .option("maxMessagesPerTrigger", per_trigger))
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (reader.load()
             .writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    in_batches = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    # Without the first batch, which pays for Spark's warm-up (code generation, first
    # Python workers) and the consumer's start.
    later = batches[1:]
    later_s = sum(p["durationMs"]["triggerExecution"] for p in later) / 1000
    steady = sum(p["numInputRows"] for p in later) / later_s if later_s else 0.0
    first = batches[0]
    first_end = (datetime.datetime.fromisoformat(first["timestamp"].replace("Z", "+00:00"))
                 .timestamp() + first["durationMs"]["triggerExecution"] / 1000)
    return (rows, rows / elapsed, rows / in_batches if in_batches else 0.0, steady,
            len(batches), first_end - started_at)


def spark_batch(spark, url: str, queue: str):
    started = time.perf_counter()
    frame = spark.read.format("amqp").option("url", url).option("queue", queue).load()
    frame.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - started
    return elapsed


def run_queue_scenario(args, url: str, queue: str, results: dict, spark_factory) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_declare(queue)
    connection.close()

    results["publish_msg_s"] = fill(url, queue, args.messages, args.size)
    results["raw_pika_msg_s"] = raw_pika_consume(url, queue, args.messages,
                                                 args.max_per_trigger)

    spark = spark_factory()
    fill(url, queue, args.messages, args.size)
    rows, wall_rate, batch_rate, steady, batches, first = spark_stream(
        spark, url, queue, args.messages, args.max_per_trigger)
    results.update(stream_rows=rows, stream_batches=batches, stream_first_batch_s=first,
                   stream_rows_s=wall_rate, stream_rows_s_in_batches=batch_rate,
                   stream_rows_s_after_first_batch=steady)

    # The stream's last batch is back in the queue (not acknowledged at stop): top up.
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    leftover = channel.queue_declare(queue, passive=True).method.message_count
    connection.close()
    fill(url, queue, args.messages, args.size)
    elapsed = spark_batch(spark, url, queue)
    results["batch_rows"] = args.messages + leftover
    results["batch_rows_s"] = results["batch_rows"] / elapsed


def run_stream_scenario(args, url: str, stream: str, results: dict, spark_factory) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_declare(stream, durable=True,
                                       arguments={"x-queue-type": "stream"})
    connection.close()
    results["sq_publish_msg_s"] = fill_stream(url, stream, args.messages, args.size)
    results["sq_raw_pika_msg_s"] = raw_pika_stream_consume(url, stream, args.messages,
                                                           args.stream_prefetch)
    spark = spark_factory()
    rows, wall_rate, batch_rate, steady, batches, first = spark_stream(
        spark, url, stream, args.messages, args.stream_max_per_trigger,
        startingOffset="first", maxMessagesPerPartition=args.stream_max_per_partition,
        prefetch=args.stream_prefetch)
    results.update(sq_rows=rows, sq_batches=batches, sq_first_batch_s=first,
                   sq_rows_s=wall_rate,
                   sq_rows_s_in_batches=batch_rate, sq_rows_s_after_first_batch=steady)


def delete_queues(url: str, queues) -> None:
    try:
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        for queue in queues:
            channel.queue_delete(queue)
        connection.close()
    except pika.exceptions.AMQPError:
        pass


def main(argv=None) -> int:
    args = parse_args(argv)
    scenarios = {name.strip() for name in args.scenarios.split(",") if name.strip()}
    unknown = scenarios - {"queue", "stream"}
    if unknown or not scenarios:
        raise SystemExit(f"--scenarios takes queue and/or stream, got {args.scenarios!r}")
    warren = None
    data_dir = None
    if args.start_warren:
        data_dir = tempfile.mkdtemp(prefix="warren-bench-data-")
        warren, args.port = start_warren(data_dir)
    url = args.url or f"amqp://guest:guest@{args.host}:{args.port}/%2F"
    queue = f"spark-bench-{uuid.uuid4().hex}"
    stream = f"spark-bench-stream-{uuid.uuid4().hex}"
    results = {"messages": args.messages, "size": args.size,
               "max_per_trigger": args.max_per_trigger, "master": args.master}
    sessions = []

    def spark_factory():
        if not sessions:
            sessions.append(spark_session(args.master))
        return sessions[0]

    try:
        if "queue" in scenarios:
            run_queue_scenario(args, url, queue, results, spark_factory)
        if "stream" in scenarios:
            results.update(stream_max_per_trigger=args.stream_max_per_trigger,
                           stream_max_per_partition=args.stream_max_per_partition,
                           stream_prefetch=args.stream_prefetch)
            run_stream_scenario(args, url, stream, results, spark_factory)
        if sessions:
            sessions[0].stop()
    finally:
        delete_queues(url, [queue, stream])
        if warren is not None:
            warren.kill()
            warren.wait()

    print(f"{args.messages} messages of {args.size} B, {args.master}")
    if "queue" in scenarios:
        print(f"plain queue, maxMessagesPerTrigger {args.max_per_trigger}")
        print(f"  publish (pika, no confirms)        {results['publish_msg_s']:>10,.0f} msg/s")
        print(f"  raw pika consume (manual ack)      {results['raw_pika_msg_s']:>10,.0f} msg/s")
        print(f"  amqp stream -> noop (wall)         {results['stream_rows_s']:>10,.0f} rows/s"
              f"  ({results['stream_batches']} batches)")
        print(f"  amqp stream -> noop (in batches)   "
              f"{results['stream_rows_s_in_batches']:>10,.0f} rows/s")
        print(f"  amqp stream, batches 2..n          "
              f"{results['stream_rows_s_after_first_batch']:>10,.0f} rows/s")
        print(f"  amqp stream, first batch done      "
              f"{results['stream_first_batch_s']:>10.1f} s after start")
        print(f"  amqp batch read -> noop (wall)     {results['batch_rows_s']:>10,.0f} rows/s"
              f"  ({results['batch_rows']} rows)")
    if "stream" in scenarios:
        print(f"stream queue, maxMessagesPerTrigger {args.stream_max_per_trigger}, "
              f"maxMessagesPerPartition {args.stream_max_per_partition}, "
              f"prefetch {args.stream_prefetch}")
        print(f"  publish (pika, no confirms)        {results['sq_publish_msg_s']:>10,.0f} msg/s")
        print(f"  raw pika consume from first        "
              f"{results['sq_raw_pika_msg_s']:>10,.0f} msg/s")
        print(f"  amqp stream queue -> noop (wall)   {results['sq_rows_s']:>10,.0f} rows/s"
              f"  ({results['sq_batches']} batches)")
        print(f"  amqp stream queue (in batches)     "
              f"{results['sq_rows_s_in_batches']:>10,.0f} rows/s")
        print(f"  amqp stream queue, batches 2..n    "
              f"{results['sq_rows_s_after_first_batch']:>10,.0f} rows/s")
        print(f"  amqp stream queue, first batch     "
              f"{results['sq_first_batch_s']:>10.1f} s after start")
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
