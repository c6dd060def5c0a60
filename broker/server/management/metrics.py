"""/metrics and /metrics/per-object: the Prometheus endpoints (no login, as
rabbitmq_prometheus), in the exposition format the scraper asks for (Accept: the text
format or OpenMetrics, prometheus_client's choice).

A scrape reads the broker on the event loop (BrokerCollector: plain numbers and names
into metric families), then encodes them in a worker thread: at 10,000 queues the
per-object encoding (2.8 MB) takes about 150 ms that the loop would otherwise spend away
from AMQP connections. The families are the scrape's own copies: nothing else touches
them."""

import trio
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .broker_collector import BrokerCollector
from .context import context_of


class _Collected(Collector):
    """Metric families already collected, for the encoder (a registry of the scrape's
    own, never prometheus_client's global one)."""

    def __init__(self, families: list):
        self.families = families

    def collect(self):
        return self.families


async def _scrape(request: Request, per_object: bool) -> Response:
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collected(list(BrokerCollector(context_of(request),
                                                      per_object).collect())))
    body = await trio.to_thread.run_sync(encoder, registry)
    return Response(body, headers={"Content-Type": content_type})


async def aggregated(request: Request) -> Response:
    return await _scrape(request, per_object=False)


async def per_object(request: Request) -> Response:
    return await _scrape(request, per_object=True)


ROUTES = [Route("/metrics", aggregated), Route("/metrics/per-object", per_object)]
