"""Failure boundaries: an unexpected exception costs the narrowest scope that keeps the
broker consistent (one connection, one timer, one dead-lettered message), never the
broker. Faults are injected where no real input reaches them any more: through the core's
ports (a transport, a queue store), its dispatch table, or a stand-in for a collaborator
(the same for a compiled core, whose instances cannot be patched).
"""

import logging
import socket

import pytest
import trio
from pamqp import commands, frame as pamqp_frame

from amqp_codec import PROTOCOL_HEADER, InboundMethod
from broker.config import AlarmLimits
from broker.core import dispatch
from broker.core.broker import Broker
from broker.core.handshake import ConnectionState
from broker.core.persistence import Persistence
from broker.core.scheduler import Scheduler
from broker.server.admission import Admission
from broker.server.alarms import ResourceAlarm
from broker.server.drain_signal import DrainSignal
from broker.server.transport import SocketTransport
from core_harness import Client, close_code

INTERNAL_ERROR = 541


def _boom(*_args, **_kwargs):
    raise RuntimeError("injected fault")


def _close_of(replies: list):
    return next(frame for _, frame in replies if isinstance(frame, commands.Connection.Close))


def test_a_failing_handler_closes_only_its_connection_with_541(monkeypatch, caplog):
    broker = Broker()
    victim, bystander = Client(broker), Client(broker)
    victim.open_channel(1)
    bystander.open_channel(1)
    exclusive = victim.declare_queue(1, "", exclusive=True)
    monkeypatch.setitem(dispatch.HANDLERS, commands.Queue.Purge, _boom)
    with caplog.at_level(logging.ERROR):
        replies = victim.method(1, commands.Queue.Purge(queue=exclusive))
    close = _close_of(replies)
    assert close.reply_code == INTERNAL_ERROR
    assert close.reply_text.startswith("INTERNAL_ERROR - ")
    assert "injected fault" in caplog.text and "peer=test" in caplog.text
    assert exclusive not in broker.vhosts["/"].queues     # resources released
    assert victim.connection not in broker.connections
    # The other connection carries on.
    name = bystander.declare_queue(1, "", exclusive=True)
    bystander.publish(1, "", name, b"still here")
    (_, get_ok), _header, (_, body) = bystander.method(1, commands.Basic.Get(queue=name))
    assert isinstance(get_ok, commands.Basic.GetOk) and body.value == b"still here"


def test_a_failure_while_closing_drops_the_socket(monkeypatch):
    client = Client()
    client.open_channel(1)
    monkeypatch.setitem(dispatch.HANDLERS, commands.Queue.Purge, _boom)
    monkeypatch.setattr(client.transport, "write", _boom)   # the 541 Close cannot go out
    client.method(1, commands.Queue.Purge(queue="q"))
    assert client.connection.state is ConnectionState.CLOSED
    assert client.transport.closed


@pytest.mark.parametrize("no_ack", [False, True])   # no-ack: handed over without entry
def test_a_failed_delivery_costs_the_consumer_connection_not_the_publisher(monkeypatch,
                                                                          no_ack):
    broker = Broker()
    publisher, consumer, other = Client(broker), Client(broker), Client(broker)
    for client in (publisher, consumer, other):
        client.open_channel(1)
    name = publisher.declare_queue(1, "shared")
    consumer.method(1, commands.Basic.Consume(queue=name, consumer_tag="bad",
                                              no_ack=no_ack))

    def encode_failing(*args):
        raise RuntimeError("injected delivery fault")

    monkeypatch.setattr(consumer.connection.framer, "encode_deliver", encode_failing)
    replies = publisher.publish(1, "", name, b"m1")
    assert close_code(replies) is None                  # the publisher is untouched
    assert close_code(consumer.transport.frames()) == INTERNAL_ERROR
    assert broker.vhosts["/"].queues[name].message_count == 1   # the message stayed
    replies = other.method(1, commands.Basic.Consume(queue=name, consumer_tag="good",
                                                     no_ack=True))
    delivered = [frame for _, frame in replies if isinstance(frame, commands.Basic.Deliver)]
    assert [d.consumer_tag for d in delivered] == ["good"]


def test_a_failing_timer_is_logged_and_the_others_still_run(caplog):
    now = [0.0]
    scheduler = Scheduler(lambda: now[0])
    ran = []
    scheduler.call_at(1.0, _boom)
    scheduler.call_at(1.0, lambda: ran.append("second"))
    now[0] = 2.0
    with caplog.at_level(logging.ERROR):
        scheduler.run_due()
    assert ran == ["second"]
    assert "event=timer_failed" in caplog.text and "injected fault" in caplog.text


class _FailingStore:
    """A durable queue's store that fails to take messages once `failing` is set."""

    store_id = "failing"

    def __init__(self):
        self.failing = False

    def append(self, entry) -> None:
        if self.failing:
            raise RuntimeError("injected fault")

    def settle(self, entry) -> None:
        pass

    def drop(self) -> None:
        pass

    def synced(self) -> None:
        pass


def test_failed_dead_lettering_drops_the_message_and_the_rejecter_carries_on(caplog):
    store = _FailingStore()
    persistence = Persistence(store_factory=lambda vhost, queue: store)
    client = Client(Broker(persistence=persistence))
    client.open_channel(1)
    client.method(1, commands.Exchange.Declare(exchange="dlx", exchange_type="fanout"))
    client.connection.handle(InboundMethod(1, commands.Queue.Declare(queue="dead",
                                                                     durable=True)))
    client.end_batch()
    _, stores, writes = persistence.take_pending()   # the commit its Declare-Ok waits for
    persistence.committed(stores, writes)
    client.method(1, commands.Queue.Bind(queue="dead", exchange="dlx"))
    name = client.declare_queue(1, "source", arguments={"x-dead-letter-exchange": "dlx"})
    client.publish(1, "", name, b"rejected")
    client.method(1, commands.Basic.Get(queue=name))
    store.failing = True     # the dead-lettered copy cannot be stored
    with caplog.at_level(logging.ERROR):
        replies = client.method(1, commands.Basic.Reject(delivery_tag=1, requeue=False))
    assert close_code(replies) is None
    assert "event=dead_letter_failed" in caplog.text
    queues = client.broker.vhosts["/"].queues
    assert queues[name].message_count == 0 and queues["dead"].message_count == 0
    client.publish(1, "", name, b"next")
    assert queues[name].message_count == 1


class _DurableWritesWaiter:
    """What Persistence calls back after a commit (a Connection in the broker): records
    the releases, or fails in them; `fail` is the connection's own."""

    def __init__(self, connection, failing: bool):
        self.fail = connection.fail
        self.failing = failing
        self.released: list[int] = []

    def writes_durable(self, writes: int) -> bool:
        if self.failing:
            raise RuntimeError("injected fault")
        self.released.append(writes)
        return False


def test_a_failing_commit_callback_fails_only_that_connection():
    broker = Broker()
    failing, waiting = Client(broker), Client(broker)
    persistence = broker.persistence
    failing_waiter = _DurableWritesWaiter(failing.connection, failing=True)
    other_waiter = _DurableWritesWaiter(waiting.connection, failing=False)
    persistence.wait_durable(failing_waiter)
    persistence.wait_durable(other_waiter)
    persistence.committed([], persistence.writes)
    assert other_waiter.released == [persistence.writes]
    assert close_code(failing.transport.frames()) == INTERNAL_ERROR
    assert waiting.transport.frames() == []


def _server_side_transport(server_socket, broker):
    alarm = ResourceAlarm(AlarmLimits(), ".", lambda raised: None,
                          read_memory=lambda: 0, read_disk=lambda path: 1 << 40)
    return SocketTransport(trio.SocketStream(trio.socket.from_stdlib_socket(server_socket)),
                           broker, ("127.0.0.1", 1), alarm, DrainSignal(),
                           Admission(10, trio.current_time))


def test_the_transport_turns_an_unexpected_exception_into_541_and_returns():
    """A fault below the core (here: in the decoder) ends that socket's task normally
    after a 541 Connection.Close; nothing propagates to the listener."""
    client_socket, server_socket = socket.socketpair()
    received = bytearray()

    async def main():
        transport = _server_side_transport(server_socket, Broker())
        transport.framer.feed = _boom
        client = trio.socket.from_stdlib_socket(client_socket)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(transport.run)
            await client.send(PROTOCOL_HEADER)
            while chunk := await client.recv(65536):
                received.extend(chunk)

    trio.run(main)
    _consumed, _channel, close = pamqp_frame.unmarshal(bytes(received))
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == INTERNAL_ERROR
    client_socket.close()


class _LostFails:
    """The transport's connection, failing when told that the socket is gone."""

    def __init__(self, connection):
        self._connection = connection

    def __getattr__(self, name: str):
        return getattr(self._connection, name)

    def lost(self) -> None:
        raise RuntimeError("injected fault")


def test_the_transport_survives_a_fault_while_cleaning_up(monkeypatch, caplog):
    client_socket, server_socket = socket.socketpair()

    async def main():
        transport = _server_side_transport(server_socket, Broker())
        monkeypatch.setattr(transport, "connection", _LostFails(transport.connection))
        client_socket.close()     # the peer is gone at once
        await transport.run()     # must return, not raise

    with caplog.at_level(logging.ERROR):
        trio.run(main)
    assert "event=connection_cleanup_failed" in caplog.text
