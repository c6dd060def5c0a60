"""One client socket: a reader task feeding the core, a writer task draining a
coalesced output buffer, and heartbeats.

Small writes are appended to one bytearray. Large message bodies come from the codec as
parts that refer to the body; they are queued as chunks of their own and sent with the
buffered bytes by one sendmsg (scatter/gather), so a 64 KiB body is not copied on its
way out of the broker."""

import logging

import trio

from amqp_codec import (HEARTBEAT_FRAME, PROTOCOL_HEADER, Decoder, ProtocolError,
                        ProtocolHeaderMismatch)
from broker.core.connection import Connection

from .alarms import ResourceAlarm

log = logging.getLogger("warren.server")

RECEIVE_SIZE = 256 * 1024
HIGH_WATER = 4 * 1024 * 1024  # stop feeding consumers above this many buffered bytes
LOW_WATER = 1024 * 1024       # resume below this
OWN_CHUNK = 16 * 1024         # parts this large are sent from where they are, not copied
MAX_IOV = 512                 # buffers per sendmsg (Linux allows 1024)
CLOSE_OK_TIMEOUT = 5.0        # how long a server-initiated close waits for CloseOk
THROTTLE_WAIT = 0.5           # a throttled publisher is read again after this at the latest


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

    def __init__(self, stream: trio.abc.Stream, broker, peer: str, alarm: ResourceAlarm,
                 drain_signal: DrainSignal):
        self.stream = stream
        self.peer = peer
        self.alarm = alarm
        self.drain_signal = drain_signal
        self._held_by_alarm = False
        self._started = False   # Connection.Start sent (after the protocol header)
        self.connection = Connection(broker, self, peer)
        self.decoder = Decoder()
        self.writable = True
        self.heartbeat = 0
        self._buffer = bytearray()    # small writes since the last queued chunk
        self._chunks: list = []       # bytes-like chunks to send before _buffer
        self._queued = 0              # bytes in _chunks and _buffer
        self._data_ready = trio.Event()
        self._closing = False
        self._last_received = trio.current_time()
        self._last_sent = trio.current_time()
        self._nursery: trio.Nursery | None = None

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
        if not self._data_ready.is_set():
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

    def close(self) -> None:
        """Stop reading; the writer flushes what is buffered, then the socket closes."""
        self._closing = True
        self._data_ready.set()

    def tuned(self, frame_max: int, heartbeat: int) -> None:
        self.decoder.frame_max = frame_max
        self.heartbeat = heartbeat
        if heartbeat and self._nursery is not None:
            self._nursery.start_soon(self._heartbeats, heartbeat)

    # -- tasks ---------------------------------------------------------------------

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_loop)
                await self._read_loop()
                self.connection.input_ended()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            log.debug("event=socket_lost peer=%s", self.peer)
        finally:
            self.connection.lost()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)

    async def _read_loop(self) -> None:
        while not self._closing:
            if self.connection.has_published and not self.alarm.clear.is_set():
                await self._wait_for_alarm_to_clear()
            if self.connection.throttled:
                await self._wait_while_throttled()
            with trio.move_on_at(self._read_deadline()) as deadline:
                data = await self.stream.receive_some(RECEIVE_SIZE)
            if deadline.cancelled_caught or not data:
                return   # peer closed, or our Connection.Close was not answered in time
            self._last_received = trio.current_time()
            if not self._handle(data):
                return

    def _handle(self, data: bytes) -> bool:
        """Run one read through the codec and the core; False ends the connection."""
        connection = self.connection
        try:
            items = self.decoder.feed(data)
        except ProtocolHeaderMismatch:
            self.write(PROTOCOL_HEADER)
            return False
        except ProtocolError as error:
            for item in error.decoded:
                connection.handle(item)
            self._protocol_error(error)
            return False
        if not self._started and self.decoder.header_received:
            self._started = True
            connection.start()
        for item in items:
            connection.handle(item)
        connection.end_of_batch()
        return True

    async def _wait_while_throttled(self) -> None:
        """Publisher flow control: leave this connection unread while the queues it fed
        work off their backlog, for THROTTLE_WAIT at most (then one more read)."""
        deadline = trio.current_time() + THROTTLE_WAIT
        while self.connection.throttled and trio.current_time() < deadline:
            await self.drain_signal.wait(deadline)
        self._last_received = trio.current_time()

    async def _wait_for_alarm_to_clear(self) -> None:
        """A publishing connection is not read while a resource alarm is raised."""
        self._held_by_alarm = True
        self.connection.alarm_changed(self.alarm.raised)
        await self.alarm.clear.wait()
        self._held_by_alarm = False
        self._last_received = trio.current_time()

    def _read_deadline(self) -> float:
        if self.connection.state == "closing":
            return trio.current_time() + CLOSE_OK_TIMEOUT
        return float("inf")

    def _protocol_error(self, error: ProtocolError) -> None:
        log.info("event=protocol_error peer=%s code=%s text=%r",
                 self.peer, int(error.reply_code), error.text)
        self.connection.close(error.reply_code, error.reply_text, error.class_id,
                              error.method_id)

    async def _write_loop(self) -> None:
        stream = self.stream
        while True:
            await self._data_ready.wait()
            self._data_ready = trio.Event()
            while self._queued:
                chunks, size = self._take_queued()
                if len(chunks) == 1:
                    await stream.send_all(chunks[0])
                else:
                    await self._send_chunks(chunks)
                self._queued -= size
                self._last_sent = trio.current_time()
                if not self.writable and self._queued <= LOW_WATER:
                    self.writable = True
                    self.connection.drained()
                    self.drain_signal.notify()
            if self._closing:
                self._nursery.cancel_scope.cancel()
                return

    def _take_queued(self) -> tuple[list, int]:
        chunks = self._chunks
        if self._buffer:
            chunks.append(self._buffer)
            self._buffer = bytearray()
        self._chunks = []
        return chunks, self._queued

    async def _send_chunks(self, chunks: list) -> None:
        """Send every chunk, in order, with as few sendmsg calls as the socket allows."""
        socket = self.stream.socket
        index = 0
        while index < len(chunks):
            sent = await socket.sendmsg(chunks[index:index + MAX_IOV])
            while sent:
                size = len(chunks[index])
                if sent < size:
                    chunks[index] = memoryview(chunks[index])[sent:]
                    break
                sent -= size
                index += 1

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
            if now - self._last_sent >= interval / 2:
                self.write(HEARTBEAT_FRAME)
