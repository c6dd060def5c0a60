"""A connection's output held for durable commits.

Replies that promise durability (confirms, Tx.CommitOk, Declare-Ok of durable entities)
are held, with everything the connection writes after them, in one `HeldSegment` per
read; the segment is sealed at the end of the read with the number of durable writes
that must be on disk before it goes. `release_durable` sends the segments a finished
commit covers, in order. When the commit fails instead (a full disk), `release_failed`
sends them refused: each confirm becomes a Basic.Nack, and each durable reply becomes a
Channel.Close (406) of its channel, after which nothing more of that channel is sent.
"""

from collections import deque
from typing import TYPE_CHECKING

from pamqp import commands

from amqp_codec import Framer
from amqp_codec.reply_codes import ReplyCode
from amqp_codec.wire_ids import TX_COMMIT, MethodId

from .ports import Transport

if TYPE_CHECKING:
    from .channel import Channel


class HeldConfirm:
    """A Basic.Ack in a segment's data, and what its Basic.Nack would be."""

    __slots__ = ("index", "channel", "delivery_tag", "multiple")

    def __init__(self, index: int, channel: int, delivery_tag: int, multiple: bool):
        self.index = index            # where in the segment's data
        self.channel = channel
        self.delivery_tag = delivery_tag
        self.multiple = multiple


class HeldReply:
    """The writes of one handler whose reply promises durability (a declare, a bind, a
    delete, a Tx.Commit): data[start:end] of its segment."""

    __slots__ = ("start", "end", "channel", "method")

    def __init__(self, start: int, end: int, channel: "Channel", method: MethodId):
        self.start = start
        self.end = end
        self.channel = channel
        self.method = method          # the method it answers


class HeldSegment:
    """The output of one read, held until the commit covering its writes is done."""

    __slots__ = ("target", "data", "confirms", "replies")

    def __init__(self) -> None:
        # The durable writes that must be on disk first (None while the read runs).
        self.target: int | None = None
        self.data: list[bytes | tuple] = []     # every write, in order
        self.confirms: list[HeldConfirm] = []
        self.replies: list[HeldReply] = []


class HeldOutput:
    """The held segments of one connection, oldest first."""

    def __init__(self, transport: Transport, framer: Framer):
        self.transport = transport
        self.framer = framer
        self.segments: deque[HeldSegment] = deque()
        self.close_when_released = False   # the socket closes once nothing is held

    def open_segment(self) -> HeldSegment:
        """The segment of the read being handled (started on first use)."""
        segments = self.segments
        if not segments or segments[-1].target is not None:
            segments.append(HeldSegment())
        return segments[-1]

    def hold_confirm(self, data: bytes, channel: int, delivery_tag: int,
                     multiple: bool) -> None:
        """A Basic.Ack, encoded as `data`, behind what is held."""
        segment = self.segments[-1]
        segment.confirms.append(HeldConfirm(len(segment.data), channel, delivery_tag,
                                            multiple))
        segment.data.append(data)

    def hold_reply(self, writes: list[bytes | tuple], channel: "Channel",
                   method: MethodId) -> None:
        """The writes of a handler whose reply promises durability."""
        data = self.open_segment().data
        self.segments[-1].replies.append(HeldReply(len(data), len(data) + len(writes),
                                                   channel, method))
        data.extend(writes)

    def clear(self) -> None:
        self.segments.clear()
        self.close_when_released = False

    def release_durable(self, writes: int) -> bool:
        """The first `writes` durable writes are on disk: send the output held for
        them, in order. Returns whether output is still held for later writes."""
        # (`_covered`'s loop written out: this runs after every commit)
        segments = self.segments
        transport = self.transport
        while segments:
            target = segments[0].target
            if target is None or target > writes:
                break
            for write in segments.popleft().data:
                transport.write(write)
        transport.flush()
        return self.still_held()

    def release_failed(self, writes: int, reason: str,
                       channels: dict[int, "Channel"]) -> list["Channel"]:
        """A commit of the first `writes` writes failed: send the output held for them
        refused; returns the channels whose durable reply became a Channel.Close (of
        those still open in `channels`: they are closing now)."""
        failed = self._covered(writes)
        for segment in failed:
            data = segment.data
            for confirm in segment.confirms:
                if data[confirm.index]:
                    data[confirm.index] = self.framer.encode_basic_nack(
                        confirm.channel, confirm.delivery_tag, confirm.multiple)
        refused = self._refuse_replies(failed, reason, channels)
        for segment in failed:
            for write in segment.data:
                if write:
                    self.transport.write(write)
        self.transport.flush()
        return refused

    def still_held(self) -> bool:
        """After a release: whether output is still held; when none is and the
        connection asked for it, the socket closes now."""
        if self.segments:
            return True
        if self.close_when_released:
            self.transport.close()
        return False

    def _covered(self, writes: int) -> list[HeldSegment]:
        """Take the sealed segments the first `writes` writes cover."""
        segments = self.segments
        covered = []
        while segments:
            target = segments[0].target
            if target is None or target > writes:
                break
            covered.append(segments.popleft())
        return covered

    def _refuse_replies(self, failed: list[HeldSegment], reason: str,
                        channels: dict[int, "Channel"]) -> list["Channel"]:
        """Put a Channel.Close where each durable reply of `failed` was, and blank what
        its channel would have been sent after it; returns the refused channels."""
        refused: list[Channel] = []
        for position, segment in enumerate(failed):
            data = segment.data
            for reply in segment.replies:
                start, end, channel, method = (reply.start, reply.end, reply.channel,
                                               reply.method)
                data[start:end] = [b""] * (end - start)
                if channel in refused or channels.get(channel.number) is not channel:
                    continue        # closed meanwhile: nobody waits for the reply
                data[start] = self.framer.encode_method(
                    channel.number, commands.Channel.Close(
                        reply_code=ReplyCode.PRECONDITION_FAILED,
                        reply_text=_refusal_text(method, reason)[:255],
                        class_id=method.class_id, method_id=method.method_id))
                later = [later.data for later in failed[position + 1:]]
                _drop_channel_output(channel.number, data, end,
                                     later + [held.data for held in self.segments])
                refused.append(channel)
        return refused


def _refusal_text(method: MethodId, reason: str) -> str:
    if method == TX_COMMIT:
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
