"""Fault injection on a Warren test broker, as methods of TestVhost (the `warren`
fixture): make the broker refuse publishes, hold confirms, close or drop a connection,
raise a resource alarm, stop heartbeats, time consumers out, or restart. Each needs
Warren's test hooks (NotOnThisBroker elsewhere). See docs/testing.md, "Fault
injection"."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .control_client import ControlClient
    from .test_broker import TestBroker


class Faults:
    """Fault injection (a mixin of TestVhost: uses its `call`, `hooks` and `broker`)."""

    if TYPE_CHECKING:   # what TestVhost gives the mixin
        broker: "TestBroker | None"

        def call(self, operation: str, **arguments) -> Any: ...

        def hooks(self, needed_for: str) -> "ControlClient": ...

    def nack_next_publishes(self, count: int) -> None:
        """The next `count` publishes in this vhost on confirm-mode channels are nacked
        (Basic.Nack) and not enqueued; 0 cancels the rest of an earlier call."""
        self.call("nack_next_publishes", count=count)

    def delay_confirms(self, seconds: float) -> None:
        """Hold this vhost's confirms for `seconds` (broker clock) before sending them,
        in order; `delay_confirms(0)` sends the held ones and stops holding."""
        self.call("delay_confirms", seconds=float(seconds))

    def close_connection(self, name: str, reply_code: int = 320,
                         reply_text: str | None = None) -> int:
        """Close this vhost's connections whose client-provided `connection_name` is
        `name` with Connection.Close(reply_code, reply_text); returns how many."""
        options = {} if reply_text is None else {"reply_text": reply_text}
        return self.call("close_connection", name=name, reply_code=reply_code,
                         **options)

    def drop_connection(self, name: str) -> int:
        """Close the sockets of the connections named `name`, without a
        Connection.Close (the client sees a lost connection); returns how many."""
        return self.call("drop_connection", name=name)

    def stop_heartbeats(self, name: str) -> int:
        """The broker stops sending heartbeats to the connections named `name`; their
        clients' heartbeat timeouts then fire. Returns how many."""
        return self.call("stop_heartbeats", name=name)

    def raise_alarm(self, kind: str) -> None:
        """Raise the "memory" or "disk" alarm: publishing connections are blocked
        (connection.blocked) until clear_alarm or the end of the test. Broker-wide:
        other vhosts' publishers are blocked too."""
        self.call("raise_alarm", kind=kind)

    def clear_alarm(self, kind: str) -> None:
        """Clear an alarm raised by raise_alarm (connection.unblocked)."""
        self.call("clear_alarm", kind=kind)

    def set_consumer_timeout(self, milliseconds: int) -> None:
        """The broker's consumer timeout for deliveries from now on until the end of the
        test: a channel holding a delivery unacked longer is closed with 406.
        Broker-wide."""
        self.call("set_consumer_timeout", milliseconds=milliseconds)

    def restart(self, kill: bool = False) -> None:
        """Restart the broker on the same data directory and ports: clients are closed
        with 320 (or, with `kill` on a subprocess broker, lose their sockets). This
        vhost, its user and its durable queues, exchanges, bindings and persistent
        messages survive."""
        self.hooks("restart")   # NotOnThisBroker unless this is Warren's test broker
        assert self.broker is not None, "a Warren test broker's vhost has its broker"
        self.broker.restart(kill)
