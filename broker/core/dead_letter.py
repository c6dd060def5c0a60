"""Dead-lettering: republishing rejected, expired or overflowing messages to the
queue's x-dead-letter-exchange with RabbitMQ's x-death bookkeeping.

Only the x-death header, the x-first-death-* headers RabbitMQ sets on a message's
first death (none yet in its headers) and the expiration property change (and, with a
new routing key from x-dead-letter-routing-key, the CC header goes, as in RabbitMQ;
without one, the copy is routed with the message's CC and BCC keys again); every other
header and property is copied byte for byte, and so are the earlier x-death entries
(as RabbitMQ 3.10: an entry for the same queue and reason only gets its count, a long,
one up, and is moved first). An x-death header that is not an array starts a new
history, and elements of it that are not tables are left out (RabbitMQ 3.10 replaces
the former too, and fails to dead-letter the message for the latter); a death whose
count is not an integer counts from 1 again.
A message whose properties cannot be read or whose x-death cannot be written back is
not dead-lettered: it is dropped with a warning.
"""

import datetime
import logging
from collections import Counter

from amqp_codec import (EncodedValue, Long, MalformedProperties, array_elements,
                        encode_table, headers_entries, replace_properties,
                        with_table_entry)

from .message import Message, SenderRoutedMessage
from .sender_routing import CC, cc_routing_keys

log = logging.getLogger("warren.dead_letter")

_FIRST_DEATH = ("x-first-death-reason", "x-first-death-queue", "x-first-death-exchange")


def dead_letter_message(message: Message, queue_name: str, reason: str, exchange: str,
                        routing_key: str | None, now: datetime.datetime) -> Message | None:
    """The message to republish, or None when it would cycle (expired back into a
    queue it already expired from with no rejection in between, as RabbitMQ drops) or
    cannot be dead-lettered (see the module's docstring)."""
    try:
        properties = _dead_lettered_properties(message, queue_name, reason,
                                               routing_key is not None, now)
    except (MalformedProperties, TypeError, ValueError) as error:
        log.warning("event=dead_letter_dropped queue=%r reason=%s error=%r", queue_name,
                    reason, str(error))
        return None
    if properties is None:
        return None
    if routing_key is not None:
        return Message(exchange, routing_key, properties, message.body)
    extra_routing_keys = _extra_routing_keys(message)
    if extra_routing_keys:   # routed with its CC and BCC keys again
        return SenderRoutedMessage(exchange, message.routing_key, properties, message.body,
                                   extra_routing_keys)
    return Message(exchange, message.routing_key, properties, message.body)


def _extra_routing_keys(message: Message) -> tuple[str, ...]:
    """The CC and BCC keys the message was published with; of a message read back from
    a queue file (paged out, or recovered after a restart) only the CC keys, which its
    headers still hold (BCC was taken out before it was stored)."""
    if message.extra_routing_keys or not message.may_name_recipients():
        return message.extra_routing_keys
    return tuple(cc_routing_keys(headers_entries(message.properties)))


def _dead_lettered_properties(message: Message, queue_name: str, reason: str,
                              new_routing_key: bool,
                              now: datetime.datetime) -> bytes | None:
    entries = headers_entries(message.properties)
    history = next((raw for key, _value, raw in entries if key == "x-death"), None)
    deaths = _earlier_deaths(history)
    if reason == "expired" and _cycles([table for table, _ in deaths], queue_name):
        return None
    death: EncodedValue | dict | None = _take_death(deaths, queue_name, reason)
    if death is None:
        death = _new_death(message, queue_name, reason, now, entries)
    added: dict = {"x-death": [death, *(encoded for _table, encoded in deaths)]}
    if history is None:   # the first death sets (or overwrites) the x-first-death-*
        added.update(zip(_FIRST_DEATH, (reason, queue_name, message.exchange)))
    dropped = {*added, CC} if new_routing_key else set(added)
    kept = b"".join(raw for key, _value, raw in entries if key not in dropped)
    headers = kept + encode_table(added)[4:]
    return replace_properties(message.properties, headers=headers, expiration=None)


def _new_death(message: Message, queue_name: str, reason: str, now: datetime.datetime,
               entries: list) -> dict:
    death = {"count": Long(1), "queue": queue_name, "reason": reason, "time": now,
             "exchange": message.exchange,
             "routing-keys": [message.routing_key, *cc_routing_keys(entries)]}
    expiration = message.decoded_properties.expiration
    if expiration is not None:
        death["original-expiration"] = expiration
    return death


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


def _cycles(deaths: list, queue_name: str) -> bool:
    seen_here = any(death.get("queue") == queue_name for death in deaths)
    rejected = any(death.get("reason") == "rejected" for death in deaths)
    return seen_here and not rejected
