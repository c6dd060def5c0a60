"""Celery over the broker: a real worker process executes tasks sent from the test.

One `celery worker` subprocess (solo pool, one unique queue, mingle, gossip and events
on) serves the module; the test process is the Celery client, with the rpc:// result
backend, so results come back as messages on the client's own reply queue. Remote
control (ping, inspect) goes over the per-run control exchange (fanout) and the reply
exchange. Every wait is bounded: `result.get(timeout=...)`, the worker's "ready" line,
and the worker's exit after SIGTERM (a warm shutdown that must exit with 0).
"""

import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import uuid

import celery.exceptions
import pytest
from celery import chain, group

from tests.support import celery_app

WAIT = 10.0
START_TIMEOUT = 20.0
HERE = pathlib.Path(celery_app.__file__).resolve().parent   # the worker imports celery_app from here
# Worker log lines that mean the broker let the worker down (task failures the tests
# cause on purpose are logged as ERROR with a traceback, so those are not among them).
TROUBLE = ("CRITICAL", "Unrecoverable error", "Connection to broker lost",
           "consumer: Cannot connect", "Restoring", "Couldn't ack")


class Worker:
    def __init__(self, broker_url: str, run_id: str):
        self.queue = f"celery-q-{run_id}"
        self.hostname = f"warren-{run_id}@localhost"
        self.settings = {
            celery_app.BROKER_ENV: broker_url,
            celery_app.QUEUE_ENV: self.queue,
            celery_app.CONTROL_EXCHANGE_ENV: f"celery-ctl-{run_id}",
            celery_app.EVENT_EXCHANGE_ENV: f"celery-ev-{run_id}",
        }
        self.log_lines = []
        self.ready = threading.Event()
        self.process = None
        self._reader = None

    def start(self) -> "Worker":
        env = dict(os.environ, **self.settings)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "celery", "-A", "celery_app", "worker",
                   "--pool=solo", "--concurrency=1", "-Q", self.queue, "-n", self.hostname,
                   "--loglevel=INFO"]
        self.process = subprocess.Popen(command, env=env, cwd=HERE, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        if not self.ready.wait(START_TIMEOUT):
            self.kill()
            raise RuntimeError("celery worker did not become ready:\n" + self.log())
        return self

    def _read_log(self) -> None:
        for line in self.process.stdout:
            self.log_lines.append(line)
            if f"{self.hostname} ready." in line:
                self.ready.set()

    def log(self) -> str:
        return "".join(self.log_lines)

    def stop(self, timeout: float = 15.0) -> int:
        """Warm shutdown (SIGTERM); returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        self._close_log()
        return code

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._close_log()

    def _close_log(self) -> None:
        """After the process exited: let the reader reach end of file, close the pipe."""
        if self._reader is not None:
            self._reader.join(5.0)
        if self.process is not None and self.process.stdout and not self.process.stdout.closed:
            self.process.stdout.close()


@pytest.fixture(scope="module")
def celery_vhost(warren_broker):
    """A vhost and user of the plugin's broker for this module: the worker runs for the
    whole module, longer than a test's `warren` vhost lives."""
    vhost = warren_broker.new_vhost("celery")
    yield vhost
    vhost.remove()


@pytest.fixture(scope="module")
def worker(celery_vhost):
    run_id = uuid.uuid4().hex
    started = Worker(celery_vhost.url, run_id).start()
    try:
        yield started
        code = started.stop()
        assert code == 0, f"worker exited with {code}:\n{started.log()}"
        for trouble in TROUBLE:
            assert trouble not in started.log(), started.log()
    finally:
        started.kill()


@pytest.fixture(scope="module")
def client(worker):
    settings = worker.settings
    app = celery_app.make_app(
        settings[celery_app.BROKER_ENV], settings[celery_app.QUEUE_ENV],
        settings[celery_app.CONTROL_EXCHANGE_ENV], settings[celery_app.EVENT_EXCHANGE_ENV])
    yield app
    app.close()


def task(app, name):
    return app.tasks[f"warren_test.{name}"]


def get(result, worker):
    """`result.get` bounded by WAIT; a timeout fails with the worker's log attached."""
    try:
        return result.get(timeout=WAIT)
    except celery.exceptions.TimeoutError as error:
        raise AssertionError(f"no result within {WAIT}s; worker log:\n{worker.log()}") \
            from error


def test_delay_returns_result(client, worker):
    result = task(client, "add").delay(2, 3)
    assert get(result, worker) == 5     # no celery TimeoutError: the result came back
    assert result.state == "SUCCESS"


def test_several_tasks_in_flight(client, worker):
    add = task(client, "add")
    results = [add.delay(n, n) for n in range(8)]
    assert [get(r, worker) for r in results] == [2 * n for n in range(8)]


def test_task_runs_on_the_worker_from_its_queue(client, worker):
    info = get(task(client, "echo_request").delay(), worker)
    assert info["hostname"] == worker.hostname
    assert info["routing_key"] == worker.queue
    # Celery sends to the queue through the default exchange (or its own named one).
    assert info["exchange"] in ("", worker.queue)
    assert info["redelivered"] is False


def test_task_exception_propagates(client, worker):
    result = task(client, "fail").delay("boom")
    with pytest.raises(ValueError, match="boom"):
        get(result, worker)
    assert result.state == "FAILURE"


def test_retry_republishes_the_task(client, worker):
    assert get(task(client, "retry_once").delay("x"), worker) == {"value": "x", "retries": 1}


def test_countdown_task_waits_for_its_eta(client, worker):
    started = time.monotonic()
    result = task(client, "add").apply_async((20, 22), countdown=1)
    assert get(result, worker) == 42
    assert time.monotonic() - started >= 1.0


def test_group_and_chain(client, worker):
    add = task(client, "add")
    assert get(group(add.s(n, 1) for n in range(4))(), worker) == [1, 2, 3, 4]
    assert get(chain(add.s(1, 2), add.s(3), add.s(4))(), worker) == 10


def test_remote_control_ping_and_inspect(client, worker):
    replies = client.control.ping(destination=[worker.hostname], timeout=WAIT)
    assert replies == [{worker.hostname: {"ok": "pong"}}]
    inspect = client.control.inspect(destination=[worker.hostname], timeout=WAIT)
    queues = inspect.active_queues()
    assert [q["name"] for q in queues[worker.hostname]] == [worker.queue]
    registered = inspect.registered()[worker.hostname]
    assert "warren_test.add" in registered
