"""The channels of one connection: which are open, which the broker closed and still
waits on for the client's Channel.Close-Ok, opening them (channel_max, the user's channel
limit) and closing them from either side.

The connection looks each frame's channel up in `open` itself (it keeps the same dict as
`Connection.channels`); this table is for the frames on a channel that is not open, and
for every change of the table.
"""

import logging
from typing import TYPE_CHECKING

from pamqp import commands

from amqp_codec import fit_reply_text
from amqp_codec.reply_codes import ReplyCode
from amqp_codec.wire_ids import BASIC_PUBLISH, MethodId

from .channel import Channel
from .errors import ChannelError, ConnectionFailure

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger("warren.connection")   # a channel's events are its connection's


class ChannelTable:
    """The open and the closing channels of one connection, by number. A number is in
    at most one of the two."""

    def __init__(self, connection: "Connection"):
        self.connection = connection
        self.open: dict[int, Channel] = {}
        # Closed by the broker: only Close/Close-Ok are heard on them until the client's
        # Close-Ok, and they still count against channel_max.
        self.closing: set[int] = set()

    def method_without_channel(self, number: int, method) -> None:
        """A method on a channel that is not open: after our Channel.Close only
        Close/CloseOk matter (AMQP 0-9-1 §2.3.5.2); else it must be Channel.Open."""
        if number in self.closing:
            if isinstance(method, commands.Channel.CloseOk):
                self.closing.discard(number)
            elif isinstance(method, commands.Channel.Close):
                # crossing closes: answered, and, as RabbitMQ, the channel stays closing
                # until the client's Close-Ok for our Close arrives
                self.connection.send_method(number, commands.Channel.CloseOk())
            return
        self._check_count()
        if not isinstance(method, commands.Channel.Open):
            raise ConnectionFailure(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'",
                                    *MethodId.from_frame_index(method.index))
        connection = self.connection
        limits = connection.broker.limits
        assert connection.vhost is not None, "channels open after Connection.Open"
        limits.check_channel(connection.user,
                             connection.vhost.profile.line.limits_in_parentheses)
        channel = Channel(connection, number)
        self.open[number] = channel
        limits.channel_opened(connection.user)
        channel.send(commands.Channel.OpenOk())

    def publish_without_channel(self, number: int) -> None:
        """A publish on a channel that is not open: ignored while the channel closes,
        else a connection error (channel_max exceeded, or 504)."""
        if number in self.closing:
            return
        self._check_count()
        raise ConnectionFailure(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'",
                                *BASIC_PUBLISH)

    def _check_count(self) -> None:
        """A frame on a channel that is not open would open one more: as RabbitMQ 3.10,
        refuse it once channel_max channels are open or closing, whatever the numbers."""
        count = len(self.open) + len(self.closing)
        channel_max = self.connection.channel_max
        if count >= channel_max:
            raise ConnectionFailure(
                ReplyCode.NOT_ALLOWED, f"number of channels opened ({count}) has reached "
                f"the negotiated channel_max ({channel_max})")

    def closed_by_client(self, channel: Channel) -> None:
        """The client's Channel.Close: answered with Close-Ok, the number is free."""
        self._shut_down(channel)
        del self.open[channel.number]
        channel.send(commands.Channel.CloseOk())

    def close(self, number: int, error: ChannelError) -> None:
        """Close a channel for `error`: Channel.Close, then wait for the client's
        Close-Ok."""
        channel = self.open.pop(number, None)
        if channel is not None:
            self._shut_down(channel)
        self.closing.add(number)
        self.connection.send_method(number, commands.Channel.Close(
            reply_code=error.reply_code, reply_text=fit_reply_text(error.reply_text),
            class_id=error.class_id, method_id=error.method_id))

    def refused(self, channel: Channel, reason: str) -> None:
        """The commit a durable reply of `channel` waited for failed, and the reply went
        out as a Channel.Close: the channel waits for the client's Close-Ok like one the
        broker closed."""
        log.info("event=durable_reply_refused peer=%s channel=%d reason=%r",
                 self.connection.peer, channel.number, reason)
        del self.open[channel.number]
        self.closing.add(channel.number)
        self._shut_down(channel)

    def close_all(self) -> None:
        """The connection ends: every open channel gives back what it held."""
        for channel in self.open.values():
            self._shut_down(channel)
        self.open.clear()

    def _shut_down(self, channel: Channel) -> None:
        """A channel is gone from `open`: it no longer counts against the user's channel
        limit, and it gives back what it held."""
        self.connection.broker.limits.channel_closed(self.connection.user)
        channel.shutdown()
