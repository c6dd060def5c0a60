"""`warren serve` as a user runs it: configuration file, flags, start-up failures."""

import os
import subprocess
import sys

import pika
import pytest

from broker import __version__
from broker.build import COMPILED, EXPECT_BUILD_VARIABLE, build_kind
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.warren_only(
    "runs `warren serve` itself: its command line, configuration file and start-up failures")

SERVE = [sys.executable, "-m", "broker", "serve"]


def run_serve(*args, timeout=30):
    return subprocess.run([*SERVE, *args], capture_output=True, text=True, timeout=timeout)


def test_version_says_which_build_runs():
    result = subprocess.run([sys.executable, "-m", "broker", "--version"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    assert result.stdout.strip() == f"warren {__version__}, {build_kind()}"


def test_a_broker_refuses_to_start_on_another_build_than_the_expected_one(tmp_path):
    other = "pure" if build_kind() == COMPILED else "compiled"
    result = subprocess.run([*SERVE, "--data-dir", str(tmp_path), "--port", "0",
                             "--management-port", "0"],
                            env={**os.environ, EXPECT_BUILD_VARIABLE: other},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert f"{EXPECT_BUILD_VARIABLE}={other} but this is the {build_kind()} build" \
        in result.stderr


def test_a_taken_port_fails_with_exit_1_and_says_why(broker_factory, tmp_path):
    running = broker_factory()
    result = run_serve("--port", str(running.port), "--data-dir", str(tmp_path))
    assert result.returncode == 1
    assert "event=listen_failed" in result.stderr
    assert "Address already in use" in result.stderr


def test_unknown_configuration_key_fails_with_exit_2(tmp_path):
    config = tmp_path / "warren.toml"
    config.write_text('prot = 5672\n')
    result = run_serve("--config", str(config))
    assert result.returncode == 2
    assert "unknown setting 'prot'" in result.stderr


def test_configuration_file_sets_the_tune_limits(tmp_path):
    config = tmp_path / "warren.toml"
    config.write_text('log_level = "info"\n[limits]\nchannel_max = 7\nheartbeat = 5\n')
    broker = BrokerProcess(data_dir=str(tmp_path / "data"),
                           extra_args=("--config", str(config))).start()
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", broker.port))
        try:
            params = connection._impl.params
            assert (params.channel_max, params.heartbeat) == (7, 5)
        finally:
            connection.close()
    finally:
        broker.kill()
    assert (tmp_path / "data").is_dir()


def test_serve_keeps_its_start_up_objects_out_of_full_garbage_collections(tmp_path):
    """They live as long as the process; a full collection walking all of them paused
    the event loop for tens of milliseconds."""
    broker = BrokerProcess(data_dir=str(tmp_path),
                           extra_args=("--log-level", "debug")).start()
    try:
        line = broker.wait_for_log("event=start_up_objects_frozen")
    finally:
        broker.kill()
    assert int(line.split("count=")[1].split()[0]) > 10_000


def test_the_broker_advertises_its_package_version(broker_factory):
    running = broker_factory()
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", running.port))
    try:
        properties = connection._impl.server_properties
    finally:
        connection.close()
    # the product and version of the RabbitMQ release of the line; Warren's in platform
    assert (properties["product"], properties["version"]) == ("RabbitMQ", "4.3.6")
    assert properties["platform"].startswith(f"Warren {__version__} on Python ")
