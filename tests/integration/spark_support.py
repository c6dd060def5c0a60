"""One SparkSession for the Spark tests of a pytest session, with the amqp source registered.

A SparkSession takes 10-30 s to start and about 1-1.5 GB of memory, so there is exactly
one (session scope), local[2], no UI, two shuffle partitions, UTC session time zone.
Spark's Python workers import the data source (``spark.amqp``) themselves, so the
project must be installed in the interpreter running the tests (``pip install -e
".[test]"``, as scripts/test.sh does); the fixture checks that first and fails with a
clear message otherwise. PYSPARK_PYTHON defaults to the interpreter running pytest.

(The fixture is not called `spark`, which would shadow the package of that name.)
Test modules import the fixture by name:
    from spark_support import spark_session  # noqa: F401  (fixture)

Run as a script, this module is a streaming query in a process of its own (its own
SparkSession and JVM), which a test can kill at any moment:
    python spark_support.py stream-to-parquet URL QUEUE OUTPUT CHECKPOINT PER_TRIGGER
"""

import os
import subprocess
import sys
import tempfile

import pytest

APP_NAME = "warren-spark-tests"


def build_session(app_name: str = APP_NAME):
    """A local[2] SparkSession configured as the tests need it, with amqp registered."""
    from pyspark.sql import SparkSession

    from spark.amqp import register

    session = (SparkSession.builder
               .master("local[2]")
               .appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.streaming.stopTimeout", "30s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def start_stream_to_parquet(spark, url: str, queue: str, output: str, checkpoint: str,
                            starting_offset="first", per_trigger=None, available_now=True,
                            **options):
    """Start readStream amqp (stream mode) -> Parquet file sink with a checkpoint;
    returns the StreamingQuery."""
    reader = (spark.readStream.format("amqp").option("url", url).option("queue", queue)
              .option("startingOffset", str(starting_offset)))
    if per_trigger is not None:
        reader = reader.option("maxMessagesPerTrigger", per_trigger)
    for name, value in options.items():
        reader = reader.option(name, value)
    writer = (reader.load().writeStream.format("parquet").option("path", str(output))
              .option("checkpointLocation", str(checkpoint)))
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def _check_importable_by_workers() -> None:
    """Spark's Python workers start in their own processes and cannot see pytest's
    sys.path: the package must be importable by the interpreter from anywhere."""
    with tempfile.TemporaryDirectory() as elsewhere:
        result = subprocess.run(
            [os.environ["PYSPARK_PYTHON"], "-c", "import pika, pyspark, spark.amqp"],
            cwd=elsewhere, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        pytest.fail(
            "Spark's Python workers cannot import the amqp data source with "
            f"{os.environ['PYSPARK_PYTHON']}: install the project and its test extra "
            "(pip install -e '.[test]', or scripts/test.sh).\n" + result.stderr[-2000:],
            pytrace=False)


@pytest.fixture(scope="session")
def spark_session():
    """The shared SparkSession (amqp registered)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local[2]: loopback only
    _check_importable_by_workers()
    session = build_session()
    yield session
    session.stop()


def _main(argv) -> int:
    command, url, queue, output, checkpoint, per_trigger = argv
    assert command == "stream-to-parquet", command
    session = build_session(APP_NAME + "-subprocess")
    query = start_stream_to_parquet(session, url, queue, output, checkpoint,
                                    per_trigger=int(per_trigger))
    query.awaitTermination()
    session.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
