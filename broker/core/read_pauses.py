"""Why the server stops reading from one connection for a while: a resource alarm (for
a connection that publishes), publisher flow control (queues it fed cannot keep up), or
a Basic.Get that waits for a body read from disk; and the Connection.Blocked/Unblocked
notices that tell a publishing client about the alarms.

The server asks `paused_for` after each read (the connection's `ReadOutcome`) and again
after each wait; it tells every connection when the alarms change (`alarm_changed`).
"""

from enum import Enum
from typing import TYPE_CHECKING, Final

from pamqp import commands

from .backlog import FLOW_RESUME
from .handshake import ConnectionState

if TYPE_CHECKING:
    from .connection import Connection
    from .queue import Queue

_OPEN: Final = ConnectionState.OPEN


class Pause(Enum):
    """What the server waits for before it reads from a connection again."""

    ALARM = "alarm"            # a resource alarm is raised, and this connection publishes
    FLOW = "flow"              # queues it fed have a long backlog (publisher flow control)
    DISK_READ = "disk read"    # a Basic.Get waits for a body read from disk


class ReadPauses:
    """The alarms and the flow control that pause reading from one connection."""

    def __init__(self, connection: "Connection"):
        self.connection = connection
        self.alarms: frozenset = frozenset()   # the resource alarms raised now
        # Queues this connection fed that have a long backlog and consumers waiting for
        # their sockets: the server stops reading from it until they catch up.
        self.throttled_by: set[Queue] = set()
        self._blocked_notified = False

    def paused_for(self) -> Pause | None:
        """What the server waits for before it reads from this connection again
        (None: nothing)."""
        connection = self.connection
        if connection.has_published and self.alarms:
            return Pause.ALARM
        if self.throttled:
            return Pause.FLOW
        if connection.input_deferred:
            return Pause.DISK_READ
        return None

    def after_read(self) -> Pause | None:
        """`paused_for` at the end of a read: a client that published in it is told of
        the alarms raised now, if it was not yet."""
        pause = self.paused_for()
        if pause is Pause.ALARM:
            self.alarm_changed(self.alarms)
        return pause

    def alarm_changed(self, raised: frozenset) -> None:
        """The resource alarms raised now (the server tells every connection when they
        change): tell a publishing client that asked to know (connection.blocked
        capability), as RabbitMQ does."""
        self.alarms = raised
        connection = self.connection
        if connection.state is not _OPEN or not connection.supports("connection.blocked"):
            return
        if raised and connection.has_published and not self._blocked_notified:
            reason = f"low on {' and '.join(sorted(raised))}"
            connection.send_method(0, commands.Connection.Blocked(reason=reason))
            self._blocked_notified = True
        elif not raised and self._blocked_notified:
            connection.send_method(0, commands.Connection.Unblocked())
            self._blocked_notified = False

    @property
    def throttled(self) -> bool:
        """Whether to stop reading from this connection for now: a queue it fed still
        has more than half the flow-control backlog and consumers to work it off."""
        queues = self.throttled_by
        if queues:
            for queue in list(queues):
                if queue.deleted or not queue.consumers or queue.backlog <= FLOW_RESUME:
                    queues.discard(queue)
        return bool(queues)
