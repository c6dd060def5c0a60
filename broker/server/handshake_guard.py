"""The server's watch over one socket until its connection is open: the socket counts
against unauthenticated_connection_max (`Admission`) until Connection.Open or its end,
it is dropped when the handshake is not done by handshake_timeout after the accept, and
a refused login is answered late, later the more often its address failed."""

import logging

import trio

from .admission import Admission

log = logging.getLogger("warren.server")


class HandshakeGuard:
    """Admission's bookkeeping and the handshake deadline of one accepted socket."""

    def __init__(self, admission: Admission, address: str, accepted_at: float):
        self.admission = admission
        self.address = address          # the client's IP address
        self.deadline = accepted_at     # plus handshake_timeout, in `watch`
        self._in_handshake = True       # counted by admission until Connection.Open
        self._opened = trio.Event()
        self._refusal_pending = False   # a login was refused: delay the answer

    async def watch(self, handshake_timeout: float, peer: str,
                    cancel_scope: trio.CancelScope) -> None:
        """Cancel `cancel_scope` (the socket's tasks) unless the connection opens by
        handshake_timeout after the accept."""
        with trio.move_on_at(self.deadline + handshake_timeout):
            await self._opened.wait()
            return
        log.debug("event=handshake_timeout peer=%s state=amqp", peer)
        self.admission.handshake_timeouts += 1
        cancel_scope.cancel()

    def opened(self) -> None:
        """Connection.Open was accepted: the handshake is over, and the address's
        failed logins are forgotten."""
        if self._in_handshake:
            self._end()
            self.admission.login_accepted(self.address)
            self._opened.set()

    def ended(self) -> None:
        """The socket's connection is over (opened or not)."""
        if self._in_handshake:
            self._end()

    def login_refused(self) -> None:
        self._refusal_pending = True

    async def delay_refusal(self) -> None:
        """After a read that refused a login, before its answer goes out: wait as long
        as Admission says for the address."""
        if self._refusal_pending:
            self._refusal_pending = False
            await trio.sleep(self.admission.login_refused(self.address))

    def _end(self) -> None:
        self._in_handshake = False
        self.admission.handshake_ended()
