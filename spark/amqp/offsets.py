"""Offsets of the ``amqp`` stream reader: what Spark writes to the checkpoint's offset log.

A plain AMQP queue has no positions a consumer could seek to: a message is removed when
it is acknowledged and a message that was delivered but not acknowledged goes back to
the queue when the consumer's connection closes. So a plain-queue offset does not
address messages; it names a micro-batch of one reader instance:

    {"version": 1, "kind": "queue", "queue": "events", "run": "<uuid4 hex>", "seq": 42}

``queue`` names the queue (several plain queues: their names joined by commas, ``"a,b,c"``).
``run`` identifies the reader instance (a new one every time a query starts), ``seq``
numbers its batches, continuing from the start offset Spark hands it so that sequence
numbers keep growing across restarts. Only the reader of the same ``run`` holds the
delivery tags of a batch, so only it can acknowledge the batch; an offset of another run
(read back from the checkpoint after a restart) refers to messages that the broker
already requeued when that run's connection closed.

Stream queues (x-queue-type=stream) have real positions: every message has an offset,
and a consumer can start at any of them. A stream offset is, per stream read by the
query, the offset of the next message to read (the end of the last batch, exclusive):

    {"version": 1, "kind": "stream", "offsets": {"s1": 120, "s2": 80}}

A batch from start to end reads, for every stream, the offsets [start, end), and can be
read again, with the same rows, after a failure. Streams are listed in name order
(Spark compares offsets by their JSON text). The initial offset of a query started with
startingOffset ``next`` or ``last`` also carries ``"start": "next"`` (or ``"last"``): it
differs from every later offset, so Spark runs a first (empty) batch at once and writes
the resolved offsets to the checkpoint; a restart then continues from them instead of
resolving ``next`` or ``last`` again.
"""

from dataclasses import dataclass

OFFSET_VERSION = 1


class OffsetError(ValueError):
    """An offset read back from a checkpoint does not fit this query."""


@dataclass(frozen=True)
class QueueOffset:
    """The end of micro-batch `seq` of reader run `run` on plain queue `queue`."""

    KIND = "queue"

    queue: str
    run: str
    seq: int

    def to_dict(self) -> dict:
        # Key order matters: Spark compares offsets by their JSON text.
        return {"version": OFFSET_VERSION, "kind": self.KIND, "queue": self.queue,
                "run": self.run, "seq": self.seq}

    @classmethod
    def from_dict(cls, data: dict) -> "QueueOffset":
        try:
            return cls(queue=str(data["queue"]), run=str(data["run"]), seq=int(data["seq"]))
        except (KeyError, TypeError, ValueError):
            raise OffsetError(f"malformed plain-queue offset in the checkpoint: {data!r}") \
                from None


@dataclass(frozen=True)
class StreamOffset:
    """Per stream, the offset of the next message to read. `start` is set on the initial
    offset of a query that resolved startingOffset ``next`` or ``last`` (see above)."""

    KIND = "stream"

    offsets: tuple  # ((stream, offset), ...) in stream name order
    start: str | None = None

    @classmethod
    def of(cls, offsets: dict, start: str | None = None) -> "StreamOffset":
        return cls(tuple(sorted((str(k), int(v)) for k, v in offsets.items())), start)

    def as_dict(self) -> dict:
        return dict(self.offsets)

    def to_dict(self) -> dict:
        data = {"version": OFFSET_VERSION, "kind": self.KIND,
                "offsets": {stream: offset for stream, offset in self.offsets}}
        if self.start is not None:
            data["start"] = self.start
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "StreamOffset":
        try:
            offsets = data["offsets"]
            if not isinstance(offsets, dict) or not offsets:
                raise TypeError
            if any(isinstance(v, bool) or not isinstance(v, int) or v < 0
                   for v in offsets.values()):
                raise ValueError
            start = data.get("start")
            return cls.of(offsets, None if start is None else str(start))
        except (KeyError, TypeError, ValueError):
            raise OffsetError(f"malformed stream offset in the checkpoint: {data!r}") from None


_KINDS = {QueueOffset.KIND: QueueOffset, StreamOffset.KIND: StreamOffset}
_KIND_HINTS = {
    QueueOffset.KIND: "a query reading a plain queue (without startingOffset)",
    StreamOffset.KIND: "a query reading stream queues (with startingOffset)",
}


def _parse(data, kind: str):
    if not isinstance(data, dict):
        raise OffsetError(f"offset must be a JSON object, got {data!r}")
    version = data.get("version")
    if version != OFFSET_VERSION:
        raise OffsetError(
            f"offset version {version!r} in the checkpoint is not supported "
            f"(this connector writes version {OFFSET_VERSION}): {data!r}")
    found = data.get("kind")
    offset_class = _KINDS.get(found)
    if offset_class is None:
        raise OffsetError(
            f"offset kind {found!r} in the checkpoint is not supported; this connector "
            f"writes kinds {', '.join(map(repr, _KINDS))}: {data!r}")
    if found != kind:
        raise OffsetError(
            f"the checkpoint was written by {_KIND_HINTS[found]}, but this query is "
            f"{_KIND_HINTS[kind]}; use a new checkpointLocation: {data!r}")
    return offset_class.from_dict(data)


def parse_stream_offset(data, streams) -> StreamOffset:
    """The stream offset `data` (a dict from Spark) for a query reading `streams`.

    The checkpoint must name exactly the streams of the query: a stream added later
    would have no position to start from that every replay agrees on, and a dropped one
    would silently lose its progress.
    """
    offset = _parse(data, StreamOffset.KIND)
    found = set(offset.as_dict())
    if found != set(streams):
        raise OffsetError(
            f"the checkpoint belongs to a query on the streams {sorted(found)}, but this "
            f"query reads {sorted(streams)}; use a new checkpointLocation for a different "
            f"set of streams")
    return offset


def parse_offset(data, queue: str) -> QueueOffset:
    """The plain-queue offset `data` (a dict from Spark) for a query reading `queue`.

    Raises OffsetError when the checkpoint was written by a different kind of source, a
    newer version of this one, or a query on another queue: reusing a checkpoint for a
    different queue would silently mix two sources' progress.
    """
    offset = _parse(data, QueueOffset.KIND)
    if offset.queue != queue:
        raise OffsetError(
            f"the checkpoint belongs to a query on queue {offset.queue!r}, but this query "
            f"reads queue {queue!r}; use a new checkpointLocation for a different queue")
    return offset
