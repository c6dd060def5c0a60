"""One framer per connection: the connection's one frame_max limits what it reads and
cuts what it sends, before and after Connection.TuneOk; the encoders it offers write
what the codec's encoders write; the memory alarm counts its partly received input."""

import socket
import struct

import pytest
import trio
from hypothesis import given, strategies as st
from pamqp import commands, frame

from amqp_codec import PROTOCOL_HEADER, Framer, InboundMethod, InboundPublish, ProtocolError
from amqp_codec.encoder import encode_deliver, encode_get_ok, encode_return
from broker.core.broker import Broker, BrokerConfig
from broker.core.connection import Connection
from broker.core.rabbitmq_lines import LINE_3_10, LINE_4_3, Profile
from broker.server.alarms import held_memory
from core_harness import RecordingTransport
from test_decoder import body, content_header, publish, raw_frame
from test_fast_path import (bodies, channels, delivery_tags, exchange_names, joined,
                            raw_properties, shortstrs)
from test_fault_isolation import _server_side_transport


def _frame_sizes(data: bytes) -> list[int]:
    """The size of every frame (header, payload and end octet) in data."""
    sizes, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from(">I", data, pos + 3)[0]
        sizes.append(size + 8)
        pos += size + 8
    return sizes


def _tuned_connection(frame_max: int, server_frame_max: int = 131072) -> Connection:
    """A connection negotiated up to Connection.Open with the client's frame_max (on a
    broker of the 3.10 line, which takes a frame_max as low as 4096)."""
    broker = Broker(BrokerConfig(frame_max=server_frame_max), profile=Profile(LINE_3_10))
    connection = Connection(broker, RecordingTransport(), "test", "127.0.0.1")
    connection.framer.feed(PROTOCOL_HEADER)
    connection.handshake.start()
    for method in (commands.Connection.StartOk(client_properties={}, mechanism="PLAIN",
                                               response="\0guest\0guest"),
                   commands.Connection.TuneOk(channel_max=10, frame_max=frame_max),
                   commands.Connection.Open(virtual_host="/"),):
        connection.handle(InboundMethod(0, method))
    connection.handle(InboundMethod(1, commands.Channel.Open()))
    connection.transport.frames()
    return connection


def _start_ok(padding: int) -> bytes:
    return frame.marshal(commands.Connection.StartOk(
        client_properties={"padding": "x" * padding}, mechanism="PLAIN",
        response="\0guest\0guest"), 0)


@pytest.mark.parametrize("line", [LINE_3_10, LINE_4_3])
def test_before_tune_ok_frames_above_8192_octets_are_refused(line):
    """RabbitMQ 4.1 and later: until the client's Connection.TuneOk, no frame may
    exceed 8192 octets (a 6 KB Start-Ok is read, as measured on 4.3.6); a Start-Ok with
    a larger client-properties table is a frame error. Every line reads 8192 here, 3.10
    too (its node refuses frames above 4096: Warren is lenient on purpose)."""
    connection = Connection(Broker(BrokerConfig(frame_max=20_000), profile=Profile(line)),
                            RecordingTransport())
    framer = connection.framer
    [item] = framer.feed(PROTOCOL_HEADER + _start_ok(6_000))
    assert item.method.client_properties["padding"] == "x" * 6_000
    with pytest.raises(ProtocolError) as refused:
        framer.feed(_start_ok(9_000))
    assert refused.value.reply_code == 501
    assert "frame_too_large" in refused.value.text


def test_frames_after_a_tune_ok_in_the_same_read_are_held_to_the_servers_frame_max():
    """A client that sends Tune-Ok and more at once: what follows the Tune-Ok in that
    read may be as large as the server's frame_max (the negotiated one applies once the
    broker has handled the Tune-Ok), not 4096; above it is still refused."""
    connection = Connection(Broker(BrokerConfig(frame_max=20_000)), RecordingTransport())
    framer = connection.framer
    tune_ok = frame.marshal(commands.Connection.TuneOk(channel_max=10, frame_max=20_000,
                                                       heartbeat=0), 0)
    large = frame.marshal(commands.Queue.Declare(queue="q", arguments={"x": "y" * 10_000}), 1)
    items = framer.feed(PROTOCOL_HEADER + _start_ok(100) + tune_ok[:5])
    items += framer.feed(tune_ok[5:] + large)
    assert [type(item.method) for item in items] == [
        commands.Connection.StartOk, commands.Connection.TuneOk, commands.Queue.Declare]
    with pytest.raises(ProtocolError) as refused:
        framer.feed(raw_frame(1, 0, bytes(20_001)))
    assert refused.value.reply_code == 501


def test_tune_ok_sets_the_one_frame_max_for_what_is_read_and_what_is_sent():
    connection = _tuned_connection(frame_max=4096)
    framer = connection.framer
    assert framer.frame_max == 4096
    # What the connection sends: a 10,000-byte message comes back in 4096-byte frames.
    connection.handle(InboundMethod(1, commands.Queue.Declare(queue="q")))
    connection.handle(InboundPublish(1, "", "q", False, False, b"\x00\x00", bytes(10_000)))
    connection.handle(InboundMethod(1, commands.Basic.Get(queue="q", no_ack=True)))
    output = bytes(connection.transport.output)
    sizes = _frame_sizes(output)
    assert max(sizes) == 4096 and sum(size - 8 for size in sizes[-3:]) == 10_000
    # What the connection reads: a frame of 4096 payload bytes passes, 4097 is a 501.
    whole = publish() + content_header(body_size=4096 + 4097) + body(data=bytes(4096))
    assert framer.feed(whole) == []
    with pytest.raises(ProtocolError) as refused:
        framer.feed(body(data=bytes(4097)))
    assert refused.value.reply_code == 501


def test_tune_changes_both_directions_at_once():
    framer = Framer(frame_max=131072)
    framer.feed(PROTOCOL_HEADER)
    framer.tune(4096)
    assert framer.frame_max == 4096
    frames = joined(framer.encode_deliver(1, "ctag", 1, False, "", "q", b"\x00\x00",
                                          bytes(5000)))
    assert _frame_sizes(frames)[-2:] == [4096, 5000 - 4088 + 8]
    with pytest.raises(ProtocolError):
        framer.feed(raw_frame(1, 1, bytes(4097)))


@given(channels, shortstrs, delivery_tags, st.booleans(), exchange_names, shortstrs,
       raw_properties, st.sampled_from([4096, 131072, 0]), st.data())
def test_the_content_encoders_are_the_codecs_with_the_framers_frame_max(
        channel, consumer_tag, delivery_tag, redelivered, exchange, routing_key, raw,
        frame_max, data):
    body_bytes = data.draw(bodies(frame_max))
    framer = Framer(frame_max=frame_max)
    assert joined(framer.encode_deliver(channel, consumer_tag, delivery_tag, redelivered,
                                        exchange, routing_key, raw, body_bytes)) == joined(
        encode_deliver(channel, consumer_tag, delivery_tag, redelivered, exchange,
                       routing_key, raw, body_bytes, frame_max))
    assert joined(framer.encode_get_ok(channel, delivery_tag, redelivered, exchange,
                                       routing_key, 7, raw, body_bytes)) == joined(
        encode_get_ok(channel, delivery_tag, redelivered, exchange, routing_key, 7, raw,
                      body_bytes, frame_max))
    assert joined(framer.encode_return(channel, 312, "NO_ROUTE", exchange, routing_key, raw,
                                       body_bytes)) == joined(
        encode_return(channel, 312, "NO_ROUTE", exchange, routing_key, raw, body_bytes,
                      frame_max))


def test_the_memory_alarm_counts_input_the_connections_framer_holds():
    """The server reads into its connection's framer, and what that holds for a message
    not complete yet is part of the memory the alarm measures."""
    broker = Broker()

    async def main():
        client_socket, server_socket = socket.socketpair()
        with client_socket, server_socket:
            transport = _server_side_transport(server_socket, broker)
            framer = transport.connection.framer
            framer.feed(PROTOCOL_HEADER + publish() + content_header(body_size=3000)
                        + body(data=bytes(1200)))
            assert held_memory(broker, [transport]) == 1200
            framer.feed(body(data=bytes(1800)))
            assert held_memory(broker, [transport]) == 0

    trio.run(main)
