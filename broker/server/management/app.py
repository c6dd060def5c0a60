"""The ASGI application: every route module's ROUTES, RabbitMQ's error bodies."""

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from . import (access, definitions, health, identity, messages, metrics, overview,
               policies, runtime, topology_read, topology_write, ui)
from .context import ManagementContext
from .errors import ApiError, api_error_response

# In this order: the first route whose path and method match answers (a fixed segment such
# as /api/users/without-permissions comes before the {name} it would otherwise match).
ROUTE_MODULES = (identity, overview, runtime, topology_read, topology_write, messages,
                 health, access, policies, definitions, metrics, ui)


def build_app(context: ManagementContext) -> Starlette:
    routes = [route for module in ROUTE_MODULES for route in module.ROUTES]
    app = Starlette(routes=routes, exception_handlers={
        ApiError: api_error_response, HTTPException: _http_error})
    app.state.context = context
    return app


async def _http_error(_request: Request, error: Exception) -> JSONResponse:
    """Starlette's own refusals (no such path, method not allowed) in RabbitMQ's shape."""
    assert isinstance(error, HTTPException)
    if error.status_code == 404:
        body = {"error": "Object Not Found", "reason": "Not Found"}
    else:
        body = {"error": "bad_request" if error.status_code < 500 else "internal_error",
                "reason": error.detail}
    return JSONResponse(body, status_code=error.status_code, headers=error.headers)
