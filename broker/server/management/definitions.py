"""/api/definitions and /api/definitions/{vhost}: export (GET) and import (POST) of
RabbitMQ's definitions JSON (broker/core/definitions.py), for administrators."""

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from broker.core import definitions

from .auth import ADMINISTRATOR
from .bodies import json_body
from .context import caller_of, context_of
from .encoded_paths import EncodedPathRoute as Route
from .errors import bad_request, not_found


async def export_definitions(request: Request) -> JSONResponse:
    caller_of(request, ADMINISTRATOR)
    broker = context_of(request).broker
    vhost = _vhost(request)
    return JSONResponse(definitions.export(broker, vhost))


async def import_definitions(request: Request) -> Response:
    caller_of(request, ADMINISTRATOR)
    context = context_of(request)
    vhost = _vhost(request)
    body = await json_body(request)
    try:
        definitions.apply(context.admin, body, vhost)
    except definitions.DefinitionsError as error:
        await context.commit()   # whatever was applied before a refusal is kept
        raise bad_request(str(error)) from None
    await context.commit()
    return Response(status_code=204)


def _vhost(request: Request) -> str | None:
    name = request.path_params.get("vhost")
    if name is not None and name not in context_of(request).broker.vhosts:
        raise not_found()
    return name


ROUTES = [
    Route("/api/definitions", export_definitions, methods=["GET"]),
    Route("/api/definitions", import_definitions, methods=["POST"]),
    Route("/api/definitions/{vhost}", export_definitions, methods=["GET"]),
    Route("/api/definitions/{vhost}", import_definitions, methods=["POST"]),
]
