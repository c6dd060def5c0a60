"""RabbitMQ's list parameters, applied to a list endpoint's items (plain dicts):

- `sort` (a field, dotted for nested ones: `message_stats.publish_details.rate`) and
  `sort_reverse=true`;
- `columns=name,messages` keeps only those fields (dotted paths keep nested ones);
- `page` (from 1) with `page_size` (1-500, default 100), `name` (a substring, or a
  regular expression with `use_regex=true`): the answer is then an object with the page's
  `items` and the counts (`filtered_count`, `item_count`, `page`, `page_count`,
  `page_size`, `total_count`). Without `page`, `name` is ignored, as in RabbitMQ.

Endpoints that RabbitMQ does not paginate call `listed(..., paginated=False)`.

A long list (10,000 queues make 12 MB of JSON) is encoded and sent in chunks of
`CHUNK_ITEMS`, with the event loop let go between chunks, so that AMQP connections are
not held up for the whole encoding.
"""

import json
import math
import re

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .errors import ApiError, bad_request

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500
CHUNK_ITEMS = 500


def listed(request: Request, items: list[dict], paginated: bool = True) -> Response:
    """The JSON answer of a list endpoint for `items`, after the request's parameters."""
    params = request.query_params
    items = _sorted(items, params.get("sort"), params.get("sort_reverse") == "true")
    if paginated and "page" in params:
        return JSONResponse(_page(items, params))
    shown = _columns(items, params.get("columns"))
    if len(shown) <= CHUNK_ITEMS:
        return JSONResponse(shown)
    return StreamingResponse(_encoded_in_chunks(shown), media_type="application/json")


async def _encoded_in_chunks(items: list[dict]):
    """The JSON array of `items`, as JSONResponse encodes it, one chunk at a time."""
    yield b"["
    for start in range(0, len(items), CHUNK_ITEMS):
        text = ",".join(json.dumps(item, ensure_ascii=False, allow_nan=False,
                                   separators=(",", ":"))
                        for item in items[start:start + CHUNK_ITEMS])
        yield (b"," if start else b"") + text.encode()
        await trio.sleep(0)   # let AMQP connections run between chunks
    yield b"]"


def _sorted(items: list[dict], sort: str | None, reverse: bool) -> list[dict]:
    if not sort:
        return items
    path = sort.split(".")
    # Values of different types (a missing field, a number, a string) sort by type first
    return sorted(items, key=lambda item: _sort_key(_field(item, path)), reverse=reverse)


def _sort_key(value) -> tuple:
    if value is None:
        return (0, 0)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (1, value)
    return (2, str(value))


def _field(item, path: list[str]):
    for key in path:
        if not isinstance(item, dict):
            return None
        item = item.get(key)
    return item


def _columns(items: list[dict], columns: str | None) -> list[dict]:
    if not columns:
        return items
    paths = [column.split(".") for column in columns.split(",") if column]
    return [_pick(item, paths) for item in items]


def _pick(item: dict, paths: list[list[str]]) -> dict:
    picked: dict = {}
    for path in paths:
        value = _field(item, path)
        if value is None and not _has(item, path):
            continue
        target = picked
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = value
    return picked


def _has(item, path: list[str]) -> bool:
    for key in path:
        if not isinstance(item, dict) or key not in item:
            return False
        item = item[key]
    return True


def _page(items: list[dict], params) -> dict:
    try:
        page = int(params["page"])
        page_size = int(params.get("page_size", DEFAULT_PAGE_SIZE))
    except ValueError:
        raise bad_request("Pagination parameters are invalid") from None
    if page < 1 or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ApiError(400, "invalid_pagination_parameters",
                       f"Invalid pagination parameters: page number {page}, page size "
                       f"{page_size}")
    filtered = _filtered(items, params.get("name"), params.get("use_regex") == "true")
    page_count = math.ceil(len(filtered) / page_size)
    if page > max(page_count, 1):
        raise ApiError(400, "page_out_of_range",
                       f"Page out of range, page: {page} page size: {page_size}, len: "
                       f"{len(filtered)}")
    start = (page - 1) * page_size
    shown = _columns(filtered[start:start + page_size], params.get("columns"))
    return {"filtered_count": len(filtered), "item_count": len(shown), "items": shown,
            "page": page, "page_count": page_count, "page_size": page_size,
            "total_count": len(items)}


def _filtered(items: list[dict], name: str | None, use_regex: bool) -> list[dict]:
    if not name:
        return items
    if use_regex:
        try:
            pattern = re.compile(name)
        except re.error:
            raise bad_request("Pagination parameters are invalid") from None
        return [item for item in items if pattern.search(str(item.get("name", "")))]
    return [item for item in items if name in str(item.get("name", ""))]
