"""The `warren` fixture with the clients people test with: pika, aio-pika, kombu, and a
Java program under test given host/port/vhost/user/password. Each client test runs
twice ("first", "second") on the same queue name: each run must find the queue empty
and get back its own message, which holds only if every test has its own vhost."""

import asyncio
import shutil
import subprocess
from pathlib import Path

import aio_pika
import kombu
import pika
import pytest

RUNS = ("first", "second")
JAVA_SOURCE = Path(__file__).resolve().parents[2] / "interop" / "java" / "VhostRoundTrip.java"
JAVA_CLIENT = Path("/usr/share/java/amqp-client.jar")
JAVA_LOGGING = Path("/usr/share/java/slf4j-api.jar")


@pytest.mark.parametrize("run", RUNS)
def test_pika_blocking_connection_from_the_url(warren, run):
    connection = pika.BlockingConnection(pika.URLParameters(warren.url))
    channel = connection.channel()
    declared = channel.queue_declare("orders")
    assert declared.method.message_count == 0
    channel.basic_publish("", "orders", run.encode())
    method, _, body = channel.basic_get("orders", auto_ack=True)
    assert (body, method.message_count) == (run.encode(), 0)
    channel.basic_publish("", "orders", b"left for the other run to not see")
    connection.close()


@pytest.mark.parametrize("run", RUNS)
def test_pika_consumer_with_connection_parameters(warren, run):
    connection = pika.BlockingConnection(warren.connection_parameters(heartbeat=30))
    channel = connection.channel()
    assert channel.queue_declare("orders").method.message_count == 0
    channel.confirm_delivery()
    channel.basic_publish("", "orders", run.encode())
    for method, _, body in channel.consume("orders", inactivity_timeout=10):
        assert body == run.encode()
        channel.basic_ack(method.delivery_tag)
        break
    channel.cancel()
    channel.basic_publish("", "orders", b"left for the other run to not see")
    connection.close()


@pytest.mark.parametrize("run", RUNS)
def test_aio_pika(warren, run):
    async def round_trip() -> bytes:
        async with await aio_pika.connect_robust(warren.aio_pika_url) as connection:
            channel = await connection.channel()
            queue = await channel.declare_queue("orders")
            assert queue.declaration_result.message_count == 0
            await channel.default_exchange.publish(aio_pika.Message(run.encode()),
                                                   routing_key="orders")
            async with queue.iterator() as messages:
                async for message in messages:
                    async with message.process():
                        received = message.body
                    break
            await channel.default_exchange.publish(
                aio_pika.Message(b"left for the other run to not see"), routing_key="orders")
            return received

    assert asyncio.run(round_trip()) == run.encode()


@pytest.mark.parametrize("run", RUNS)
def test_kombu_producer_and_consumer(warren, run):
    queue = kombu.Queue("orders", kombu.Exchange("orders", type="direct"),
                        routing_key="orders")
    received = []
    with kombu.Connection(warren.url) as connection:
        assert queue(connection.default_channel).queue_declare().message_count == 0
        producer = kombu.Producer(connection)
        producer.publish({"run": run}, exchange=queue.exchange, routing_key="orders",
                         declare=[queue], serializer="json")

        def on_message(body, message):
            received.append(body)
            message.ack()

        with kombu.Consumer(connection, queues=[queue], callbacks=[on_message]):
            connection.drain_events(timeout=10)
        producer.publish({"run": "left for the other run to not see"},
                         exchange=queue.exchange, routing_key="orders")
    assert received == [{"run": run}]


@pytest.mark.parametrize("run", RUNS)
def test_kombu_simple_queue(warren, run):
    with kombu.Connection(warren.url) as connection:
        simple = connection.SimpleQueue("orders")
        assert simple.qsize() == 0
        simple.put({"run": run})
        message = simple.get(block=True, timeout=10)
        message.ack()
        assert message.payload == {"run": run}
        simple.put({"run": "left for the other run to not see"})
        simple.close()


@pytest.fixture(scope="session")
def java_round_trip(tmp_path_factory) -> list[str]:
    """interop/java/VhostRoundTrip.java compiled; the command that runs it."""
    assert shutil.which("javac") and shutil.which("java"), (
        "javac and java not found: install a JDK (Debian: default-jdk-headless)")
    assert JAVA_CLIENT.exists(), (
        f"no {JAVA_CLIENT}: install the RabbitMQ Java client (Debian: "
        "librabbitmq-client-java)")
    classes = tmp_path_factory.mktemp("java-round-trip")
    classpath = f"{classes}:{JAVA_CLIENT}:{JAVA_LOGGING}"
    compiled = subprocess.run(["javac", "-d", str(classes), "-cp", classpath,
                               str(JAVA_SOURCE)], capture_output=True, text=True,
                              timeout=120)
    assert compiled.returncode == 0, f"javac failed:\n{compiled.stderr}"
    return ["java", "-cp", classpath, "VhostRoundTrip"]


def test_a_java_program_under_test_through_host_and_port(warren, java_round_trip):
    done = subprocess.run([*java_round_trip, warren.host, str(warren.port), warren.vhost,
                           warren.user, warren.password, "work", "50"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    summary = "published=50 confirmed=50 consumed=50"
    assert f"RESULT summary={summary}" in done.stdout.splitlines()
    channel = pika.BlockingConnection(warren.connection_parameters()).channel()
    assert channel.queue_declare("work", passive=True).method.message_count == 0
    _, _, body = channel.basic_get("work.results", auto_ack=True)
    assert body == summary.encode()
    channel.connection.close()
