"""One client socket: a reader task feeding the core, a writer task draining a
coalesced output buffer, and heartbeats.

Each read goes to the connection in one call, `Connection.receive_data`, whose
`ReadOutcome` says whether to read on and what to wait for first (a resource alarm,
publisher flow control, a disk read). The connection tells its transport the rest
through the Transport port (tuned, opened, login refused, Close sent or answered).

Small writes are appended to one bytearray. Large message bodies come from the codec as
parts that refer to the body; they are queued as chunks of their own and sent with the
buffered bytes by one writev (scatter/gather), so a 64 KiB body is not copied on its
way out of the broker.

The socket is read and written with non-blocking system calls, waiting on trio only
when it would block: a read whose replies fit in the socket is answered by the reader
itself, without waking the writer task, and each read costs one trip through trio's
scheduler (a checkpoint keeps busy connections from starving the others)."""

import logging
import time
from typing import TYPE_CHECKING, Callable

import trio

from amqp_codec import HEARTBEAT_FRAME
from broker.core.certificate_login import TlsPeer
from broker.core.connection import Connection, Pause

from .admission import Admission
from .alarms import ResourceAlarm
from .drain_signal import THROTTLE_WAIT, DrainSignal
from .handshake_guard import HandshakeGuard
from .linger import wait_for_peer_close
from .socket_io import receive_ready, send_ready

if TYPE_CHECKING:
    from broker.core.broker import Broker

log = logging.getLogger("warren.server")

HIGH_WATER = 4 * 1024 * 1024  # stop feeding consumers above this many buffered bytes
LOW_WATER = 1024 * 1024       # resume below this
OWN_CHUNK = 16 * 1024         # parts this large are sent from where they are, not copied
CLOSE_OK_TIMEOUT = 5.0        # how long a server-initiated close waits for CloseOk


class SocketTransport:
    """Implements the core's Transport over a trio stream."""

    def __init__(self, stream: trio.SocketStream, broker: "Broker", peer: tuple[str, int],
                 alarm: ResourceAlarm, drain_signal: DrainSignal, admission: Admission,
                 tls: TlsPeer | None = None, accepted_at: float | None = None):
        self.stream = stream
        self.address = peer[0]      # the client's IP address
        self.peer = peer_text(peer)
        self.admission = admission
        # The handshake (a TLS handshake included) must be done by handshake_timeout
        # after the socket was accepted.
        self._handshake = HandshakeGuard(
            admission, self.address,
            trio.current_time() if accepted_at is None else accepted_at)
        self.alarm = alarm
        self.drain_signal = drain_signal
        self._held_by_alarm = False
        self.connection = Connection(broker, self, self.peer, self.address, tls)
        self.connection.alarm_changed(alarm.raised)   # later changes: Server._alarm_changed
        self.framer = self.connection.framer   # for held_bytes
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
        self._awaiting_close_ok = False   # the broker sent Connection.Close
        self._closed_by_client = False    # Close-Ok sent for the client's Connection.Close
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
        self._end_tasks()

    def _end_tasks(self) -> None:
        """Cancel the connection's reader, writer and heartbeat tasks (if running)."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def tuned(self, heartbeat: int) -> None:
        self.heartbeat = heartbeat
        if heartbeat and self._nursery is not None:
            self._nursery.start_soon(self._heartbeats, heartbeat)

    def login_refused(self) -> None:
        self._handshake.login_refused()

    def opened(self) -> None:
        self._handshake.opened()

    def close_sent(self) -> None:
        self._awaiting_close_ok = True

    def closed_by_client(self) -> None:
        self._closed_by_client = True

    def input_resumed(self) -> None:
        self._input_resumed.set()

    # -- tasks ---------------------------------------------------------------------

    async def run(self, ended: Callable[[], None] | None = None) -> None:
        """Serve the connection until it ends. Nothing raised while serving it leaves
        this method: the failure is logged and only this connection is dropped.
        `ended()` is called once the connection is over, before the socket is left
        open for the client to close (linger.py)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_loop)
                nursery.start_soon(self._handshake.watch,
                                   self.connection.broker.config.handshake_timeout,
                                   self.peer, nursery.cancel_scope)
                await self._read_loop()
                self.connection.input_ended()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            log.debug("event=socket_lost peer=%s", self.peer)
        except* Exception as failures:
            log.error("event=connection_failed peer=%s", self.peer, exc_info=failures)
        finally:
            self._handshake.ended()
            try:
                self.connection.lost()
            except Exception as error:
                log.error("event=connection_cleanup_failed peer=%s", self.peer,
                          exc_info=error)
            if ended is not None:
                ended()
            try:
                if self._closed_by_client:
                    await wait_for_peer_close(self.stream.socket, self._receive,
                                              self.admission)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(self.stream)

    async def _read_loop(self) -> None:
        sock = self.stream.socket
        fd = sock.fileno()
        yielded = True
        pause: Pause | None = None
        while not self._closing:
            if pause is not None:
                await self._wait_before_reading(pause)
            data = self._receive(fd)
            if data is None:
                if self._awaiting_close_ok:
                    with trio.move_on_after(CLOSE_OK_TIMEOUT) as deadline:
                        await trio.lowlevel.wait_readable(sock)
                    if deadline.cancelled_caught:
                        return   # our Connection.Close was not answered in time
                else:
                    await trio.lowlevel.wait_readable(sock)
                yielded = True
                pause = self.connection.paused_for()   # an alarm may have come meanwhile
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
                outcome = self.connection.receive_data(data)
            finally:
                self._handling = False
            pause = outcome.paused_for
            await self._handshake.delay_refusal()
            if self._queued and not self._sending and not self._send_now():
                self._data_ready.set()
            if not outcome.keep_reading:
                return

    def _receive(self, fd: int) -> bytes | None:
        """One non-blocking read (TlsSocketTransport decrypts it)."""
        return receive_ready(fd)

    async def _wait_before_reading(self, pause: Pause | None) -> None:
        """Wait for what the connection asked for, each kind once and in this order
        (a wait that ends leaves the socket read once more before the next)."""
        if pause is Pause.ALARM:
            # A publishing connection is not read while a resource alarm is raised.
            self._held_by_alarm = True
            await self.alarm.clear.wait()
            self._held_by_alarm = False
            self._last_received = trio.current_time()
            pause = self.connection.paused_for()
        if pause is Pause.FLOW:
            # Leave this connection unread while the queues it fed work off their
            # backlog, for THROTTLE_WAIT at most (then one more read).
            deadline = trio.current_time() + THROTTLE_WAIT
            while pause is Pause.FLOW and trio.current_time() < deadline:
                await self.drain_signal.wait(deadline)
                pause = self.connection.paused_for()
            self._last_received = trio.current_time()
        if pause is Pause.DISK_READ:
            # The connection holds back what was read after a Basic.Get that waits for
            # a body read from disk: read nothing more until that is handled, so held
            # input stays one read's worth (THROTTLE_WAIT at most at a time).
            self._input_resumed = trio.Event()
            with trio.move_on_after(THROTTLE_WAIT):
                while pause is Pause.DISK_READ:
                    await self._input_resumed.wait()
                    self._input_resumed = trio.Event()
                    pause = self.connection.paused_for()
            self._last_received = trio.current_time()

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
                self._end_tasks()
                return

    def _send_now(self) -> bool:
        """Send queued output until the socket would block; True when all of it went."""
        chunks = self._chunks
        if self._buffer:
            chunks.append(self._buffer)
            self._buffer = bytearray()
        fd = self.stream.socket.fileno()
        while chunks:
            sent = send_ready(fd, chunks)
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
                self._end_tasks()
                return
            if now - self._last_sent >= interval / 2 and self.sends_heartbeats:
                self.write(HEARTBEAT_FRAME)


def peer_text(address: tuple[str, int]) -> str:
    """host:port for logs, with an IPv6 host in brackets."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
