"""One client socket: a reader task feeding the core, a writer task draining a
coalesced output buffer, and heartbeats."""

import logging

import trio

from amqp_codec import (HEARTBEAT_FRAME, PROTOCOL_HEADER, Decoder, ProtocolError,
                        ProtocolHeaderMismatch)
from broker.core.connection import Connection

from .alarms import ResourceAlarm
from .committer import GroupCommitter

log = logging.getLogger("warren.server")

RECEIVE_SIZE = 256 * 1024
HIGH_WATER = 4 * 1024 * 1024  # stop feeding consumers above this many buffered bytes
LOW_WATER = 1024 * 1024       # resume below this
CLOSE_OK_TIMEOUT = 5.0        # how long a server-initiated close waits for CloseOk


class SocketTransport:
    """Implements the core's Transport over a trio stream."""

    def __init__(self, stream: trio.abc.Stream, broker, peer: str,
                 committer: GroupCommitter, alarm: ResourceAlarm):
        self.stream = stream
        self.peer = peer
        self.committer = committer
        self.alarm = alarm
        self._held_by_alarm = False
        self._started = False   # Connection.Start sent (after the protocol header)
        self.connection = Connection(broker, self, peer)
        self.decoder = Decoder()
        self.writable = True
        self.heartbeat = 0
        self._buffer = bytearray()
        self._data_ready = trio.Event()
        self._closing = False
        self._last_received = trio.current_time()
        self._last_sent = trio.current_time()
        self._nursery: trio.Nursery | None = None

    # -- Transport interface -------------------------------------------------------

    def write(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        if len(buffer) > HIGH_WATER:
            self.writable = False
        if not self._data_ready.is_set():
            self._data_ready.set()

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
                self.close()
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
            with trio.move_on_at(self._read_deadline()) as deadline:
                data = await self.stream.receive_some(RECEIVE_SIZE)
            if deadline.cancelled_caught or not data:
                return   # peer closed, or our Connection.Close was not answered in time
            self._last_received = trio.current_time()
            if not await self._handle(data):
                return

    async def _handle(self, data: bytes) -> bool:
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
        if connection.needs_sync:
            await self.committer.wait_for(connection.broker.persistence.writes)
        connection.end_of_batch()
        return True

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
            while self._buffer:
                data = self._buffer
                self._buffer = bytearray()
                await stream.send_all(data)
                self._last_sent = trio.current_time()
                if not self.writable and len(self._buffer) <= LOW_WATER:
                    self.writable = True
                    self.connection.drained()
            if self._closing:
                self._nursery.cancel_scope.cancel()
                return

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
