"""The management API's topology writes: PUT/DELETE of exchanges and queues, purges,
and bindings (POST to create, DELETE by properties_key), acting as the caller with its
permissions (broker/core/admin.py's topology operations).

Refusals answer as RabbitMQ 3.10's management plugin: 401 "Access refused." without the
permission, 404 for a missing vhost or object, 400 with the channel's reason text for an
inequivalent or invalid declaration or a locked (exclusive) queue."""

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from broker.core.admin import AdminError
from broker.core.exchange import Exchange

from .binding_keys import properties_key
from .bodies import json_body
from .context import caller_of, context_of
from .encoded_paths import EncodedPathRoute
from .errors import ApiError, bad_request, forbidden, not_found


async def put_exchange(request: Request) -> Response:
    caller, vhost, name = _target(request, "name")
    body = await _object_body(request)
    exchange_type = _string(body, "type", "direct")
    if not exchange_type:
        raise bad_request("an exchange needs a type: direct, fanout, topic, headers...")
    context = context_of(request)
    existed = name in _vhost(request, vhost).exchanges
    _apply(lambda: context.admin.declare_exchange(
        vhost, name, exchange_type, _boolean(body, "durable", False),
        _boolean(body, "auto_delete", False), _boolean(body, "internal", False),
        _arguments(body), user=caller.name))
    await context.commit()
    return _no_content() if existed else Response(status_code=201)


async def delete_exchange(request: Request) -> Response:
    caller, vhost, name = _target(request, "name")
    context = context_of(request)
    _vhost(request, vhost, deleting=True)
    _apply(lambda: context.admin.delete_exchange(
        vhost, name, if_unused=_flag(request, "if-unused"), user=caller.name))
    await context.commit()
    return _no_content()


async def put_queue(request: Request) -> Response:
    caller, vhost, name = _target(request, "name")
    body = await _object_body(request)
    context = context_of(request)
    existed = name in _vhost(request, vhost).queues
    _apply(lambda: context.admin.declare_queue(
        vhost, name, _boolean(body, "durable", False), _boolean(body, "auto_delete", False),
        _arguments(body), user=caller.name))
    await context.commit()
    return _no_content() if existed else Response(status_code=201)


async def delete_queue(request: Request) -> Response:
    caller, vhost, name = _target(request, "name")
    context = context_of(request)
    _vhost(request, vhost, deleting=True)
    _apply(lambda: context.admin.delete_queue(
        vhost, name, if_unused=_flag(request, "if-unused"),
        if_empty=_flag(request, "if-empty"), user=caller.name))
    await context.commit()
    return _no_content()


async def purge_queue(request: Request) -> Response:
    caller, vhost, name = _target(request, "name")
    context = context_of(request)
    _vhost(request, vhost, deleting=True)
    _apply(lambda: context.admin.purge_queue(vhost, name, user=caller.name))
    await context.commit()
    return _no_content()


async def post_binding(request: Request) -> Response:
    caller, vhost, source = _target(request, "source")
    kind, destination = _destination(request)
    body = await _object_body(request)
    routing_key = _string(body, "routing_key", "")
    arguments = _arguments(body)
    context = context_of(request)
    _vhost(request, vhost)
    _apply(lambda: context.admin.bind(vhost, source, kind, destination, routing_key,
                                      arguments, user=caller.name), missing_reason=True)
    await context.commit()
    location = quote(destination, safe="") + "/" + quote(
        properties_key(routing_key, arguments), safe="")
    return Response(status_code=201, headers={"Location": location})


async def delete_binding(request: Request) -> Response:
    caller, vhost, source = _target(request, "source")
    kind, destination = _destination(request)
    context = context_of(request)
    exchanges = _vhost(request, vhost, deleting=True).exchanges
    wanted = request.path_params["props"]
    binding = _binding_named(exchanges.get(source), kind, destination, wanted)
    if binding is None:
        raise not_found()
    routing_key, arguments = binding
    _apply(lambda: context.admin.unbind(vhost, source, kind, destination, routing_key,
                                        arguments, user=caller.name))
    await context.commit()
    return _no_content()


def _binding_named(exchange, kind: str, destination: str, wanted: str):
    """(routing_key, arguments) of the binding from `exchange` to the destination whose
    properties_key is `wanted`, or None."""
    if exchange is None:
        return None
    for (end, routing_key, _frozen), arguments in exchange.bindings.items():
        end_kind = "exchange" if isinstance(end, Exchange) else "queue"
        if (end_kind == kind and end.name == destination
                and properties_key(routing_key, arguments) == wanted):
            return routing_key, arguments
    return None


# -- request parts -----------------------------------------------------------------

def _target(request: Request, field: str):
    return caller_of(request), request.path_params["vhost"], request.path_params[field]


def _destination(request: Request) -> tuple[str, str]:
    kind = {"q": "queue", "e": "exchange"}.get(request.path_params["kind"])
    if kind is None:
        raise not_found()
    return kind, request.path_params["destination"]


def _vhost(request: Request, name: str, deleting: bool = False):
    """The vhost `name`; when missing, 404 in RabbitMQ's two wordings (a DELETE says
    only "Not Found")."""
    vhost = context_of(request).broker.vhosts.get(name)
    if vhost is None:
        raise not_found() if deleting else ApiError(404, "not_found", "vhost_not_found")
    return vhost


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


async def _object_body(request: Request) -> dict:
    body = await json_body(request)
    if not isinstance(body, dict):
        raise bad_request("not_json")   # RabbitMQ's reason for a body that is no object
    return body


def _boolean(body: dict, field: str, default: bool) -> bool:
    value = body.get(field, default)
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):   # RabbitMQ accepts the strings as well
        return value == "true"
    raise ApiError(400, "bad_request", ["not_boolean", value])


def _string(body: dict, field: str, default: str) -> str:
    value = body.get(field, default)
    if not isinstance(value, str):
        raise bad_request(f"'{field}' must be a string, not {value!r}")
    return value


def _arguments(body: dict) -> dict:
    value = body.get("arguments", {})
    if value is None or value == []:
        return {}
    if not isinstance(value, dict):
        raise bad_request(f"'arguments' must be a JSON object, not {value!r}")
    return value


def _apply(operation, missing_reason: bool = False):
    """Run an Administration operation; its refusal becomes RabbitMQ's HTTP answer."""
    try:
        return operation()
    except AdminError as error:
        raise _http_refusal(error, missing_reason) from None


def _http_refusal(error: AdminError, missing_reason: bool) -> ApiError:
    code = error.reply_code
    if code == 403:
        return forbidden()
    if code == 404:
        # RabbitMQ names the missing object for bindings, and says only "Not Found"
        # for a missing exchange or queue being deleted or purged
        if missing_reason:
            return ApiError(404, "not_found", str(error))
        return not_found()
    return bad_request(str(error))


def _no_content() -> Response:
    return Response(status_code=204)


ROUTES = [
    EncodedPathRoute("/api/exchanges/{vhost}/{name}", put_exchange, methods=["PUT"]),
    EncodedPathRoute("/api/exchanges/{vhost}/{name}", delete_exchange, methods=["DELETE"]),
    EncodedPathRoute("/api/queues/{vhost}/{name}", put_queue, methods=["PUT"]),
    EncodedPathRoute("/api/queues/{vhost}/{name}", delete_queue, methods=["DELETE"]),
    EncodedPathRoute("/api/queues/{vhost}/{name}/contents", purge_queue, methods=["DELETE"]),
    EncodedPathRoute("/api/bindings/{vhost}/e/{source}/{kind}/{destination}", post_binding,
          methods=["POST"]),
    EncodedPathRoute("/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
          delete_binding, methods=["DELETE"]),
]
