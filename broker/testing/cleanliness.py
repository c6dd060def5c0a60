"""`assert_clean()`: fail a test that left work behind in its vhost (unacked
deliveries, ready messages, open channels and connections). Warren only."""

from typing import TYPE_CHECKING, Any

CLEAN_UP_HINT = ("ack or reject what the test consumed, consume or purge what it "
                 "published, and close its channels and connections before it ends")


class Cleanliness:
    """TestVhost's assert_clean (a mixin: uses `call` and `vhost`)."""

    if TYPE_CHECKING:
        vhost: str

        def call(self, operation: str, **arguments: Any) -> Any: ...

    def leftovers(self) -> dict:
        """What is left in the vhost: {"connections": [...], "unacked": [...],
        "ready": [...]} (see broker/server/testing/leftovers.py)."""
        return self.call("leftovers")

    def assert_clean(self) -> None:
        """Raise AssertionError listing what the test left in its vhost, if anything."""
        lines = describe_leftovers(self.leftovers())
        if lines:
            raise AssertionError(
                f"the test left these in vhost {self.vhost!r}:\n"
                + "".join(f"  - {line}\n" for line in lines) + CLEAN_UP_HINT)


def describe_leftovers(found: dict) -> list[str]:
    """One line per leftover, unacked deliveries first."""
    return ([_unacked_line(delivery) for delivery in found["unacked"]]
            + [f"{ready['count']} ready message(s) in queue {ready['queue']!r}"
               for ready in found["ready"]]
            + [_connection_line(connection) for connection in found["connections"]])


def _unacked_line(delivery: dict) -> str:
    by = (f"consumer {delivery['consumer']!r}" if delivery["consumer"] is not None
          else "basic.get")
    return (f"{delivery['count']} unacked deliver{'y' if delivery['count'] == 1 else 'ies'}"
            f" from queue {delivery['queue']!r} ({by}) on channel {delivery['channel']}"
            f" of connection {delivery['connection']!r}")


def _connection_line(connection: dict) -> str:
    channels = connection["channels"]
    opened = (f"open channel(s) {', '.join(map(str, channels))}" if channels
              else "no open channel")
    return f"open connection {connection['name']!r} ({connection['peer']}) with {opened}"
