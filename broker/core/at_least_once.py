"""At-least-once dead-lettering (`x-dead-letter-strategy: at-least-once`), as RabbitMQ's
quorum queues do it since 3.10: a dead-lettered message leaves its queue only once
every queue it was routed to holds it durably.

RabbitMQ applies the strategy when the quorum queue also has a dead-letter exchange and
overflow reject-publish; otherwise it dead-letters at most once. The quorum queue
(quorum_queue.py) has an AtLeastOnce while the strategy applies: a policy that changes
the strategy, the overflow mode or the exchange switches it on or off. In Warren the
target queues get the message at once (one node), so "holds it durably" is the next
group commit: the source's queue-file record is settled when the commit that wrote the
targets' records has synced. A message that routes nowhere (the dead-letter exchange
is missing, or nothing is bound for its key) stays in the source's queue file and is
tried again every RETRY_SECONDS. Until settled, such a message is not ready in the
source queue (no consumer gets it); after a crash it is back in the source, and expires
or is rejected again: a target may then get it twice, never zero times.
"""

import datetime
import logging
from collections import deque
from typing import TYPE_CHECKING

from .message import QueueEntry
from .scheduler import Timer

if TYPE_CHECKING:
    from .queue import Queue

log = logging.getLogger("warren.dead_letter")

# How often a dead-lettered message that routed nowhere is tried again.
RETRY_SECONDS = 5.0


class AtLeastOnce:
    """The dead-lettered messages of one quorum queue still in its queue file: routed
    and waiting for the commit that makes them durable in their targets (`in_flight`),
    or routed nowhere and waiting for a retry (`unroutable`)."""

    def __init__(self, queue: "Queue"):
        self.queue = queue
        self.in_flight: deque[tuple[int, QueueEntry]] = deque()   # (writes mark, entry)
        self.unroutable: deque[tuple[QueueEntry, str, datetime.datetime]] = deque()
        self.retry: Timer | None = None

    @property
    def pending(self) -> int:
        """Dead-lettered messages not yet settled in the source."""
        return len(self.in_flight) + len(self.unroutable)

    def send(self, entry: QueueEntry, reason: str, now: datetime.datetime) -> None:
        """Dead-letter `entry` (its body in memory): settled in the source once its
        targets hold it durably, kept for a retry when it routes nowhere, settled at
        once when it is not to be dead-lettered at all (a cycle, unreadable headers)."""
        queue = self.queue
        exchange = queue.dead_lettering.target()
        routed = 0 if exchange is None else \
            queue._republish(exchange, entry.message, reason, now)
        if routed is None:            # nothing to send: it leaves as at-most-once
            queue.store.settle(entry)
        elif routed:
            persistence = queue.vhost.persistence
            self.in_flight.append((persistence.writes, entry))
            persistence.wait_durable(self)
        else:
            self.unroutable.append((entry, reason, now))
            self._retry_later()

    # -- the commit, as a waiter of Persistence.wait_durable --------------------------

    def writes_durable(self, durable: int) -> bool:
        """A commit made the first `durable` writes durable: settle what it covered.
        True while more wait."""
        queue = self.queue
        in_flight = self.in_flight
        while in_flight and in_flight[0][0] <= durable:
            _mark, entry = in_flight.popleft()
            if not queue.deleted:
                queue.store.settle(entry)
        return bool(in_flight)

    def writes_failed(self, writes: int, reason: str) -> bool:
        """The commit failed: the writes go into the next one; keep waiting."""
        return bool(self.in_flight)

    def fail(self, error: BaseException) -> None:
        log.error("event=dead_letter_settle_failed vhost=%r queue=%r",
                  self.queue.vhost.name, self.queue.name, exc_info=error)

    # -- messages that routed nowhere ---------------------------------------------------

    def _retry_later(self) -> None:
        if self.retry is None:
            scheduler = self.queue.vhost.scheduler
            self.retry = scheduler.call_at(scheduler.clock() + RETRY_SECONDS,
                                           self._retry_due)

    def _retry_due(self) -> None:
        self.retry = None
        if self.queue.deleted:
            self.unroutable.clear()
            return
        waiting, self.unroutable = self.unroutable, deque()
        for entry, reason, now in waiting:
            self.send(entry, reason, now)

    def retry_now(self) -> None:
        """Try the messages that routed nowhere again without waiting (the queue's
        policy changed: the dead-letter exchange or routing key may have)."""
        if self.unroutable:
            if self.retry is not None:
                self.retry.cancel()
            self._retry_due()

    def switched_off(self) -> None:
        """The queue dead-letters at most once from now on: as RabbitMQ, it deletes the
        messages it still holds for at-least-once dead-lettering (those routed stay
        where they went; those that routed nowhere are lost)."""
        queue = self.queue
        held = [entry for _mark, entry in self.in_flight]
        held.extend(entry for entry, _reason, _now in self.unroutable)
        for entry in held:
            queue.store.settle(entry)
        if held:
            log.info("event=dead_letter_strategy_switched vhost=%r queue=%r deleted=%d",
                     queue.vhost.name, queue.name, len(held))
        self.dropped()

    def dropped(self) -> None:
        """The queue is deleted: what it kept goes with it."""
        if self.retry is not None:
            self.retry.cancel()
            self.retry = None
        self.unroutable.clear()
        self.in_flight.clear()
