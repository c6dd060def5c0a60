"""Record the fuzzers' seed sessions: real clients talking to a broker through a
recording proxy (bench/fuzz_wire.py --record). Each connection's client-to-server bytes
become tests/fuzz_seed_sessions/<client>-<scenario>-<n>.bin, cut at a frame boundary
below MAX_SEED_BYTES so the seeds stay small.
"""

import tempfile
from pathlib import Path

import pika
from pamqp import commands, frame

from tests.support.amqp_mutation import split_frames
from tests.support.java_support import JavaPrograms, compile_programs
from tests.support.raw_amqp import (RawAmqpClient, connect, content_body_frame,
                                    content_header_frame)

MAX_SEED_BYTES = 32 * 1024
JAVA_SCENARIOS = (("Confirms", 30), ("QosConsumer", 30), ("BasicGet",), ("Tx",),
                  ("Errors",), ("StreamReplay", 20), ("DirectReplyRpc",))


def record_all(proxy, seed_dir: Path) -> list:
    for path in seed_dir.glob("*.bin"):
        path.unlink()
    seed_dir.mkdir(exist_ok=True)
    written = []
    scenarios = [("pika", _pika_publish_consume), ("pika", _pika_confirms_routing),
                 ("pika", _pika_tx_get), ("raw", _raw_amqplain_publish_get),
                 ("raw", _raw_content_frames_and_heartbeats)]
    for client, scenario in scenarios:
        scenario(proxy.port)
        written += _save(seed_dir, client, scenario.__name__.split("_", 2)[2], proxy.take())
    with tempfile.TemporaryDirectory() as build:
        programs = JavaPrograms(compile_programs(Path(build)))
        for program, *extra in JAVA_SCENARIOS:
            programs.run(program, _Address(proxy.port), *extra)
            written += _save(seed_dir, "java", program.lower(), proxy.take())
    return written


class _Address:
    host = "127.0.0.1"

    def __init__(self, port: int):
        self.port = port


def _save(seed_dir: Path, client: str, scenario: str, sessions: list) -> list:
    paths = []
    for number, stream in enumerate(sessions):
        kept = b""
        for frame in split_frames(stream):
            if len(kept) + len(frame) > MAX_SEED_BYTES:
                break
            kept += frame
        path = seed_dir / f"{client}-{scenario.replace('_', '-')}-{number}.bin"
        path.write_bytes(kept)
        paths.append(path)
    return paths


def _pika(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, heartbeat=0, client_properties={"connection_name": "seed"}))


def _pika_publish_consume(port: int) -> None:
    connection = _pika(port)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=10)
    queue = channel.queue_declare("seed-q", arguments={
        "x-message-ttl": 60000, "x-max-length": 100, "x-dead-letter-exchange": "seed-dlx",
        "x-max-priority": 5}).method.queue
    properties = pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8", delivery_mode=2,
        priority=3, correlation_id="c1", reply_to="seed-reply", expiration="60000",
        message_id="m1", timestamp=1700000000, type="t", user_id="guest", app_id="seed",
        headers={"h1": "v", "n": 1, "list": [1, "a", {"k": True}], "nested": {"a": {"b": 10 ** 12}},
                 "none": None, "bytes": b"\x00\xff", "CC": ["seed-q"]})
    for number in range(3):
        channel.basic_publish("", queue, b"body %d" % number, properties)
    for method, _properties, _body in channel.consume(queue, inactivity_timeout=5):
        channel.basic_ack(method.delivery_tag)
        if method.delivery_tag == 3:
            break
    channel.cancel()
    channel.queue_delete(queue)
    connection.close()


def _pika_confirms_routing(port: int) -> None:
    connection = _pika(port)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.exchange_declare("seed-topic", "topic", auto_delete=True)
    channel.exchange_declare("seed-headers", "headers", auto_delete=True)
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(queue, "seed-topic", "a.*.c")
    channel.queue_bind(queue, "seed-headers", "", {"x-match": "any", "h": "1"})
    channel.basic_publish("seed-topic", "a.b.c", b"topic", mandatory=True)
    channel.basic_publish("seed-headers", "", b"headers",
                          pika.BasicProperties(headers={"h": "1"}))
    method, _, _ = channel.basic_get(queue)
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, _, _ = channel.basic_get(queue)
    channel.basic_reject(method.delivery_tag, requeue=False)
    channel.queue_purge(queue)
    channel.queue_unbind(queue, "seed-topic", "a.*.c")
    channel.exchange_delete("seed-topic")
    connection.close()


def _pika_tx_get(port: int) -> None:
    connection = _pika(port)
    channel = connection.channel()
    queue = channel.queue_declare("seed-tx", auto_delete=True).method.queue
    channel.tx_select()
    channel.basic_publish("", queue, b"tx")
    channel.tx_rollback()
    channel.basic_publish("", queue, b"tx")
    channel.tx_commit()
    method, _, _ = channel.basic_get(queue, auto_ack=False)
    channel.basic_recover(requeue=True)
    channel.close()
    connection.close()


def _raw_amqplain_publish_get(port: int) -> None:
    with connect("127.0.0.1", port, mechanism="AMQPLAIN") as client:
        client.open_channel(1)
        client.send_method(1, commands.Queue.Declare(queue="seed-raw", auto_delete=True))
        client.expect(commands.Queue.DeclareOk, channel=1)
        client.publish(1, "seed-raw", b"raw body", properties=commands.Basic.Properties(
            headers={"x-death": [{"queue": "q", "count": 1}]}, delivery_mode=1))
        client.send_method(1, commands.Basic.Get(queue="seed-raw", no_ack=True))
        client.expect(commands.Basic.GetOk, channel=1)
        client.send_method(0, commands.Connection.Close(200, "bye", 0, 0))
        client.read_until_closed()


def _raw_content_frames_and_heartbeats(port: int) -> None:
    """Bodies split over several body frames at frame_max 4096, heartbeats, two
    channels, flow, qos and recover."""
    with RawAmqpClient("127.0.0.1", port) as client:
        client.handshake(frame_max=4096, channel_max=16)
        client.open_channel(1)
        client.open_channel(2)
        client.send_raw(b"\x08\x00\x00\x00\x00\x00\x00\xce")    # heartbeat
        client.send_method(2, commands.Basic.Qos(prefetch_count=1))
        client.expect(commands.Basic.QosOk, channel=2)
        client.send_method(1, commands.Queue.Declare(queue="seed-raw2", auto_delete=True))
        client.expect(commands.Queue.DeclareOk, channel=1)
        body = b"y" * 10000
        client.send_raw(frame.marshal(commands.Basic.Publish(routing_key="seed-raw2"), 1)
                        + content_header_frame(1, len(body))
                        + b"".join(content_body_frame(1, body[at:at + 4088])
                                   for at in range(0, len(body), 4088)))
        client.send_method(2, commands.Basic.Consume(queue="seed-raw2", consumer_tag="c"))
        client.expect(commands.Basic.ConsumeOk, channel=2)
        client.send_method(2, commands.Basic.Cancel(consumer_tag="c"))
        client.send_method(1, commands.Channel.Close(200, "bye", 0, 0))
        client.send_method(0, commands.Connection.Close(200, "bye", 0, 0))
        client.read_until_closed()
