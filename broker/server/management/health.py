"""RabbitMQ 3.10's health checks (/api/health/checks/...) and /api/aliveness-test.

A check answers 200 {"status": "ok", ...} or 503 {"status": "failed", "reason": ...}
in RabbitMQ's shapes. Warren is one node, so the cluster-wide and the local alarm checks
agree and no queue is ever quorum-critical."""

import socket

from pamqp import commands
from starlette.requests import Request
from starlette.responses import JSONResponse

from amqp_codec import encode_properties
from broker.core.admin import AdminError
from broker.core.direct_session import DirectRefusal, DirectSession

from .context import caller_of, context_of
from .encoded_paths import EncodedPathRoute
from .errors import ApiError, bad_request, not_found
from .messages import SessionWaiter

ALIVENESS_QUEUE = "aliveness-test"
_NO_PROPERTIES = encode_properties(commands.Basic.Properties())
# RabbitMQ's names of the protocols, with the aliases it accepts
_PROTOCOL_ALIASES = {"amqp091": "amqp", "amqp0-9-1": "amqp", "amqp0_9_1": "amqp",
                     "amqps": "amqp/ssl", "https": "http"}


async def alarms(request: Request) -> JSONResponse:
    return _alarm_check(request, "There are alarms in effect in the cluster")


async def local_alarms(request: Request) -> JSONResponse:
    return _alarm_check(request, "There are alarms in effect on the node")


def _alarm_check(request: Request, reason: str) -> JSONResponse:
    caller_of(request)
    raised = sorted(context_of(request).server.alarm.raised)
    if not raised:
        return _ok()
    node = node_name()
    return _failed(reason, alarms=[{"node": node, "resource": resource}
                                   for resource in raised])


async def port_listener(request: Request) -> JSONResponse:
    caller_of(request)
    text = request.path_params["port"]
    if not text.isdigit():
        raise bad_request("Invalid port")
    ports = sorted(_listeners(request).values())
    port = int(text)
    if port in ports:
        return _ok(port=port)
    return _failed("No active listener", missing=port, ports=ports)


async def protocol_listener(request: Request) -> JSONResponse:
    caller_of(request)
    asked = request.path_params["protocol"].lower()
    protocol = _PROTOCOL_ALIASES.get(asked, asked)
    listeners = _listeners(request)
    if protocol in listeners:
        return _ok(protocol=protocol)
    return _failed("No active listener", missing=asked, protocols=sorted(listeners))


async def virtual_hosts(request: Request) -> JSONResponse:
    """Every vhost is running (Warren's vhosts cannot be stopped on their own)."""
    caller_of(request)
    return _ok()


async def node_is_quorum_critical(request: Request) -> JSONResponse:
    caller_of(request)
    return _ok(reason="single node cluster")


async def aliveness_test(request: Request) -> JSONResponse:
    """Declare the aliveness-test queue, publish a message to it and get it back, as the
    caller (RabbitMQ's check that the vhost serves messages)."""
    caller = caller_of(request)
    vhost = request.path_params["vhost"]
    context = context_of(request)
    if vhost not in context.broker.vhosts:
        raise not_found()
    try:
        context.admin.declare_queue(vhost, ALIVENESS_QUEUE, durable=False,
                                    user=caller.name)
        await context.commit()
        ok = await _round_trip(context, caller, vhost)
    except AdminError as error:
        if error.reply_code == 403:
            raise ApiError(401, "not_authorised", f"ACCESS_REFUSED - {error}") from None
        return _failed(str(error))
    except DirectRefusal as refusal:
        if refusal.reply_code == 403:
            raise ApiError(401, "not_authorised", refusal.reply_text) from None
        return _failed(refusal.reply_text)
    return _ok() if ok else _failed("aliveness-test message was not received")


async def _round_trip(context, caller, vhost: str) -> bool:
    waker = SessionWaiter()
    session = DirectSession(context.broker, caller.user, vhost, waker)
    try:
        session.publish("", ALIVENESS_QUEUE, _NO_PROPERTIES, b"test_message")
        if not await waker.until(session.publish_outcome):
            return False
        session.get(ALIVENESS_QUEUE)
        reply = await waker.until(session.get_outcome)
        if reply is None:
            return False
        session.settle([reply.method.delivery_tag], acknowledge=True, requeue=False)
        return reply.body == b"test_message"
    finally:
        session.close()


def _listeners(request: Request) -> dict[str, int]:
    """RabbitMQ's protocol name of each listening socket, and its port."""
    server = context_of(request).server
    listening = {}
    if server.plain_listener:
        listening["amqp"] = server.port
    if server.tls is not None and server.tls.port is not None:
        listening["amqp/ssl"] = server.tls.port
    if server.management is not None:
        listening["http"] = server.management.port
    return listening


def node_name() -> str:
    """The node's name in RabbitMQ's form (name@host)."""
    return f"warren@{socket.gethostname().split('.')[0]}"


def _ok(**fields) -> JSONResponse:
    return JSONResponse({"status": "ok", **fields})


def _failed(reason: str, **fields) -> JSONResponse:
    return JSONResponse({"status": "failed", "reason": reason, **fields}, status_code=503)


ROUTES = [
    EncodedPathRoute("/api/health/checks/alarms", alarms),
    EncodedPathRoute("/api/health/checks/local-alarms", local_alarms),
    EncodedPathRoute("/api/health/checks/port-listener/{port}", port_listener),
    EncodedPathRoute("/api/health/checks/protocol-listener/{protocol}",
                     protocol_listener),
    EncodedPathRoute("/api/health/checks/virtual-hosts", virtual_hosts),
    EncodedPathRoute("/api/health/checks/node-is-quorum-critical",
                     node_is_quorum_critical),
    EncodedPathRoute("/api/aliveness-test/{vhost}", aliveness_test),
]
