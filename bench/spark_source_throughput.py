"""Throughput of the amqp PySpark source and writer next to raw pika on the same machine.

Scenarios (--scenarios, comma-separated, run in the order given):

queue: --messages messages of --size bytes spread over --queues plain queues;
  1. raw pika: one BlockingConnection consumer per queue, each in a process of its own,
     all at once; manual acks, the prefetch the source uses (2 x --max-per-trigger), one
     multiple-ack per --max-per-trigger messages;
  2. the stream source: ``readStream.format("amqp")`` over all the queues
     (queue=a,b,...) with trigger(availableNow=True) and
     maxMessagesPerTrigger=--max-per-trigger into the no-op sink (``format("noop")``);
  3. the batch source: ``read.format("amqp")`` of the first queue into the no-op sink.
stream: the same messages spread over --streams stream queues (x-queue-type=stream);
  4. raw pika: one consumer per stream (a process each, all at once) from offset
     "first", prefetch --stream-prefetch, a multiple ack every half prefetch;
  5. the stream-queue source: startingOffset=first, trigger(availableNow=True),
     maxMessagesPerTrigger=--stream-max-per-trigger and
     maxMessagesPerPartition=--stream-max-per-partition into the no-op sink; the
     partitions of a batch are read in parallel by the executors (--master).
writer: 6. raw pika publishing --messages persistent messages with publisher confirms,
  at most 1000 unconfirmed (what the writer does), next to 7.
  ``df.write.format("amqp")`` of as many rows (cached first) in --writer-partitions tasks,
  twice: the session's first Python write (cold: Spark starts its Python workers, which
  import the connector) and a second one (warm).
latency: a plain queue of --latency-messages messages read by an availableNow query
  twice: the session's first query (cold; put latency first in --scenarios) and again
  (warm). Prints when the first batch was done and Spark's durationMs of its phases.

Queues are refilled before each run. SparkSession start-up is not timed. Stream
figures: "wall" is rows / time from query start to its end; "in batches" leaves out
the time between batches; "batches 2..n" also leaves out the first batch (Spark's
warm-up); "first batch" is the time from the query's start to the end of its first
batch with rows. The batch figure is rows / time of the read-and-write job.

    python3 bench/spark_source_throughput.py --start-warren            # a fresh Warren
    python3 bench/spark_source_throughput.py --port 5673               # RabbitMQ
    python3 bench/spark_source_throughput.py --start-warren --master 'local[4]' \
        --queues 4 --streams 4 --stream-max-per-partition 100000 --scenarios queue,stream

Needs pika and pyspark[sql] (see docs/spark.md). Prints a table (and a JSON line with
--json).
"""

import argparse
import datetime
import json
import multiprocessing
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
                        help="comma-separated: queue (plain queues), stream (stream queues), "
                             "writer (publishing), latency (first batch, cold and warm "
                             "session; must come first to see a cold session)")
    parser.add_argument("--queues", type=int, default=1,
                        help="plain queues read by one query (option queue=a,b,...); the "
                             "messages are spread evenly over them")
    parser.add_argument("--streams", type=int, default=1,
                        help="stream queues read by one query; the messages are spread "
                             "evenly over them")
    parser.add_argument("--writer-partitions", type=int, default=2,
                        help="tasks (DataFrame partitions) of the writer scenario")
    parser.add_argument("--latency-messages", type=int, default=1_000,
                        help="messages in the queue for the latency scenario")
    parser.add_argument("--stream-max-per-trigger", type=int, default=100_000)
    parser.add_argument("--stream-max-per-partition", type=int, default=25_000)
    parser.add_argument("--stream-prefetch", type=int, default=2_000)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark configuration for the session (repeatable)")
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


def raw_pika_consume(url: str, queue: str, count: int, ack_every: int) -> tuple:
    """One consumer reading `count` messages; returns (count, start, end) wall times."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=min(2 * ack_every, 65535))
    state = {"n": 0}

    def on_message(ch, method, properties, body):
        state["n"] += 1
        if state["n"] % ack_every == 0 or state["n"] == count:
            ch.basic_ack(method.delivery_tag, multiple=True)

    started = time.time()
    channel.basic_consume(queue, on_message)
    while state["n"] < count:
        connection.process_data_events(time_limit=1)
    ended = time.time()
    connection.close()
    return count, started, ended


def spark_session(master: str, confs=()):
    # Spark's Python workers import spark.amqp: make the checkout importable for them.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, REPO)
    from pyspark.sql import SparkSession

    from spark.amqp import register

    session = (SparkSession.builder.master(master).appName("warren-spark-bench")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    for conf in confs:
        key, _, value = conf.partition("=")
        session = session.config(key, value)
    session = session.getOrCreate()
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


def raw_pika_stream_consume(url: str, stream: str, count: int, prefetch: int) -> tuple:
    """One consumer from offset 'first' until offset count - 1 arrived; closes the
    connection instead of cancelling (pika's cancel nacks, which RabbitMQ 3.10 refuses
    on streams). Returns (count, start, end) wall times."""
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

    started = time.time()
    channel.basic_consume(stream, on_message, arguments={"x-stream-offset": "first"})
    while state["last"] < count - 1:
        connection.process_data_events(time_limit=1)
    ended = time.time()
    connection.close()
    return count, started, ended


def in_parallel(function, argument_lists) -> float:
    """Run `function` (returning (count, start, end)) once per argument list, each in a
    process of its own, at the same time; returns all counts / the whole span."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(len(argument_lists)) as pool:
        spans = pool.starmap(function, argument_lists)
    return sum(c for c, _, _ in spans) / (max(e for _, _, e in spans)
                                          - min(s for _, s, _ in spans))


def raw_pika_confirmed_publish(url: str, queue: str, count: int, size: int,
                               window: int) -> float:
    """Publish `count` messages with publisher confirms, at most `window` unconfirmed
    (what the writer does, on pika's channel directly, with basic_publish per message);
    returns messages/s."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()._impl
    state = {"confirmed": 0, "selected": False}

    def on_confirm(frame):
        state["confirmed"] = frame.method.delivery_tag
        # End process_data_events(time_limit) now rather than at the limit (a timer is
        # one of the events it returns for; a confirm to this callback is not).
        connection.call_later(0, lambda: None)

    channel.confirm_delivery(ack_nack_callback=on_confirm,
                             callback=lambda frame: state.update(selected=True))
    while not state["selected"]:
        connection.process_data_events(time_limit=0.1)
    body = b"x" * size
    started = time.perf_counter()
    for n in range(1, count + 1):
        channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
        if n - state["confirmed"] >= window:
            while n - state["confirmed"] > window // 2:
                connection.process_data_events(time_limit=0.1)
        elif n % 100 == 0:
            connection.process_data_events(time_limit=0)
    while state["confirmed"] < count:
        connection.process_data_events(time_limit=0.1)
    elapsed = time.perf_counter() - started
    connection.close()
    return count / elapsed


def spark_stream(spark, url: str, queue: str, per_trigger: int, **options) -> dict:
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
    first = batches[0]
    first_start = datetime.datetime.fromisoformat(
        first["timestamp"].replace("Z", "+00:00")).timestamp()
    return {"rows": rows, "wall": rows / elapsed,
            "in_batches": rows / in_batches if in_batches else 0.0,
            "after_first": sum(p["numInputRows"] for p in later) / later_s if later_s else 0.0,
            "batches": len(batches),
            "first_batch_s": first_start + first["durationMs"]["triggerExecution"] / 1000
            - started_at,
            "first_trigger_start_s": first_start - started_at,
            "first_rows": first["numInputRows"],
            "first_durations_ms": first["durationMs"]}


def spark_batch(spark, url: str, queue: str):
    started = time.perf_counter()
    frame = spark.read.format("amqp").option("url", url).option("queue", queue).load()
    frame.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - started
    return elapsed


def declare(url: str, queues, arguments=None) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    for queue in queues:
        channel.queue_declare(queue, durable=arguments is not None, arguments=arguments)
    connection.close()


def ready_count(url: str, queues) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    count = sum(channel.queue_declare(q, passive=True).method.message_count for q in queues)
    connection.close()
    return count


def run_queue_scenario(args, url: str, queues: list, results: dict, spark_factory) -> None:
    """The plain-queue source over len(queues) queues, args.messages spread over them;
    raw pika: one consumer (process) per queue at the same time."""
    declare(url, queues)
    share = args.messages // len(queues)
    results["publish_msg_s"] = min(fill(url, q, share, args.size) for q in queues)
    results["raw_pika_msg_s"] = in_parallel(
        raw_pika_consume, [(url, q, share, args.max_per_trigger) for q in queues])

    spark = spark_factory()
    for queue in queues:
        fill(url, queue, share, args.size)
    results["stream"] = spark_stream(spark, url, ",".join(queues), args.max_per_trigger)

    # What the stream left (nothing, when its last batch was acknowledged), then a
    # refill of the first queue, read with the batch read.
    results["batch_leftover"] = ready_count(url, queues)
    fill(url, queues[0], args.messages, args.size)
    results["batch_rows"] = ready_count(url, queues[:1])
    results["batch_rows_s"] = results["batch_rows"] / spark_batch(spark, url, queues[0])


def run_stream_scenario(args, url: str, streams: list, results: dict, spark_factory) -> None:
    """The stream-queue source over len(streams) streams, args.messages spread over
    them; raw pika: one consumer (process) per stream at the same time."""
    declare(url, streams, arguments={"x-queue-type": "stream"})
    share = args.messages // len(streams)
    results["sq_publish_msg_s"] = min(fill_stream(url, s, share, args.size) for s in streams)
    results["sq_raw_pika_msg_s"] = in_parallel(
        raw_pika_stream_consume, [(url, s, share, args.stream_prefetch) for s in streams])
    spark = spark_factory()
    results["sq"] = spark_stream(
        spark, url, ",".join(streams), args.stream_max_per_trigger,
        startingOffset="first", maxMessagesPerPartition=args.stream_max_per_partition,
        prefetch=args.stream_prefetch)


def run_writer_scenario(args, url: str, queue: str, results: dict, spark_factory) -> None:
    """Raw pika publishing with confirms (window 1000, like the writer) next to
    df.write.format("amqp") of the same number of rows, in --writer-partitions tasks."""
    from spark.amqp.publisher import CONFIRM_WINDOW

    declare(url, [queue])
    results["writer_raw_pika_msg_s"] = raw_pika_confirmed_publish(
        url, queue, args.messages, args.size, CONFIRM_WINDOW)
    purge(url, queue)
    spark = spark_factory()
    frame = (spark.range(args.messages, numPartitions=args.writer_partitions)
             .selectExpr(f"CAST(repeat('x', {args.size}) AS BINARY) AS body").cache())
    frame.count()  # the rows exist before the write is timed
    for name in ("cold", "warm"):
        started = time.perf_counter()
        (frame.write.format("amqp").mode("append").option("url", url)
         .option("routingKey", queue).save())
        elapsed = time.perf_counter() - started
        results[f"writer_{name}_rows"] = ready_count(url, [queue])
        results[f"writer_{name}_rows_s"] = args.messages / elapsed
        purge(url, queue)
    frame.unpersist()


def run_latency_scenario(args, url: str, queue: str, results: dict, spark_factory) -> None:
    """Time from query start to the first batch done, for a small queue, with the
    session's first query (cold) and again (warm)."""
    declare(url, [queue])
    spark = spark_factory()
    for name in ("cold", "warm"):
        fill(url, queue, args.latency_messages, args.size)
        results[f"latency_{name}"] = spark_stream(spark, url, queue, args.max_per_trigger)


def purge(url: str, queue: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_purge(queue)
    connection.close()


def delete_queues(url: str, queues) -> None:
    try:
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        for queue in queues:
            channel.queue_delete(queue)
        connection.close()
    except pika.exceptions.AMQPError:
        pass


SCENARIOS = ("latency", "queue", "stream", "writer")


def print_stream(title: str, figures: dict) -> None:
    print(f"  {title} -> noop (wall)   {figures['wall']:>10,.0f} rows/s"
          f"  ({figures['rows']} rows, {figures['batches']} batches)")
    print(f"  {title} (in batches)     {figures['in_batches']:>10,.0f} rows/s")
    print(f"  {title}, batches 2..n    {figures['after_first']:>10,.0f} rows/s")
    print(f"  {title}, first batch     {figures['first_batch_s']:>10.1f} s after start "
          f"({figures['first_rows']} rows; first trigger began "
          f"{figures['first_trigger_start_s']:.1f} s after start; durationMs "
          f"{json.dumps(figures['first_durations_ms'], sort_keys=True)})")


def report(args, scenarios, results) -> None:
    print(f"{args.messages} messages of {args.size} B, {args.master} {' '.join(args.conf)}, "
          f"load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    if "latency" in scenarios:
        print(f"first batch, {args.latency_messages} messages in one plain queue")
        print_stream("cold session", results["latency_cold"])
        print_stream("warm session", results["latency_warm"])
    if "queue" in scenarios:
        print(f"plain queues: {args.queues}, maxMessagesPerTrigger {args.max_per_trigger}")
        print(f"  publish (pika, no confirms)        {results['publish_msg_s']:>10,.0f} msg/s")
        print(f"  raw pika consume (manual ack)      {results['raw_pika_msg_s']:>10,.0f} msg/s"
              f"  ({args.queues} consumer processes)")
        print_stream("amqp stream", results["stream"])
        print(f"  amqp batch read -> noop (wall)     {results['batch_rows_s']:>10,.0f} rows/s"
              f"  ({results['batch_rows']} rows; left by the stream: "
              f"{results['batch_leftover']})")
    if "stream" in scenarios:
        print(f"stream queues: {args.streams}, maxMessagesPerTrigger "
              f"{args.stream_max_per_trigger}, maxMessagesPerPartition "
              f"{args.stream_max_per_partition}, prefetch {args.stream_prefetch}")
        print(f"  publish (pika, no confirms)        {results['sq_publish_msg_s']:>10,.0f} msg/s")
        print(f"  raw pika consume from first        "
              f"{results['sq_raw_pika_msg_s']:>10,.0f} msg/s  ({args.streams} consumer "
              f"processes)")
        print_stream("amqp stream queue", results["sq"])
    if "writer" in scenarios:
        print(f"writer: {args.writer_partitions} partitions, confirms")
        print(f"  raw pika publish, confirms (window) {results['writer_raw_pika_msg_s']:>9,.0f} "
              f"msg/s")
        for name in ("cold", "warm"):
            print(f"  df.write.format('amqp'), {name}      "
                  f"{results[f'writer_{name}_rows_s']:>10,.0f} rows/s"
                  f"  ({results[f'writer_{name}_rows']} rows arrived)")


def main(argv=None) -> int:
    args = parse_args(argv)
    scenarios = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown or not scenarios:
        raise SystemExit(f"--scenarios takes {', '.join(SCENARIOS)}, got {args.scenarios!r}")
    warren = None
    if args.start_warren:
        data_dir = tempfile.mkdtemp(prefix="warren-bench-data-")
        warren, args.port = start_warren(data_dir)
    url = args.url or f"amqp://guest:guest@{args.host}:{args.port}/%2F"
    run = uuid.uuid4().hex
    queues = [f"spark-bench-{run}-{n}" for n in range(args.queues)]
    streams = [f"spark-bench-stream-{run}-{n}" for n in range(args.streams)]
    other = f"spark-bench-{run}-other"
    results = {"messages": args.messages, "size": args.size, "queues": args.queues,
               "streams": args.streams, "max_per_trigger": args.max_per_trigger,
               "master": args.master, "stream_max_per_trigger": args.stream_max_per_trigger,
               "stream_max_per_partition": args.stream_max_per_partition,
               "stream_prefetch": args.stream_prefetch}
    sessions = []

    def spark_factory():
        if not sessions:
            sessions.append(spark_session(args.master, args.conf))
        return sessions[0]

    runners = {"latency": lambda: run_latency_scenario(args, url, other, results, spark_factory),
               "queue": lambda: run_queue_scenario(args, url, queues, results, spark_factory),
               "stream": lambda: run_stream_scenario(args, url, streams, results, spark_factory),
               "writer": lambda: run_writer_scenario(args, url, other, results, spark_factory)}
    try:
        for name in scenarios:
            runners[name]()
        if sessions:
            sessions[0].stop()
    finally:
        delete_queues(url, queues + streams + [other])
        if warren is not None:
            warren.kill()
            warren.wait()
    report(args, scenarios, results)
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
