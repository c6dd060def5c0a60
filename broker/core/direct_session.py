"""A connection of the broker to itself, as the management API's publish and get use
it (RabbitMQ's management plugin uses an internal "direct" connection the same way).

A DirectSession is a core Connection logged in as a user, without a socket: its
transport keeps what the connection writes, and the session decodes those frames. The
commands go through the connection's own handling, so a publish or Basic.Get over HTTP
meets everything an AMQP client's would: permissions, topic permissions, the user_id
check, alternate exchanges, CC/BCC, TTL, the delayed exchange, dead-lettering on
reject, bodies read back from disk, durable confirms.

The session never waits: the caller (broker/server) waits until `on_output` is called,
then asks again (`publish_outcome`, `get_outcome`)."""

import struct
from dataclasses import dataclass
from typing import Any, Callable

from pamqp import body as content_body
from pamqp import commands, frame, header

from amqp_codec import InboundMethod, InboundPublish

from .access_control import User
from .connection import Connection
from .handshake import ConnectionState

CHANNEL = 1
_FRAME_HEADER = struct.Struct(">BHI")
_CONTENT_METHODS = (commands.Basic.GetOk, commands.Basic.Return, commands.Basic.Deliver)


class DirectRefusal(Exception):
    """The broker closed the session's channel or connection: `reply_code` and
    `reply_text` as an AMQP client would have been told."""

    def __init__(self, reply_code: int, reply_text: str):
        super().__init__(f"{reply_code} {reply_text}")
        self.reply_code = reply_code
        self.reply_text = reply_text


@dataclass
class Reply:
    """One command the broker sent: a method, with its content when it has one."""

    method: Any   # a pamqp method
    properties: commands.Basic.Properties | None = None
    body: bytes = b""


class _KeptOutput:
    """The Transport of a DirectSession: keeps the bytes, tells the session's owner."""

    writable = True

    def __init__(self, on_output: Callable[[], None]):
        self.data = bytearray()
        self.closed = False
        self.on_output = on_output

    def write(self, data) -> None:
        for part in (data if isinstance(data, tuple) else (data,)):
            self.data += part
        self.on_output()

    def flush(self) -> None:
        pass        # kept output is the owner's as soon as it is written

    def close(self) -> None:
        self.closed = True
        self.on_output()

    def tuned(self, heartbeat: int) -> None:
        pass

    def login_refused(self) -> None:
        pass

    def opened(self) -> None:
        pass

    def close_sent(self) -> None:
        pass

    def closed_by_client(self) -> None:
        pass

    def input_resumed(self) -> None:
        self.on_output()


class DirectSession:
    """One channel on a socketless connection of `account` to `vhost`."""

    def __init__(self, broker, account: User, vhost: str, on_output: Callable[[], None]):
        self._output = _KeptOutput(on_output)
        connection = Connection(broker, self._output, peer="management",
                                address="127.0.0.1")
        connection.handshake.skip_to_open(account)   # the API authenticated the user
        self.connection = connection
        self._replies: list[Reply] = []
        self._content: Reply | None = None
        self._remaining = 0
        opening = commands.Connection.Open()
        opening.virtual_host = vhost   # after __init__: pamqp's validate() refuses
        self._send(0, opening)         # names RabbitMQ accepts
        self._expect(commands.Connection.OpenOk)
        self._send(CHANNEL, commands.Channel.Open())
        self._expect(commands.Channel.OpenOk)

    # -- publishing ------------------------------------------------------------------

    def publish(self, exchange: str, routing_key: str, properties: bytes,
                body: bytes) -> None:
        """Publish (mandatory, confirmed): `publish_outcome` tells how it went."""
        self._send(CHANNEL, commands.Confirm.Select())
        self._expect(commands.Confirm.SelectOk)
        self.connection.handle(InboundPublish(CHANNEL, exchange, routing_key, True, False,
                                              properties, body))
        self.connection.end_of_batch()

    def publish_outcome(self) -> bool | None:
        """None while the confirm waits (for a commit); then whether the message reached
        a queue. Raises DirectRefusal when the broker refused the publish."""
        returned = False
        for reply in self._take():
            if isinstance(reply.method, commands.Basic.Return):
                returned = True
            elif isinstance(reply.method, commands.Basic.Ack):
                return not returned
            elif isinstance(reply.method, commands.Basic.Nack):
                raise DirectRefusal(541, "INTERNAL_ERROR - the message could not be "
                                         "stored (see the broker log)")
        self._check_alive()
        return None

    # -- getting ---------------------------------------------------------------------

    def get(self, queue: str) -> None:
        """Basic.Get with acknowledgement: `get_outcome` gives the message."""
        method = commands.Basic.Get(queue="", no_ack=False)
        method.queue = queue   # (set after pamqp's validation, as for the vhost)
        self._send(CHANNEL, method)

    def get_outcome(self) -> tuple[bool, Reply | None]:
        """(False, None) while the Get waits for a disk read; then (True, the GetOk with
        its content, or None for an empty queue)."""
        if self.connection.input_deferred:
            return False, None
        for reply in self._take():
            if isinstance(reply.method, commands.Basic.GetOk):
                return True, reply
            if isinstance(reply.method, commands.Basic.GetEmpty):
                return True, None
        self._check_alive()
        return False, None

    def settle(self, delivery_tags: list[int], acknowledge: bool, requeue: bool) -> None:
        for tag in delivery_tags:
            if acknowledge:
                self._send(CHANNEL, commands.Basic.Ack(delivery_tag=tag))
            else:
                self._send(CHANNEL, commands.Basic.Reject(delivery_tag=tag,
                                                          requeue=requeue))
        self._take()

    def close(self) -> None:
        """Close the connection (what is still unacknowledged is requeued)."""
        if self.connection.state is ConnectionState.OPEN:
            self.connection.handle(InboundMethod(0, commands.Connection.Close(
                reply_code=200, reply_text="done")))
        self.connection.end_of_batch()

    # -- frames ----------------------------------------------------------------------

    def _check_alive(self) -> None:
        """A connection that failed (a bug, logged by the connection) answers no more."""
        if self._output.closed:
            raise DirectRefusal(541, "INTERNAL_ERROR - the internal connection failed; "
                                     "see the broker log")

    def _send(self, channel: int, method) -> None:
        self.connection.handle(InboundMethod(channel, method))

    def _expect(self, kind) -> None:
        replies = self._take()
        if not any(isinstance(reply.method, kind) for reply in replies):
            raise DirectRefusal(541, f"INTERNAL_ERROR - expected {kind.__name__}")

    def _take(self) -> list[Reply]:
        """The replies decoded so far; a Channel.Close or Connection.Close among them
        raises DirectRefusal."""
        self._decode()
        replies, self._replies = self._replies, []
        for reply in replies:
            if isinstance(reply.method, (commands.Channel.Close,
                                         commands.Connection.Close)):
                raise DirectRefusal(reply.method.reply_code or 0, reply.method.reply_text)
        return replies

    def _decode(self) -> None:
        data = self._output.data
        start = 0
        while len(data) - start >= 8:
            _kind, _channel, size = _FRAME_HEADER.unpack_from(data, start)
            end = start + 8 + size
            if len(data) < end:
                break
            _used, _channel, decoded = frame.unmarshal(bytes(data[start:end]))
            self._add(decoded)
            start = end
        del data[:start]

    def _add(self, decoded) -> None:
        if isinstance(decoded, header.ContentHeader):
            assert self._content is not None
            self._content.properties = decoded.properties
            self._remaining = decoded.body_size
            if not self._remaining:
                self._finish_content()
        elif isinstance(decoded, content_body.ContentBody):
            assert self._content is not None
            self._content.body += decoded.value
            self._remaining -= len(decoded.value)
            if self._remaining <= 0:
                self._finish_content()
        elif isinstance(decoded, _CONTENT_METHODS):
            self._content = Reply(decoded)
        elif isinstance(decoded, commands.Channel.Close):
            self._send(CHANNEL, commands.Channel.CloseOk())
            self._replies.append(Reply(decoded))
        else:
            self._replies.append(Reply(decoded))

    def _finish_content(self) -> None:
        assert self._content is not None
        self._replies.append(self._content)
        self._content = None
