"""CPU per message of the source's read paths, outside Spark.

Three measures, as CPU time of this process (all threads), so that other work on the
machine changes them much less than it changes wall-clock rates; read and queue also
count the cyclic garbage collector's full collections during the read:

parse: ``DeliveryFrames`` fed 4 KiB reads of --messages stream deliveries as Warren
  sends them (100 B bodies, a message-id each, the ``x-stream-offset`` header spliced
  in by Warren's own ``with_long_header``), the consumer's ``_on_delivery`` building
  the Delivery, then the Arrow record batches (``to_record_batches``), with the cyclic
  garbage collector disabled. No broker.
read: a fresh Warren stream of --messages messages (published as the Spark bench fills
  them), read as one executor task reads its range (offsets
  [0, --messages), prefetch --prefetch: the reader's ``read``, as an executor task
  runs it; its record batches are only counted).
queue: a plain queue of --messages messages (as the Spark bench fills them) read by the
  plain-queue reader as the driver's runner process drives an availableNow query
  (``prepareForTriggerAvailableNow``, then ``read``/``commit`` until nothing is left;
  30,000 messages a batch, the first 1,000).

    python3 bench/spark_reader_cpu.py --runs 3
"""

import argparse
import gc
import os
import struct
import sys
import tempfile
import time

import pika
import pika.frame
import pika.spec

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from amqp_codec.header_splice import with_long_header  # noqa: E402
from bench.spark_source_throughput import fill, fill_stream, start_warren  # noqa: E402
from spark.amqp.delivery_frames import DeliveryFrames  # noqa: E402
from spark.amqp.messages import to_record_batches, warm_up_arrow_in_background  # noqa: E402
from spark.amqp.options import StreamQueueReadOptions, StreamReadOptions  # noqa: E402
from spark.amqp.stream_client import StreamChannel  # noqa: E402
from spark.amqp.stream_reader import AmqpStreamReader  # noqa: E402
from spark.amqp.stream_queue_reader import AmqpStreamQueueReader, StreamRange  # noqa: E402

READ_SIZE = 4096
FRAME_START = struct.Struct(">BHI")
HEADER_START = struct.Struct(">HHQ")  # class, weight, body size
CHANNEL = 1


class _Connection:
    """What DeliveryFrames needs of a pika connection."""

    bytes_received = 0
    frames_received = 0

    def _on_data_available(self, data):
        raise AssertionError(f"a frame went to pika: {data[:20]!r}")


class FullCollections:
    """Counts the cyclic collector's full (generation 2) collections, in all threads."""

    def __init__(self):
        self.count = 0
        gc.callbacks.append(self._on_collection)

    def _on_collection(self, phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            self.count += 1


FULL_COLLECTIONS = FullCollections()


def stream_deliveries(count: int, size: int) -> bytes:
    body = b"x" * size
    frames = []
    for n in range(count):
        method = pika.spec.Basic.Deliver(consumer_tag="ctag-1", delivery_tag=n + 1,
                                         exchange="", routing_key="s1")
        # The header as Warren adds it: a signed long long ("l") spliced into the table.
        properties = with_long_header(b"".join(pika.BasicProperties(message_id=str(n)).encode()),
                                      b"x-stream-offset", n)
        header = HEADER_START.pack(60, 0, len(body)) + properties
        frames += [pika.frame.Method(CHANNEL, method).marshal(),
                   FRAME_START.pack(2, CHANNEL, len(header)), header, b"\xce",
                   pika.frame.Body(CHANNEL, body).marshal()]
    return b"".join(frames)


def parse_cpu(data: bytes, count: int) -> float:
    """CPU seconds to parse `data` into Deliveries and record batches."""
    stream = StreamChannel.__new__(StreamChannel)  # only the delivery callback is used
    stream.queue = "s1"
    stream.error = None
    stream.deliveries = []
    stream._wake = lambda: None
    frames = DeliveryFrames(_Connection())
    frames.route(CHANNEL, stream._on_delivery)
    gc.disable()  # the parsing alone, in both trees: no full collections in the clock
    started = time.process_time()
    for at in range(0, len(data), READ_SIZE):
        frames.data_received(data[at:at + READ_SIZE])
    to_record_batches(stream.deliveries, "s1")
    elapsed = time.process_time() - started
    gc.enable()
    assert len(stream.deliveries) == count, len(stream.deliveries)
    return elapsed


def read_cpu(url: str, stream: str, count: int, prefetch: int) -> tuple:
    """(CPU seconds, wall seconds) to read offsets [0, count) into record batches, as
    an executor task does (the reader's ``read``)."""
    reader = AmqpStreamQueueReader(StreamQueueReadOptions.parse(
        {"url": url, "queue": stream, "startingOffset": "first", "prefetch": str(prefetch)}))
    started, wall = time.process_time(), time.perf_counter()
    rows = sum(batch.num_rows for batch in reader.read(StreamRange(stream, 0, count)))
    elapsed, wall = time.process_time() - started, time.perf_counter() - wall
    assert rows == count, rows
    return elapsed, wall


def queue_cpu(url: str, queue: str, count: int) -> tuple:
    """(CPU seconds, wall seconds) of an availableNow run of the plain-queue reader."""
    reader = AmqpStreamReader(StreamReadOptions.parse({"url": url, "queue": queue}))
    rows = 0
    started, wall = time.process_time(), time.perf_counter()
    try:
        reader.prepareForTriggerAvailableNow()
        start = reader.initialOffset()
        while True:
            batches, end = reader.read(start)
            if end == start:
                break
            rows += sum(batch.num_rows for batch in batches)
            reader.commit(end)
            start = end
    finally:
        reader.stop()
    elapsed, wall = time.process_time() - started, time.perf_counter() - wall
    assert rows == count, rows
    return elapsed, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--prefetch", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=("parse", "read", "queue"))
    args = parser.parse_args()
    warm_up_arrow_in_background()
    to_record_batches([], "s1")
    time.sleep(1)  # pyarrow's pandas import, outside the clock
    if args.only in (None, "parse"):
        data = stream_deliveries(args.messages, args.size)
        for _ in range(args.runs):
            cpu = parse_cpu(data, args.messages)
            print(f"parse: {cpu / args.messages * 1e6:.2f} us CPU a message")
    if args.only == "parse":
        return 0
    measures = ("read", "queue") if args.only is None else (args.only,)
    with tempfile.TemporaryDirectory() as data_dir:
        broker, port = start_warren(data_dir)
        try:
            url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
            connection = pika.BlockingConnection(pika.URLParameters(url))
            connection.channel().queue_declare("s1", durable=True,
                                               arguments={"x-queue-type": "stream"})
            connection.channel().queue_declare("q1")
            connection.close()
            if "read" in measures:
                fill_stream(url, "s1", args.messages, args.size)
            for _ in range(args.runs):
                if "read" in measures:
                    collections = FULL_COLLECTIONS.count
                    cpu, wall = read_cpu(url, "s1", args.messages, args.prefetch)
                    print(f"read: {cpu / args.messages * 1e6:.2f} us CPU a message, "
                          f"{args.messages / wall:,.0f} msg/s wall, "
                          f"{FULL_COLLECTIONS.count - collections} full collections")
                if "queue" in measures:
                    fill(url, "q1", args.messages, args.size)
                    collections = FULL_COLLECTIONS.count
                    cpu, wall = queue_cpu(url, "q1", args.messages)
                    print(f"queue: {cpu / args.messages * 1e6:.2f} us CPU a message, "
                          f"{args.messages / wall:,.0f} msg/s wall, "
                          f"{FULL_COLLECTIONS.count - collections} full collections")
        finally:
            broker.terminate()
            broker.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
