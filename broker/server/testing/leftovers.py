"""What a test left in its vhost: open connections and their channels, unacked
deliveries, and ready messages (for `TestVhost.assert_clean()`)."""

from collections import Counter
from typing import TYPE_CHECKING

from .refusal import TestHookError

if TYPE_CHECKING:
    from broker.core.channel import Channel
    from broker.core.connection import Connection

    from .hooks import TestHooks


def leftovers(hooks: "TestHooks", vhost: str) -> dict:
    """The vhost's open connections (name, peer, channel numbers), unacked deliveries
    (queue, count, connection, channel, consumer tag or None for basic.get) and queues
    with ready messages (streams keep their messages by design and are left out)."""
    host = hooks.broker.vhosts.get(vhost)
    if host is None:
        raise TestHookError(f"no vhost {vhost!r}: it was removed already, or never made")
    connections = sorted((connection for connection in hooks.broker.connections
                          if connection.vhost is host),
                         key=_connection_name)
    return {
        "connections": [{"name": _connection_name(connection), "peer": connection.peer,
                         "channels": sorted(connection.channels)}
                        for connection in connections],
        "unacked": [delivery for connection in connections
                    for channel in connection.channels.values()
                    for delivery in _unacked(connection, channel)],
        "ready": [{"queue": name, "count": queue.message_count}
                  for name, queue in sorted(host.queues.items())
                  if queue.kind.name != "stream" and queue.message_count],
    }


def _connection_name(connection: "Connection") -> str:
    """The client-provided connection_name, else the client's address."""
    name = connection.client_properties.get("connection_name")
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    return name if isinstance(name, str) and name else connection.peer


def _unacked(connection: "Connection", channel: "Channel") -> list[dict]:
    """The channel's unacked deliveries counted per queue and consumer."""
    counts = Counter((delivery.queue.name,
                      delivery.consumer.tag if delivery.consumer is not None else None)
                     for delivery in channel.unacked.values())
    return [{"queue": queue, "count": count, "consumer": consumer,
             "connection": _connection_name(connection), "channel": channel.number}
            for (queue, consumer), count in sorted(counts.items(), key=str)]


OPERATIONS = {"leftovers": leftovers}
