"""A classic queue's messages between memory and its store, off the hot path: the
messages recovered at start-up, the bodies of paged-out messages read back, and
letting go of every ready message (purge).

Functions of the queue: they work on its `ready` deque and its backlog (backlog.py)
and call the hooks a priority queue overrides (`_place_restored`, `_tail`).
"""

import logging
from typing import TYPE_CHECKING

from .backlog import ENTRY_COST, held_size
from .message import DeadLetteredMessage, Message, PagedOutPlaceholders, QueueEntry
from .queue_expiry import expiry_time
from .queue_limits import count_ready_bytes

if TYPE_CHECKING:
    from .queue import Queue

log = logging.getLogger("warren.queue")


def restore(queue: "Queue", recovered) -> None:
    """Load messages recovered from the queue file (in seq order). A record without a
    body (recovered with load_bodies=False) is read back before it is delivered. Their
    TTL, if any, counts again from now: publish times are not stored."""
    now = queue.vhost.scheduler.clock()
    placeholders = PagedOutPlaceholders()
    ttl = queue.message_ttl
    for record in recovered:
        if record.body is None:
            message: Message = placeholders.placeholder(
                record.exchange, record.routing_key, record.properties, record.body_size,
                record.dead_lettered)
        elif record.dead_lettered:   # its x-death is the broker's history (dead_letter.py)
            message = DeadLetteredMessage(record.exchange, record.routing_key,
                                          record.properties, record.body, ())
        else:
            message = Message(record.exchange, record.routing_key, record.properties,
                              record.body)
        entry = QueueEntry(message, record.seq, record.redelivered)
        message.persistent_cache = True
        queue.held_bytes += held_size(entry)
        if ttl is not None or message.has_expiration():
            entry.expires_at = expiry_time(ttl, message, now)
            queue._may_expire = True
        queue._place_restored(entry)
    # Seqs continue after the last one the store ever had, acked ones included (the
    # queue file refuses a seq it has seen).
    queue._next_seq = queue.store.last_seq
    count_ready_bytes(queue)
    queue._arm_expiry()


def bodies_read(queue: "Queue", entries: list[QueueEntry], bodies: list) -> None:
    """The store read paged-out bodies (on the event loop): waiting Basic.Get calls go
    first, dead-letters next, consumers last."""
    paged = queue._paged
    unreadable, loaded = paged.bodies_arrived(entries, bodies)
    queue.held_bytes += loaded
    if unreadable:
        _forget_unreadable(queue, unreadable)
    if paged.dead_letters:
        queue.dead_lettering.send_waiting()
    waiters, paged.waiters = paged.waiters, []
    for callback in waiters:
        callback()
    if not queue.deleted:
        queue.dispatch()


def _forget_unreadable(queue: "Queue", entries: list[QueueEntry]) -> None:
    """Bodies the store could not read (it logged why): the messages leave the queue
    but stay in its file, so a restart finds them again if they are sound."""
    for entry in entries:
        queue.ready.remove(entry)
        queue.held_bytes -= ENTRY_COST
    count_ready_bytes(queue)
    log.error("event=paged_messages_unreadable vhost=%r queue=%r count=%d hint=%r",
              queue.vhost.name, queue.name, len(entries),
              "they stay in the queue file; restart the broker to recover them")


def drop_messages(queue: "Queue") -> int:
    """The queue is deleted: let go of its messages; how many were ready. Dead-letters
    still waiting for their bodies are dropped with it."""
    queue._paged.dead_letters.clear()
    queue._paged.dead_letter_reads.clear()
    return queue.purge()


def purge(queue: "Queue") -> int:
    """Let go of every ready message (settled in the store); how many there were.
    Reads in flight are dropped when they come back."""
    count = queue.backlog
    store = queue.store
    for entries in (queue.ready, queue._tail()):
        for entry in entries:
            queue.held_bytes -= held_size(entry)
            store.settle(entry)
    paged = queue._paged
    queue.held_bytes += paged.saved_bytes
    queue.ready.clear()
    queue.ready_bytes = 0
    paged.clear()
    paged.reading.clear()
    return count
