"""One client connection: channel 0 negotiation, channel multiplexing, error handling.

The connection owns its wire protocol, a `Framer` (amqp_codec): the server feeds the
bytes it reads to `connection.framer`, and the connection and its channels encode what
they send with it; Connection.TuneOk sets the framer's frame_max for both directions.
The server layer owns the socket. It gives the connection a Transport, passes it every
decoded inbound item through `handle`, calls `end_of_batch` after each read, `drained`
when the outgoing buffer falls below the low-water mark, `input_ended` when reading
stops, and `lost` when the socket goes.

Replies that promise durability (confirms, Tx.CommitOk, Declare-Ok of durable entities)
are held, with everything written after them, in segments sealed at the end of a read
and released in order by `writes_durable` once the commit covering them is done. The
connection keeps reading meanwhile, so the next commit gathers the next reads. When the
commit fails instead (a full disk), `writes_failed` releases them refused: confirms
become Basic.Nack, and a durable reply becomes a Channel.Close (406) of its channel.
"""

import logging
from collections import deque
from typing import TYPE_CHECKING

from pamqp import commands

from amqp_codec import (Framer, InboundHeartbeat, InboundPublish, MalformedProperties,
                        Publish, fit_reply_text)
from amqp_codec.constants import FRAME_MIN_SIZE
from amqp_codec.reply_codes import ReplyCode
from amqp_codec.wire_ids import (BASIC_PUBLISH, CHANNEL_OPEN, CONNECTION_OPEN,
                                 CONNECTION_TUNE_OK, TX_COMMIT)

from .access_control import User
from .auth import (AuthenticationFailure, UndecodableCredentials, is_loopback,
                   parse_credentials)
from .backlog import FLOW_RESUME, HeadOnDisk
from .certificate_login import EXTERNAL, TlsPeer, offered_mechanisms
from .channel import Channel
from .dispatch import HANDLERS
from .errors import AMQPError, ChannelError, ConnectionFailure
from .message import PublishedMessage
from .ports import Transport

if TYPE_CHECKING:
    from .broker import Broker
    from .queue import Queue
    from .queue_base import QueueBase
    from .vhost import VirtualHost

log = logging.getLogger("warren.connection")

_LOGIN_REFUSED = ("Login was refused using authentication mechanism {}. For details see "
                  "the broker logfile.")


class Connection:
    """The AMQP state of one client connection."""

    def __init__(self, broker: "Broker", transport: Transport, peer: str = "",
                 address: str = "", tls: TlsPeer | None = None):
        self.broker = broker
        self.transport = transport
        self.peer = peer         # for logs: "host:port"
        self.address = address   # the client's IP address, without the port
        self.tls = tls           # None: plain TCP
        self.mechanisms = offered_mechanisms(broker.auth_mechanisms, tls)
        self.state = "awaiting-start-ok"
        self.login_refused = False   # the server slows down the refusal it sends
        self.closed_by_client = False   # Close-Ok sent for the client's Connection.Close
        self.user = ""
        self.user_tags: tuple[str, ...] = ()   # as at login, as RabbitMQ keeps them
        self.vhost: VirtualHost | None = None
        self.client_properties: dict = {}
        self.capabilities: dict = {}
        self.channel_max = broker.config.channel_max
        # Until Connection.TuneOk, frames of up to frame-min-size (4096 octets) only, as
        # AMQP 0-9-1 says and RabbitMQ enforces (a larger Start-Ok is a frame error).
        self.framer = Framer(broker.config.frame_max, broker.config.max_message_size,
                             PublishedMessage, handshake_frame_max=FRAME_MIN_SIZE)
        self.heartbeat = 0
        self.channels: dict[int, Channel] = {}
        self.closing_channels: set[int] = set()
        self.exclusive_queues: dict[str, QueueBase] = {}
        self.needs_sync = False   # replies of this batch wait for a durable commit
        self.has_published = False   # publishing connections are blocked by alarms
        # Queues this connection fed that have a long backlog and consumers waiting for
        # their sockets: the server stops reading from it until they catch up.
        self._throttled_by: set[Queue] = set()
        self._blocked_notified = False
        self._confirming: dict[Channel, None] = {}
        # Output held for durability, one segment per batch: [target writes (None while
        # the batch runs), data, confirms, durable replies]; the last two say where in
        # `data` a refused commit changes the output (see `writes_failed`).
        self._held: deque[list] = deque()
        self._close_when_released = False
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
            self._held[-1][1].append(data)
        else:
            self.transport.write(data)

    def send_method(self, channel: int, method) -> None:
        """Send a method frame (any pamqp method without content)."""
        self.write(self.framer.encode_method(channel, method))

    def write_confirm(self, channel: int, delivery_tag: int, multiple: bool) -> None:
        """A Basic.Ack of publishes; held output remembers where it is, so that a failed
        commit can turn it into a Basic.Nack."""
        data = self.framer.encode_basic_ack(channel, delivery_tag, multiple)
        held = self._held
        if held and self._capture is None:
            segment = held[-1]
            segment[2].append((len(segment[1]), channel, delivery_tag, multiple))
            segment[1].append(data)
        else:
            self.write(data)

    def supports(self, capability: str) -> bool:
        return bool(self.capabilities.get(capability))

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        """The protocol header arrived: offer Connection.Start."""
        self.write(self.framer.encode_connection_start(self.broker.server_properties(),
                                                       " ".join(self.mechanisms),
                                                       "en_US"))

    def handle(self, item) -> None:
        """Process one decoded inbound item (publish, method or heartbeat)."""
        self.handle_all((item,))

    def handle_all(self, items) -> None:
        """Process the decoded inbound items of one read in order, each as `handle`
        would (the hot path, a publish, inline: one Python call per read, not per
        message). Items after one that waits for a disk read are held back with it."""
        items = iter(items)
        for item in items:
            if self.state == "closed":
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
                        self._publish_without_channel(channel_number)
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
                self._close_channel(channel_number, error)
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
        items = self._take_deferred()
        if items is None or self.state == "closed":
            return
        try:
            self.handle_all(items)    # the next Get that waits holds back the rest again
            self.end_of_batch()
        except Exception as error:   # this connection's failure, not the reading queue's
            self.fail(error)
        if not self.input_deferred:
            self.transport.input_resumed()

    def _take_deferred(self) -> list | None:
        items, self._deferred = self._deferred, None
        return items

    @property
    def input_deferred(self) -> bool:
        """Whether inbound items are held back for a Basic.Get's disk read (the server
        does not read from the socket meanwhile, so what is held stays one read's worth)."""
        return self._deferred is not None

    def fail(self, error: BaseException) -> None:
        """An unexpected exception while serving this connection: log it with its
        traceback and close this connection (541 INTERNAL_ERROR), and only this one.
        When even the close fails, the socket is dropped."""
        log.error("event=internal_error peer=%s user=%r vhost=%r error=%r", self.peer,
                  self.user, self.vhost.name if self.vhost else None, error,
                  exc_info=error)
        if self.state in ("closing", "closed"):
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
        self.state = "closed"
        self._held.clear()
        self._deferred = None
        self._close_when_released = False
        self.transport.close()

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
        self.transport.flush()
        if held:
            return True
        if self._close_when_released:
            self.transport.close()
        return False

    def writes_failed(self, writes: int, reason: str) -> bool:
        """A commit of the first `writes` writes failed: send the output held for them
        refused (confirms as Basic.Nack; a durable reply as a 406 Channel.Close, after
        which nothing more of its channel is sent). Returns whether output is still held
        for later writes."""
        held = self._held
        failed = []
        while held and held[0][0] is not None and held[0][0] <= writes:
            failed.append(held.popleft())
        for _target, data, confirms, _replies in failed:
            for index, channel, delivery_tag, multiple in confirms:
                if data[index]:
                    data[index] = self.framer.encode_basic_nack(channel, delivery_tag,
                                                                multiple)
        refused = self._refuse_replies(failed, reason)
        for segment in failed:
            for data in segment[1]:
                if data:
                    self.transport.write(data)
        self.transport.flush()
        for channel in refused:
            log.info("event=durable_reply_refused peer=%s channel=%d reason=%r",
                     self.peer, channel.number, reason)
            del self.channels[channel.number]
            self.closing_channels.add(channel.number)
            self._shut_down(channel)
        if held:
            return True
        if self._close_when_released:
            self.transport.close()
        return False

    def _refuse_replies(self, failed: list, reason: str) -> list[Channel]:
        """Put a Channel.Close where each durable reply of `failed` was, and blank what
        its channel would have been sent after it; returns the refused channels."""
        refused: list[Channel] = []
        channel: Channel
        for position, (_target, data, _confirms, replies) in enumerate(failed):
            for start, end, channel, ids in replies:
                data[start:end] = [b""] * (end - start)
                if channel in refused or self.channels.get(channel.number) is not channel:
                    continue        # closed meanwhile: nobody waits for the reply
                data[start] = self.framer.encode_method(
                    channel.number, commands.Channel.Close(
                        reply_code=ReplyCode.PRECONDITION_FAILED,
                        reply_text=_refusal_text(ids, reason)[:255], class_id=ids[0],
                        method_id=ids[1]))
                later = [segment[1] for segment in failed[position + 1:]]
                _drop_channel_output(channel.number, data, end,
                                     later + [segment[1] for segment in self._held])
                refused.append(channel)
        return refused

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
        """The held segment of the batch being handled (started on first use)."""
        held = self._held
        if not held or held[-1][0] is not None:
            held.append([None, [], [], []])
        return held[-1]

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
            self.send_method(0, commands.Connection.Blocked(reason=reason))
            self._blocked_notified = True
        elif not raised and self._blocked_notified:
            self.send_method(0, commands.Connection.Unblocked())
            self._blocked_notified = False

    def throttle(self, queue: "Queue") -> None:
        """Publisher flow control: `queue` cannot keep up with this publisher."""
        self._throttled_by.add(queue)

    @property
    def throttled(self) -> bool:
        """Whether to stop reading from this connection for now: a queue it fed still
        has more than half the flow-control backlog and consumers to work it off."""
        queues = self._throttled_by
        if queues:
            for queue in list(queues):
                if queue.deleted or not queue.consumers or queue.backlog <= FLOW_RESUME:
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
        # Refused logins are counted and summed up by the server, not logged one by one.
        log.log(logging.DEBUG if self.login_refused else logging.INFO,
                "event=connection_closed_by_broker peer=%s code=%s text=%r", self.peer,
                reply_code, reply_text)
        self._release_resources()
        self.state = "closing"
        self.send_method(0, commands.Connection.Close(
            reply_code=reply_code, reply_text=fit_reply_text(reply_text), class_id=class_id,
            method_id=method_id))

    def lost(self) -> None:
        """The socket is gone: requeue unacked messages, drop exclusive queues."""
        if self.state != "closed":
            self._release_resources()
        self.state = "closed"
        self._held.clear()
        self._deferred = None

    def _release_resources(self) -> None:
        for channel in self.channels.values():
            self._shut_down(channel)
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
        capabilities = self.client_properties.get("capabilities")
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}
        if method.mechanism not in self.mechanisms:
            self._refuse_mechanism(f"authentication mechanism '{method.mechanism}' "
                                   "not offered")
            return
        if method.mechanism == EXTERNAL:
            self._external_login()
            return
        try:
            user, password = parse_credentials(method.mechanism, method.response)
        except UndecodableCredentials:
            self._refuse_login(_LOGIN_REFUSED.format(method.mechanism))
            log.info("event=login_refused peer=%s reason=credentials_not_utf8", self.peer)
            return
        except AuthenticationFailure as failure:
            self._refuse_mechanism(str(failure))
            return
        account = self.broker.access.authenticate(user, password)
        if account is None:
            self._refuse_login(_LOGIN_REFUSED.format(method.mechanism))
            log.debug("event=login_refused peer=%s user=%r", self.peer, user)
            return
        self._logged_in(account, method.mechanism)

    def _external_login(self) -> None:
        """EXTERNAL: the user the client's TLS certificate names, if it exists; the
        response is not read (RabbitMQ ignores it too)."""
        assert self.tls is not None   # EXTERNAL is offered only over TLS
        user = self.tls.user
        account = None if user is None else self.broker.access.users.get(user)
        if account is None:
            self._refuse_login(_LOGIN_REFUSED.format(EXTERNAL))
            log.debug("event=login_refused peer=%s mechanism=EXTERNAL user=%r reason=%r",
                      self.peer, user, self.tls.missing or "no such user")
            return
        self._logged_in(account, EXTERNAL)

    def _refuse_mechanism(self, reason: str) -> None:
        """A mechanism not offered, or a malformed response: RabbitMQ closes the socket
        without a frame."""
        log.debug("event=login_refused peer=%s reason=%r", self.peer, reason)
        self.login_refused = True
        self.state = "closed"
        self._close_transport()

    def _logged_in(self, account: User, mechanism: str) -> None:
        """`account` proved who it is; a user in loopback_users still needs a loopback
        address, whatever the mechanism (as RabbitMQ checks it after authentication)."""
        user = account.name
        if user in self.broker.loopback_users and not is_loopback(self.address):
            self._refuse_login(_LOGIN_REFUSED.format(mechanism))
            log.warning("event=login_refused peer=%s user=%r reason=not_loopback hint=%r",
                        self.peer, user, f"'{user}' is in loopback_users: it may log in "
                        "only from a loopback address; connect from this machine, use "
                        "another user, or change loopback_users")
            return
        self.user = user
        self.user_tags = account.tags
        self.state = "awaiting-tune-ok"
        config = self.broker.config
        self.send_method(0, commands.Connection.Tune(
            channel_max=config.channel_max, frame_max=config.frame_max,
            heartbeat=config.heartbeat))

    def _refuse_login(self, text: str) -> None:
        self.login_refused = True
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
                *CONNECTION_TUNE_OK)
        channel_max = method.channel_max
        if not 0 < channel_max <= config.channel_max:
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED,
                f"channel_max={channel_max} > {config.channel_max} max channels",
                *CONNECTION_TUNE_OK)
        self.framer.tune(frame_max)
        self.channel_max = channel_max
        self.heartbeat = method.heartbeat
        self.state = "awaiting-open"
        self.transport.tuned(method.heartbeat)

    def _open(self, method) -> None:
        """RabbitMQ's order: the vhost exists, its connection limit, the user's
        connection limit, then the user's access to the vhost."""
        name = method.virtual_host
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            raise ConnectionFailure(ReplyCode.NOT_ALLOWED, f"vhost {name} not found",
                                    *CONNECTION_OPEN)
        self.broker.limits.check_connection(self.user, name)
        if not self.broker.access.may_open(self.user, name):
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED,
                f"access to vhost '{name}' refused for user '{self.user}'",
                *CONNECTION_OPEN)
        limit = self.broker.config.connection_max
        if limit and len(self.broker.connections) >= limit:
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED,
                f"connection refused: node connection limit ({limit}) is reached",
                *CONNECTION_OPEN)
        self.vhost = vhost
        self.state = "open"
        self.broker.connection_opened(self)
        self.send_method(0, commands.Connection.OpenOk())

    def _client_close(self, method) -> None:
        self.end_of_batch()    # confirms of this read go before the CloseOk
        self._release_resources()
        self.send_method(0, commands.Connection.CloseOk())
        self.state = "closed"
        self.closed_by_client = True
        self._close_transport()

    def _close_ok(self, method) -> None:
        self.state = "closed"
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
            self._check_channel_count()
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
            self._shut_down(channel)
            del self.channels[number]
            channel.send(commands.Channel.CloseOk())
        elif isinstance(method, commands.Channel.Open):
            raise ConnectionFailure(ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen",
                                    *CHANNEL_OPEN)
        else:
            raise ConnectionFailure(ReplyCode.COMMAND_INVALID, "unimplemented method",
                                    *_ids(method))

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
                _target, data, _confirms, replies = self._open_segment()
                replies.append((len(data), len(data) + len(captured), channel,
                                _ids(method)))
                data.extend(captured)
            else:
                for data in captured:
                    self.write(data)

    def _check_channel_count(self) -> None:
        """A frame on a channel that is not open would open one more: as RabbitMQ 3.10,
        refuse it once channel_max channels are open or closing, whatever the numbers."""
        count = len(self.channels) + len(self.closing_channels)
        if count >= self.channel_max:
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED, f"number of channels opened ({count}) has reached "
                f"the negotiated channel_max ({self.channel_max})")

    def _open_channel(self, number: int, method) -> None:
        if not isinstance(method, commands.Channel.Open):
            raise ConnectionFailure(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'",
                                    *_ids(method))
        limits = self.broker.limits
        limits.check_channel(self.user)
        channel = Channel(self, number)
        self.channels[number] = channel
        limits.channel_opened(self.user)
        channel.send(commands.Channel.OpenOk())

    def _shut_down(self, channel: Channel) -> None:
        """A channel is gone from `channels`: it no longer counts against the user's
        channel limit, and it gives back what it held."""
        self.broker.limits.channel_closed(self.user)
        channel.shutdown()

    def _closing_channel_method(self, number: int, method) -> None:
        """After our Channel.Close only Close/CloseOk matter (AMQP 0-9-1 §2.3.5.2)."""
        if isinstance(method, commands.Channel.CloseOk):
            self.closing_channels.discard(number)
        elif isinstance(method, commands.Channel.Close):
            # crossing closes: answered, and, as RabbitMQ, the channel stays closing until
            # the client's Close-Ok for our Close arrives
            self.send_method(number, commands.Channel.CloseOk())

    def _publish_without_channel(self, number: int) -> None:
        """A publish on a channel that is not open: ignored while the channel closes,
        else a connection error (channel_max exceeded, or 504)."""
        if number in self.closing_channels:
            return
        self._check_channel_count()
        raise ConnectionFailure(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'",
                                *BASIC_PUBLISH)

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
            self._close_channel(number, error)

    def _close_channel(self, number: int, error: ChannelError) -> None:
        channel = self.channels.pop(number, None)
        if channel is not None:
            self._shut_down(channel)
        self.closing_channels.add(number)
        self.send_method(number, commands.Channel.Close(
            reply_code=error.reply_code, reply_text=fit_reply_text(error.reply_text),
            class_id=error.class_id, method_id=error.method_id))


def _refusal_text(ids: tuple[int, int], reason: str) -> str:
    if ids == TX_COMMIT:
        return (f"PRECONDITION_FAILED - partial tx completion: writing to disk failed "
                f"({reason}); repeat the transaction once disk space is freed")
    return (f"PRECONDITION_FAILED - writing to disk failed ({reason}); the change may "
            "not survive a restart: free disk space, then repeat it")


def _drop_channel_output(number: int, data: list, start: int, later: list) -> None:
    """Blank every write for channel `number` in data[start:] and in the later segments:
    its Channel.Close has been sent."""
    for items in [data] + later:
        for index in range(start if items is data else 0, len(items)):
            item = items[index]
            if item and _frame_channel(item) == number:
                items[index] = b""


def _frame_channel(data) -> int:
    """The channel of a write (bytes, or a tuple of parts): every write is whole frames
    of one channel."""
    first = data[0] if type(data) is tuple else data
    return (first[1] << 8) | first[2]


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
    ("open", commands.Connection.UpdateSecret): Connection._update_secret,
    ("closing", commands.Connection.CloseOk): Connection._close_ok,
    ("closing", commands.Connection.Close): Connection._close_ok,
}
