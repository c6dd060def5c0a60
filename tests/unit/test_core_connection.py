"""Channel 0: negotiation, vhost and authentication checks, close handshakes."""

import pytest
from pamqp import body as pamqp_body, commands, frame, header

from broker.core.broker import Broker
from broker.core.certificate_login import TlsPeer
from broker.core.connection import Connection, ReadOutcome
from broker.core.handshake import ConnectionState
from amqp_codec import (PROTOCOL_HEADER, Framer, InboundMethod, InboundPublish,
                        encode_properties)
from broker.core.message import Message, PublishedMessage
from broker.core.rabbitmq_lines import LINE_3_10, Profile

from core_harness import Client, RecordingTransport, close_code, deliveries, kinds


def negotiate(broker, response="\0guest\0guest", capabilities=None, vhost="/",
              tune=(2047, 131072, 0)):
    transport = RecordingTransport()
    connection = Connection(broker, transport, "test", "127.0.0.1")
    connection.handshake.start()
    replies = [transport.methods()]
    caps = capabilities if capabilities is not None else {}
    steps = [commands.Connection.StartOk(client_properties={"capabilities": caps},
                                         mechanism="PLAIN", response=response),
             commands.Connection.TuneOk(*tune),
             commands.Connection.Open(virtual_host=vhost)]
    for step in steps:
        if transport.closed:
            break
        connection.handle(InboundMethod(0, step))
        replies.append(transport.methods())
    return connection, transport, replies


def test_start_advertises_what_pika_needs_for_confirms():
    _, _, replies = negotiate(Broker())
    (_, start), = replies[0]
    capabilities = start.server_properties["capabilities"]
    assert capabilities["publisher_confirms"] and capabilities["basic.nack"]
    assert set(start.mechanisms.split()) == {"PLAIN", "AMQPLAIN"}


def test_full_handshake_reaches_open_and_applies_tuning():
    connection, transport, replies = negotiate(Broker(), tune=(100, 8192, 30))
    assert isinstance(replies[1][0][1], commands.Connection.Tune)
    assert isinstance(replies[3][0][1], commands.Connection.OpenOk)
    assert connection.state is ConnectionState.OPEN
    assert connection.framer.frame_max == 8192
    assert transport.tuned_with == 30
    assert connection.channel_max == 100


def test_bad_password_closes_with_403_for_clients_that_ask_for_it():
    _, transport, replies = negotiate(Broker(), response="\0guest\0wrong",
                                      capabilities={"authentication_failure_close": True})
    assert close_code(replies[1]) == 403
    assert transport.closed


def test_bad_password_just_drops_clients_without_the_capability():
    _, transport, replies = negotiate(Broker(), response="\0guest\0wrong")
    assert replies[1] == []
    assert transport.closed


def test_unknown_vhost_is_530():
    _, _, replies = negotiate(Broker(), vhost="/nope")
    assert close_code(replies[3]) == 530


def test_frame_max_above_the_servers_is_refused():
    _, _, replies = negotiate(Broker(), tune=(0, 10_000_000, 0))
    assert close_code(replies[2]) == 530


def test_client_close_is_answered_with_close_ok_and_requeues():
    client = Client()
    client.open_channel()
    client.declare_queue(1, "q")
    client.publish(1, "", "q", b"m")
    client.method(1, commands.Basic.Get(queue="q"))
    replies = client.method(0, commands.Connection.Close())
    assert kinds(replies) == [(0, commands.Connection.CloseOk)]
    assert client.transport.closed
    assert client.broker.vhosts["/"].queues["q"].message_count == 1


def test_server_close_waits_for_close_ok_and_ignores_other_methods():
    client = Client()
    client.open_channel()
    client.connection.close(320, "CONNECTION_FORCED - shutdown")
    assert close_code(client.transport.methods()) == 320
    assert client.method(1, commands.Queue.Declare(queue="x")) == []
    client.method(0, commands.Connection.CloseOk())
    assert client.transport.closed


def test_second_channel_open_is_a_connection_error():
    client = Client()
    client.open_channel()
    assert close_code(client.method(1, commands.Channel.Open())) == 504


def test_method_on_unopened_channel_is_504():
    client = Client()
    assert close_code(client.method(3, commands.Queue.Declare(queue="x"))) == 504


def test_channel_max_channels_open_and_one_more_is_530():
    client = Client()                # negotiated channel_max=100
    for number in range(1, 101):
        client.open_channel(number)
    (_, close), = client.method(101, commands.Channel.Open())
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        530, "NOT_ALLOWED - number of channels opened (100) has reached the negotiated "
             "channel_max (100)", 0, 0)


def test_channel_max_limits_how_many_channels_are_open_not_their_numbers():
    """As RabbitMQ 3.10: any channel number opens while fewer than channel_max channels
    are open or closing (closed by the broker, Close-Ok not yet received)."""
    client = Client()                # negotiated channel_max=100
    for number in [5000, 65535, *range(1, 99)]:
        client.open_channel(number)
    client.method(5000, commands.Queue.Declare(queue="missing", passive=True))   # 404
    client.method(5000, commands.Channel.CloseOk())
    client.open_channel(4000)                       # 5000 no longer counts
    client.method(4000, commands.Queue.Declare(queue="missing", passive=True))   # 404
    assert close_code(client.method(200, commands.Channel.Open())) == 530


def test_capabilities_that_are_not_a_table_count_as_none():
    """A client_properties `capabilities` of another type (found by the fuzzer: it made
    every supports() call raise) is treated as no capabilities."""
    client = Client(capabilities="not a table")
    assert not client.connection.supports("consumer_cancel_notify")
    client.open_channel(1)
    assert close_code(client.method(1, commands.Queue.Declare(queue="q"))) is None


def test_close_texts_quoting_long_non_ascii_names_are_cut_to_255_bytes():
    client = Client()
    client.open_channel(1)
    name = "é" * 127           # 254 bytes: a legal name, a reply text over 255 bytes
    declare = commands.Queue.Declare(queue="placeholder", passive=True)
    declare.queue = name       # (pamqp's constructor accepts ASCII names only)
    (_, close), = client.method(1, declare)
    assert close.reply_code == 404
    assert len(close.reply_text.encode()) <= 255
    assert close.reply_text.startswith("NOT_FOUND - no queue 'éé")


def test_dead_letter_exchange_that_is_not_utf8_is_a_406():
    client = Client()
    client.open_channel(1)
    replies = client.method(1, commands.Queue.Declare(
        queue="q", arguments={"x-dead-letter-exchange": b"\xff\xfe"}))
    assert close_code(replies) == 406


@pytest.mark.parametrize("secret", ["guest", "not-the-password", b"\xff\x00token"])
def test_update_secret_is_acknowledged_whatever_the_secret_and_changes_nothing(secret):
    """RabbitMQ's internal user database does not check a new secret."""
    client = Client()
    client.open_channel(1)
    replies = client.method(0, commands.Connection.UpdateSecret(new_secret=secret,
                                                                reason="rotation"))
    assert kinds(replies) == [(0, commands.Connection.UpdateSecretOk)]
    assert client.connection.user == "guest"
    assert client.declare_queue(1, "after-update") == "after-update"
    assert client.broker.access.authenticate("guest", "guest") is not None


def test_update_secret_on_an_external_login_is_acknowledged():
    broker = Broker()
    broker.auth_mechanisms = ("PLAIN", "AMQPLAIN", "EXTERNAL")
    transport = RecordingTransport()
    connection = Connection(broker, transport, "test", "127.0.0.1", TlsPeer("guest"))
    connection.handshake.start()
    for method in (commands.Connection.StartOk(mechanism="EXTERNAL", response=""),
                   commands.Connection.TuneOk(2047, 131072, 0),
                   commands.Connection.Open(virtual_host="/"),
                   commands.Connection.UpdateSecret(new_secret="", reason="renewed")):
        connection.handle(InboundMethod(0, method))
    assert kinds(transport.methods())[-1] == (0, commands.Connection.UpdateSecretOk)
    assert connection.state is ConnectionState.OPEN


def test_update_secret_before_open_is_504_as_any_unexpected_connection_method():
    transport = RecordingTransport()
    connection = Connection(Broker(), transport, "test", "127.0.0.1")
    connection.handshake.start()
    connection.handle(InboundMethod(0, commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\0guest\0guest")))
    connection.handle(InboundMethod(0, commands.Connection.TuneOk(2047, 131072, 0)))
    transport.methods()
    connection.handle(InboundMethod(0, commands.Connection.UpdateSecret(new_secret="guest",
                                                                   reason="early")))
    (_, close), = transport.methods()
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        504, "CHANNEL_ERROR - unexpected method in connection state opening", 10, 70)


def publish(channel: int, exchange: str, body: bytes, immediate: bool = False):
    return InboundPublish(channel, exchange, "q", False, immediate,
                          encode_properties(commands.Basic.Properties()), body)


def queued_bodies(client: Client) -> list:
    return [entry.message.body
            for entry in client.broker.vhosts["/"].queues["q"].ready_entries()]


def test_a_reads_publishes_go_in_order_and_a_channel_error_stops_only_its_channel():
    """The items of one read go through the core together; a publish that closes its
    channel (404) leaves the other channel's publishes before and after it queued, and
    its own channel's later publishes are dropped until Channel.CloseOk."""
    client = Client()
    client.open_channel(1)
    client.open_channel(2)
    client.declare_queue(1, "q")
    client.connection.handle_all([publish(1, "", b"1"), publish(2, "", b"2"),
                                  publish(1, "missing", b"404"), publish(1, "", b"3"),
                                  publish(2, "", b"4")])
    client.end_batch()
    assert close_code(client.transport.methods()) == 404
    assert queued_bodies(client) == [b"1", b"2", b"4"]


def test_a_connection_error_in_a_read_ends_the_handling_of_the_rest_of_it():
    client = Client()
    client.open_channel(1)
    client.declare_queue(1, "q")
    client.connection.handle_all([publish(1, "", b"1"), publish(1, "", b"540", True),
                                  publish(1, "", b"2")])
    client.end_batch()
    assert close_code(client.transport.methods()) == 540
    assert queued_bodies(client) == [b"1"]


def test_a_publish_read_from_the_wire_is_delivered_as_published():
    """The decoder makes a publish as the broker's message (PublishedMessage): the
    queue holds that object, and the consumer gets the publisher's properties and body."""
    publisher = Client()
    consumer = Client(publisher.broker)
    publisher.open_channel()
    consumer.open_channel()
    publisher.declare_queue(1, "q")
    properties = commands.Basic.Properties(message_id="m1", delivery_mode=2)
    framer = publisher.connection.framer
    framer.feed(PROTOCOL_HEADER)
    publisher.connection.handle_all(framer.feed(
        frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
        + frame.marshal(header.ContentHeader(0, 5, properties), 1)
        + frame.marshal(pamqp_body.ContentBody(b"hello"), 1)))
    publisher.end_batch()
    [entry] = publisher.broker.vhosts["/"].queues["q"].ready
    assert type(entry.message) is PublishedMessage and entry.message.persistent
    frames = consumer.method(1, commands.Basic.Consume(queue="q", no_ack=True))
    [(deliver, content)] = deliveries(frames)
    [content_header] = [f for _, f in frames if isinstance(f, header.ContentHeader)]
    assert (deliver.routing_key, content) == ("q", b"hello")
    assert (content_header.properties.message_id,
            content_header.properties.delivery_mode) == ("m1", 2)


def test_a_message_decodes_its_properties_on_use_and_again_after_forgetting_them():
    """A message the decoder made (no constructor call), before a channel saw it and
    after it was queued, and messages made by copying answer `persistent` and
    `decoded_properties` alike, before and after forget."""
    properties = commands.Basic.Properties(delivery_mode=2, priority=3)
    raw = encode_properties(properties)
    publisher = Client()
    publisher.open_channel()
    publisher.declare_queue(1, "q")
    framer = publisher.connection.framer
    framer.feed(PROTOCOL_HEADER)
    wire = (frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
            + frame.marshal(header.ContentHeader(0, 2, properties), 1)
            + frame.marshal(pamqp_body.ContentBody(b"hi"), 1))
    [unrouted] = framer.feed(wire)
    publisher.connection.handle_all(framer.feed(wire))
    [entry] = publisher.broker.vhosts["/"].queues["q"].ready
    decoded = entry.message
    assert type(decoded) is PublishedMessage
    for message in (unrouted, decoded, Message("", "q", raw, b"hi"),
                    decoded.with_body(b"hi")):
        message.forget_decoded()   # nothing decoded yet: nothing to forget
        assert message.persistent and message.decoded_properties.priority == 3
        message.forget_decoded()
        assert message.decoded_properties.priority == 3


def test_receive_data_answers_the_header_handles_each_read_and_says_to_read_on():
    transport = RecordingTransport()
    connection = Connection(Broker(), transport, "test", "127.0.0.1")
    assert connection.receive_data(PROTOCOL_HEADER) == ReadOutcome(True, None)
    assert kinds(transport.methods()) == [(0, commands.Connection.Start)]
    outcome = connection.receive_data(frame.marshal(commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\0guest\0guest"), 0))
    assert outcome == ReadOutcome(True, None)
    assert kinds(transport.methods()) == [(0, commands.Connection.Tune)]


def test_receive_data_closes_the_connection_on_a_protocol_error_and_stops_reading():
    transport = RecordingTransport()
    connection = Connection(Broker(), transport, "test", "127.0.0.1")
    connection.receive_data(PROTOCOL_HEADER)
    transport.methods()
    outcome = connection.receive_data(b"\x09\x00\x00\x00\x00\x00\x00\xce")  # no frame type 9
    assert not outcome.keep_reading
    assert close_code(transport.methods()) == 501
    assert connection.state is ConnectionState.CLOSING


def test_receive_data_answers_another_protocol_header_with_its_own_and_stops():
    """(Under 3.10; 4.x answers AMQP 1.0's: test_refusal_texts_by_line.py.)"""
    transport = RecordingTransport()
    connection = Connection(Broker(profile=Profile(LINE_3_10)), transport, "test",
                            "127.0.0.1")
    assert not connection.receive_data(b"HTTP/1.1 200 OK\r\n").keep_reading
    assert bytes(transport.output) == PROTOCOL_HEADER
