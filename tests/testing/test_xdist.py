"""With pytest-xdist, each worker has its own Warren broker (the session fixture runs
once per worker) and the tests pass side by side."""

import json

from pytester_runs import run_pytest

pytest_plugins = ["pytester"]

SUITE = """
import json
import os

import pika
import pytest


@pytest.mark.parametrize("number", range(8))
def test_records_its_broker(warren_broker, warren, number):
    channel = pika.BlockingConnection(warren.connection_parameters()).channel()
    assert channel.queue_declare("orders").method.message_count == 0
    channel.basic_publish("", "orders", b"mine")
    channel.connection.close()
    line = {"worker": os.environ["PYTEST_XDIST_WORKER"], "port": warren_broker.port}
    with open("brokers.jsonl", "a") as record:
        record.write(json.dumps(line) + "\\n")
"""


def test_two_workers_each_with_its_own_broker(pytester):
    pytester.makepyfile(SUITE)
    result = run_pytest(pytester, "-n", "2")
    result.assert_outcomes(passed=8)
    lines = (pytester.path / "brokers.jsonl").read_text().splitlines()
    ports = {}
    for record in map(json.loads, lines):
        ports.setdefault(record["worker"], set()).add(record["port"])
    assert sorted(ports) == ["gw0", "gw1"]
    assert all(len(worker_ports) == 1 for worker_ports in ports.values()), ports
    assert ports["gw0"] != ports["gw1"]
