"""/metrics and /metrics/per-object: the Prometheus endpoints (no login, as
rabbitmq_prometheus), in the exposition format the scraper asks for (Accept: the text
format or OpenMetrics, prometheus_client's choice)."""

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .broker_collector import BrokerCollector
from .context import context_of


def _registry(request: Request, per_object: bool) -> CollectorRegistry:
    """The app's own registry for the endpoint (never prometheus_client's global one)."""
    registries = getattr(request.app.state, "metrics_registries", None)
    if registries is None:
        registries = request.app.state.metrics_registries = {}
    registry = registries.get(per_object)
    if registry is None:
        registry = registries[per_object] = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(context_of(request), per_object))
    return registry


def _scrape(request: Request, per_object: bool) -> Response:
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    body = encoder(_registry(request, per_object))
    return Response(body, headers={"Content-Type": content_type})


async def aggregated(request: Request) -> Response:
    return _scrape(request, per_object=False)


async def per_object(request: Request) -> Response:
    return _scrape(request, per_object=True)


ROUTES = [Route("/metrics", aggregated), Route("/metrics/per-object", per_object)]
