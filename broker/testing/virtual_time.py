"""Virtual time on a Warren test broker: `advance(seconds)` moves the broker's clock
forward, so TTLs, queue expiry, delayed messages, consumer timeouts and the broker's
heartbeat checks fall due without waiting."""

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .control_client import ControlClient


class VirtualTime:
    """TestVhost's virtual-time helper (Warren only)."""

    hooks: "Callable[[str], ControlClient]"   # TestVhost's

    def advance(self, seconds: float) -> float:
        """Move the broker's time `seconds` forward and fire what fell due; returns
        once it has. Broker-wide: every vhost and connection sees the jump (a client
        that does not send heartbeats in the meantime is dropped after more than twice
        its heartbeat interval). Returns the seconds advanced since the broker
        started."""
        return self.hooks("advance").call("test.advance", seconds=seconds)
