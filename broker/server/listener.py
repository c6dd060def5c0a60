"""Accept connections, and shut down cleanly on SIGINT/SIGTERM."""

import logging
import math
import signal
import threading
from typing import Callable

import trio

from amqp_codec.reply_codes import ReplyCode
from broker.config import AlarmLimits
from broker.core.broker import Broker

from .admission import SUMMARY_INTERVAL, Admission
from .alarms import ResourceAlarm, held_memory
from .committer import GroupCommitter
from .control import ControlSocket
from .management.listener import ManagementListener
from .tls import TlsHandshakeFailed, TlsListener, TlsSocketTransport
from .drain_signal import DrainSignal
from .transport import SocketTransport, peer_text

log = logging.getLogger("warren.server")

SHUTDOWN_GRACE = 5.0   # seconds connections get to flush their Connection.Close
FLUSH_INTERVAL = 0.2   # unconfirmed persistent messages and acks reach disk this often


class Server:
    """The listening sockets (plain AMQP, amqps) and every live SocketTransport."""

    def __init__(self, broker: Broker, host: str, port: int, committer: GroupCommitter,
                 alarm_limits: AlarmLimits, data_dir: str,
                 control: ControlSocket | None = None, tls: TlsListener | None = None,
                 plain_listener: bool = True,
                 management: ManagementListener | None = None):
        self.broker = broker
        self.control = control
        self.management = management
        self.host = host
        self.port = port
        self.tls = tls
        self.plain_listener = plain_listener
        self.committer = committer
        self.transports: set[SocketTransport] = set()
        self.alarm = ResourceAlarm(alarm_limits, data_dir, self._alarm_changed,
                                   lambda: held_memory(broker, self.transports))
        committer.watch_disk(self.alarm.disk, self.alarm.check_disk)
        self.drain_signal = DrainSignal()
        self.admission = Admission(broker.config.unauthenticated_connection_max,
                                   trio.current_time)
        self._all_closed = trio.Event()
        self._stop_requested = trio.Event()
        self._trio_token: trio.lowlevel.TrioToken | None = None
        # called once every listener is bound (ports known), before serving starts
        self.on_listening: Callable[["Server"], None] = lambda server: None
        self.tls_port: int | None = None   # the amqps port once bound

    def request_stop(self) -> None:
        """Shut down as on SIGTERM; callable from any thread while `run` runs."""
        token = self._trio_token
        if token is None:
            raise RuntimeError("the server is not running")
        try:
            trio.from_thread.run_sync(self._stop_requested.set, trio_token=token)
        except trio.RunFinishedError:
            pass   # it stopped on its own meanwhile

    async def run(self) -> None:
        """Serve until SIGINT/SIGTERM (on the main thread) or `request_stop()`. Raises
        OSError when the address cannot be bound."""
        listeners = (await trio.open_tcp_listeners(self.port, host=self.host)
                     if self.plain_listener else [])
        # A TlsListener is made only for a port (node.py); tls.py types it int | None.
        tls_listeners = (await trio.open_tcp_listeners(
                             self.tls.port, host=self.host)  # type: ignore[arg-type]
                         if self.tls is not None else [])
        self._trio_token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            if listeners:
                nursery.start_soon(trio.serve_listeners, self._serve_connection,
                                   listeners)
            if tls_listeners:
                nursery.start_soon(trio.serve_listeners, self._serve_tls_connection,
                                   tls_listeners)
            nursery.start_soon(self._run_timers)
            nursery.start_soon(self._summarise_refusals)
            nursery.start_soon(self.alarm.run)
            nursery.start_soon(self.committer.flush_periodically, FLUSH_INTERVAL)
            if self.control is not None:
                await nursery.start(self.control.run)
            if self.management is not None:
                await nursery.start(self.management.run, self)
            if tls_listeners:
                self.tls_port = tls_listeners[0].socket.getsockname()[1]
                log.info("event=listening_tls host=%s port=%s", self.host, self.tls_port)
            if listeners:
                self.port = listeners[0].socket.getsockname()[1]   # when 0 was asked
                log.info("event=listening host=%s port=%s", self.host, self.port)
            self.on_listening(self)
            reason = await self._stop_reason()
            log.info("event=shutdown reason=%s connections=%d", reason,
                     len(self.transports))
            await self.committer.flush()   # releases replies held for it
            await self._close_all()
            await self.committer.flush()
            self.admission.summarise()
            nursery.cancel_scope.cancel()
        log.info("event=stopped")

    async def _stop_reason(self) -> str:
        """Wait for SIGINT/SIGTERM (only the main thread receives signals) or a stop
        request, and say which it was."""
        if threading.current_thread() is not threading.main_thread():
            await self._stop_requested.wait()
            return "stop_requested"
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as waiters:
                reason = "stop_requested"

                async def on_signal() -> None:
                    nonlocal reason
                    async for signum in signals:
                        reason = signal.Signals(signum).name
                        break
                    waiters.cancel_scope.cancel()

                async def on_request() -> None:
                    await self._stop_requested.wait()
                    waiters.cancel_scope.cancel()

                waiters.start_soon(on_signal)
                waiters.start_soon(on_request)
        return reason

    def _alarm_changed(self, raised: frozenset) -> None:
        for transport in list(self.transports):
            try:
                transport.connection.alarm_changed(raised)
            except Exception as error:
                transport.connection.fail(error)

    async def _summarise_refusals(self) -> None:
        while True:
            await trio.sleep(SUMMARY_INTERVAL)
            self.admission.summarise()

    async def _run_timers(self) -> None:
        """Fire the core's timers (message expiry) when they fall due."""
        scheduler = self.broker.scheduler
        wakeup = trio.Event()

        def earlier_timer_added() -> None:
            wakeup.set()

        scheduler.on_change = earlier_timer_added
        while True:
            deadline = scheduler.next_deadline()
            delay = math.inf if deadline is None else deadline - scheduler.clock()
            with trio.move_on_after(max(delay, 0)):
                await wakeup.wait()
            wakeup = trio.Event()
            scheduler.run_due()

    async def _serve_tls_connection(self, stream: trio.SocketStream) -> None:
        await self._serve_connection(stream, self.tls)

    async def _serve_connection(self, stream: trio.SocketStream,
                                tls: TlsListener | None = None) -> None:
        """One accepted socket, start to end (after a TLS handshake on the amqps
        port). Nothing raised here reaches the listener: a failure ends this socket
        only."""
        if not self.admission.admit():
            await trio.aclose_forcefully(stream)
            return
        accepted_at = trio.current_time()
        transport: SocketTransport | None
        try:
            host, port = stream.socket.getpeername()[:2]
            if tls is None:
                transport = SocketTransport(stream, self.broker, (host, port), self.alarm,
                                            self.drain_signal, self.admission)
            else:
                transport = await self._tls_transport(stream, tls, (host, port),
                                                      accepted_at)
        except Exception as error:   # e.g. the peer reset the socket before this ran
            log.debug("event=socket_lost_at_accept error=%r", error)
            transport = None
        if transport is None:
            self.admission.handshake_ended()
            await trio.aclose_forcefully(stream)
            return
        self.transports.add(transport)
        try:
            await transport.run(ended=lambda: self._transport_ended(transport))
        except Exception as error:
            log.error("event=connection_failed peer=%s", transport.peer, exc_info=error)
        finally:
            self._transport_ended(transport)

    def _transport_ended(self, transport: SocketTransport) -> None:
        """Its connection is over (its socket may still wait for the client to close
        it): no longer listed, counted or waited for at shutdown."""
        self.transports.discard(transport)
        if not self.transports:
            self._all_closed.set()

    async def _tls_transport(self, stream: trio.SocketStream, tls: TlsListener,
                             address: tuple[str, int],
                             accepted_at: float) -> TlsSocketTransport | None:
        """The TLS handshake, which counts against handshake_timeout from the accept;
        None when it failed or took too long (counted, summed up in the log)."""
        peer = peer_text(address)
        with trio.move_on_at(accepted_at + self.broker.config.handshake_timeout):
            try:
                session = await tls.handshake(stream)
            except TlsHandshakeFailed as failure:
                log.debug("event=tls_handshake_failed peer=%s reason=%r", peer, str(failure))
                self.admission.tls_handshake_failed(str(failure))
                return None
            return TlsSocketTransport(stream, session, self.broker, address, self.alarm,
                                      self.drain_signal, self.admission,
                                      accepted_at=accepted_at)
        log.debug("event=handshake_timeout peer=%s state=tls", peer)
        self.admission.handshake_timeouts += 1
        return None

    async def _close_all(self) -> None:
        for transport in list(self.transports):
            try:
                transport.connection.close(
                    ReplyCode.CONNECTION_FORCED,
                    "CONNECTION_FORCED - broker forced connection closure with reason "
                    "'shutdown'")
            except Exception as error:
                log.error("event=close_failed peer=%s", transport.peer, exc_info=error)
            transport.close()
        if self.transports:
            self._all_closed = trio.Event()
            with trio.move_on_after(SHUTDOWN_GRACE):
                await self._all_closed.wait()
