"""Publisher confirms of one channel (Confirm.Select): which of its publishes are
confirmed, with one Basic.Ack per contiguous range and a Basic.Nack for each publish
that a queue refused. The channel counts the publishes and marks the refused ones
(Channel.publish); the connection asks for the confirms at the end of each batch and
holds them until what they confirm is durable (Connection.write_confirm)."""

from typing import TYPE_CHECKING

from .errors import precondition_failed

if TYPE_CHECKING:
    from .channel import Channel


class Confirms:
    """The confirm state of one channel; in use once its `confirming` is set.

    Publishes are numbered by the channel's `published` (every publish, the message
    counter too); confirm sequence numbers count from the Confirm.Select:
    published - base. `acked` and `nacked` hold `published` numbers."""

    __slots__ = ("channel", "base", "acked", "nacked")

    def __init__(self, channel: "Channel"):
        self.channel = channel
        self.base = 0
        self.acked = 0
        self.nacked: list[int] = []

    def select(self) -> None:
        """Confirm.Select: the channel's later publishes are confirmed."""
        channel = self.channel
        if channel.transaction is not None:
            raise precondition_failed("cannot switch from tx to confirm mode")
        if not channel.confirming:   # publishes before Confirm.Select are not confirmed
            self.base = self.acked = channel.published
        channel.confirming = True

    @property
    def unconfirmed(self) -> int:
        """Publishes of confirm mode not confirmed yet."""
        channel = self.channel
        return channel.published - self.acked if channel.confirming else 0

    def flush(self) -> None:
        """Confirm every publish routed since the last flush: one Basic.Ack per
        contiguous range (multiple=true), a Basic.Nack for each refused message."""
        channel = self.channel
        if channel.closing:
            return
        vhost = channel.vhost
        observer = vhost.observer
        if observer is not None:
            nacks = len(self.nacked)
            observer.confirming(channel, channel.published - self.acked - nacks, nacks)
        faults = vhost.faults
        if faults is not None and faults.confirm_delay:
            faults.hold_confirms(channel, channel.published, self.nacked)
            self.nacked = []
            return
        self.confirm_through(channel.published, self.nacked)
        self.nacked.clear()

    def confirm_through(self, published: int, nacked: list[int]) -> None:
        """Confirm the publishes up to `published`: those in `nacked` with Basic.Nack,
        the others with Basic.Ack (one per contiguous range)."""
        channel = self.channel
        connection = channel.connection
        for seq in nacked:
            self._ack_through(seq - 1)
            connection.write(connection.framer.encode_basic_nack(
                channel.number, seq - self.base, False))
            channel.counts.confirm += 1
            self.acked = seq
        self._ack_through(published)

    def _ack_through(self, seq: int) -> None:
        if seq > self.acked:
            channel = self.channel
            channel.connection.write_confirm(channel.number, seq - self.base,
                                             seq - self.acked > 1)
            channel.counts.confirm += seq - self.acked
            self.acked = seq
