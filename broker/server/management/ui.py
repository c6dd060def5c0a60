"""The web UI: a self-contained front end (HTML, CSS, JS in ui/) served at / as RabbitMQ
serves its UI. Every byte of data it shows comes from the JSON API, called by the
browser with the user's basic credentials; these routes only hand out the static files,
read once at import so that no request waits on the disk."""

from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

_DIRECTORY = Path(__file__).with_name("ui")
_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".js": "text/javascript; charset=utf-8"}
# The page loads nothing but its own files and talks to nothing but this API.
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'self'; img-src 'self' data:",
            "X-Frame-Options": "DENY"}


def _load(name: str) -> Response:
    path = _DIRECTORY / name
    return Response(path.read_bytes(), media_type=_TYPES[path.suffix], headers=_HEADERS)


_FILES = {name: _load(name) for name in ("index.html", "app.js", "style.css")}


async def index(_request: Request) -> Response:
    return _FILES["index.html"]


async def asset(request: Request) -> Response:
    response = _FILES.get(request.path_params["name"])
    if response is None or response is _FILES["index.html"]:
        raise HTTPException(404)
    return response


ROUTES = [Route("/", index), Route("/ui/{name}", asset)]
