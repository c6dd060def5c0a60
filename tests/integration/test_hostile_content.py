"""Names, content properties and field tables that used to end the broker process.

Each attack runs on its own connection to a broker dedicated to this module while a
RunningBystander publishes and consumes beside it (checked on leaving the `with` block),
and the broker process must still be running after every test. A named queue that
several tests declare is exclusive (it goes with the test's connection) or declared
alike by all of them (the stream `s`). The expected answers are RabbitMQ 3.10.8's
(probed on 127.0.0.1:5673 with the same frames) unless docs/compatibility.md lists a
difference.
"""

import struct

import pika
import pytest

from amqp_codec import decode_properties

from tests.support.broker_process import BrokerProcess
from tests.support.bystander import RunningBystander
from tests.support.raw_amqp import (FRAME_HEADER, RawAmqpClient, connect, method_frame, raw_frame,
                                    start_ok_frame)

pytestmark = pytest.mark.warren_only(
    "attacks a Warren broker of its own (BrokerProcess), as hostile-input tests run")

CLOSE_CONNECTION = (10, 50)
CLOSE_CHANNEL = (20, 40)
PLAIN_GUEST = b"\x00guest\x00guest"


# -- raw frames (built by hand: pamqp refuses or mangles what these tests send) ---------

def shortstr(data: bytes) -> bytes:
    return bytes([len(data)]) + data


def table(entries: bytes = b"") -> bytes:
    return struct.pack(">I", len(entries)) + entries


def array(*values: bytes) -> bytes:
    data = b"".join(values)
    return b"A" + struct.pack(">I", len(data)) + data


def nested_table(depth: int) -> bytes:
    value = table()
    for _ in range(depth):
        value = table(shortstr(b"k") + b"F" + value)
    return value


def queue_declare(name: bytes, durable: bool = False, arguments: bytes = b"",
                  exclusive: bool = False) -> bytes:
    return method_frame(1, 50, 10, b"\x00\x00" + shortstr(name)
                        + bytes([durable << 1 | exclusive << 2]) + table(arguments))


def queue_bind(queue: bytes, exchange: bytes, arguments: bytes = b"") -> bytes:
    return method_frame(1, 50, 20, b"\x00\x00" + shortstr(queue) + shortstr(exchange)
                        + shortstr(b"") + b"\x00" + table(arguments))


def queue_purge(name: bytes) -> bytes:
    return method_frame(1, 50, 30, b"\x00\x00" + shortstr(name) + b"\x00")


def basic_consume(queue: bytes, arguments: bytes = b"") -> bytes:
    return method_frame(1, 60, 20, b"\x00\x00" + shortstr(queue) + shortstr(b"")
                        + b"\x00" + table(arguments))


def publish(properties: bytes, routing_key: bytes = b"", exchange: bytes = b"",
            body: bytes = b"x") -> bytes:
    return (method_frame(1, 60, 40, b"\x00\x00" + shortstr(exchange)
                         + shortstr(routing_key) + b"\x00")
            + raw_frame(FRAME_HEADER, 1, struct.pack(">HHQ", 60, 0, len(body)) + properties)
            + (raw_frame(3, 1, body) if body else b""))


def basic_get(queue: bytes) -> bytes:
    return method_frame(1, 60, 70, b"\x00\x00" + shortstr(queue) + b"\x01")


def read_raw(client) -> tuple[int, bytes]:
    """(frame type, payload) of the next frame that is not a heartbeat."""
    while True:
        frame_type, _channel, size = struct.unpack(">BHI", client.read_exact(7))
        payload = client.read_exact(size + 1)[:-1]
        if frame_type != 8:
            return frame_type, payload


def read_method(client) -> tuple[tuple[int, int], bytes]:
    _type, payload = read_raw(client)
    return struct.unpack(">HH", payload[:4]), payload[4:]


def reply_code(arguments: bytes) -> int:
    return struct.unpack(">H", arguments[:2])[0]


def expect_close(client, kind: tuple[int, int], code: int) -> bytes:
    """Read until a Channel.Close or Connection.Close; check it; return its text."""
    ids, arguments = read_method(client)
    assert ids == kind, f"expected {kind}, got {ids} {arguments!r}"
    assert reply_code(arguments) == code, arguments
    return arguments[3:3 + arguments[2]]


def get_properties(client, queue: bytes) -> bytes:
    """Basic.Get (no-ack) one message; the raw property block it came with."""
    client.send_raw(basic_get(queue))
    ids, arguments = read_method(client)
    assert ids == (60, 71), f"expected Basic.GetOk, got {ids} {arguments!r}"
    _type, header = read_raw(client)
    if struct.unpack(">Q", header[4:12])[0]:
        read_raw(client)
    return header[12:]


def declared_name(client, frame: bytes) -> bytes:
    client.send_raw(frame)
    ids, arguments = read_method(client)
    assert ids == (50, 11), f"expected Queue.DeclareOk, got {ids} {arguments!r}"
    return arguments[1:1 + arguments[0]]


@pytest.fixture(scope="module")
def hostile_broker(tmp_path_factory):
    broker = BrokerProcess(data_dir=str(tmp_path_factory.mktemp("hostile-content"))).start()
    yield broker
    broker.kill()


@pytest.fixture
def attacked(hostile_broker):
    """The module's broker with a bystander running; the broker must survive."""
    assert hostile_broker.process.poll() is None, "the broker process exited before"
    with RunningBystander(hostile_broker):
        yield hostile_broker
    assert hostile_broker.process.poll() is None, "the broker process exited"


def open_client(broker):
    client = connect(broker.host, broker.port)
    client.open_channel(1)
    return client


# -- names -----------------------------------------------------------------------------

def test_pika_declares_consumes_and_publishes_with_utf8_names(attacked):
    """queue_declare('café') from plain pika gets its name back, and the name travels
    in Deliver (exchange and routing key) and Get-Ok."""
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        host=attacked.host, port=attacked.port))
    channel = connection.channel()
    name = "café-ü-日本-🐇" + "é" * 100
    assert channel.queue_declare(name, exclusive=True).method.queue == name
    channel.exchange_declare("échange-λ", "direct")
    channel.queue_bind(name, "échange-λ", routing_key="clé-ключ")
    channel.basic_publish("échange-λ", "clé-ключ", b"one")
    method, _props, body = next(channel.consume(name, inactivity_timeout=30))
    assert (method.exchange, method.routing_key, body) == ("échange-λ", "clé-ключ", b"one")
    channel.basic_ack(method.delivery_tag)
    channel.cancel()
    channel.basic_publish("échange-λ", "clé-ключ", b"two")
    method, _props, body = channel.basic_get(name, auto_ack=True)
    assert (method.exchange, method.routing_key, body) == ("échange-λ", "clé-ключ", b"two")
    channel.exchange_delete("échange-λ")
    connection.close()


def test_cr_and_lf_are_stripped_where_rabbitmq_strips_them(attacked):
    client = open_client(attacked)
    assert declared_name(client, queue_declare(b"a\r\nb")) == b"ab"
    client.send_raw(queue_bind(b"a\rb", b"amq.di\nrect"))
    assert read_method(client)[0] == (50, 21)          # Queue.BindOk: both stripped
    client.send_raw(queue_purge(b"a\r\nb"))              # purge does not strip
    assert b"no queue 'a\r\nb'" in expect_close(client, CLOSE_CHANNEL, 404)
    client.close()


def test_a_long_utf8_name_in_an_error_text_is_cut_to_a_shortstr(attacked):
    client = open_client(attacked)
    client.send_raw(queue_purge("é".encode() * 127 + b"x"))
    text = expect_close(client, CLOSE_CHANNEL, 404)
    assert len(text) == 255 and text.endswith(b"...")
    text.decode()                                       # cut at a character boundary
    client.close()


def test_a_name_that_is_not_utf8_is_a_frame_error(attacked):
    client = open_client(attacked)
    client.send_raw(queue_declare(b"\xff\xfe"))
    expect_close(client, CLOSE_CONNECTION, 501)
    client.close()


def test_durable_utf8_names_survive_a_restart(broker_factory, tmp_path):
    data_dir = str(tmp_path / "data")
    broker = broker_factory(data_dir=data_dir)
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        host=broker.host, port=broker.port))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.exchange_declare("αβγ-交換", "fanout", durable=True)
    channel.queue_declare("очередь-ü", durable=True)
    channel.queue_bind("очередь-ü", "αβγ-交換")
    channel.basic_publish("αβγ-交換", "", b"kept", pika.BasicProperties(delivery_mode=2))
    connection.close()
    assert broker.stop() == 0
    broker = broker_factory(data_dir=data_dir)
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        host=broker.host, port=broker.port))
    channel = connection.channel()
    channel.exchange_declare("αβγ-交換", "fanout", passive=True)
    method, _props, body = channel.basic_get("очередь-ü", auto_ack=True)
    assert (method.exchange, body) == ("αβγ-交換", b"kept")
    channel.basic_publish("αβγ-交換", "", b"routed after restart")
    assert channel.basic_get("очередь-ü", auto_ack=True)[2] == b"routed after restart"
    connection.close()


# -- properties the broker reads ---------------------------------------------------------

TIMESTAMP_MAX = struct.pack(">H", 0x0040) + struct.pack(">Q", 2**64 - 1)


@pytest.mark.parametrize("properties", [
    TIMESTAMP_MAX,
    # user_id makes the broker read the whole block: the timestamp must not stop it
    struct.pack(">H", 0x0050) + struct.pack(">Q", 2**64 - 1) + shortstr(b"guest"),
    struct.pack(">H", 0x2000) + nested_table(3000),          # not read: opaque
    struct.pack(">H", 0x2000) + table(shortstr(b"h") + b"Z" + b"abc"),   # opaque
    struct.pack(">H", 0x8002) + shortstr(b"\xff\xfe"),        # unused flag bit, not UTF-8
], ids=["timestamp-2**64-1", "timestamp-with-user-id", "headers-3000-deep",
        "headers-unknown-tag", "odd-flag-and-bytes"])
def test_properties_pass_through_byte_identical(attacked, properties):
    client = open_client(attacked)
    queue = declared_name(client, queue_declare(b""))
    client.send_raw(publish(properties, queue))
    assert get_properties(client, queue) == properties
    client.close()


@pytest.mark.parametrize("properties, durable", [
    (struct.pack(">H", 0x1000), True),                    # delivery_mode without a value
    (struct.pack(">H", 0x0010), False),                   # user_id without a value
    (struct.pack(">H", 0x0010) + b"\x05gu", False),       # user_id cut short
    (struct.pack(">HH", 0x0011, 0x8000) + shortstr(b"guest"), False),  # bad 2nd flag word
    (struct.pack(">H", 0x0110) + shortstr(b"5"), False),  # user_id flag, value missing
], ids=["delivery-mode-durable", "user-id-missing", "user-id-truncated",
        "continuation-word", "expiration-then-nothing"])
def test_malformed_properties_the_broker_must_read_close_the_connection(
        attacked, properties, durable):
    """RabbitMQ answers these with Connection.Close 541 INTERNAL_ERROR."""
    client = open_client(attacked)
    queue = declared_name(client, queue_declare(b"", durable=durable))
    client.send_raw(publish(properties, queue))
    expect_close(client, CLOSE_CONNECTION, 541)
    client.close()


@pytest.mark.parametrize("headers", [
    table(shortstr(b"h") + b"Z" + b"abc"),                         # unknown type tag
    struct.pack(">I", 50) + shortstr(b"h") + b"t\x01",             # truncated table
    nested_table(3000),                                            # deeper than 100
], ids=["unknown-tag", "truncated", "3000-deep"])
def test_headers_a_headers_exchange_cannot_read_close_the_connection(attacked, headers):
    client = open_client(attacked)
    queue = declared_name(client, queue_declare(b""))
    client.send_raw(queue_bind(queue, b"amq.headers"))
    assert read_method(client)[0] == (50, 21)
    client.send_raw(publish(struct.pack(">H", 0x2000) + headers, exchange=b"amq.headers"))
    expect_close(client, CLOSE_CONNECTION, 541)
    client.close()


@pytest.mark.parametrize("expiration", [b" 5", b"1.5", b"-1", b"", b"1_0", b"\xff",
                                        "٣".encode()])
def test_an_expiration_rabbitmq_refuses_is_a_406(attacked, expiration):
    client = open_client(attacked)
    queue = declared_name(client, queue_declare(b""))
    client.send_raw(publish(struct.pack(">H", 0x0100) + shortstr(expiration), queue))
    expect_close(client, CLOSE_CHANNEL, 406)
    client.close()


def test_user_id_that_is_not_utf8_is_a_406_with_a_readable_text(attacked):
    client = open_client(attacked)
    queue = declared_name(client, queue_declare(b""))
    client.send_raw(publish(struct.pack(">H", 0x0010) + shortstr(b"\xff"), queue))
    expect_close(client, CLOSE_CHANNEL, 406).decode()
    client.close()


@pytest.mark.parametrize("x_death", [
    b"S" + struct.pack(">I", 3) + b"abc",
    b"I" + struct.pack(">i", 5),
    b"F" + table(shortstr(b"a") + b"V"),
    array(b"S\x00\x00\x00\x01a"),
    array(b"F" + table(shortstr(b"queue") + b"S\x00\x00\x00\x04ttlq" + shortstr(b"reason")
                       + b"S\x00\x00\x00\x07expired" + shortstr(b"count") + b"V"),
          b"F" + table(shortstr(b"reason") + b"S\x00\x00\x00\x08rejected")),  # no cycle
], ids=["string", "int", "table", "array-of-strings", "count-void"])
def test_dead_lettering_an_x_death_of_an_unexpected_type(attacked, x_death):
    client = open_client(attacked)
    dead = declared_name(client, queue_declare(b""))
    arguments = (shortstr(b"x-message-ttl") + b"I" + struct.pack(">i", 0)
                 + shortstr(b"x-dead-letter-exchange") + b"S\x00\x00\x00\x00"
                 + shortstr(b"x-dead-letter-routing-key") + b"S" + struct.pack(">I", len(dead))
                 + dead)
    assert declared_name(client, queue_declare(b"ttlq", arguments=arguments,
                                               exclusive=True)) == b"ttlq"
    headers = shortstr(b"x-death") + x_death + shortstr(b"keep") + b"S\x00\x00\x00\x02me"
    client.send_raw(publish(struct.pack(">H", 0x2000) + table(headers), b"ttlq"))
    client.send_raw(basic_consume(dead))
    assert read_method(client)[0] == (60, 21)                          # Consume-Ok
    assert read_method(client)[0] == (60, 60)                          # Deliver
    _type, header = read_raw(client)
    properties = header[12:]
    assert shortstr(b"keep") + b"S\x00\x00\x00\x02me" in properties    # kept as it was
    deaths = decode_properties(properties).headers["x-death"]
    assert (deaths[0]["queue"], deaths[0]["count"]) == ("ttlq", 1)    # counted afresh
    client.close()


@pytest.mark.parametrize("x_match", [
    b"I" + struct.pack(">i", 1), b"S\x00\x00\x00\x01\xff", b"F" + table(), b"V",
], ids=["int", "not-utf8", "table", "void"])
def test_x_match_of_the_wrong_type_is_a_406(attacked, x_match):
    client = open_client(attacked)
    queue = declared_name(client, queue_declare(b""))
    client.send_raw(queue_bind(queue, b"amq.headers", shortstr(b"x-match") + x_match))
    expect_close(client, CLOSE_CHANNEL, 406)
    client.close()


@pytest.mark.parametrize("offset", [
    b"S\x00\x00\x00\x01\xff", b"F" + table(), b"A\x00\x00\x00\x00", b"t\x01",
    b"T" + struct.pack(">Q", 2**64 - 1),
], ids=["not-utf8", "table", "array", "bool", "timestamp-max"])
def test_stream_offset_of_the_wrong_type(attacked, offset):
    """RabbitMQ 3.10 answers a malformed x-stream-offset with 541; Warren with 406 (the
    timestamp, readable, starts after the end of the stream)."""
    client = open_client(attacked)
    stream = shortstr(b"x-queue-type") + b"S\x00\x00\x00\x06stream"
    assert declared_name(client, queue_declare(b"s", durable=True, arguments=stream)) == b"s"
    client.send_raw(method_frame(1, 60, 10, struct.pack(">IHB", 0, 10, 0)))   # qos 10
    assert read_method(client)[0] == (60, 11)
    client.send_raw(basic_consume(b"s", shortstr(b"x-stream-offset") + offset))
    ids, arguments = read_method(client)
    if offset.startswith(b"T"):
        assert ids == (60, 21)
    else:
        assert (ids, reply_code(arguments)) == (CLOSE_CHANNEL, 406)
    client.close()


# -- field tables in methods -----------------------------------------------------------

@pytest.mark.parametrize("arguments", [
    shortstr(b"h") + b"Z" + b"abc",
    shortstr(b"h") + b"S" + struct.pack(">I", 100) + b"ab",
    shortstr(b"h") + b"F" + nested_table(3000),
], ids=["unknown-tag", "truncated", "3000-deep"])
def test_a_method_table_that_cannot_be_read_is_a_frame_error(attacked, arguments):
    """RabbitMQ drops the socket for the first two and accepts the third."""
    client = open_client(attacked)
    client.send_raw(queue_declare(b"q", arguments=arguments))
    expect_close(client, CLOSE_CONNECTION, 501)
    client.close()


@pytest.mark.parametrize("client_properties", [
    nested_table(500), table(shortstr(b"h") + b"Z" + b"abc"),
    struct.pack(">I", 50) + shortstr(b"h") + b"t\x01",
], ids=["500-deep", "unknown-tag", "truncated"])
def test_start_ok_client_properties_that_cannot_be_read(attacked, client_properties):
    """Before login: a Connection.Close 501 (RabbitMQ drops the socket for a
    malformed table and accepts 500 levels)."""
    client = connect_raw(attacked)
    client.send_raw(method_frame(0, 10, 11, client_properties + shortstr(b"PLAIN")
                                 + struct.pack(">I", len(PLAIN_GUEST)) + PLAIN_GUEST
                                 + shortstr(b"en_US")))
    expect_close(client, CLOSE_CONNECTION, 501)
    client.close()


@pytest.mark.parametrize("mechanism, response", [
    ("PLAIN", b"\x00\xff\xfe\x00guest"),
    ("PLAIN", b"\x00guest\x00\xff"),
    ("AMQPLAIN", shortstr(b"LOGIN") + b"S\x00\x00\x00\x01\xff" + shortstr(b"PASSWORD")
     + b"S\x00\x00\x00\x05guest"),
], ids=["plain-user", "plain-password", "amqplain-user"])
def test_credentials_that_are_not_utf8_are_refused_like_a_wrong_password(
        attacked, mechanism, response):
    client = connect_raw(attacked)
    client.send_raw(start_ok_frame(mechanism, response, {
        "capabilities": {"authentication_failure_close": True}}))
    expect_close(client, CLOSE_CONNECTION, 403)
    client.close()


def connect_raw(broker):
    client = RawAmqpClient(broker.host, broker.port)
    client.start_handshake()
    return client
