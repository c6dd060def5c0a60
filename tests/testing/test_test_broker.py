"""The test broker itself (broker/testing): started in this process or as a subprocess
on a free port, a vhost and user per test that see nothing of each other, removal in one
step, restart on the same address and data, and the test hooks refused by a broker
started without them."""

import json
import subprocess
import sys

import pika
import pika.exceptions
import pytest

from broker.testing import BrokerRefused, TestBroker
from broker.testing.control_client import ControlClient


def publish_and_get(vhost, queue: str, body: bytes):
    with pika.BlockingConnection(vhost.connection_parameters()) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
        return channel.queue_declare(queue, passive=True).method.message_count


@pytest.mark.parametrize("mode", ["thread", "subprocess"])
def test_each_mode_serves_a_vhost_per_test_that_others_cannot_see(mode, tmp_path):
    with TestBroker(data_dir=str(tmp_path), mode=mode) as broker:
        first, second = broker.new_vhost(), broker.new_vhost()
        assert publish_and_get(first, "orders", b"one") == 1
        assert publish_and_get(second, "orders", b"two") == 1   # not first's queue
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            pika.BlockingConnection(pika.ConnectionParameters(
                broker.host, broker.port, first.vhost,
                pika.PlainCredentials(second.user, second.password)))


def test_removing_a_vhost_drops_its_queues_and_user_in_one_step(warren_broker):
    vhost = warren_broker.new_vhost()
    connection = pika.BlockingConnection(vhost.connection_parameters())
    connection.channel().queue_declare("left-behind")
    vhost.remove()
    with pytest.raises(pika.exceptions.ConnectionClosed):   # closed by the removal
        connection.channel()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(vhost.connection_parameters())
    vhost.remove()   # a second removal is a no-op


def test_url_reaches_the_same_vhost_as_the_connection_parameters(warren):
    with pika.BlockingConnection(pika.URLParameters(warren.url)) as connection:
        connection.channel().queue_declare("by-url")
    with pika.BlockingConnection(warren.connection_parameters()) as connection:
        assert connection.channel().queue_declare("by-url", passive=True)


def test_restart_keeps_the_port_and_the_durable_messages(tmp_path):
    with TestBroker(data_dir=str(tmp_path)) as broker:
        vhost = broker.new_vhost()
        publish_and_get(vhost, "kept", b"persistent")
        port = broker.port
        broker.restart()
        assert broker.port == port
        assert publish_and_get(vhost, "kept", b"again") == 2


def test_test_operations_are_refused_by_a_broker_started_without_testing(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "broker", "serve", "--ephemeral", "--data-dir",
         str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        addresses = json.loads(process.stdout.readline())
        with pytest.raises(BrokerRefused, match="need a broker started with --testing"):
            ControlClient(addresses["control_socket"]).call(
                "test.create_sandbox", vhost="v", user="u", password="p")
    finally:
        process.terminate()
        assert process.wait() == 0


def test_a_test_operation_with_wrong_arguments_says_which(warren_broker):
    with pytest.raises(BrokerRefused, match="bad arguments"):
        warren_broker.control.call("test.create_sandbox", vhost="v")
    with pytest.raises(BrokerRefused, match="'user' must be a string"):
        warren_broker.control.call("test.create_sandbox", vhost="v", user=3, password="p")


def test_a_data_directory_too_deep_for_a_unix_socket_still_gets_the_test_hooks(tmp_path):
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 4)
    with TestBroker(data_dir=str(deep)) as broker:
        assert not broker.control_socket.startswith(str(deep))
        assert publish_and_get(broker.new_vhost(), "deep", b"x") == 1
