"""Routes matched on the request's path as sent, percent-encoded.

RabbitMQ's paths put names in segments, "/" included as %2F (the default vhost is
"%2F"). The ASGI server hands Starlette the decoded path, where such a segment is two
segments and no route matches; EncodedPathRoute matches `raw_path` instead and decodes
each path parameter itself."""

from urllib.parse import unquote

from starlette.routing import Match, Route
from starlette.types import Scope


class EncodedPathRoute(Route):
    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        raw_path = scope.get("raw_path")
        if scope["type"] != "http" or not raw_path:
            return super().matches(scope)
        encoded = dict(scope, path=raw_path.decode("latin-1"), root_path="")
        match, child_scope = super().matches(encoded)
        if match is not Match.NONE:
            child_scope["path_params"] = {
                name: unquote(value) if isinstance(value, str) else value
                for name, value in child_scope["path_params"].items()}
        return match, child_scope
