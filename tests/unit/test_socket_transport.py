"""SocketTransport output released outside a read (a commit's confirms): `flush` sends
it at once, and what the socket does not take is left to the writer task, in order."""

import socket

import trio

from broker.config import AlarmLimits
from broker.core.broker import Broker
from broker.server.admission import Admission
from broker.server.alarms import ResourceAlarm
from broker.server.drain_signal import DrainSignal
from broker.server.transport import SocketTransport


def server_side_transport(server_socket) -> SocketTransport:
    alarm = ResourceAlarm(AlarmLimits(), ".", lambda raised: None,
                          read_memory=lambda: 0, read_disk=lambda path: 1 << 40)
    return SocketTransport(trio.SocketStream(trio.socket.from_stdlib_socket(server_socket)),
                           Broker(), ("127.0.0.1", 1), alarm, DrainSignal(),
                           Admission(10, trio.current_time))


def test_flush_sends_what_was_written_without_waiting_for_the_writer_task():
    client_socket, server_socket = socket.socketpair()
    client_socket.setblocking(False)

    async def main():
        transport = server_side_transport(server_socket)
        transport.write(b"basic.ack")
        transport.flush()           # no checkpoint after this: no task ran meanwhile
        assert client_socket.recv(100) == b"basic.ack"

    trio.run(main)
    client_socket.close()


def test_flush_leaves_what_a_full_socket_does_not_take_to_the_writer_in_order():
    client_socket, server_socket = socket.socketpair()
    data = bytes(range(256)) * 32 * 1024         # 8 MiB: more than the socket takes
    received = bytearray()

    async def main():
        transport = server_side_transport(server_socket)
        client = trio.socket.from_stdlib_socket(client_socket)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(transport._write_loop)
            transport.write(data[:1000])
            transport.write((data[1000:],))      # a large part, sent from where it is
            transport.flush()
            while len(received) < len(data):
                received.extend(await client.recv(1 << 20))
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert received == data
    client_socket.close()
