"""Inspection operations: a test vhost's queues, exchanges, bindings, ready messages,
and what its Recorder kept (dead-lettered and returned messages, confirms). They read
the core objects on the broker's loop, so what they answer is the state between two
steps of the broker; every list is bounded."""

import base64
import datetime
import decimal
from typing import TYPE_CHECKING, Any

from amqp_codec import MalformedProperties, decode_properties

from broker.core.message import Message
from broker.core.queue import Queue
from broker.core.queue_base import QueueBase
from broker.core.vhost import VirtualHost

from .recorder import Recorder
from .refusal import TestHookError

if TYPE_CHECKING:
    from .hooks import TestHooks

MAX_ITEMS = 1000   # the most queues, exchanges, bindings or messages one answer holds


class InspectionRefused(LookupError):
    """What was asked for does not exist; the text says what does."""


# -- lookups shared with the waits ------------------------------------------------------

def vhost_of(hooks: "TestHooks", vhost: str) -> VirtualHost:
    found = hooks.broker.vhosts.get(vhost)
    if found is None:
        raise TestHookError(f"no vhost {vhost!r} on this broker (removed already?)")
    return found


def recorder_of(vhost: VirtualHost) -> Recorder:
    """The vhost's Recorder (a new one for a vhost restored after a restart)."""
    if not isinstance(vhost.observer, Recorder):
        vhost.observer = Recorder()
    return vhost.observer


def unacked_counts(hooks: "TestHooks", vhost: VirtualHost) -> dict[str, int]:
    """Deliveries not yet settled, by queue name, over the vhost's channels."""
    counts: dict[str, int] = {}
    for connection in hooks.broker.connections:
        if connection.vhost is not vhost:
            continue
        for channel in connection.channels.values():
            for delivery in channel.unacked.values():
                name = delivery.queue.name
                counts[name] = counts.get(name, 0) + 1
    return counts


def queue_state(queue: QueueBase, unacked: int) -> dict:
    return {"name": queue.name, "ready": queue.message_count, "unacked": unacked,
            "consumers": queue.consumer_count,
            "consumer_tags": [consumer.tag for consumer in queue.consumers][:MAX_ITEMS],
            "durable": queue.durable, "auto_delete": queue.auto_delete,
            "exclusive": queue.exclusive_owner is not None,
            "arguments": json_value(queue.arguments)}


def find_queue(vhost: VirtualHost, name: str) -> QueueBase:
    queue = vhost.queues.get(name)
    if queue is None:
        names = sorted(vhost.queues)[:20]
        raise TestHookError(f"no queue {name!r} in vhost {vhost.name!r}; its queues: {names}")
    return queue


# -- operations ---------------------------------------------------------------------------

def queue(hooks: "TestHooks", vhost: str, name: str) -> dict:
    found = vhost_of(hooks, vhost)
    return queue_state(find_queue(found, name), unacked_counts(hooks, found).get(name, 0))


def queues(hooks: "TestHooks", vhost: str) -> list:
    found = vhost_of(hooks, vhost)
    unacked = unacked_counts(hooks, found)
    return [queue_state(queue, unacked.get(name, 0))
            for name, queue in sorted(found.queues.items())[:MAX_ITEMS]]


def exchanges(hooks: "TestHooks", vhost: str) -> list:
    found = vhost_of(hooks, vhost)
    return [{"name": exchange.name, "type": exchange.kind, "durable": exchange.durable,
             "auto_delete": exchange.auto_delete, "internal": exchange.internal,
             "arguments": json_value(exchange.arguments)}
            for _name, exchange in sorted(found.exchanges.items())[:MAX_ITEMS]]


def bindings(hooks: "TestHooks", vhost: str) -> list:
    """Bindings from every exchange but the default one (which binds every queue)."""
    found = vhost_of(hooks, vhost)
    answer = []
    for name, exchange in sorted(found.exchanges.items()):
        if not name:
            continue
        for (destination, routing_key, _), arguments in exchange.bindings.items():
            kind = "queue" if isinstance(destination, QueueBase) else "exchange"
            answer.append({"source": name, "destination": destination.name,
                           "destination_type": kind, "routing_key": routing_key,
                           "arguments": json_value(arguments)})
            if len(answer) == MAX_ITEMS:
                return answer
    return answer


def peek(hooks: "TestHooks", vhost: str, queue: str, count: int = 10) -> list:
    """The first `count` ready messages of a classic, priority or quorum queue, left
    where they are. The body of a message paged out to disk is null."""
    found = find_queue(vhost_of(hooks, vhost), queue)
    if not isinstance(found, Queue):
        raise TestHookError(f"peek reads classic, priority and quorum queues; {queue!r} is a "
                       "stream (read it with a consumer)")
    found.message_count   # drops expired messages at the head first
    answer: list[dict] = []
    for entry in found.ready_entries():
        if len(answer) >= min(count, MAX_ITEMS):
            break
        answer.append({**message_json(entry.message), "redelivered": entry.redelivered})
    return answer


def dead_lettered(hooks: "TestHooks", vhost: str, queue: str | None = None) -> dict:
    """Messages dead-lettered (from `queue`, or any queue), as republished, with the
    count of all of them (only the last KEPT are held)."""
    recorder = recorder_of(vhost_of(hooks, vhost))
    messages = [{**message_json(record.message), "queue": record.queue,
                 "reason": record.reason}
                for record in recorder.dead_letters if queue in (None, record.queue)]
    total = (sum(recorder.dead_letter_counts.values()) if queue is None
             else recorder.dead_letter_counts[queue])
    return {"count": total, "messages": messages}


def returned(hooks: "TestHooks", vhost: str) -> dict:
    recorder = recorder_of(vhost_of(hooks, vhost))
    return {"count": recorder.returned_count,
            "messages": [message_json(message) for message in recorder.returns]}


def confirms(hooks: "TestHooks", vhost: str) -> list:
    recorder = recorder_of(vhost_of(hooks, vhost))
    return [{"connection": connection, "channel": channel, "acks": acks, "nacks": nacks}
            for (connection, channel), (acks, nacks) in sorted(recorder.confirms.items())]


OPERATIONS = {"queue": queue, "queues": queues, "exchanges": exchanges,
              "bindings": bindings, "peek": peek, "dead_lettered": dead_lettered,
              "returned": returned, "confirms": confirms}


# -- messages as JSON -------------------------------------------------------------------

def message_json(message: Message) -> dict:
    """exchange, routing key, body (base64, or null when paged out) and properties (the
    set ones; headers among them) of a message."""
    try:
        decoded = decode_properties(message.properties)
        properties = {name: json_value(value) for name, value in dict(decoded).items()
                      if value not in (None, "")}
    except (MalformedProperties, ValueError) as error:
        properties = {"unreadable": str(error)}
    body = message.body
    return {"exchange": message.exchange, "routing_key": message.routing_key,
            "body": None if body is None else base64.b64encode(body).decode(),
            "properties": properties}


def json_value(value: Any) -> Any:
    """An AMQP field value as JSON: tables, arrays, numbers and text as they are;
    bytes as {"$bytes": base64}, timestamps as {"$timestamp": ISO 8601}, decimals as
    {"$decimal": text} (broker/testing/inspection.py reads them back)."""
    if isinstance(value, dict):
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, datetime.datetime):
        return {"$timestamp": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)

