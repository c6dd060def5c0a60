"""POST /api/exchanges/{vhost}/{name}/publish and POST /api/queues/{vhost}/{name}/get:
an AMQP publish and Basic.Gets done by the caller on an internal connection
(broker/core/direct_session.py), answered in RabbitMQ 3.10's shapes."""

import base64
import binascii
import datetime
import decimal
import re
from typing import Any

import trio
from pamqp import commands
from starlette.requests import Request
from starlette.responses import JSONResponse

from amqp_codec import encode_properties
from broker.core.direct_session import DirectRefusal, DirectSession, Reply

from .bodies import json_body
from .context import caller_of, context_of
from .encoded_paths import EncodedPathRoute
from .errors import ApiError, bad_request

OUTCOME_TIMEOUT = 60.0   # seconds a publish's confirm or a get's disk read may take

# JSON property name -> (pamqp attribute, accepted JSON types)
_PROPERTIES = {
    "content_type": ("content_type", str), "content_encoding": ("content_encoding", str),
    "headers": ("headers", dict), "delivery_mode": ("delivery_mode", int),
    "priority": ("priority", int), "correlation_id": ("correlation_id", str),
    "reply_to": ("reply_to", str), "expiration": ("expiration", str),
    "message_id": ("message_id", str), "timestamp": ("timestamp", int),
    "type": ("message_type", str), "user_id": ("user_id", str),
    "app_id": ("app_id", str), "cluster_id": ("cluster_id", str),
}
_DECIMAL = re.compile(r"[+-]?[0-9]+")   # what Erlang's binary_to_integer takes
# ackmode -> (acknowledge, requeue) of the messages got
_ACKMODES = {
    "ack_requeue_true": (False, True), "reject_requeue_true": (False, True),
    "ack_requeue_false": (True, False), "reject_requeue_false": (False, False),
}


async def publish(request: Request) -> JSONResponse:
    caller = caller_of(request)
    vhost, exchange = request.path_params["vhost"], request.path_params["name"]
    body = await _object_body(request, ("properties", "routing_key", "payload",
                                        "payload_encoding"))
    routing_key = _typed(body, "routing_key", str)
    properties = _properties(_typed(body, "properties", (dict, list)))
    payload = _payload(_typed(body, "payload", str), body["payload_encoding"])
    context = context_of(request)
    _check_vhost(context, vhost)
    waker = SessionWaiter()
    session = _open(context, caller, vhost, waker)
    try:
        session.publish("" if exchange == "amq.default" else exchange, routing_key,
                        properties, payload)
        routed = await waker.until(session.publish_outcome)
    except DirectRefusal as refusal:
        raise bad_request(f"{refusal.reply_code} {refusal.reply_text}") from None
    finally:
        session.close()
    await context.commit()
    return JSONResponse({"routed": routed})


async def get(request: Request) -> JSONResponse:
    caller = caller_of(request)
    vhost, queue = request.path_params["vhost"], request.path_params["name"]
    body = await _object_body(request, ("count", "ackmode", "encoding"))
    count = _integer(body["count"])
    ackmode = body["ackmode"]
    if ackmode not in _ACKMODES:
        raise bad_request(f"ackmode must be one of {', '.join(_ACKMODES)}")
    encoding = body["encoding"]
    if encoding not in ("auto", "base64"):
        raise bad_request("Unsupported encoding. Please use auto or base64.")
    truncate = None if body.get("truncate") is None else _integer(body["truncate"])
    if truncate is not None and truncate < 0:
        raise bad_request("truncate must be a number of bytes")
    context = context_of(request)
    _check_vhost(context, vhost)
    waker = SessionWaiter()
    session = _open(context, caller, vhost, waker)
    try:
        got = await _get_messages(session, waker, queue, count)
        acknowledge, requeue = _ACKMODES[ackmode]
        session.settle([reply.method.delivery_tag for reply in got], acknowledge, requeue)
    except DirectRefusal as refusal:
        raise _get_refusal(refusal) from None
    finally:
        session.close()
    await context.commit()
    return JSONResponse([_message(reply, encoding, truncate) for reply in got])


async def _get_messages(session: DirectSession, waker: "SessionWaiter", queue: str,
                        count: int) -> list[Reply]:
    got = []
    for _ in range(count):
        session.get(queue)
        reply = await waker.until(session.get_outcome)
        if reply is None:
            break
        got.append(reply)
    return got


def _get_refusal(refusal: DirectRefusal) -> ApiError:
    if refusal.reply_code == 404:
        return ApiError(404, "not_found", refusal.reply_text)
    if refusal.reply_code == 403:
        return ApiError(401, "not_authorised", refusal.reply_text)
    return bad_request(f"{refusal.reply_code} {refusal.reply_text}")


class SessionWaiter:
    """Wakes a handler when its session has output; `until` waits for an outcome."""

    def __init__(self):
        self._event = trio.Event()

    def __call__(self) -> None:
        self._event.set()

    async def until(self, outcome):
        with trio.move_on_after(OUTCOME_TIMEOUT):
            while True:
                self._event = trio.Event()
                result = outcome()
                if isinstance(result, tuple):   # (done, value): a get's outcome
                    done, value = result
                    if done:
                        return value
                elif result is not None:
                    return result
                await self._event.wait()
        raise ApiError(503, "timeout", f"the broker did not answer within "
                                       f"{OUTCOME_TIMEOUT:.0f} s; try again")


def _open(context, caller, vhost: str, waker: SessionWaiter) -> DirectSession:
    try:
        return DirectSession(context.broker, caller.user, vhost, waker)
    except DirectRefusal:
        raise ApiError(401, "not_authorised", "Access refused.") from None


def _check_vhost(context, vhost: str) -> None:
    if vhost not in context.broker.vhosts:
        raise ApiError(404, "not_found", "vhost_not_found")


# -- request and reply bodies -------------------------------------------------------

async def _object_body(request: Request, required: tuple[str, ...]) -> dict:
    body = await json_body(request)
    if not isinstance(body, dict):
        raise bad_request("not_json")
    missing = [name for name in required if name not in body]
    if missing:
        raise bad_request("[" + ",".join(f"{{key_missing,{name}}}" for name in missing)
                          + "]")
    return body


def _typed(body: dict, field: str, kinds):
    value = body[field]
    if not isinstance(value, kinds) or (kinds is int and isinstance(value, bool)):
        raise bad_request(f"'{field}' has the wrong type: {value!r}")
    return value


def _integer(value: Any) -> int:
    """A number, or its decimal digits as a string: RabbitMQ takes both for get's count
    and truncate (rabbitmqadmin sends strings), and names anything else not_integer."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return int(value)
    raise ApiError(400, "bad_request", ["not_integer", value])


def _properties(given: dict | list) -> bytes:
    """The raw content properties of the JSON `properties` ([] is none, as RabbitMQ
    writes an empty object)."""
    chosen: dict[str, Any] = {}
    fields: dict[str, Any] = given if isinstance(given, dict) else {}
    for name, value in fields.items():
        if name not in _PROPERTIES:
            raise bad_request(f"unknown message property '{name}'; known: "
                              f"{', '.join(_PROPERTIES)}")
        attribute, kind = _PROPERTIES[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise bad_request(f"message property '{name}' has the wrong type: {value!r}")
        if name == "timestamp":
            value = datetime.datetime.fromtimestamp(fields[name], datetime.timezone.utc)
        chosen[attribute] = value
    try:
        return encode_properties(commands.Basic.Properties(**chosen))
    except (TypeError, ValueError) as error:
        raise bad_request(f"the message properties cannot be encoded: {error}") from None


def _payload(payload: str, encoding) -> bytes:
    if encoding == "string":
        return payload.encode()
    if encoding == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise bad_request("payload is not valid base64") from None
    raise ApiError(400, "bad_request", ["unsupported_encoding", encoding])


def _message(reply: Reply, encoding: str, truncate: int | None) -> dict:
    method = reply.method
    payload = reply.body if truncate is None else reply.body[:truncate]
    text, payload_encoding = _encoded(payload, encoding)
    return {"payload_bytes": len(reply.body), "redelivered": method.redelivered,
            "exchange": method.exchange, "routing_key": method.routing_key,
            "message_count": method.message_count,
            "properties": _properties_json(reply.properties) or [],
            "payload": text, "payload_encoding": payload_encoding}


def _encoded(payload: bytes, encoding: str) -> tuple[str, str]:
    if encoding == "auto":
        try:
            return payload.decode(), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(payload).decode(), "base64"


def _properties_json(properties) -> dict:
    shown = {}
    for name, (attribute, _kind) in _PROPERTIES.items():
        value = getattr(properties, attribute, None) if properties is not None else None
        if value is not None and not (name == "cluster_id" and value == ""):
            shown[name] = _json_value(value)   # (pamqp decodes no cluster_id as "")
    return shown


def _json_value(value):
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, (bytes, bytearray)):
        return value.decode(errors="replace")
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dict):
        return {key: _json_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_value(item) for item in value]
    return value


ROUTES = [
    EncodedPathRoute("/api/exchanges/{vhost}/{name}/publish", publish, methods=["POST"]),
    EncodedPathRoute("/api/queues/{vhost}/{name}/get", get, methods=["POST"]),
]
