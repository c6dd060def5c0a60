"""Offsets of the ``amqp`` stream reader: what Spark writes to the checkpoint's offset log.

A plain AMQP queue has no positions a consumer could seek to: a message is removed when
it is acknowledged and a message that was delivered but not acknowledged goes back to
the queue when the consumer's connection closes. So a plain-queue offset does not
address messages; it names a micro-batch of one reader instance:

    {"version": 1, "kind": "queue", "queue": "events", "run": "<uuid4 hex>", "seq": 42}

``run`` identifies the reader instance (a new one every time a query starts), ``seq``
numbers its batches, continuing from the start offset Spark hands it so that sequence
numbers keep growing across restarts. Only the reader of the same ``run`` holds the
delivery tags of a batch, so only it can acknowledge the batch; an offset of another run
(read back from the checkpoint after a restart) refers to messages that the broker
already requeued when that run's connection closed.

``kind`` leaves room for stream queues (x-queue-type=stream), whose offsets will be real
positions in the stream (``{"kind": "stream", "queue": ..., "offset": n}``) and can be
replayed exactly; they are not implemented. Add a class with ``KIND = "stream"`` and
register it in ``_KINDS`` when they are.
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


_KINDS = {QueueOffset.KIND: QueueOffset}


def parse_offset(data, queue: str) -> QueueOffset:
    """The offset `data` (a dict from Spark) for a query reading `queue`.

    Raises OffsetError when the checkpoint was written by a different kind of source, a
    newer version of this one, or a query on another queue: reusing a checkpoint for a
    different queue would silently mix two sources' progress.
    """
    if not isinstance(data, dict):
        raise OffsetError(f"offset must be a JSON object, got {data!r}")
    version = data.get("version")
    if version != OFFSET_VERSION:
        raise OffsetError(
            f"offset version {version!r} in the checkpoint is not supported "
            f"(this connector writes version {OFFSET_VERSION}): {data!r}")
    kind = data.get("kind")
    offset_class = _KINDS.get(kind)
    if offset_class is None:
        raise OffsetError(
            f"offset kind {kind!r} in the checkpoint is not supported; this connector reads "
            f"plain queues (kind 'queue'): {data!r}")
    offset = offset_class.from_dict(data)
    if offset.queue != queue:
        raise OffsetError(
            f"the checkpoint belongs to a query on queue {offset.queue!r}, but this query "
            f"reads queue {queue!r}; use a new checkpointLocation for a different queue")
    return offset
