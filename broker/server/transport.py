"""One client socket: a reader task feeding the core, a writer task draining a
coalesced output buffer, and heartbeats.

Small writes are appended to one bytearray. Large message bodies come from the codec as
parts that refer to the body; they are queued as chunks of their own and sent with the
buffered bytes by one writev (scatter/gather), so a 64 KiB body is not copied on its
way out of the broker.

The socket is read and written with non-blocking system calls, waiting on trio only
when it would block: a read whose replies fit in the socket is answered by the reader
itself, without waking the writer task, and each read costs one trip through trio's
scheduler (a checkpoint keeps busy connections from starving the others)."""

import logging
import os
import time
from typing import Callable

import trio

from amqp_codec import (HEARTBEAT_FRAME, PROTOCOL_HEADER, ProtocolError,
                        ProtocolHeaderMismatch)
from broker.core.certificate_login import TlsPeer
from broker.core.connection import Connection

from .admission import Admission
from .alarms import ResourceAlarm

log = logging.getLogger("warren.server")

RECEIVE_SIZE = 256 * 1024
HIGH_WATER = 4 * 1024 * 1024  # stop feeding consumers above this many buffered bytes
LOW_WATER = 1024 * 1024       # resume below this
OWN_CHUNK = 16 * 1024         # parts this large are sent from where they are, not copied
MAX_IOV = 512                 # buffers per sendmsg (Linux allows 1024)
CLOSE_OK_TIMEOUT = 5.0        # how long a server-initiated close waits for CloseOk
# After the Close-Ok of a client's Connection.Close, how long the socket waits for the
# client to close its end (RabbitMQ's CLOSING_TIMEOUT).
CLOSING_TIMEOUT = 30.0
THROTTLE_WAIT = 0.5           # a throttled publisher is read again after this at the latest
HANDSHAKE_STATES = ("awaiting-start-ok", "awaiting-tune-ok", "awaiting-open")


class DrainSignal:
    """Publisher flow control: throttled publishing connections wait here for consumer
    connections' output to drain (for THROTTLE_WAIT at most, so heartbeats and other
    traffic keep being read)."""

    def __init__(self):
        self._drained = trio.Event()

    def notify(self) -> None:
        self._drained.set()
        self._drained = trio.Event()

    async def wait(self, deadline: float) -> None:
        with trio.move_on_at(deadline):
            await self._drained.wait()


class SocketTransport:
    """Implements the core's Transport over a trio stream."""

    def __init__(self, stream: trio.abc.Stream, broker, peer: tuple[str, int],
                 alarm: ResourceAlarm, drain_signal: DrainSignal, admission: Admission,
                 tls: TlsPeer | None = None, accepted_at: float | None = None):
        self.stream = stream
        self.address = peer[0]      # the client's IP address
        self.peer = peer_text(peer)
        self.admission = admission
        self._in_handshake = True     # counted by admission until Connection.Open
        self._refusal_delayed = False
        self._opened = trio.Event()
        self.alarm = alarm
        self.drain_signal = drain_signal
        self._held_by_alarm = False
        self._started = False   # Connection.Start sent (after the protocol header)
        self.connection = Connection(broker, self, self.peer, self.address, tls)
        # The handshake (a TLS handshake included) must be done by handshake_timeout
        # after the socket was accepted.
        self._accepted_at = trio.current_time() if accepted_at is None else accepted_at
        self.framer = self.connection.framer   # the bytes read go in here
        self.writable = True
        self.heartbeat = 0
        self.sends_heartbeats = True   # a test broker can stop them (testing/faults.py)
        self._buffer = bytearray()    # small writes since the last queued chunk
        self._chunks: list = []       # bytes-like chunks to send before _buffer
        self._queued = 0              # bytes in _chunks and _buffer
        self._data_ready = trio.Event()
        self._input_resumed = trio.Event()   # set when held-back input is handled
        self._handling = False        # the reader answers its own batch itself
        self._sending = False         # the writer task waits for the socket mid-send
        self._closing = False
        self._last_received = trio.current_time()
        self._last_sent = trio.current_time()
        self._nursery: trio.Nursery | None = None
        # For the management API: when it connected (wall clock, ms), bytes per read/send
        self.connected_at = int(time.time() * 1000)
        self.received_bytes = 0
        self.sent_bytes = 0

    # -- Transport interface -------------------------------------------------------

    def write(self, data) -> None:
        """Queue bytes, or a tuple of bytes-like parts (see the module docstring)."""
        if type(data) is tuple:
            self._write_parts(data)
        else:
            self._buffer += data
            self._queued += len(data)
        if self._queued > HIGH_WATER:
            self.writable = False
        if not self._handling and not self._data_ready.is_set():
            self._data_ready.set()

    def flush(self) -> None:
        """Send what is queued now, outside any read (output a commit released): one
        trip through the scheduler less than waking the writer task, which is left what
        the socket does not take (and a broken socket, to end the connection)."""
        if not self._queued or self._handling or self._sending or self._closing:
            return
        try:
            if self._send_now():
                return
        except trio.BrokenResourceError:
            pass
        self._data_ready.set()

    def _write_parts(self, parts: tuple) -> None:
        for part in parts:
            size = len(part)
            if size >= OWN_CHUNK:
                if self._buffer:
                    self._chunks.append(self._buffer)
                    self._buffer = bytearray()
                self._chunks.append(part)
            else:
                self._buffer += part
            self._queued += size

    @property
    def held_bytes(self) -> int:
        """Output not yet sent and input of incomplete messages (memory alarm)."""
        return self._queued + self.framer.assembling_bytes

    def close(self) -> None:
        """Stop reading; the writer flushes what is buffered, then the socket closes
        (once the read being handled is finished with)."""
        self._closing = True
        if not self._handling:
            self._data_ready.set()

    def drop(self) -> None:
        """End the connection without a Connection.Close: the socket just closes, as
        when the network fails (a test broker's fault)."""
        log.info("event=connection_dropped peer=%s", self.peer)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def tuned(self, heartbeat: int) -> None:
        self.heartbeat = heartbeat
        if heartbeat and self._nursery is not None:
            self._nursery.start_soon(self._heartbeats, heartbeat)

    # -- tasks ---------------------------------------------------------------------

    async def run(self, ended: Callable[[], None] | None = None) -> None:
        """Serve the connection until it ends. Nothing raised while serving it leaves
        this method: the failure is logged and only this connection is dropped.
        `ended()` is called once the connection is over, before the socket is left
        open for the client to close (see _wait_for_peer_close)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_loop)
                nursery.start_soon(self._handshake_deadline)
                await self._read_loop()
                self.connection.input_ended()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            log.debug("event=socket_lost peer=%s", self.peer)
        except* Exception as failures:
            log.error("event=connection_failed peer=%s", self.peer, exc_info=failures)
        finally:
            self._end_handshake()
            try:
                self.connection.lost()
            except Exception as error:
                log.error("event=connection_cleanup_failed peer=%s", self.peer,
                          exc_info=error)
            if ended is not None:
                ended()
            try:
                if self.connection.closed_by_client:
                    await self._wait_for_peer_close()
            finally:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(self.stream)

    async def _wait_for_peer_close(self) -> None:
        """After the Close-Ok of the client's Connection.Close, leave closing the socket
        to the client, as RabbitMQ does: what it still sends is read and dropped, for
        CLOSING_TIMEOUT at most. Closed first, with input unread or still coming, the
        socket would be reset, and a client reading it reports an error (amqp091-go's
        Close, called from several goroutines at once, returned 501 "connection reset by
        peer"). A server shutting down does not wait."""
        if not self.admission.may_linger():
            return
        sock = self.stream.socket
        fd = sock.fileno()
        try:
            with trio.move_on_after(CLOSING_TIMEOUT):
                while True:
                    data = self._receive(fd)
                    if data is None:
                        await trio.lowlevel.wait_readable(sock)
                    elif not data:
                        return
                    else:
                        await trio.lowlevel.checkpoint()
        except (trio.BrokenResourceError, ConnectionError):
            pass
        finally:
            self.admission.linger_ended()

    async def _handshake_deadline(self) -> None:
        """Drop a socket that has not opened its connection in time."""
        with trio.move_on_at(self._accepted_at
                             + self.connection.broker.config.handshake_timeout):
            await self._opened.wait()
            return
        log.debug("event=handshake_timeout peer=%s state=%s", self.peer,
                  self.connection.state)
        self.admission.handshake_timeouts += 1
        self._nursery.cancel_scope.cancel()

    def _end_handshake(self) -> None:
        if self._in_handshake:
            self._in_handshake = False
            self.admission.handshake_ended()
            if self.connection.state == "open":
                self.admission.login_accepted(self.address)
                self._opened.set()

    async def _delay_login_refusal(self) -> None:
        """A refused login is answered late, later the more often the address failed."""
        await trio.sleep(self.admission.login_refused(self.address))

    async def _read_loop(self) -> None:
        sock = self.stream.socket
        fd = sock.fileno()
        yielded = True
        while not self._closing:
            if self.connection.has_published and not self.alarm.clear.is_set():
                await self._wait_for_alarm_to_clear()
            if self.connection.throttled:
                await self._wait_while_throttled()
            if self.connection.input_deferred:
                await self._wait_for_deferred_input()
            data = self._receive(fd)
            if data is None:
                if self.connection.state == "closing":
                    with trio.move_on_after(CLOSE_OK_TIMEOUT) as deadline:
                        await trio.lowlevel.wait_readable(sock)
                    if deadline.cancelled_caught:
                        return   # our Connection.Close was not answered in time
                else:
                    await trio.lowlevel.wait_readable(sock)
                yielded = True
                continue
            if not data:
                return       # the peer closed
            self.received_bytes += len(data)
            if not yielded:
                await trio.lowlevel.checkpoint()
            yielded = False
            self._last_received = trio.current_time()
            self._handling = True
            try:
                keep_reading = self._handle(data)
            finally:
                self._handling = False
            if self.framer.awaiting_content:
                # As RabbitMQ: a connection publishes once a Basic.Publish has arrived,
                # so an alarm pauses (and tells) one in the middle of a large message too.
                self.connection.has_published = True
            if self._in_handshake:
                if self.connection.state == "open":
                    self._end_handshake()
                elif self.connection.login_refused and not self._refusal_delayed:
                    self._refusal_delayed = True
                    await self._delay_login_refusal()
            if self._queued and not self._sending and not self._send_now():
                self._data_ready.set()
            if not keep_reading:
                return

    def _receive(self, fd: int) -> bytes | None:
        """One non-blocking read (TlsSocketTransport decrypts it)."""
        return receive_ready(fd)

    def _handle(self, data: bytes) -> bool:
        """Run one read through the codec and the core; False ends the connection. An
        unexpected exception closes this connection (541 INTERNAL_ERROR), no other."""
        try:
            return self._handle_read(data)
        except Exception as error:
            self.connection.fail(error)
            return False

    def _handle_read(self, data: bytes) -> bool:
        connection = self.connection
        try:
            items = self.framer.feed(data)
        except ProtocolHeaderMismatch:
            self.write(PROTOCOL_HEADER)
            return False
        except ProtocolError as error:
            connection.handle_all(error.decoded)
            self._protocol_error(error)
            return False
        if not self._started and self.framer.header_received:
            self._started = True
            connection.start()
        connection.handle_all(items)
        connection.end_of_batch()
        return True

    async def _wait_while_throttled(self) -> None:
        """Publisher flow control: leave this connection unread while the queues it fed
        work off their backlog, for THROTTLE_WAIT at most (then one more read)."""
        deadline = trio.current_time() + THROTTLE_WAIT
        while self.connection.throttled and trio.current_time() < deadline:
            await self.drain_signal.wait(deadline)
        self._last_received = trio.current_time()

    async def _wait_for_deferred_input(self) -> None:
        """A Basic.Get waits for a body read from disk and the connection holds back
        what was read after it: read nothing more until that is handled, so held input
        stays one read's worth (THROTTLE_WAIT at most at a time, as for flow control)."""
        self._input_resumed = trio.Event()
        with trio.move_on_after(THROTTLE_WAIT):
            while self.connection.input_deferred:
                await self._input_resumed.wait()
                self._input_resumed = trio.Event()
        self._last_received = trio.current_time()

    def input_resumed(self) -> None:
        self._input_resumed.set()

    async def _wait_for_alarm_to_clear(self) -> None:
        """A publishing connection is not read while a resource alarm is raised."""
        self._held_by_alarm = True
        self.connection.alarm_changed(self.alarm.raised)
        await self.alarm.clear.wait()
        self._held_by_alarm = False
        self._last_received = trio.current_time()

    def _protocol_error(self, error: ProtocolError) -> None:
        log.info("event=protocol_error peer=%s code=%s text=%r",
                 self.peer, int(error.reply_code), error.text)
        self.connection.close(error.reply_code, error.reply_text, error.class_id,
                              error.method_id)

    async def _write_loop(self) -> None:
        sock = self.stream.socket
        while True:
            await self._data_ready.wait()
            self._data_ready = trio.Event()
            while self._queued and not self._send_now():
                self._sending = True
                try:
                    await trio.lowlevel.wait_writable(sock)
                finally:
                    self._sending = False
            if self._closing:
                self._nursery.cancel_scope.cancel()
                return

    def _send_now(self) -> bool:
        """Send queued output until the socket would block; True when all of it went."""
        chunks = self._chunks
        if self._buffer:
            chunks.append(self._buffer)
            self._buffer = bytearray()
        fd = self.stream.socket.fileno()
        while chunks:
            sent = _send(fd, chunks)
            if sent is None:
                return False
            self._sent(sent)
            index = 0
            while sent:
                size = len(chunks[index])
                if sent < size:
                    chunks[index] = memoryview(chunks[index])[sent:]
                    break
                sent -= size
                index += 1
            del chunks[:index]
        return True

    def _sent(self, size: int) -> None:
        self._queued -= size
        self.sent_bytes += size
        self._last_sent = trio.current_time()
        if not self.writable and self._queued <= LOW_WATER:
            self.writable = True
            self.connection.drained()
            self.drain_signal.notify()

    async def _heartbeats(self, interval: int) -> None:
        """Send a heartbeat when idle for half the interval; drop a silent peer
        after two intervals without any inbound byte."""
        while True:
            await trio.sleep(interval / 2)
            now = trio.current_time()
            if not self._held_by_alarm and now - self._last_received > 2 * interval:
                log.info("event=heartbeat_timeout peer=%s interval=%s", self.peer, interval)
                self.connection.lost()
                self._nursery.cancel_scope.cancel()
                return
            if now - self._last_sent >= interval / 2 and self.sends_heartbeats:
                self.write(HEARTBEAT_FRAME)


def peer_text(address: tuple[str, int]) -> str:
    """host:port for logs, with an IPv6 host in brackets."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def receive_ready(fd: int) -> bytes | None:
    """One non-blocking read: None when nothing is there yet, b"" when the peer closed."""
    try:
        return os.read(fd, RECEIVE_SIZE)
    except BlockingIOError:
        return None
    except OSError as error:
        raise trio.BrokenResourceError(error) from error


def _send(fd: int, chunks: list) -> int | None:
    """One non-blocking write of the first chunks: bytes sent, or None when the socket
    is full."""
    try:
        if len(chunks) == 1:
            return os.write(fd, chunks[0])
        return os.writev(fd, chunks[:MAX_IOV])
    except BlockingIOError:
        return None
    except OSError as error:
        raise trio.BrokenResourceError(error) from error
