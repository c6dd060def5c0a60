"""Dead-lettering: republishing rejected, expired or overflowing messages to the
queue's x-dead-letter-exchange with RabbitMQ's x-death bookkeeping.

Only the x-death header, the x-first-death-* headers RabbitMQ adds and the expiration
property change (and, with a new routing key from x-dead-letter-routing-key, the CC
header goes, as in RabbitMQ; without one, the copy is routed with the message's CC and
BCC keys again); every other header and property is copied byte for byte. An x-death
header that is not an array starts a new history, and elements of it that are not
tables are left out (RabbitMQ 3.10 replaces the former too, and fails to dead-letter
the message for the latter); a death whose count is not an integer counts from 1 again.
A message whose properties cannot be read or whose x-death cannot be written back is
not dead-lettered: it is dropped with a warning.
"""

import datetime
import logging

from amqp_codec import (MalformedProperties, encode_table, headers_entries,
                        replace_properties)

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
    except (MalformedProperties, TypeError, ValueError, OverflowError) as error:
        # OverflowError: an earlier x-death holds a double that pamqp can only write
        # back as a single-precision float (found by the in-process fuzzer, seed 2).
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
    previous = next((value for key, value, _raw in entries if key == "x-death"), None)
    deaths = ([dict(death) for death in previous if isinstance(death, dict)]
              if isinstance(previous, list) else [])
    if reason == "expired" and _cycles(deaths, queue_name):
        return None
    death = _take_death(deaths, queue_name, reason)
    death.update({"queue": queue_name, "reason": reason, "time": now,
                  "exchange": message.exchange,
                  "routing-keys": [message.routing_key, *cc_routing_keys(entries)]})
    expiration = message.decoded_properties.expiration
    if expiration is not None:
        death["original-expiration"] = expiration
    deaths.insert(0, death)
    added: dict = {"x-death": deaths}   # a field table: header name -> value
    present = {key for key, _value, _raw in entries}
    firsts = (reason, queue_name, message.exchange)
    added.update((key, value) for key, value in zip(_FIRST_DEATH, firsts)
                 if key not in present)
    dropped = ("x-death", CC) if new_routing_key else ("x-death",)
    kept = b"".join(raw for key, _value, raw in entries if key not in dropped)
    headers = kept + encode_table(added)[4:]
    return replace_properties(message.properties, headers=headers, expiration=None)


def _take_death(deaths: list, queue_name: str, reason: str) -> dict:
    for index, death in enumerate(deaths):
        if death.get("queue") == queue_name and death.get("reason") == reason:
            deaths.pop(index)
            count = death.get("count")
            valid = isinstance(count, int) and not isinstance(count, bool)
            death["count"] = count + 1 if valid else 1
            return death
    return {"count": 1}


def _cycles(deaths: list, queue_name: str) -> bool:
    seen_here = any(death.get("queue") == queue_name for death in deaths)
    rejected = any(death.get("reason") == "rejected" for death in deaths)
    return seen_here and not rejected
