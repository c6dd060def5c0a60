"""Dead-lettering: republishing rejected, expired or overflowing messages to the
queue's x-dead-letter-exchange with RabbitMQ's x-death bookkeeping.

Only the x-death header, the x-first-death-* headers RabbitMQ sets on a message's
first death (none yet in its history), the x-last-death-* headers of RabbitMQ 4.x and
the expiration property change (and, with a
new routing key from x-dead-letter-routing-key, the CC header goes, as in RabbitMQ;
without one, the copy is routed with the message's CC and BCC keys again); every other
header and property is copied byte for byte, and so are the earlier x-death entries
(as RabbitMQ: an entry for the same queue and reason only gets its count, a long,
one up, and is moved first). An x-death header that is not an array starts a new
history, and elements of it that are not tables are left out (RabbitMQ 3.10 replaces
the former too, and fails to dead-letter the message for the latter); a death whose
count is not an integer counts from 1 again.
A message whose properties cannot be read or whose x-death cannot be written back is
not dead-lettered: it is dropped with a warning.
A dead-lettered message does not enter a queue already in its history when no death
since that queue's (that one included) is a rejection: such a cycle would run forever on
its own. As RabbitMQ 3.10 and 4.x, this is checked for each queue the message is routed
to (the others get it), and not when the death is a rejection.

The history is the message's x-death header under RabbitMQ 3.10, whoever wrote it. Since
4.0 RabbitMQ keeps it apart from the headers (a message annotation, rendered as x-death
on delivery) and reads no x-death a client published: a message a client re-publishes
with its x-death starts a fresh history (count 1, x-first-death-* of this death) when
it is dead-lettered, its old x-death replaced. Warren writes the history into the
headers under every line and tells its own from a client's by the message's class: a
message it dead-lettered is a DeadLetteredMessage (a mark kept in the queue file), one
a client published is not. The line record's `reads_client_x_death` and
`writes_last_death` say which rules apply.

`DeadLettering` is a classic queue's collaborator for the rest: which messages go, in
which order, once their bodies are in memory, and the republishing itself.
"""

import datetime
import logging
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from amqp_codec import (EncodedValue, Long, MalformedProperties, array_elements,
                        encode_table, headers_entries, replace_properties,
                        with_table_entry)

from .backlog import held_size
from .message import DeadLetteredMessage, Message, QueueEntry
from .rabbitmq_lines import RabbitMQLine
from .sender_routing import CC, cc_routing_keys

if TYPE_CHECKING:
    from .at_least_once import AtLeastOnce
    from .exchange import Exchange
    from .queue import Queue
    from .queue_base import QueueBase

log = logging.getLogger("warren.dead_letter")

_FIRST_DEATH = ("x-first-death-reason", "x-first-death-queue", "x-first-death-exchange")
_LAST_DEATH = ("x-last-death-reason", "x-last-death-queue", "x-last-death-exchange")


class DeadLettering:
    """Where a classic queue's messages go when they leave it without an ack (rejected,
    expired, over a length limit): its x-dead-letter-exchange, with its
    x-dead-letter-routing-key, in order. Those whose bodies are paged out wait, and so
    do those behind them, until the store read them back (`queue._paged` keeps the
    waiting ones, so that the reads' answer finds them)."""

    __slots__ = ("queue", "exchange", "routing_key", "keeper")

    def __init__(self, queue: "Queue", exchange: str | None, routing_key: str | None):
        self.queue = queue
        self.exchange = exchange          # the exchange's name, or None
        self.routing_key = routing_key
        # A quorum queue's dead-letter strategy at-least-once while it applies
        # (at_least_once.py): dead-lettered messages stay in its store until their
        # targets hold them.
        self.keeper: "AtLeastOnce | None" = None

    def target(self) -> "Exchange | None":
        name = self.exchange
        return None if name is None else self.queue.vhost.exchanges.get(name)

    def discard(self, entries: list[QueueEntry], reason: str) -> None:
        """`entries` leave the queue for good: settled at once without a dead-letter
        exchange, else dead-lettered in order (Queue.discard)."""
        queue = self.queue
        paged_out = [entry for entry in entries if entry.message.body is None]
        unread = [entry for entry in paged_out if not queue._leaves_ready(entry)]
        if (self.target() is None and self.keeper is None) or not entries:
            for entry in entries:
                queue.held_bytes -= held_size(entry)
                queue.store.settle(entry)
            return
        now = datetime.datetime.now(datetime.timezone.utc)
        paged = queue._paged
        paged.dead_letters.extend((entry, reason, now) for entry in entries)
        reads = paged.dead_letter_reads
        for entry in paged_out:
            reads[entry.seq] = entry    # a read in flight for delivery serves too
        if unread:
            queue.store.read_bodies(unread, queue._bodies_read)
        self.send_waiting()

    def send_waiting(self) -> None:
        """Dead-letter the waiting messages whose bodies are in memory, in order,
        up to the first one still being read. One that could not be read is dropped
        (it stays in the queue file; the store logged why)."""
        queue = self.queue
        paged = queue._paged
        waiting = paged.dead_letters
        reads = paged.dead_letter_reads
        exchange = None
        keeper = self.keeper
        while waiting:
            entry, reason, now = waiting[0]
            if entry.message.body is None and entry.seq in reads:
                return
            waiting.popleft()
            queue.held_bytes -= held_size(entry)
            if entry.message.body is None:
                log.error("event=dead_letter_unreadable vhost=%r queue=%r seq=%d",
                          queue.vhost.name, queue.name, entry.seq)
                continue
            if keeper is not None:
                keeper.send(entry, reason, now)
                continue
            queue.store.settle(entry)
            if exchange is None:
                exchange = self.target()
            if exchange is not None:
                queue._republish(exchange, entry.message, reason, now)

    def refused(self, message: Message) -> None:
        """x-overflow reject-publish-dlx: a copy of the refused message is dead-lettered
        (it never entered the queue)."""
        exchange = self.target()
        if exchange is not None:
            self.queue._republish(exchange, message, "maxlen",
                                  datetime.datetime.now(datetime.timezone.utc))

    def republish(self, exchange: "Exchange", message: Message, reason: str,
                  now: datetime.datetime) -> int | None:
        """Dead-letter one message: the number of queues it reached (none for those it
        would reach in a dead-letter cycle), or None when it is not to be dead-lettered
        (headers that cannot be rewritten). When that
        fails, the message is dropped, as if the queue had no dead-letter exchange, and
        the failure is logged: the queue and whoever triggered the dead-lettering carry
        on."""
        queue = self.queue
        vhost = queue.vhost
        try:
            dead = dead_letter_message(message, queue.name, reason, exchange.name,
                                       self.routing_key, now, vhost.profile.line)
            if dead is None:
                return None
            observer = vhost.observer
            if observer is not None:
                observer.dead_lettered(queue, reason, dead)
            destinations = vhost.route(exchange, dead)
            if reason != "rejected" and destinations:
                destinations = out_of_cycles(dead, destinations)
            for destination in destinations:
                destination.enqueue(dead)
            return len(destinations)
        except Exception as error:
            log.error("event=dead_letter_failed vhost=%r queue=%r reason=%s", vhost.name,
                      queue.name, reason, exc_info=error)
            return None


def dead_letter_message(message: Message, queue_name: str, reason: str, exchange: str,
                        routing_key: str | None, now: datetime.datetime,
                        line: RabbitMQLine) -> DeadLetteredMessage | None:
    """The message to republish under RabbitMQ `line`'s rules, or None when it cannot
    be dead-lettered (see the module's docstring)."""
    try:
        properties = _dead_lettered_properties(message, queue_name, reason,
                                               routing_key is not None, now, line)
    except (MalformedProperties, TypeError, ValueError) as error:
        log.warning("event=dead_letter_dropped queue=%r reason=%s error=%r", queue_name,
                    reason, str(error))
        return None
    if properties is None:
        return None
    if routing_key is not None:
        return DeadLetteredMessage(exchange, routing_key, properties, message.body, ())
    # without a new routing key, routed with its CC and BCC keys again
    return DeadLetteredMessage(exchange, message.routing_key, properties, message.body,
                               _extra_routing_keys(message))


def _extra_routing_keys(message: Message) -> tuple[str, ...]:
    """The CC and BCC keys the message was published with; of a message read back from
    a queue file (paged out, or recovered after a restart) only the CC keys, which its
    headers still hold (BCC was taken out before it was stored)."""
    if message.extra_routing_keys or not message.may_name_recipients():
        return message.extra_routing_keys
    return tuple(cc_routing_keys(headers_entries(message.properties)))


def _dead_lettered_properties(message: Message, queue_name: str, reason: str,
                              new_routing_key: bool, now: datetime.datetime,
                              line: RabbitMQLine) -> bytes | None:
    entries = headers_entries(message.properties)
    history = None
    if line.reads_client_x_death or message.dead_lettered():
        history = next((raw for key, _value, raw in entries if key == "x-death"), None)
    deaths = _earlier_deaths(history)
    death: EncodedValue | dict | None = _take_death(deaths, queue_name, reason)
    if death is None:
        death = _new_death(message, queue_name, reason, now, entries, line)
    added: dict = {"x-death": [death, *(encoded for _table, encoded in deaths)]}
    if history is None:   # the first death sets (or overwrites) the x-first-death-*
        added.update(zip(_FIRST_DEATH, (reason, queue_name, message.exchange)))
    if line.writes_last_death:
        added.update(zip(_LAST_DEATH, (reason, queue_name, message.exchange)))
    dropped = {*added, CC} if new_routing_key else set(added)
    kept = b"".join(raw for key, _value, raw in entries if key not in dropped)
    headers = kept + encode_table(added)[4:]
    return replace_properties(message.properties, headers=headers, expiration=None)


def _new_death(message: Message, queue_name: str, reason: str, now: datetime.datetime,
               entries: list, line: RabbitMQLine) -> dict:
    death = {"count": Long(1), "queue": queue_name, "reason": reason, "time": now,
             "exchange": message.exchange,
             "routing-keys": _death_routing_keys(message, entries, line)}
    expiration = message.decoded_properties.expiration
    if expiration is not None:
        death["original-expiration"] = expiration
    return death


def _death_routing_keys(message: Message, entries: list, line: RabbitMQLine) -> list[str]:
    """The routing keys the death records, by `line`'s rule (death_keys_less_bcc). The
    BCC keys are those the message was routed with after its CC keys; they are not
    known once it was paged out or recovered, nor after it was dead-lettered with a new
    routing key (its extra keys are gone then)."""
    cc = cc_routing_keys(entries)
    keys = [message.routing_key, *cc]
    if line.death_keys_less_bcc:
        bcc = message.extra_routing_keys[len(cc):]
        keys.extend(bcc)
        for key in bcc:
            keys.remove(key)      # its first occurrence, as Erlang's --
    return keys


def _earlier_deaths(history: bytes | None) -> list[tuple[dict, EncodedValue]]:
    """The tables of an x-death header entry that is an array, each with its encoding,
    grouped as RabbitMQ groups histories written by versions before 3.5: of several
    entries for one queue and reason only the first stays, and gets their number as its
    count when it has none. A single entry is taken as it is."""
    if history is None or history[1 + history[0]] != ord("A"):
        return []
    tables = [(table, encoded) for table, encoded in array_elements(history, 2 + history[0])
              if isinstance(table, dict)]
    if len(tables) < 2:
        return tables
    counts = Counter(_death_key(table) for table, _ in tables)
    grouped, seen = [], set()
    for table, encoded in tables:
        key = _death_key(table)
        if key in seen:
            continue
        seen.add(key)
        if "count" not in table:
            table = {**table, "count": counts[key]}
            encoded = with_table_entry(encoded, "count", Long(counts[key]))
        grouped.append((table, encoded))
    return grouped


def _death_key(table: dict) -> tuple[str, str]:
    return repr(table.get("queue")), repr(table.get("reason"))


def _take_death(deaths: list, queue_name: str, reason: str) -> EncodedValue | None:
    """The earlier death for this queue and reason, taken out of `deaths`, with its
    count one up as a long; as RabbitMQ 3.10, its other fields stay as they were."""
    for index, (death, encoded) in enumerate(deaths):
        if death.get("queue") == queue_name and death.get("reason") == reason:
            del deaths[index]
            count = death.get("count")
            valid = isinstance(count, int) and not isinstance(count, bool)
            return with_table_entry(encoded, "count", Long(count + 1 if valid else 1))
    return None


class Named(Protocol):
    """A dead-letter destination as the cycle check sees it (a Protocol: a queue, or a
    test's stand-in, which a class annotation would refuse when compiled)."""

    @property
    def name(self) -> str: ...


NamedDestination = TypeVar("NamedDestination", bound=Named)


def out_of_cycles(dead: Message,
                  destinations: Sequence[NamedDestination]) -> list[NamedDestination]:
    """The queues of `destinations` the dead-lettered message may enter: as RabbitMQ
    3.10 and 4.x, not one already in its history (the x-death just written) when no
    death from the newest to that queue's is a rejection: such a cycle runs on its own
    (expiries, length limits, delivery limits) and would never end. Checked for deaths
    other than rejections only, as RabbitMQ."""
    history = next((raw for key, _value, raw in headers_entries(dead.properties)
                    if key == "x-death"), None)
    deaths = [(table.get("queue"), table.get("reason"))
              for table, _encoded in _earlier_deaths(history)]
    return [destination for destination in destinations
            if not _closes_cycle(deaths, destination.name)]


def _closes_cycle(deaths: list[tuple], queue_name: str) -> bool:
    for index, (queue, _reason) in enumerate(deaths):
        if queue == queue_name:
            return all(reason != "rejected" for _queue, reason in deaths[:index + 1])
    return False
