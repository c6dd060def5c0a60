"""Request bodies: JSON, bounded before it is buffered."""

import json

from starlette.requests import Request

from .errors import ApiError, bad_request

MAX_BODY_BYTES = 20_000_000   # RabbitMQ's management.http.max_body_size default


async def json_body(request: Request, max_bytes: int = MAX_BODY_BYTES):
    """The request's JSON body ({} when empty); 413 once it passes `max_bytes`, 400 when
    it is not JSON."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise _too_large(max_bytes)
    if not body.strip():
        return {}
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise bad_request(f"the body is not JSON: {error}") from None


def _too_large(max_bytes: int) -> ApiError:
    return ApiError(413, "payload_too_large",
                    f"request bodies are limited to {max_bytes} bytes")
