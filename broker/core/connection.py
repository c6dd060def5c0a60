"""One client connection: the one door the server reads through, dispatch of each
frame to its channel, error handling.

The connection owns its wire protocol, a `Framer` (amqp_codec), and the server owns the
socket. The server hands each read to `receive_data`, which decodes it, answers the
protocol header, handles what was decoded and ends the batch, and says in a
`ReadOutcome` whether to keep reading and what to wait for first; the connection's
`ReadPauses` (read_pauses.py: alarms, publisher flow) answers that again after a wait.
The connection and its channels encode what they send with the framer and write it to
their Transport. Channel 0 before Connection.Open is the `Handshake`'s (handshake.py); it
ends by handing the connection an `Opened` record. Opening and closing channels is the
`ChannelTable`'s (channel_table.py).

Replies that promise durability are held with what follows them until a commit covers
them (held_output.py): `writes_durable` and `writes_failed` release them.
"""

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pamqp import commands

from amqp_codec import (Framer, InboundHeartbeat, InboundPublish,
                        MalformedProperties, ProtocolError, ProtocolHeaderMismatch, Publish,
                        fit_reply_text)
from amqp_codec.reply_codes import ReplyCode
from amqp_codec.wire_ids import BASIC_PUBLISH, CHANNEL_OPEN, MethodId

from .backlog import HeadOnDisk
from .certificate_login import TlsPeer
from .channel import Channel
from .channel_table import ChannelTable
from .dispatch import HANDLERS
from .errors import AMQPError, ChannelError, ConnectionFailure
from .handshake import (HANDSHAKE_FRAME_MAX, ConnectionState, Handshake, Opened,
                        header_refusal)
from .held_output import HeldOutput
from .message import PublishedMessage
from .ports import Transport
from .queue_base import ClientConnection
from .read_pauses import Pause, ReadPauses

if TYPE_CHECKING:
    from .broker import Broker
    from .queue import Queue
    from .queue_base import QueueBase
    from .vhost import VirtualHost

log = logging.getLogger("warren.connection")

# Compared on every inbound item: module constants (an Enum member looked up on its
# class costs a metaclass attribute hook in Python 3.11).
_OPEN: Final = ConnectionState.OPEN
_CLOSING: Final = ConnectionState.CLOSING
_CLOSED: Final = ConnectionState.CLOSED


@dataclass(frozen=True)
class ReadOutcome:
    """What the server does after a read: keep reading (False: the connection is over,
    stop reading), after waiting for `paused_for` (None: read at once)."""

    keep_reading: bool
    paused_for: Pause | None


_READ_ON: Final = ReadOutcome(True, None)
_STOP_READING: Final = ReadOutcome(False, None)


class Connection(ClientConnection):
    """The AMQP state of one client connection."""

    def __init__(self, broker: "Broker", transport: Transport, peer: str = "",
                 address: str = "", tls: TlsPeer | None = None):
        self.broker = broker
        self.transport = transport
        self.peer = peer         # for logs: "host:port"
        self.address = address   # the client's IP address, without the port
        self.tls = tls           # None: plain TCP
        self.state = ConnectionState.STARTING
        self.handshake = Handshake(self)
        self._start_sent = False   # Connection.Start answered the protocol header
        # Handed over by the handshake at Connection.Open (see `opened`):
        self.user = ""
        self.user_tags: tuple[str, ...] = ()
        self.vhost: VirtualHost | None = None
        self.client_properties: dict = {}
        self.capabilities: dict = {}
        self.channel_max = broker.config.channel_max
        self.heartbeat = 0
        # Until Connection.TuneOk, frames of up to 8192 octets only, as RabbitMQ 4.1
        # and later enforce (a larger Start-Ok is a frame error): a Start-Ok with a
        # large client certificate or many client properties fits.
        self.framer = Framer(broker.config.frame_max,
                             broker.config.message_size_limit(broker.profile),
                             PublishedMessage, handshake_frame_max=HANDSHAKE_FRAME_MAX)
        self.channel_table = ChannelTable(self)
        self.channels = self.channel_table.open   # looked up per frame, without a hop
        self.exclusive_queues: dict[str, QueueBase] = {}
        self.needs_sync = False   # replies of this batch wait for a durable commit
        self.has_published = False   # publishing connections are blocked by alarms
        self.read_pauses = ReadPauses(self)
        self._confirming: dict[Channel, None] = {}
        self._held_output = HeldOutput(transport, self.framer)
        self._held = self._held_output.segments   # `write` looks at it directly
        self._capture: list[bytes | tuple] | None = None
        # Inbound items held back while a Basic.Get waits for a body read from disk:
        # handled, in order, once the read is done (None: nothing waits).
        self._deferred: list | None = None

    @property
    def writable(self) -> bool:
        return self.transport.writable

    def write(self, data: bytes | tuple) -> None:
        """Send bytes, unless replies are being held for a durable commit: then they
        queue behind the held ones so the client sees them in order."""
        if self._capture is not None:
            self._capture.append(data)
        elif self._held:
            self._held[-1].data.append(data)
        else:
            self.transport.write(data)

    def send_method(self, channel: int, method) -> None:
        """Send a method frame (any pamqp method without content)."""
        self.write(self.framer.encode_method(channel, method))

    def write_confirm(self, channel: int, delivery_tag: int, multiple: bool) -> None:
        """A Basic.Ack of publishes; held output remembers where it is, so that a failed
        commit can turn it into a Basic.Nack."""
        data = self.framer.encode_basic_ack(channel, delivery_tag, multiple)
        if self._held and self._capture is None:
            self._held_output.hold_confirm(data, channel, delivery_tag, multiple)
        else:
            self.write(data)

    def supports(self, capability: str) -> bool:
        return bool(self.capabilities.get(capability))

    # -- reading -------------------------------------------------------------------

    def receive_data(self, data: bytes) -> ReadOutcome:
        """Everything one read from the socket asks for: decode it, answer the protocol
        header with Connection.Start, handle what was decoded, end the batch. A protocol
        error still handles what was decoded before it, then closes the connection; an
        unexpected exception closes this connection (541 INTERNAL_ERROR), no other."""
        try:
            framer = self.framer
            try:
                items = framer.feed(data)
            except ProtocolHeaderMismatch as mismatch:
                self.transport.write(header_refusal(
                    mismatch.args[0], self.broker.profile.line.offers_amqp_1_0))
                return _STOP_READING
            except ProtocolError as error:
                self.handle_all(error.decoded)
                log.info("event=protocol_error peer=%s code=%s text=%r",
                         self.peer, int(error.reply_code), error.text)
                self.close(error.reply_code, error.reply_text, error.class_id,
                           error.method_id)
                return _STOP_READING
            if not self._start_sent and framer.header_received:
                self._start_sent = True
                self.handshake.start()
            self.handle_all(items)
            if framer.awaiting_content:
                # As RabbitMQ: a connection publishes once a Basic.Publish has arrived,
                # so an alarm pauses (and tells) one in the middle of a large message.
                self.has_published = True
            self.end_of_batch()
            pauses = self.read_pauses
            if pauses.alarms or pauses.throttled_by or self._deferred is not None:
                pause = pauses.after_read()
                if pause is not None:
                    return ReadOutcome(True, pause)
            return _READ_ON
        except Exception as bug:   # (not `error`: mypyc types a name once per function)
            self.fail(bug)
            return _STOP_READING

    def handle(self, item) -> None:
        """Process one decoded inbound item (publish, method or heartbeat)."""
        self.handle_all((item,))

    def handle_all(self, items) -> None:
        """Process the decoded inbound items of one read in order, each as `handle`
        would (the hot path, a publish, inline: one Python call per read, not per
        message). Items after one that waits for a disk read are held back with it."""
        items = iter(items)
        for item in items:
            if self.state is _CLOSED:
                return
            deferred = self._deferred
            if deferred is not None:
                deferred.append(item)
                deferred += items
                return
            channel_number = item.channel
            kind = type(item)
            try:
                # the hot path, a decoded publish (or one made as InboundPublish): inline
                if kind is PublishedMessage or kind is InboundPublish:
                    self.has_published = True
                    channel = self.channels.get(channel_number)
                    if channel is None:
                        self.channel_table.publish_without_channel(channel_number)
                    elif channel.confirming:
                        self._publish_confirmed(channel, item)
                    else:
                        channel.publish(item)
                elif channel_number == 0:
                    if kind is not InboundHeartbeat:
                        self._connection_method(item.method)
                else:
                    self._channel_method(channel_number, item.method)
            except ChannelError as error:
                if kind is PublishedMessage or kind is InboundPublish:
                    error.class_id, error.method_id = BASIC_PUBLISH
                self.channel_table.close(channel_number, error)
            except ConnectionFailure as failure:
                self.close(failure.reply_code, failure.reply_text, failure.class_id,
                           failure.method_id)
            except HeadOnDisk as waiting:
                self._deferred = [item]
                waiting.queue.wake_when_read(self._resume_input)
            except MalformedProperties as malformed:
                # A feature needed a field of a message this client published (headers
                # routing, expiration, user_id, delivery_mode...): RabbitMQ reads every
                # property block on publish and closes the connection with 541 then.
                self.close(ReplyCode.INTERNAL_ERROR, "INTERNAL_ERROR - cannot read the "
                           f"content properties of a published message: {malformed}",
                           *BASIC_PUBLISH)
            except Exception as bug:   # a bug must cost this connection, not the broker
                self.fail(bug)

    def _resume_input(self) -> None:
        """A read a Basic.Get waited for is done: handle the items held back, in order
        (the Get first, again), until one has to wait again."""
        items, self._deferred = self._deferred, None
        if items is None or self.state is _CLOSED:
            return
        try:
            self.handle_all(items)    # the next Get that waits holds back the rest again
            self.end_of_batch()
        except Exception as error:   # this connection's failure, not the reading queue's
            self.fail(error)
        if not self.input_deferred:
            self.transport.input_resumed()

    @property
    def input_deferred(self) -> bool:
        """Whether inbound items are held back for a Basic.Get's disk read (the server
        does not read from the socket meanwhile, so what is held stays one read's worth)."""
        return self._deferred is not None

    # -- lifecycle -----------------------------------------------------------------

    def opened(self, opened: Opened) -> None:
        """The handshake is done (Connection.Open accepted): the connection takes over
        what it agreed, and is open on its vhost."""
        self.user = opened.user
        self.user_tags = opened.user_tags
        self.client_properties = opened.client_properties
        self.capabilities = opened.capabilities
        self.channel_max = opened.channel_max
        self.heartbeat = opened.heartbeat
        self.vhost = opened.vhost
        if opened.vhost.profile is not self.broker.profile:   # the vhost's own line
            self.framer.limit_body_size(
                self.broker.config.message_size_limit(opened.vhost.profile))
        self.state = _OPEN
        self.broker.connection_opened(self)
        self.send_method(0, commands.Connection.OpenOk())
        self.transport.opened()

    def refuse_login(self, reply_text: str | None) -> None:
        """The handshake refused the login: Connection.Close with `reply_text`, or, when
        None, no frame; either way the socket closes, and the server slows the
        refusal down."""
        if reply_text is None:
            self.state = _CLOSED
        else:
            self.close(ReplyCode.ACCESS_REFUSED, reply_text, quietly=True)
        self.transport.login_refused()
        self._close_transport()

    def fail(self, error: BaseException) -> None:
        """An unexpected exception while serving this connection: log it with its
        traceback and close this connection (541 INTERNAL_ERROR), and only this one.
        When even the close fails, the socket is dropped."""
        log.error("event=internal_error peer=%s user=%r vhost=%r error=%r", self.peer,
                  self.user, self.vhost.name if self.vhost else None, error,
                  exc_info=error)
        if self.state is _CLOSING or self.state is _CLOSED:
            self._drop()
            return
        try:
            self.close(ReplyCode.INTERNAL_ERROR, "INTERNAL_ERROR - the broker failed while "
                       "handling this connection and closed it (the broker log has the "
                       "details); reconnect to continue")
        except Exception as second:
            log.error("event=internal_error_on_close peer=%s error=%r", self.peer, second,
                      exc_info=second)
            self._drop()

    def _drop(self) -> None:
        """Give up on the connection: no more frames in or out, the socket closes."""
        self.state = _CLOSED
        self._held_output.clear()
        self._deferred = None
        self.transport.close()

    def end_of_batch(self) -> None:
        """Everything read so far is handled: send the confirms, or, when a reply of
        this batch promises durability, seal the held output for the next commit."""
        if self.needs_sync:
            self.needs_sync = False
            segment = self._held_output.open_segment()
            self._flush_confirms()
            persistence = self.broker.persistence
            segment.target = persistence.writes   # sealed: it goes once they are durable
            persistence.wait_durable(self)
        elif self._confirming:
            self._flush_confirms()

    def writes_durable(self, writes: int) -> bool:
        """The first `writes` durable writes are on disk: send the output held for
        them, in order. Returns whether output is still held for later writes."""
        return self._held_output.release_durable(writes)

    def writes_failed(self, writes: int, reason: str) -> bool:
        """A commit of the first `writes` writes failed: send the output held for them
        refused (confirms as Basic.Nack; a durable reply as a 406 Channel.Close, after
        which nothing more of its channel is sent). Returns whether output is still held
        for later writes."""
        held_output = self._held_output
        for channel in held_output.release_failed(writes, reason, self.channels):
            self.channel_table.refused(channel, reason)
        return held_output.still_held()

    def input_ended(self) -> None:
        """The server stopped reading: close the socket once the held output is sent."""
        self.end_of_batch()    # a protocol error may have cut the last batch short
        self._close_transport()

    def _close_transport(self) -> None:
        if self._held:
            self._held_output.close_when_released = True
        else:
            self.transport.close()

    def _flush_confirms(self) -> None:
        for channel in self._confirming:
            channel.flush_confirms()
        self._confirming.clear()

    def confirms_pending(self, channel: Channel) -> None:
        self._confirming[channel] = None

    def throttle(self, queue: "Queue") -> None:
        """Publisher flow control: `queue` cannot keep up with this publisher, which is
        read again once it caught up (ReadPauses.throttled)."""
        self.read_pauses.throttled_by.add(queue)

    def drained(self) -> None:
        """The outgoing buffer drained: consumers may be fed again."""
        for channel in list(self.channels.values()):
            channel.redispatch()

    def close(self, reply_code: int, reply_text: str, class_id: int = 0,
              method_id: int = 0, quietly: bool = False) -> None:
        """Start a server-initiated close: Connection.Close, then wait for CloseOk.
        Refused logins close `quietly`: the server counts and sums them up instead of
        logging each."""
        if self.state is _CLOSING or self.state is _CLOSED:
            return
        log.log(logging.DEBUG if quietly else logging.INFO,
                "event=connection_closed_by_broker peer=%s code=%s text=%r", self.peer,
                reply_code, reply_text)
        self._release_resources()
        self.state = _CLOSING
        self.send_method(0, commands.Connection.Close(
            reply_code=reply_code, reply_text=fit_reply_text(reply_text), class_id=class_id,
            method_id=method_id))
        self.transport.close_sent()

    def lost(self) -> None:
        """The socket is gone: requeue unacked messages, drop exclusive queues."""
        if self.state is not _CLOSED:
            self._release_resources()
        self.state = _CLOSED
        self._held.clear()
        self._deferred = None

    def _release_resources(self) -> None:
        self.channel_table.close_all()
        for queue in list(self.exclusive_queues.values()):
            if not queue.deleted:
                queue.vhost.delete_queue(queue)
        self.exclusive_queues.clear()
        self.broker.connection_closed(self)

    # -- channel 0 -----------------------------------------------------------------

    def _connection_method(self, method) -> None:
        state = self.state
        kind = type(method)
        if state is _CLOSING:
            # after our Close, only the client's Close or Close-Ok is heard
            if kind is commands.Connection.CloseOk or kind is commands.Connection.Close:
                self._close_ok()
        elif state is _OPEN and kind is commands.Connection.UpdateSecret:
            self._update_secret(method)
        elif state is not _OPEN and self.handshake.handle(state, method):
            pass
        elif kind is commands.Connection.Close:
            self._client_close()
        else:
            raise ConnectionFailure(
                ReplyCode.CHANNEL_ERROR,
                f"unexpected method in connection state {state.value}",
                *_method_id(method))

    def _client_close(self) -> None:
        self.end_of_batch()    # confirms of this read go before the CloseOk
        self._release_resources()
        self.send_method(0, commands.Connection.CloseOk())
        self.state = _CLOSED
        self.transport.closed_by_client()
        self._close_transport()

    def _close_ok(self) -> None:
        self.state = _CLOSED
        self._close_transport()

    def _update_secret(self, method) -> None:
        """RabbitMQ passes a new secret only to authentication backends whose
        credentials expire (OAuth 2 tokens); its internal user database, which Warren's
        users are, is not one, so every secret is accepted, whatever the login mechanism,
        and the connection keeps the user and permissions it logged in with."""
        log.debug("event=secret_updated peer=%s user=%r reason=%r", self.peer, self.user,
                  method.reason)
        self.send_method(0, commands.Connection.UpdateSecretOk())

    # -- channels ------------------------------------------------------------------

    def _channel_method(self, number: int, method) -> None:
        if self.state is not _OPEN:
            if self.state is _CLOSING:
                return
            raise ConnectionFailure(ReplyCode.COMMAND_INVALID,
                                    "channel methods before connection.open",
                                    *_method_id(method))
        channel = self.channels.get(number)
        if channel is None:
            self.channel_table.method_without_channel(number, method)
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
                    error.class_id, error.method_id = _method_id(method)
                raise
        elif isinstance(method, commands.Channel.Close):
            self.channel_table.closed_by_client(channel)
        elif isinstance(method, commands.Channel.Open):
            raise ConnectionFailure(ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen",
                                    *CHANNEL_OPEN)
        else:
            raise ConnectionFailure(ReplyCode.COMMAND_INVALID, "unimplemented method",
                                    *_method_id(method))

    def _run_holding_durable_replies(self, handler, channel: Channel, method) -> None:
        """Run a handler whose reply may promise durability (declare, bind, delete,
        tx.commit): when it wrote to durable storage, hold its output until the commit."""
        persistence = self.broker.persistence
        writes = persistence.writes
        captured: list[bytes | tuple]
        self._capture = captured = []
        try:
            handler(channel, method)
        finally:
            self._capture = None
            if persistence.writes != writes:
                self.needs_sync = True
                self._held_output.hold_reply(captured, channel, _method_id(method))
            else:
                for data in captured:
                    self.write(data)

    def _publish_confirmed(self, channel: Channel, item: Publish) -> None:
        """A publish in confirm mode: the confirm waits for what the publish wrote."""
        persistence = self.broker.persistence
        writes = persistence.writes
        channel.publish(item)
        if persistence.writes != writes:
            self.needs_sync = True

    def close_channel(self, number: int, error: ChannelError) -> None:
        """Close a channel for a reason of the broker's own (a consumer timeout)."""
        if number in self.channels:
            self.channel_table.close(number, error)


def _method_id(method) -> MethodId:
    """(class_id, method_id) of a pamqp method."""
    return MethodId.from_frame_index(method.index)


DURABLE_REPLIES = frozenset({
    commands.Exchange.Declare, commands.Exchange.Delete, commands.Exchange.Bind,
    commands.Exchange.Unbind, commands.Queue.Declare, commands.Queue.Bind,
    commands.Queue.Unbind, commands.Queue.Delete,
    commands.Tx.Commit,
})
