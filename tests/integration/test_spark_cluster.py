"""The example pipeline (spark/examples/pipeline.py) on a real Spark standalone cluster:
`--master spark://...` runs the same job as local[*] and gives the same output.

The cluster (spark_support.StandaloneCluster) is one master and one worker (1 core, 1 GB),
separate JVMs started from the pip-installed pyspark's bin/spark-class, on loopback and
ephemeral ports, each in a process group of its own; teardown kills them with everything
they started (the executor JVM, PySpark's daemons and workers) and checks that nothing
survived. The pipeline runs as a command, `python -m spark.examples.pipeline --master
spark://...` (what the console script warren-spark-example runs), in a process group of
its own in an empty directory, so its driver, the executor and their Python workers must
all import the data source from the installed project (PYSPARK_PYTHON = this
interpreter; the system python3 would fail with "No module named 'spark'").

Same events and expected aggregates as test_example_pipeline in test_spark_source.py
(local[2] there; the pipeline itself picks local[*] without --master). Like the other
Spark tests it runs one query at a time and waits with deadlines, never a fixed time.
Against RabbitMQ: WARREN_TEST_BROKER=127.0.0.1:5673.
"""

import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from tests.support.pika_helpers import (  # noqa: F401  (names: fixture)
    amqp_url, close_quietly, connect, names,
)
from tests.support.spark_support import (
    StandaloneCluster, assert_example_pipeline_published, example_pipeline_bodies,
    example_pipeline_expected, kill_process_group,
    popen_group,
)

pytestmark = pytest.mark.slow   # Spark sessions and queries: tens of seconds

PIPELINE_TIMEOUT = 240  # seconds for the whole pipeline run (about 25-35 s normally)
# The driver's settings: as in local mode (the pipeline sets 4 shuffle partitions for
# local[*]; the default 200 makes each stateful stage 200 tasks on one core, ~2 minutes),
# no UI (no port 4040), no progress bar in the log.
SUBMIT_ARGS = ("--conf spark.sql.shuffle.partitions=4 --conf spark.ui.enabled=false "
               "--conf spark.ui.showConsoleProgress=false pyspark-shell")


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """A started StandaloneCluster (a worker registered); master and worker are killed
    with all their descendants at teardown, which fails if any process survived."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        leftovers = cluster.stop()
        assert not leftovers, f"Spark processes survived the teardown: {leftovers}"


def run_pipeline(cluster, args, directory, timeout=PIPELINE_TIMEOUT):
    """Run `python -m spark.examples.pipeline ARGS` in its own process group in
    `directory`; returns (exit code, log). Its process tree is killed whatever happens."""
    env = cluster.env()
    env["PYSPARK_SUBMIT_ARGS"] = SUBMIT_ARGS
    log_path = os.path.join(directory, "pipeline.log")
    with open(log_path, "wb") as log:
        process = popen_group([sys.executable, "-m", "spark.examples.pipeline", *args],
                              env=env, cwd=directory, stdin=subprocess.DEVNULL,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        leftovers = kill_process_group(process, grace=5.0)
    text = StandaloneCluster.log_tail(log_path, 6000)
    assert not leftovers, f"pipeline processes survived: {leftovers}"
    assert code is not None, f"pipeline did not finish in {timeout} s:\n{text}"
    return code, text


def test_example_pipeline_on_a_standalone_cluster(spark_cluster, warren, names, tmp_path):
    queue, results = names.queue("spark-cluster-events"), names.queue("spark-cluster-aggs")
    routing_key = results  # unique
    connection = connect(warren)
    try:
        channel = connection.channel()
        channel.queue_declare(queue)
        channel.queue_declare(results)
        channel.queue_bind(results, "amq.topic", routing_key)
        channel.confirm_delivery()
        for body in example_pipeline_bodies():
            channel.basic_publish("", queue, body)
    finally:
        close_quietly(connection)

    workdir = tmp_path / "driver"
    workdir.mkdir()
    output = tmp_path / "out"
    code, log = run_pipeline(
        spark_cluster,
        ["--master", spark_cluster.master_url, "--url", amqp_url(warren), "--queue", queue,
         "--output", str(output), "--available-now", "--results-routing-key", routing_key],
        str(workdir))
    assert code == 0, log

    expected = example_pipeline_expected()
    # Parquet: every finished window once (Spark writes INT96 timestamps, which pyarrow
    # reads as naive UTC).
    rows = pq.read_table(str(output / "aggregates")).to_pylist()
    assert {(r["window_start"].isoformat(), r["kind"]): (r["events"], r["amount"])
            for r in rows} == expected
    assert len(rows) == len(expected)

    # Published back to amq.topic: one JSON message per window.
    connection = connect(warren)
    try:
        channel = connection.channel()
        published = []
        while True:
            method, properties, body = channel.basic_get(results, auto_ack=True)
            if method is None:
                break
            published.append((properties, body))
        assert_example_pipeline_published(published)
    finally:
        close_quietly(connection)

    # The tasks ran in the worker's executor: one application, one executor, whose log
    # shows finished tasks.
    apps = os.listdir(spark_cluster.work_dir)
    assert len(apps) == 1 and apps[0].startswith("app-"), apps
    executor_log = StandaloneCluster.log_tail(
        os.path.join(spark_cluster.work_dir, apps[0], "0", "stderr"), 10**7)
    assert "Finished task" in executor_log
    assert "CoarseGrainedExecutorBackend" in executor_log
