"""Fault injection, for testing how clients handle a broker's errors: refused publishes,
slow confirms, closed and dropped connections, resource alarms, missing heartbeats and
a short consumer timeout.

Publish faults belong to the vhost (`VirtualHost.faults`) and end with it. Alarms and
the consumer timeout are the broker's: `reset_broker_faults` puts them back when a
test's sandbox is removed."""

import logging
import math
from typing import TYPE_CHECKING

from amqp_codec.reply_codes import ReplyCode
from broker.core.handshake import ConnectionState
from broker.core.publish_faults import PublishFaults

from .refusal import TestHookError

if TYPE_CHECKING:
    from broker.core.vhost import VirtualHost

    from ..transport import SocketTransport
    from .hooks import TestHooks

log = logging.getLogger("warren.testing")

ALARMS = ("memory", "disk")
CLOSED_BY_TEST = "CONNECTION_FORCED - closed by a test (close_connection)"


# -- publishes and confirms ------------------------------------------------------------

def nack_next_publishes(hooks: "TestHooks", vhost: str, count: int) -> None:
    """The next `count` publishes of confirm-mode channels in `vhost` are nacked and
    not enqueued (0 cancels what is left of an earlier call)."""
    if count < 0:
        raise TestHookError(f"count must be 0 or more, not {count}")
    _publish_faults(hooks, vhost).nacks_left = count
    log.info("event=fault_nack_publishes vhost=%s count=%d", vhost, count)


def delay_confirms(hooks: "TestHooks", vhost: str, seconds: int | float) -> None:
    """Hold the confirms of `vhost`'s channels for `seconds` of the broker's clock
    before sending them, in order; 0 sends the held ones now and stops holding."""
    if not math.isfinite(seconds) or seconds < 0:
        raise TestHookError(f"seconds must be 0 or more, not {seconds}")
    _publish_faults(hooks, vhost).set_confirm_delay(seconds)
    log.info("event=fault_delay_confirms vhost=%s seconds=%s", vhost, seconds)


def _publish_faults(hooks: "TestHooks", vhost: str) -> PublishFaults:
    found = _vhost(hooks, vhost)
    if found.faults is None:
        found.faults = PublishFaults(found.scheduler)
    return found.faults


def _vhost(hooks: "TestHooks", name: str) -> "VirtualHost":
    found = hooks.broker.vhosts.get(name)
    if found is None:
        raise TestHookError(f"no vhost {name!r} (was it removed already?)")
    return found


# -- connections -----------------------------------------------------------------------

def close_connection(hooks: "TestHooks", vhost: str, name: str,
                     reply_code: int = int(ReplyCode.CONNECTION_FORCED),
                     reply_text: str = CLOSED_BY_TEST) -> int:
    """Close the connections of `vhost` that the client named `name` with a
    Connection.Close of `reply_code` and `reply_text`; returns how many."""
    if not 200 <= reply_code <= 599:
        raise TestHookError(f"reply_code must be an AMQP reply code (320 "
                            f"CONNECTION_FORCED, 541 INTERNAL_ERROR...), not {reply_code}")
    transports = _named_connections(hooks, vhost, name)
    for transport in transports:
        transport.connection.close(reply_code, reply_text)
    log.info("event=fault_close_connection vhost=%s name=%r count=%d", vhost, name,
             len(transports))
    return len(transports)


def drop_connection(hooks: "TestHooks", vhost: str, name: str) -> int:
    """Close the sockets of `vhost`'s connections named `name` without a
    Connection.Close (the client sees a lost connection); returns how many."""
    transports = _named_connections(hooks, vhost, name)
    for transport in transports:
        transport.drop()
    return len(transports)


def stop_heartbeats(hooks: "TestHooks", vhost: str, name: str) -> int:
    """Stop sending heartbeats to `vhost`'s connections named `name` (the broker still
    reads the client's); returns how many."""
    transports = _named_connections(hooks, vhost, name)
    if not all(transport.heartbeat for transport in transports):
        raise TestHookError(
            f"connection {name!r} negotiated no heartbeats (heartbeat 0): connect with "
            "a heartbeat (pika: heartbeat=1) for its client to miss them")
    for transport in transports:
        transport.sends_heartbeats = False
    log.info("event=fault_stop_heartbeats vhost=%s name=%r count=%d", vhost, name,
             len(transports))
    return len(transports)


def _named_connections(hooks: "TestHooks", vhost: str,
                       name: str) -> list["SocketTransport"]:
    """The open connections of `vhost` whose client-provided connection_name is
    `name`; TestHookError listing the names there are when there is none."""
    _vhost(hooks, vhost)
    in_vhost = [transport for transport in hooks.server.transports
                if transport.connection.state is ConnectionState.OPEN
                and transport.connection.vhost is not None
                and transport.connection.vhost.name == vhost]
    named = [transport for transport in in_vhost if _client_name(transport) == name]
    if not named:
        names = sorted({repr(_client_name(transport)) for transport in in_vhost})
        raise TestHookError(
            f"no open connection named {name!r} in vhost {vhost!r}; its connections "
            f"are named: {', '.join(names) or 'none (no open connection)'} (clients name "
            "theirs with the connection_name client property)")
    return named


def _client_name(transport: "SocketTransport") -> str | None:
    name = transport.connection.client_properties.get("connection_name")
    if isinstance(name, (bytes, bytearray)):
        return bytes(name).decode("utf-8", "replace")
    return name


# -- broker-wide -----------------------------------------------------------------------

def raise_alarm(hooks: "TestHooks", vhost: str, kind: str) -> None:
    """Raise the memory or disk alarm on the whole broker (publishers are blocked) until
    clear_alarm or the end of the test."""
    hooks.server.alarm.force(_alarm_kind(kind), True)


def clear_alarm(hooks: "TestHooks", vhost: str, kind: str) -> None:
    """Clear an alarm raised by raise_alarm."""
    hooks.server.alarm.force(_alarm_kind(kind), False)


def _alarm_kind(kind: str) -> str:
    if kind not in ALARMS:
        raise TestHookError(f"kind must be one of {', '.join(ALARMS)}, not {kind!r}")
    return kind


def set_consumer_timeout(hooks: "TestHooks", vhost: str, milliseconds: int) -> None:
    """The broker's consumer timeout for deliveries made from now on, until the end of
    the test (queues with their own x-consumer-timeout keep theirs)."""
    if milliseconds <= 0:
        raise TestHookError(f"milliseconds must be more than 0, not {milliseconds}")
    config = hooks.broker.config
    if hooks.usual_consumer_timeout is None:
        hooks.usual_consumer_timeout = config.consumer_timeout
    config.consumer_timeout = milliseconds
    log.info("event=fault_consumer_timeout milliseconds=%d", milliseconds)


def reset_broker_faults(hooks: "TestHooks") -> None:
    """Put back what a test changed on the whole broker: forced alarms, the consumer
    timeout."""
    for kind in hooks.server.alarm.forced:
        hooks.server.alarm.force(kind, False)
    if hooks.usual_consumer_timeout is not None:
        hooks.broker.config.consumer_timeout = hooks.usual_consumer_timeout
        hooks.usual_consumer_timeout = None


OPERATIONS = {
    "nack_next_publishes": nack_next_publishes, "delay_confirms": delay_confirms,
    "close_connection": close_connection, "drop_connection": drop_connection,
    "stop_heartbeats": stop_heartbeats, "raise_alarm": raise_alarm,
    "clear_alarm": clear_alarm, "set_consumer_timeout": set_consumer_timeout,
}
