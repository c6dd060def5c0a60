"""A `celery worker` subprocess for the Celery client tests (tests/clients/test_celery*.py):
started on a broker URL with its settings in the environment (celery_app.py reads them),
ready once it logs so, stopped with a warm shutdown."""

import os
import pathlib
import signal
import subprocess
import sys
import threading
import uuid
from contextlib import contextmanager

from tests.support import celery_app

START_TIMEOUT = 20.0
HERE = pathlib.Path(celery_app.__file__).resolve().parent   # the worker imports celery_app from here
# Worker log lines that mean the broker let the worker down (task failures the tests
# cause on purpose are logged as ERROR with a traceback, so those are not among them).
TROUBLE = ("CRITICAL", "Unrecoverable error", "Connection to broker lost",
           "consumer: Cannot connect", "Restoring", "Couldn't ack")


class Worker:
    """One worker serving one queue of its own; `queue_type` "quorum" makes its queues
    quorum queues, with Celery's native delayed delivery (celery_app.make_app)."""

    def __init__(self, broker_url: str, run_id: str, queue_type: str = "classic"):
        self.queue = f"celery-q-{run_id}"
        self.hostname = f"warren-{run_id}@localhost"
        self.settings = {
            celery_app.BROKER_ENV: broker_url,
            celery_app.QUEUE_ENV: self.queue,
            celery_app.CONTROL_EXCHANGE_ENV: f"celery-ctl-{run_id}",
            celery_app.EVENT_EXCHANGE_ENV: f"celery-ev-{run_id}",
            celery_app.QUEUE_TYPE_ENV: queue_type,
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


@contextmanager
def serving_worker(broker_url: str, queue_type: str = "classic"):
    """A started worker for a module; after it, a warm shutdown that must exit with 0
    and a log without any of TROUBLE."""
    started = Worker(broker_url, uuid.uuid4().hex, queue_type).start()
    try:
        yield started
        code = started.stop()
        assert code == 0, f"worker exited with {code}:\n{started.log()}"
        for trouble in TROUBLE:
            assert trouble not in started.log(), started.log()
    finally:
        started.kill()


def client_app(worker: Worker):
    """The test process's Celery app, with the worker's settings."""
    settings = worker.settings
    return celery_app.make_app(
        settings[celery_app.BROKER_ENV], settings[celery_app.QUEUE_ENV],
        settings[celery_app.CONTROL_EXCHANGE_ENV], settings[celery_app.EVENT_EXCHANGE_ENV],
        settings[celery_app.QUEUE_TYPE_ENV])
