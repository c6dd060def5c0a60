"""Dead-lettering: republishing rejected, expired or overflowing messages to the
queue's x-dead-letter-exchange with RabbitMQ's x-death bookkeeping."""

import datetime

from amqp_codec import encode_properties

from .message import Message


def dead_letter_message(message: Message, queue_name: str, reason: str, exchange: str,
                        routing_key: str | None, now: datetime.datetime) -> Message | None:
    """The message to republish, or None when it would cycle (expired back into a
    queue it already expired from with no rejection in between, as RabbitMQ drops)."""
    properties = message.decoded_properties
    headers = dict(properties.headers or {})
    deaths = [dict(death) for death in headers.get("x-death") or []]
    if reason == "expired" and _cycles(deaths, queue_name):
        return None
    death = _take_death(deaths, queue_name, reason)
    death.update({"queue": queue_name, "reason": reason, "time": now,
                  "exchange": message.exchange,
                  "routing-keys": [message.routing_key]})
    if properties.expiration is not None:
        death["original-expiration"] = properties.expiration
        properties.expiration = None
    deaths.insert(0, death)
    headers["x-death"] = deaths
    headers.setdefault("x-first-death-reason", reason)
    headers.setdefault("x-first-death-queue", queue_name)
    headers.setdefault("x-first-death-exchange", message.exchange)
    properties.headers = headers
    return Message(exchange, message.routing_key if routing_key is None else routing_key,
                   encode_properties(properties), message.body)


def _take_death(deaths: list, queue_name: str, reason: str) -> dict:
    for index, death in enumerate(deaths):
        if death.get("queue") == queue_name and death.get("reason") == reason:
            deaths.pop(index)
            death["count"] = int(death.get("count", 0)) + 1
            return death
    return {"count": 1}


def _cycles(deaths: list, queue_name: str) -> bool:
    seen_here = any(death.get("queue") == queue_name for death in deaths)
    rejected = any(death.get("reason") == "rejected" for death in deaths)
    return seen_here and not rejected
