"""`warren serve --ephemeral`: a throw-away broker for a test suite in any language. It
prints one JSON line with its addresses, serves AMQP there, exits 0 on SIGTERM, and
removes its temporary data directory (a --data-dir given is kept)."""

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pika
import pytest

START_TIMEOUT = 60.0


class Ephemeral:
    """`warren serve --ephemeral` as a subprocess, and the addresses it printed."""

    def __init__(self, *args: str):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "broker", "serve", "--ephemeral", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.addresses = json.loads(self._first_line())

    def _first_line(self) -> str:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(self.process.stdout.readline()))
        reader.start()
        reader.join(START_TIMEOUT)
        if not lines or not lines[0]:
            self.process.kill()
            pytest.fail("warren serve --ephemeral printed no addresses:\n"
                        + self.process.communicate()[1])
        return lines[0]

    def terminate(self) -> subprocess.CompletedProcess:
        self.process.send_signal(signal.SIGTERM)
        stdout, stderr = self.process.communicate(timeout=30)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode,
                                           stdout, stderr)


def round_trip(amqp_url: str) -> bytes:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    channel.queue_declare("hello", durable=True)
    channel.basic_publish("", "hello", b"from another test suite")
    _, _, body = channel.basic_get("hello", auto_ack=True)
    connection.close()
    return body


def test_prints_its_addresses_serves_and_removes_its_data_at_sigterm():
    broker = Ephemeral()
    addresses = broker.addresses
    # The default vhost spelt %2F: the Java client reads a bare "/" path as vhost "".
    assert addresses["amqp_url"] == (
        f"amqp://guest:guest@{addresses['host']}:{addresses['port']}/%2F")
    assert addresses["management_url"].startswith(f"http://{addresses['host']}:")
    data_dir = Path(addresses["control_socket"]).parent
    assert data_dir.is_dir()
    assert round_trip(addresses["amqp_url"]) == b"from another test suite"
    done = broker.terminate()
    assert done.returncode == 0, done.stderr
    assert not data_dir.exists(), f"{data_dir} left behind"
    assert done.stdout == ""   # nothing after the addresses line


def test_a_data_dir_given_is_kept(tmp_path):
    data_dir = tmp_path / "data"
    broker = Ephemeral("--data-dir", str(data_dir), "--control-socket", "")
    assert broker.addresses["control_socket"] is None
    assert round_trip(broker.addresses["amqp_url"]) == b"from another test suite"
    done = broker.terminate()
    assert done.returncode == 0, done.stderr
    assert data_dir.is_dir() and any(data_dir.iterdir()), "the data directory was emptied"


def test_two_at_once_listen_on_different_ports():
    first, second = Ephemeral(), Ephemeral()
    try:
        assert first.addresses["port"] != second.addresses["port"]
        assert first.addresses["management_url"] != second.addresses["management_url"]
    finally:
        assert first.terminate().returncode == 0
        assert second.terminate().returncode == 0
