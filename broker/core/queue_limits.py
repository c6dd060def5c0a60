"""A classic queue's length limits: x-max-length and x-max-length-bytes under its
x-overflow mode (drop-head, reject-publish, reject-publish-dlx), as RabbitMQ applies
them.

Functions of the queue rather than an object of their own: the limits, the overflow
mode and the byte count (`ready_bytes`) stay attributes of the queue, which reads them
for every message it takes in or hands out.
"""

from typing import TYPE_CHECKING

from .message import body_size

if TYPE_CHECKING:
    from .queue import Queue


def would_overflow(queue: "Queue", size: int) -> bool:
    """Whether one more message of `size` bytes would take the queue over a length
    limit (x-overflow reject-publish and reject-publish-dlx refuse it)."""
    limit = queue.max_length
    byte_limit = queue.max_length_bytes
    return ((limit is not None and queue.backlog >= limit)
            or (byte_limit is not None and queue.ready_bytes + size > byte_limit))


def drop_overflow(queue: "Queue") -> None:
    """x-overflow drop-head: discard the oldest ready messages while the queue is over
    max-length or max-length-bytes (the reject-publish modes drop none)."""
    if queue.overflow != "drop-head":
        return
    ready = queue.ready
    paged = queue._paged
    limit = queue.max_length
    byte_limit = queue.max_length_bytes
    if limit is None:
        limit = queue.backlog
    dropped = []
    while (ready or paged.tail) and (
            len(ready) + paged.tail_count > limit
            or (byte_limit is not None and queue.ready_bytes > byte_limit)):
        if ready:
            entry = ready.popleft()
        else:
            entry, saved = paged.popleft()
            queue.held_bytes += saved      # charged ENTRY_COST again
        if byte_limit is not None:
            queue.ready_bytes -= body_size(entry.message)
        dropped.append(entry)
    queue.discard(dropped, "maxlen")


def count_ready_bytes(queue: "Queue") -> None:
    """Under a byte limit, count the bodies of the ready messages from scratch."""
    queue.ready_bytes = (0 if queue.max_length_bytes is None else
                         sum(body_size(entry.message) for entry in queue.ready)
                         + sum(body_size(entry.message) for entry in queue._tail()))
