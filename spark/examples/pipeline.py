"""Example pipeline: JSON events from a Warren (or RabbitMQ) queue -> per-minute aggregates
-> Parquet files, and each aggregate published back to an exchange.

Events are JSON objects such as
    {"event_id": "e-1", "event_time": "2026-01-01T00:00:12Z", "kind": "click", "amount": 2.5}
Malformed messages (not JSON, or without event_id/event_time) are dropped.

The query: parse -> drop duplicate event_ids within the watermark (the amqp source is
at-least-once: after a restart the last batch's messages come again) -> count and sum per
kind and event-time window once the watermark has passed the window -> for each
micro-batch, write the finished windows to <output>/aggregates/batch_id=<n>/ (overwritten
if Spark replays the batch) and publish one JSON message per window to the results
exchange.

    warren-spark-example --url amqp://guest:guest@localhost:5672/%2F --queue events \\
        --output /tmp/events-out --available-now

or, on a cluster, see docs/spark.md (spark-submit ... spark/examples/pipeline.py ...).
"""

import argparse
import os
import sys

EVENT_SCHEMA = "event_id STRING, event_time TIMESTAMP, kind STRING, amount DOUBLE"
DEFAULT_URL = "amqp://guest:guest@localhost:5672/%2F"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="warren-spark-example", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=DEFAULT_URL,
                        help="AMQP URL, vhost URL-encoded (default %(default)s)")
    parser.add_argument("--queue", required=True, help="queue holding the JSON events")
    parser.add_argument("--output", required=True,
                        help="output directory: aggregates/ (Parquet) and checkpoint/")
    parser.add_argument("--master", default=None,
                        help="Spark master (default local[*]; under spark-submit, its --master)")
    parser.add_argument("--available-now", action="store_true",
                        help="process what is in the queue now, then stop "
                             "(default: run until interrupted)")
    parser.add_argument("--results-exchange", default="amq.topic",
                        help="exchange the aggregates are published to (default %(default)s)")
    parser.add_argument("--results-routing-key", default="events.aggregates",
                        help="routing key of the aggregates (default %(default)s)")
    parser.add_argument("--window", default="1 minute", help="window length (default %(default)s)")
    parser.add_argument("--watermark", default="5 minutes",
                        help="how late events may arrive (default %(default)s)")
    parser.add_argument("--max-messages-per-trigger", type=int, default=10_000)
    parser.add_argument("--trigger-interval", default="10 seconds",
                        help="micro-batch interval without --available-now")
    return parser.parse_args(argv)


def aggregate_events(events, window_length: str, watermark: str):
    """The streaming DataFrame of finished windows from an ``amqp`` source DataFrame."""
    from pyspark.sql import functions as F

    parsed = (events
              .select(F.from_json(F.col("body").cast("string"), EVENT_SCHEMA).alias("e"))
              .select("e.*")
              .where(F.col("event_id").isNotNull() & F.col("event_time").isNotNull()))
    unique = (parsed
              .withWatermark("event_time", watermark)
              .dropDuplicatesWithinWatermark(["event_id"]))
    return (unique
            .groupBy(F.window("event_time", window_length).alias("window"), "kind")
            .agg(F.count("*").alias("events"), F.sum("amount").alias("amount"))
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"), "kind", "events", "amount"))


def write_batch(batch, batch_id: int, args) -> None:
    """foreachBatch: Parquet for the batch (idempotent per batch id), then publish."""
    from pyspark.sql import functions as F

    batch.persist()
    try:
        (batch.write.mode("overwrite")
         .parquet(os.path.join(args.output, "aggregates", f"batch_id={batch_id}")))
        message = F.to_json(F.struct(
            F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ssXXX").alias("window_start"),
            F.date_format("window_end", "yyyy-MM-dd'T'HH:mm:ssXXX").alias("window_end"),
            "kind", "events", "amount"))
        (batch.select(message.alias("body"),
                      F.lit("application/json").alias("content_type"))
         .write.format("amqp").mode("append")
         .option("url", args.url)
         .option("exchange", args.results_exchange)
         .option("routingKey", args.results_routing_key)
         .save())
    finally:
        batch.unpersist()


def start_pipeline(spark, args):
    """Start the streaming query on `spark` (the amqp source registered); returns it."""
    events = (spark.readStream.format("amqp")
              .option("url", args.url)
              .option("queue", args.queue)
              .option("maxMessagesPerTrigger", args.max_messages_per_trigger)
              .load())
    aggregates = aggregate_events(events, args.window, args.watermark)
    writer = (aggregates.writeStream
              .queryName(f"warren-events-{args.queue}")
              .outputMode("append")
              .option("checkpointLocation", os.path.join(args.output, "checkpoint"))
              .foreachBatch(lambda batch, batch_id: write_batch(batch, batch_id, args)))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger_interval)
    return writer.start()


def build_session(args):
    from pyspark.sql import SparkSession

    from spark.amqp import register

    builder = SparkSession.builder.appName("warren-spark-example")
    master = args.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"  # run directly, not under spark-submit
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        # Local workers must run the same interpreter (with pika and this package).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.config("spark.sql.shuffle.partitions", "4")
    spark = builder.getOrCreate()
    register(spark)
    return spark


def main(argv=None) -> int:
    args = parse_args(argv)
    spark = build_session(args)
    query = start_pipeline(spark, args)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
