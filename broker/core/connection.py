"""One client connection: channel 0 negotiation, channel multiplexing, error handling.

The server layer owns the socket. It gives the connection a Transport, feeds it every
decoded inbound item through `handle`, calls `end_of_batch` after each read, `drained`
when the outgoing buffer falls below the low-water mark, `input_ended` when reading
stops, and `lost` when the socket goes.

Replies that promise durability (confirms, Tx.CommitOk, Declare-Ok of durable entities)
are held, with everything written after them, in segments sealed at the end of a read
and released in order by `writes_durable` once the commit covering them is done. The
connection keeps reading meanwhile, so the next commit gathers the next reads.
"""

import logging
from collections import deque
from typing import Protocol

from pamqp import commands

from amqp_codec import (InboundHeartbeat, InboundPublish, MalformedProperties, encode_method,
                        fit_reply_text)
from amqp_codec.reply_codes import ReplyCode

from .auth import (MECHANISMS, AuthenticationFailure, UndecodableCredentials,
                   parse_credentials)
from .channel import Channel
from .dispatch import HANDLERS
from .errors import AMQPError, ChannelError, ConnectionFailure
from .queue import FLOW_RESUME

log = logging.getLogger("warren.connection")

FRAME_MIN_SIZE = 4096
_LOGIN_REFUSED = ("Login was refused using authentication mechanism {}. For details see "
                  "the broker logfile.")
PUBLISH_IDS = (60, 40)


class Transport(Protocol):
    """What the core needs from the socket side."""

    writable: bool   # False while the outgoing buffer is above its high-water mark

    def write(self, data: bytes | tuple) -> None:
        """Send bytes, or a tuple of bytes-like parts in order (large message bodies,
        written without being copied)."""

    def close(self) -> None:
        """Flush what was written, then close the socket."""

    def tuned(self, frame_max: int, heartbeat: int) -> None:
        """Negotiation finished: enforce frame_max on input, start heartbeats."""


class Connection:
    """The AMQP state of one client connection."""

    def __init__(self, broker, transport: Transport, peer: str = ""):
        self.broker = broker
        self.transport = transport
        self.peer = peer
        self.state = "awaiting-start-ok"
        self.user = ""
        self.vhost = None
        self.client_properties: dict = {}
        self.capabilities: dict = {}
        self.channel_max = broker.config.channel_max
        self.frame_max = FRAME_MIN_SIZE
        self.heartbeat = 0
        self.channels: dict[int, Channel] = {}
        self.closing_channels: set[int] = set()
        self.exclusive_queues: dict = {}
        self.needs_sync = False   # replies of this batch wait for a durable commit
        self.has_published = False   # publishing connections are blocked by alarms
        # Queues this connection fed that have a long backlog and consumers waiting for
        # their sockets: the server stops reading from it until they catch up.
        self._throttled_by: set = set()
        self._blocked_notified = False
        self._confirming: dict[Channel, None] = {}
        # Output held for durability: [target writes (None while the batch runs), data].
        self._held: deque[list] = deque()
        self._close_when_released = False
        self._capture: list[bytes] | None = None

    @property
    def writable(self) -> bool:
        return self.transport.writable

    def write(self, data: bytes) -> None:
        """Send bytes, unless replies are being held for a durable commit: then they
        queue behind the held ones so the client sees them in order."""
        if self._capture is not None:
            self._capture.append(data)
        elif self._held:
            self._held[-1][1].append(data)
        else:
            self.transport.write(data)

    def supports(self, capability: str) -> bool:
        return bool(self.capabilities.get(capability))

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        """The protocol header arrived: offer Connection.Start."""
        self.write(encode_method(0, commands.Connection.Start(
            server_properties=self.broker.server_properties(),
            mechanisms=" ".join(MECHANISMS), locales="en_US")))

    def handle(self, item) -> None:
        """Process one decoded inbound item (publish, method or heartbeat)."""
        if self.state == "closed":
            return
        channel_number = item.channel
        try:
            if type(item) is InboundPublish:
                self._publish(item)
            elif channel_number == 0:
                if type(item) is not InboundHeartbeat:
                    self._connection_method(item.method)
            else:
                self._channel_method(channel_number, item.method)
        except ChannelError as error:
            self._close_channel(channel_number, error)
        except ConnectionFailure as error:
            self.close(error.reply_code, error.reply_text, error.class_id, error.method_id)
        except MalformedProperties as error:
            # A feature needed a field of a message this client published (headers
            # routing, expiration, user_id, delivery_mode...): RabbitMQ reads every
            # property block on publish and closes the connection with 541 then.
            self.close(ReplyCode.INTERNAL_ERROR, "INTERNAL_ERROR - cannot read the content "
                       f"properties of a published message: {error}", *PUBLISH_IDS)

    def end_of_batch(self) -> None:
        """Everything read so far is handled: send the confirms, or, when a reply of
        this batch promises durability, seal the held output for the next commit."""
        if self.needs_sync:
            self.needs_sync = False
            self._open_segment()
            self._flush_confirms()
            persistence = self.broker.persistence
            self._held[-1][0] = persistence.writes
            persistence.wait_durable(self)
        elif self._confirming:
            self._flush_confirms()

    def writes_durable(self, writes: int) -> bool:
        """The first `writes` durable writes are on disk: send the output held for
        them, in order. Returns whether output is still held for later writes."""
        held = self._held
        while held and held[0][0] is not None and held[0][0] <= writes:
            for data in held.popleft()[1]:
                self.transport.write(data)
        if held:
            return True
        if self._close_when_released:
            self.transport.close()
        return False

    def input_ended(self) -> None:
        """The server stopped reading: close the socket once the held output is sent."""
        self.end_of_batch()    # a protocol error may have cut the last batch short
        self._close_transport()

    def _close_transport(self) -> None:
        if self._held:
            self._close_when_released = True
        else:
            self.transport.close()

    def _open_segment(self) -> list:
        """The held output of the batch being handled (started on first use)."""
        held = self._held
        if not held or held[-1][0] is not None:
            held.append([None, []])
        return held[-1][1]

    def _flush_confirms(self) -> None:
        for channel in self._confirming:
            channel.flush_confirms()
        self._confirming.clear()

    def confirms_pending(self, channel: Channel) -> None:
        self._confirming[channel] = None

    def alarm_changed(self, raised: frozenset) -> None:
        """A resource alarm was raised or cleared: tell a publishing client that asked to
        know (connection.blocked capability), as RabbitMQ does."""
        if self.state != "open" or not self.supports("connection.blocked"):
            return
        if raised and self.has_published and not self._blocked_notified:
            reason = f"low on {' and '.join(sorted(raised))}"
            self.write(encode_method(0, commands.Connection.Blocked(reason=reason)))
            self._blocked_notified = True
        elif not raised and self._blocked_notified:
            self.write(encode_method(0, commands.Connection.Unblocked()))
            self._blocked_notified = False

    def throttle(self, queue) -> None:
        """Publisher flow control: `queue` cannot keep up with this publisher."""
        self._throttled_by.add(queue)

    @property
    def throttled(self) -> bool:
        """Whether to stop reading from this connection for now: a queue it fed still
        has more than half the flow-control backlog and consumers to work it off."""
        queues = self._throttled_by
        if queues:
            for queue in list(queues):
                if queue.deleted or not queue.consumers or len(queue.ready) <= FLOW_RESUME:
                    queues.discard(queue)
        return bool(queues)

    def drained(self) -> None:
        """The outgoing buffer drained: consumers may be fed again."""
        for channel in list(self.channels.values()):
            channel.redispatch()

    def close(self, reply_code: int, reply_text: str, class_id: int = 0,
              method_id: int = 0) -> None:
        """Start a server-initiated close: Connection.Close, then wait for CloseOk."""
        if self.state in ("closing", "closed"):
            return
        log.info("event=connection_closed_by_broker peer=%s code=%s text=%r",
                 self.peer, reply_code, reply_text)
        self._release_resources()
        self.state = "closing"
        self.write(encode_method(0, commands.Connection.Close(
            reply_code=reply_code, reply_text=fit_reply_text(reply_text), class_id=class_id,
            method_id=method_id)))

    def lost(self) -> None:
        """The socket is gone: requeue unacked messages, drop exclusive queues."""
        if self.state != "closed":
            self._release_resources()
        self.state = "closed"
        self._held.clear()

    def _release_resources(self) -> None:
        for channel in self.channels.values():
            channel.shutdown()
        self.channels.clear()
        for queue in list(self.exclusive_queues.values()):
            if not queue.deleted:
                queue.vhost.delete_queue(queue)
        self.exclusive_queues.clear()
        self.broker.connection_closed(self)

    # -- channel 0 -----------------------------------------------------------------

    def _connection_method(self, method) -> None:
        handler = _CONNECTION_HANDLERS.get((self.state, type(method)))
        if handler is not None:
            handler(self, method)
        elif self.state == "closing":
            return   # after our Close, everything but Close/CloseOk is dropped
        elif isinstance(method, commands.Connection.Close):
            self._client_close(method)
        else:
            raise ConnectionFailure(
                ReplyCode.CHANNEL_ERROR,
                f"unexpected method in connection state {_STATE_NAMES[self.state]}",
                *_ids(method))

    def _start_ok(self, method) -> None:
        self.client_properties = method.client_properties or {}
        self.capabilities = self.client_properties.get("capabilities") or {}
        try:
            user, password = parse_credentials(method.mechanism, method.response)
        except UndecodableCredentials:
            self._refuse_login(_LOGIN_REFUSED.format(method.mechanism))
            log.info("event=login_refused peer=%s reason=credentials_not_utf8", self.peer)
            return
        except AuthenticationFailure as failure:
            log.info("event=login_refused peer=%s reason=%r", self.peer, str(failure))
            self.state = "closed"   # RabbitMQ closes the socket without a frame
            self._close_transport()
            return
        if not self.broker.users.authenticate(user, password):
            self._refuse_login(_LOGIN_REFUSED.format(method.mechanism))
            log.info("event=login_refused peer=%s user=%r", self.peer, user)
            return
        self.user = user
        self.state = "awaiting-tune-ok"
        config = self.broker.config
        self.write(encode_method(0, commands.Connection.Tune(
            channel_max=config.channel_max, frame_max=config.frame_max,
            heartbeat=config.heartbeat)))

    def _refuse_login(self, text: str) -> None:
        if self.supports("authentication_failure_close"):
            self.close(ReplyCode.ACCESS_REFUSED, f"ACCESS_REFUSED - {text}")
        else:
            self.state = "closed"
        self._close_transport()

    def _tune_ok(self, method) -> None:
        config = self.broker.config
        frame_max = method.frame_max   # RabbitMQ refuses 0 here, as Warren does
        if frame_max < FRAME_MIN_SIZE or frame_max > config.frame_max:
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED,
                f"frame_max={method.frame_max} outside {FRAME_MIN_SIZE}..{config.frame_max}",
                10, 31)
        channel_max = method.channel_max
        if not 0 < channel_max <= config.channel_max:
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED,
                f"channel_max={channel_max} > {config.channel_max} max channels", 10, 31)
        self.frame_max = frame_max
        self.channel_max = channel_max
        self.heartbeat = method.heartbeat
        self.state = "awaiting-open"
        self.transport.tuned(frame_max, method.heartbeat)

    def _open(self, method) -> None:
        vhost = self.broker.vhosts.get(method.virtual_host)
        if vhost is None or not self.broker.users.may_open(self.user, method.virtual_host):
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED,
                f"access to vhost '{method.virtual_host}' refused for user '{self.user}'",
                10, 40)
        self.vhost = vhost
        self.state = "open"
        self.broker.connection_opened(self)
        self.write(encode_method(0, commands.Connection.OpenOk()))

    def _client_close(self, method) -> None:
        self.end_of_batch()    # confirms of this read go before the CloseOk
        self._release_resources()
        self.write(encode_method(0, commands.Connection.CloseOk()))
        self.state = "closed"
        self._close_transport()

    def _close_ok(self, method) -> None:
        self.state = "closed"
        self._close_transport()

    # -- channels ------------------------------------------------------------------

    def _channel_method(self, number: int, method) -> None:
        if self.state != "open":
            if self.state == "closing":
                return
            raise ConnectionFailure(ReplyCode.COMMAND_INVALID,
                                    "channel methods before connection.open", *_ids(method))
        if number in self.closing_channels:
            self._closing_channel_method(number, method)
            return
        channel = self.channels.get(number)
        if channel is None:
            self._open_channel(number, method)
            return
        handler = HANDLERS.get(type(method))
        if handler is not None:
            try:
                if type(method) in DURABLE_REPLIES:
                    self._run_holding_durable_replies(handler, channel, method)
                else:
                    handler(channel, method)
            except AMQPError as error:
                if not error.class_id:
                    error.class_id, error.method_id = _ids(method)
                raise
        elif isinstance(method, commands.Channel.Close):
            channel.shutdown()
            del self.channels[number]
            channel.send(commands.Channel.CloseOk())
        elif isinstance(method, commands.Channel.Open):
            raise ConnectionFailure(ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen",
                                    20, 10)
        else:
            raise ConnectionFailure(ReplyCode.COMMAND_INVALID, "unimplemented method",
                                    *_ids(method))

    def _run_holding_durable_replies(self, handler, channel: Channel, method) -> None:
        """Run a handler whose reply may promise durability (declare, bind, delete,
        tx.commit): when it wrote to durable storage, hold its output until the commit."""
        persistence = self.broker.persistence
        writes = persistence.writes
        self._capture = captured = []
        try:
            handler(channel, method)
        finally:
            self._capture = None
            if persistence.writes != writes:
                self.needs_sync = True
                self._open_segment().extend(captured)
            else:
                for data in captured:
                    self.write(data)

    def _open_channel(self, number: int, method) -> None:
        if not isinstance(method, commands.Channel.Open):
            raise ConnectionFailure(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'",
                                    *_ids(method))
        opened = len(self.channels) + len(self.closing_channels)
        if opened >= self.channel_max:
            # RabbitMQ limits how many channels are open, not their numbers.
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED,
                f"number of channels opened ({opened}) has reached the negotiated "
                f"channel_max ({self.channel_max})")
        channel = Channel(self, number)
        self.channels[number] = channel
        channel.send(commands.Channel.OpenOk())

    def _closing_channel_method(self, number: int, method) -> None:
        """After our Channel.Close only Close/CloseOk matter (AMQP 0-9-1 §2.3.5.2)."""
        if isinstance(method, commands.Channel.CloseOk):
            self.closing_channels.discard(number)
        elif isinstance(method, commands.Channel.Close):
            self.closing_channels.discard(number)
            self.write(encode_method(number, commands.Channel.CloseOk()))

    def _publish(self, item: InboundPublish) -> None:
        self.has_published = True
        number = item.channel
        channel = self.channels.get(number)
        if channel is None:
            if number in self.closing_channels:
                return
            raise ConnectionFailure(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'",
                                    *PUBLISH_IDS)
        persistence = self.broker.persistence
        writes = persistence.writes
        try:
            channel.publish(item)
            if channel.confirming and persistence.writes != writes:
                self.needs_sync = True
        except ChannelError as error:
            error.class_id, error.method_id = PUBLISH_IDS
            raise

    def _close_channel(self, number: int, error: ChannelError) -> None:
        channel = self.channels.pop(number, None)
        if channel is not None:
            channel.shutdown()
        self.closing_channels.add(number)
        self.write(encode_method(number, commands.Channel.Close(
            reply_code=error.reply_code, reply_text=fit_reply_text(error.reply_text),
            class_id=error.class_id, method_id=error.method_id)))


def _ids(method) -> tuple[int, int]:
    """(class_id, method_id) of a pamqp method."""
    return method.index >> 16, method.index & 0xFFFF


DURABLE_REPLIES = frozenset({
    commands.Exchange.Declare, commands.Exchange.Delete, commands.Exchange.Bind,
    commands.Exchange.Unbind, commands.Queue.Declare, commands.Queue.Bind,
    commands.Queue.Unbind, commands.Queue.Delete,
    commands.Tx.Commit,
})

_STATE_NAMES = {"open": "running", "awaiting-start-ok": "starting",
                "awaiting-tune-ok": "tuning", "awaiting-open": "opening"}

_CONNECTION_HANDLERS = {
    ("awaiting-start-ok", commands.Connection.StartOk): Connection._start_ok,
    ("awaiting-tune-ok", commands.Connection.TuneOk): Connection._tune_ok,
    ("awaiting-open", commands.Connection.Open): Connection._open,
    ("closing", commands.Connection.CloseOk): Connection._close_ok,
    ("closing", commands.Connection.Close): Connection._close_ok,
}
