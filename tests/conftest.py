"""Shared fixtures: a real Warren broker subprocess on an ephemeral loopback port.

Set WARREN_TEST_BROKER=host:port to run the integration tests against another broker
(for example RabbitMQ on 127.0.0.1:5673) and compare behaviour.
"""

import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field

import pytest

LISTENING = re.compile(r"event=listening .*host=(\S+) port=(\d+)")


@dataclass
class BrokerProcess:
    """A Warren broker running as a subprocess; stderr is collected in `log_lines`."""

    data_dir: str
    extra_args: tuple = ()
    host: str = "127.0.0.1"
    port: int = 0
    process: subprocess.Popen | None = None
    log_lines: list = field(default_factory=list)
    _listening: threading.Event = field(default_factory=threading.Event)

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        self._listening.clear()
        command = [sys.executable, "-m", "broker", "serve", "--host", self.host,
                   "--port", str(self.port), "--data-dir", self.data_dir, *self.extra_args]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read_log, args=(self.process,), daemon=True).start()
        if not self._listening.wait(timeout):
            self.kill()
            raise RuntimeError("broker did not start:\n" + "".join(self.log_lines))
        return self

    def _read_log(self, process: subprocess.Popen) -> None:
        for line in process.stderr:
            self.log_lines.append(line)
            match = LISTENING.search(line)
            if match:
                self.port = int(match.group(2))
                self._listening.set()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send `sig` and wait for the exit code."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout)
        return code

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int


def _external_broker():
    value = os.environ.get("WARREN_TEST_BROKER")
    if not value:
        return None
    host, port = value.rsplit(":", 1)
    return BrokerAddress(host, int(port))


@pytest.fixture
def broker_factory(tmp_path_factory):
    """Start dedicated brokers: `broker_factory(*extra_args)` returns a started BrokerProcess."""
    started = []

    def start(*extra_args, data_dir=None):
        data_dir = data_dir or str(tmp_path_factory.mktemp("warren-data"))
        broker = BrokerProcess(data_dir=data_dir, extra_args=extra_args).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.kill()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """One broker shared by the integration tests of a session: a BrokerAddress."""
    external = _external_broker()
    if external is not None:
        yield external
        return
    process = BrokerProcess(data_dir=str(tmp_path_factory.mktemp("warren-shared"))).start()
    yield BrokerAddress(process.host, process.port)
    process.kill()
