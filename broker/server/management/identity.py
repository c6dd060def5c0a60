"""/api/whoami: the caller's name and tags."""

from starlette.requests import Request
from starlette.responses import JSONResponse

from .context import caller_of
from .encoded_paths import EncodedPathRoute as Route


async def whoami(request: Request) -> JSONResponse:
    caller = caller_of(request)
    return JSONResponse({"name": caller.name, "tags": list(caller.user.tags)})


ROUTES = [Route("/api/whoami", whoami)]
