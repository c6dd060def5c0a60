"""Who may connect, and how fast a wrong password is answered.

- Sockets that have not finished the handshake (up to Connection.Open) are capped
  (`unauthenticated_connection_max`): past the cap a new socket is closed at once, before
  the broker reads from it, so a flood of idle sockets cannot use up the broker's file
  descriptors. Each such socket must finish the handshake within `handshake_timeout`.
- Sockets of connections the client closed, kept until the client closes its end
  (`SocketTransport`, "closing"), are capped at the same number: past it such a socket
  is closed at once.
- Refused logins are answered after a delay that grows with the failures from the same
  address (LOGIN_DELAY_BASE doubling up to LOGIN_DELAY_MAX), forgotten after
  FAILURE_MEMORY seconds without one. They are logged in aggregate, one line per
  SUMMARY_INTERVAL at most, never one line per attempt.
"""

import logging
import resource
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger("warren.server")

LOGIN_DELAY_BASE = 0.05   # seconds before the first refusal from an address is sent
LOGIN_DELAY_MAX = 5.0     # the longest a refusal is delayed
FAILURE_MEMORY = 60.0     # seconds without a failure after which an address is forgiven
SUMMARY_INTERVAL = 60.0   # at most one aggregate log line per this many seconds
RESERVED_FILES = 256      # file descriptors kept for queue files, the database, logs


def raise_file_limit() -> int:
    """Raise this process's open-file limit to its hard limit (as far as 1,048,576),
    and return the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard if hard != resource.RLIM_INFINITY else 1 << 20, 1 << 20)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft


def default_connection_caps(file_limit: int) -> tuple[int, int]:
    """(connection_max, unauthenticated_connection_max) that fit in `file_limit` file
    descriptors together with as many closing sockets (Admission.may_linger), with
    RESERVED_FILES left over."""
    available = max(file_limit - RESERVED_FILES, 30)
    unauthenticated = max(min(1000, available // 10), 10)
    return available - 2 * unauthenticated, unauthenticated


@dataclass
class _AddressFailures:
    count: int = 0
    last: float = 0.0


@dataclass
class Admission:
    """Connection caps and login throttling for one listener (event loop only)."""

    unauthenticated_max: int
    clock: Callable[[], float]           # seconds, monotonic
    unauthenticated: int = 0
    lingering: int = 0                   # closed by the client, its socket still open
    refused_sockets: int = 0             # closed at accept since the last summary
    handshake_timeouts: int = 0          # dropped by handshake_timeout since then
    tls_handshake_failures: int = 0      # amqps sockets whose TLS handshake failed
    last_tls_failure: str = ""           # the reason of the latest one
    _failures: dict = field(default_factory=dict)       # address -> _AddressFailures
    _failed_since_summary: Counter = field(default_factory=Counter)

    def admit(self) -> bool:
        """A socket was accepted: may it start a handshake?"""
        if self.unauthenticated >= self.unauthenticated_max:
            self.refused_sockets += 1
            return False
        self.unauthenticated += 1
        return True

    def handshake_ended(self) -> None:
        """An admitted socket opened its connection, or went away before that."""
        self.unauthenticated -= 1

    def may_linger(self) -> bool:
        """A client closed its connection: may the socket wait for the client to close
        its end? (No when unauthenticated_max sockets wait already.)"""
        if self.lingering >= self.unauthenticated_max:
            return False
        self.lingering += 1
        return True

    def linger_ended(self) -> None:
        self.lingering -= 1

    def login_refused(self, address: str) -> float:
        """Record a refused login from `address`; return how long to delay the answer."""
        now = self.clock()
        failures = self._failures.get(address)
        if failures is None or now - failures.last > FAILURE_MEMORY:
            failures = self._failures[address] = _AddressFailures()
        failures.count += 1
        failures.last = now
        self._failed_since_summary[address] += 1
        return min(LOGIN_DELAY_BASE * 2 ** (failures.count - 1), LOGIN_DELAY_MAX)

    def tls_handshake_failed(self, reason: str) -> None:
        self.tls_handshake_failures += 1
        self.last_tls_failure = reason

    def login_accepted(self, address: str) -> None:
        self._failures.pop(address, None)

    def summarise(self) -> None:
        """Log what was refused since the last summary (nothing when nothing was); the
        server calls this every SUMMARY_INTERVAL."""
        failed = self._failed_since_summary
        if failed:
            address, most = failed.most_common(1)[0]
            log.warning("event=logins_refused count=%d addresses=%d busiest=%s "
                        "busiest_count=%d", sum(failed.values()), len(failed), address, most)
            failed.clear()
        if self.refused_sockets:
            log.warning("event=sockets_refused count=%d reason=%r hint=%r",
                        self.refused_sockets, "too many connections still in the handshake",
                        "raise unauthenticated_connection_max in [limits]")
            self.refused_sockets = 0
        if self.handshake_timeouts:
            log.info("event=handshake_timeouts count=%d hint=%r", self.handshake_timeouts,
                     "clients opened sockets but did not finish the AMQP handshake in "
                     "handshake_timeout seconds")
            self.handshake_timeouts = 0
        if self.tls_handshake_failures:
            log.info("event=tls_handshakes_failed count=%d last_reason=%r hint=%r",
                     self.tls_handshake_failures, self.last_tls_failure,
                     "clients on the amqps port that do not speak TLS 1.2 or 1.3 or whose "
                     "certificate was refused (run with --log-level debug to see each)")
            self.tls_handshake_failures = 0
        self._forget_old_failures()

    def _forget_old_failures(self) -> None:
        now = self.clock()
        for address in [address for address, failures in self._failures.items()
                        if now - failures.last > FAILURE_MEMORY]:
            del self._failures[address]
