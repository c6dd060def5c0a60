"""Errors of the management API, in RabbitMQ's body shape:
`{"error": "...", "reason": "..."}` with the status code RabbitMQ uses."""

from starlette.requests import Request
from starlette.responses import JSONResponse, Response


class ApiError(Exception):
    """A request the API refuses; `error` and `reason` are RabbitMQ's two fields."""

    def __init__(self, status: int, error: str, reason: str | list,
                 headers: dict[str, str] | None = None):
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason
        self.headers = headers


def bad_request(reason: str | list) -> ApiError:
    return ApiError(400, "bad_request", reason)


def not_found(reason: str = "Not Found") -> ApiError:
    return ApiError(404, "Object Not Found", reason)


def not_authorised(reason: str) -> ApiError:
    return ApiError(401, "not_authorised", reason)


def forbidden(reason: str = "Access refused.") -> ApiError:
    """What RabbitMQ answers when the user lacks a permission on the resource."""
    return ApiError(401, "not_authorised", reason)


async def api_error_response(_request: Request, error: Exception) -> Response:
    assert isinstance(error, ApiError)
    if not error.error:   # RabbitMQ's bare 401 asking for credentials
        return Response(status_code=error.status, headers=error.headers)
    return JSONResponse({"error": error.error, "reason": error.reason},
                        status_code=error.status, headers=error.headers)
