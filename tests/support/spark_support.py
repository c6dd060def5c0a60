"""One SparkSession for the Spark tests of a pytest session, with the amqp source registered.

A SparkSession takes 10-30 s to start and about 1-1.5 GB of memory, so there is exactly
one (session scope), local[2], no UI, two shuffle partitions, UTC session time zone.
Spark's Python workers import the data source (``spark.amqp``) themselves, so the
project must be installed in the interpreter running the tests (``pip install -e
".[test]"``, as scripts/test.sh does); the fixture checks that first and fails with a
clear message otherwise. PYSPARK_PYTHON defaults to the interpreter running pytest.

(The fixture is not called `spark`, which would shadow the package of that name.)
Test modules import the fixture by name:
    from tests.support.spark_support import spark_session  # noqa: F401  (fixture)

Run as a script, this module is a streaming query in a process of its own (its own
SparkSession and JVM), which a test can kill at any moment:
    python spark_support.py stream-to-parquet URL QUEUE OUTPUT CHECKPOINT PER_TRIGGER

Also here: the example pipeline's input events and expected aggregates (shared by the
local and the cluster test), and StandaloneCluster, a Spark standalone master and worker
started from the pip-installed pyspark as separate JVM processes on loopback.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

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


def example_pipeline_bodies() -> list:
    """Message bodies for spark/examples/pipeline.py: 20 events in 4 one-minute windows
    x 2 kinds, two of them twice (redelivered), two malformed messages, and a late
    "tick" that moves the watermark (5 minutes) past every window."""
    events = [{"event_id": f"{minute}-{kind}-{n}",
               "event_time": f"2026-01-01T00:0{minute}:{10 + n:02d}Z",
               "kind": kind, "amount": 1.5 * (n + 1)}
              for minute in range(4) for kind in ("click", "view")
              for n in range(minute + 1)]
    return ([json.dumps(e).encode() for e in events]
            + [json.dumps(events[0]).encode(), json.dumps(events[5]).encode()]
            + [b"not json", json.dumps({"kind": "click"}).encode()]
            + [json.dumps({"event_id": "tick", "event_time": "2026-01-01T00:30:00Z",
                           "kind": "click", "amount": 0}).encode()])


def example_pipeline_expected() -> dict:
    """{(window start "2026-01-01T00:0M:00" (UTC), kind): (events, amount)} for
    example_pipeline_bodies()."""
    return {(f"2026-01-01T00:0{minute}:00", kind):
            (minute + 1, sum(1.5 * (n + 1) for n in range(minute + 1)))
            for minute in range(4) for kind in ("click", "view")}


def assert_example_pipeline_published(published: list) -> None:
    """The pipeline's results, as (properties, body) pairs read back from the results
    queue, are one JSON message per window and kind with the expected aggregates."""
    expected = example_pipeline_expected()
    assert len(published) == len(expected)
    assert {p.content_type for p, _ in published} == {"application/json"}
    messages = [json.loads(b) for _, b in published]
    assert {(m["window_start"].rstrip("Z"), m["kind"]): (m["events"], m["amount"])
            for m in messages} == expected


def pyspark_home() -> str:
    """SPARK_HOME of the pip-installed pyspark (bin/spark-class, jars/).

    Set it explicitly: bin/spark-class of a pip-installed pyspark otherwise asks
    `python3` (the first one on PATH) where pyspark is, which may be another one.
    """
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def loopback_spark_env(conf_dir: str, python: str = sys.executable) -> dict:
    """Environment for Spark processes on loopback only: SPARK_HOME (this pyspark),
    SPARK_LOCAL_IP / SPARK_LOCAL_HOSTNAME 127.0.0.1 (otherwise the driver advertises
    the reverse-resolved name, e.g. "localhost"), an empty SPARK_CONF_DIR (no
    spark-defaults.conf from elsewhere), PYSPARK_PYTHON = `python`. Without the gateway
    variables of a PySpark in this process (a child would attach to its JVM)."""
    env = dict(os.environ)
    for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PYSPARK_SUBMIT_ARGS",
                 "SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        env.pop(name, None)
    env.update(SPARK_HOME=pyspark_home(), SPARK_CONF_DIR=conf_dir,
               SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_HOSTNAME="127.0.0.1",
               PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    return env


# Run as `python -c _DIE_WITH_PARENT PARENT_PID COMMAND...`: ask Linux to SIGKILL the
# process when its parent dies (prctl PR_SET_PDEATHSIG, kept across exec), then exec the
# command. So a test run that is killed (no teardown) takes its Spark JVMs along: the
# executors exit when their worker or driver goes, Python workers when their JVM goes.
_DIE_WITH_PARENT = """
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):  # the parent died before prctl
    sys.exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def popen_group(command, **kwargs) -> subprocess.Popen:
    """subprocess.Popen(command) as the leader of a new session / process group (kill it
    and everything it starts with kill_process_group), killed if this process dies."""
    if sys.platform.startswith("linux"):
        command = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *command]
    return subprocess.Popen(command, start_new_session=True, **kwargs)


def _processes() -> dict:
    """{pid: (ppid, pgid, start time, "pid command")} of the live (not zombie) processes."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # After "(comm)": state ppid pgrp session ... starttime (the 20th).
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ")[:120].decode(errors="replace")
        except OSError:
            continue
        if fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), int(fields[2]), fields[19],
                                 f"{entry} {command}")
    return table


def _process_tree(root: int, table: dict) -> dict:
    """{pid: start time} of `root` and its descendants (PySpark's daemons put themselves
    into process groups of their own, so a process group is not the whole tree)."""
    tree, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        if pid in table and pid not in tree:
            tree[pid] = table[pid][2]
            frontier.extend(child for child, row in table.items() if row[0] == pid)
    return tree


def kill_process_group(process: subprocess.Popen, grace: float = 10.0) -> list:
    """Stop `process` (started by popen_group) and everything it started: SIGTERM to its
    process group and to each of its descendants, up to `grace` s to exit, then SIGKILL
    to what is left. Returns the processes still alive after that (should be [])."""
    pgid = process.pid
    tree = _process_tree(pgid, _processes())

    def survivors():
        table = _processes()
        return [row[3] for pid, row in table.items()
                if row[1] == pgid or tree.get(pid) == row[2]]

    deadline = time.monotonic() + grace
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        table = _processes()
        for pid, started in tree.items():
            if pid != pgid and pid in table and table[pid][2] == started:  # not reused
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        while time.monotonic() < deadline:
            if process.poll() is not None and not survivors():
                break
            time.sleep(0.1)
        deadline = time.monotonic() + 5.0
    if process.poll() is None:
        process.wait(5.0)
    return survivors()


class StandaloneCluster:
    """A Spark standalone cluster on loopback: one master and one worker, each a JVM
    started with $SPARK_HOME/bin/spark-class in a process group of its own, on ephemeral
    ports; stop() kills both with everything they started (the worker's executors and
    their Python workers). Logs and the worker's work directory are under `directory`.

        cluster = StandaloneCluster(directory).start()   # returns once a worker is ALIVE
        ... --master cluster.master_url ...
        cluster.stop()                                   # kills both process trees
    """

    MASTER_AT = re.compile(r"Starting Spark master at (spark://\S+)")
    MASTER_UI_AT = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")

    def __init__(self, directory, cores: int = 1, memory: str = "1g"):
        self.directory = str(directory)
        self.cores = cores
        self.memory = memory
        self.conf_dir = os.path.join(self.directory, "conf")
        self.work_dir = os.path.join(self.directory, "work")
        self.master_log = os.path.join(self.directory, "master.log")
        self.worker_log = os.path.join(self.directory, "worker.log")
        self.master = self.worker = None
        self.master_url = self.web_ui = None

    def env(self, python: str = sys.executable) -> dict:
        return loopback_spark_env(self.conf_dir, python)

    def _spawn(self, log_path: str, main_class: str, *args, env) -> subprocess.Popen:
        spark_class = os.path.join(pyspark_home(), "bin", "spark-class")
        with open(log_path, "wb") as log:
            return popen_group([spark_class, main_class, *args], env=env,
                               cwd=self.directory, stdin=subprocess.DEVNULL,
                               stdout=log, stderr=subprocess.STDOUT)

    def start(self, timeout: float = 90.0) -> "StandaloneCluster":
        os.makedirs(self.conf_dir, exist_ok=True)
        os.makedirs(self.work_dir, exist_ok=True)
        deadline = time.monotonic() + timeout
        try:
            env = self.env()
            # No REST submission server: it would listen on the fixed port 6066.
            env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"
            self.master = self._spawn(
                self.master_log, "org.apache.spark.deploy.master.Master",
                "--host", "127.0.0.1", "--port", "0", "--webui-port", "0", env=env)
            url, ui_port = self._wait_for_master(deadline)
            self.master_url, self.web_ui = url, f"http://127.0.0.1:{ui_port}"
            self.worker = self._spawn(
                self.worker_log, "org.apache.spark.deploy.worker.Worker", self.master_url,
                "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                "--cores", str(self.cores), "--memory", self.memory,
                "--work-dir", self.work_dir, env=self.env())
            self._wait_for_worker(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _check_alive(self) -> None:
        for name, process, log in (("master", self.master, self.master_log),
                                   ("worker", self.worker, self.worker_log)):
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"Spark {name} exited with {process.returncode}:\n"
                                   + self.log_tail(log))

    def _wait_for_master(self, deadline: float):
        while time.monotonic() < deadline:
            self._check_alive()
            with open(self.master_log, errors="replace") as log:
                text = log.read()
            url, ui = self.MASTER_AT.search(text), self.MASTER_UI_AT.search(text)
            if url and ui and "New state: ALIVE" in text:
                return url.group(1), int(ui.group(1))
            time.sleep(0.1)
        raise TimeoutError("Spark master did not start:\n" + self.log_tail(self.master_log))

    def status(self) -> dict:
        """The master's /json/ status (workers, apps)."""
        with urllib.request.urlopen(self.web_ui + "/json/", timeout=5) as response:
            return json.load(response)

    def _wait_for_worker(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                status = self.status()
            except (OSError, urllib.error.URLError, ValueError):
                status = {}
            if any(w.get("state") == "ALIVE" and w.get("cores") == self.cores
                   for w in status.get("workers", [])):
                return
            time.sleep(0.2)
        raise TimeoutError("Spark worker did not register:\n"
                           + self.log_tail(self.worker_log))

    @staticmethod
    def log_tail(path: str, chars: int = 4000) -> str:
        try:
            with open(path, errors="replace") as log:
                return log.read()[-chars:]
        except OSError as error:
            return str(error)

    def stop(self) -> list:
        """Kill the worker and the master with everything they started; returns the
        processes still alive after that ([])."""
        leftovers = []
        for process in (self.worker, self.master):
            if process is not None:
                leftovers += kill_process_group(process)
        return leftovers


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
