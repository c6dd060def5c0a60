"""Exchanges, queues and bindings as RabbitMQ's management API shows them:
/api/exchanges, /api/queues, /api/bindings and their per-vhost and per-object variants.

As RabbitMQ, every user, monitoring and administrator ones included, sees the exchanges,
queues and bindings of the vhosts it has permissions on (may open) only. Lists are built
in one pass over the vhosts' objects, as plain dicts."""

from typing import Iterator

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from broker.core.backlog import ENTRY_COST
from broker.core.exchange import Exchange
from broker.core.policy import merged_definition
from broker.core.queue_base import QueueBase
from broker.core.vhost import VirtualHost

from .auth import Caller
from .binding_keys import properties_key
from .context import caller_of, context_of
from .encoded_paths import EncodedPathRoute as Route
from .errors import not_authorised, not_found
from .listing import listed
from .runtime import NODE, consumer_view, plain
from .stats import StatsSampler, unacked_by_queue, with_rates

DEFAULT_EXCHANGE_ALIAS = "amq.default"   # the default exchange's name in paths
# Queue views built between two turns of the event loop: a list of 10,000 queues
# leaves the AMQP connections waiting for one chunk at a time, not for all of them
VIEWS_PER_TURN = 500
_GARBAGE_COLLECTION = {"fullsweep_after": 0, "max_heap_size": 0, "min_bin_vheap_size": 0,
                       "min_heap_size": 0, "minor_gcs": 0}


def visible_vhosts(request: Request, caller: Caller) -> list[VirtualHost]:
    broker = context_of(request).broker
    if "vhost" in request.path_params:
        return [_vhost(request, caller)]
    return [vhost for vhost in broker.vhosts.values()
            if broker.access.may_open(caller.name, vhost.name)]


def _vhost(request: Request, caller: Caller) -> VirtualHost:
    broker = context_of(request).broker
    vhost = broker.vhosts.get(request.path_params["vhost"])
    if vhost is None:
        raise not_found()
    if not broker.access.may_open(caller.name, vhost.name):
        raise not_authorised("Not authorised")
    return vhost


def _policy_name(entity) -> str | None:
    policy = entity.applied_policies[0]
    return policy.name if policy is not None else None


# -- exchanges -----------------------------------------------------------------------

def exchange_view(exchange: Exchange, vhost: VirtualHost) -> dict:
    view = {"arguments": plain(exchange.arguments), "auto_delete": exchange.auto_delete,
            "durable": exchange.durable, "internal": exchange.internal,
            "name": exchange.name, "type": exchange.kind,
            "user_who_performed_action": "", "vhost": vhost.name}
    policy = _policy_name(exchange)
    if policy is not None:
        view["policy"] = policy
    return view


def _exchange(request: Request, caller: Caller) -> tuple[VirtualHost, Exchange]:
    vhost = _vhost(request, caller)
    exchange = vhost.exchanges.get(_exchange_name(request.path_params["name"]))
    if exchange is None:
        raise not_found()
    return vhost, exchange


async def list_exchanges(request: Request) -> Response:
    caller = caller_of(request)
    return listed(request, [exchange_view(exchange, vhost)
                            for vhost in visible_vhosts(request, caller)
                            for exchange in vhost.exchanges.values()])


async def get_exchange(request: Request) -> Response:
    vhost, exchange = _exchange(request, caller_of(request))
    return JSONResponse({**exchange_view(exchange, vhost), "incoming": [], "outgoing": []})


async def exchange_source_bindings(request: Request) -> Response:
    vhost, exchange = _exchange(request, caller_of(request))
    if exchange.name == "":
        return listed(request, list(_default_bindings(vhost)), paginated=False)
    return listed(request, list(_bindings_from(exchange, vhost)), paginated=False)


async def exchange_destination_bindings(request: Request) -> Response:
    vhost, exchange = _exchange(request, caller_of(request))
    return listed(request, [binding for binding in _explicit_bindings(vhost)
                            if binding["destination_type"] == "exchange"
                            and binding["destination"] == exchange.name], paginated=False)


# -- queues --------------------------------------------------------------------------

class QueueViews:
    """What the queue views need from one pass over the broker's channels."""

    def __init__(self, request: Request):
        context = context_of(request)
        self.sampler: StatsSampler = context.sampler
        self.unacked, self.unacked_bytes = unacked_by_queue(context.broker)

    def view(self, queue: QueueBase) -> dict:
        ready = queue.message_count
        unacked = self.unacked.get(queue, 0)
        unacked_bytes = self.unacked_bytes.get(queue, 0)
        rates = self.sampler.rates(queue)
        held = queue.held_bytes - queue.bookkeeping_bytes
        message_bytes = max(held - ENTRY_COST * unacked, unacked_bytes)
        consumers = queue.consumer_count
        view = {
            "arguments": plain(queue.arguments), "auto_delete": queue.auto_delete,
            "backing_queue_status": {}, "consumer_capacity": 1.0 if consumers else 0,
            "consumer_utilisation": 1.0 if consumers else 0, "consumers": consumers,
            "durable": queue.durable,
            "effective_policy_definition": plain(merged_definition(*queue.applied_policies)),
            "exclusive": queue.exclusive_owner is not None,
            "exclusive_consumer_tag": next((consumer.tag for consumer in queue.consumers
                                            if consumer.exclusive), None),
            "garbage_collection": _GARBAGE_COLLECTION, "head_message_timestamp": None,
            "memory": held, "message_bytes": message_bytes,
            "message_bytes_paged_out": 0, "message_bytes_persistent": 0,
            "message_bytes_ram": message_bytes,
            "message_bytes_ready": message_bytes - unacked_bytes,
            "message_bytes_unacknowledged": unacked_bytes,
            "message_stats": with_rates({"publish": queue.published}, rates),
            **with_rates({"messages": ready + unacked, "messages_ready": ready,
                          "messages_unacknowledged": unacked}, rates),
            "messages_paged_out": 0, "messages_persistent": 0,
            "messages_ram": ready + unacked, "messages_ready_ram": ready,
            "messages_unacknowledged_ram": unacked, "name": queue.name, "node": NODE,
            "operator_policy": _operator_policy_name(queue), "policy": _policy_name(queue),
            "recoverable_slaves": None, "reductions": 0,
            "reductions_details": {"rate": 0.0},
            "single_active_consumer_tag": (queue.consumers[0].tag if queue.single_active
                                           and queue.consumers else None),
            "state": "running", "type": queue.kind.name, "vhost": queue.vhost.name,
        }
        return view


def _operator_policy_name(queue: QueueBase) -> str | None:
    policy = queue.applied_policies[1]
    return policy.name if policy is not None else None


def _queue(request: Request, caller: Caller) -> tuple[VirtualHost, QueueBase]:
    vhost = _vhost(request, caller)
    queue = vhost.queues.get(request.path_params["name"])
    if queue is None:
        raise not_found()
    return vhost, queue


async def list_queues(request: Request) -> Response:
    caller = caller_of(request)
    views = QueueViews(request)
    queues = [queue for vhost in visible_vhosts(request, caller)
              for queue in list(vhost.queues.values())]
    shown = []
    for start in range(0, len(queues), VIEWS_PER_TURN):
        if start:
            await trio.sleep(0)   # let AMQP connections run between chunks
        shown += [views.view(queue) for queue in queues[start:start + VIEWS_PER_TURN]
                  if not queue.deleted]
    return listed(request, shown)


async def get_queue(request: Request) -> Response:
    caller = caller_of(request)
    _vhost_of, queue = _queue(request, caller)
    view = QueueViews(request).view(queue)
    server = context_of(request).server
    view["consumer_details"] = [
        consumer_view(transport, consumer)
        for transport in list(server.transports)
        for channel in list(transport.connection.channels.values())
        for consumer in list(channel.consumers.values()) if consumer.queue is queue]
    view["incoming"] = []
    view["deliveries"] = []
    return JSONResponse(view)


async def queue_bindings(request: Request) -> Response:
    """The queue's bindings, the default exchange's first. As RabbitMQ, a missing queue
    of an existing vhost has that implicit binding alone (200), not a 404."""
    vhost = _vhost(request, caller_of(request))
    name = request.path_params["name"]
    implicit = _binding("", vhost, name, "queue", name, {})
    return listed(request, [implicit] + [
        binding for binding in _explicit_bindings(vhost)
        if binding["destination_type"] == "queue" and binding["destination"] == name],
        paginated=False)


# -- bindings ------------------------------------------------------------------------

def _binding(source: str, vhost: VirtualHost, destination: str, kind: str,
             routing_key: str, arguments: dict) -> dict:
    return {"source": source, "vhost": vhost.name, "destination": destination,
            "destination_type": kind, "routing_key": routing_key,
            "arguments": plain(arguments),
            "properties_key": properties_key(routing_key, arguments)}


def _default_bindings(vhost: VirtualHost) -> Iterator[dict]:
    """The default exchange's implicit binding of every queue, by its name."""
    for name in list(vhost.queues):
        yield _binding("", vhost, name, "queue", name, {})


def _bindings_from(exchange: Exchange, vhost: VirtualHost) -> Iterator[dict]:
    for (destination, routing_key, _frozen), arguments in list(exchange.bindings.items()):
        kind = "queue" if destination.is_queue else "exchange"
        yield _binding(exchange.name, vhost, destination.name, kind, routing_key,
                       arguments)


def _explicit_bindings(vhost: VirtualHost) -> Iterator[dict]:
    for exchange in list(vhost.exchanges.values()):
        if exchange.name:
            yield from _bindings_from(exchange, vhost)


def _vhost_bindings(vhost: VirtualHost) -> list[dict]:
    return [*_default_bindings(vhost), *_explicit_bindings(vhost)]


async def list_bindings(request: Request) -> Response:
    caller = caller_of(request)
    return listed(request, [binding for vhost in visible_vhosts(request, caller)
                            for binding in _vhost_bindings(vhost)], paginated=False)


def _exchange_name(name: str) -> str:
    return "" if name == DEFAULT_EXCHANGE_ALIAS else name


def _between(request: Request, kind: str) -> list[dict]:
    """The bindings from the path's exchange to its `kind` destination named there."""
    caller = caller_of(request)
    vhost = _vhost(request, caller)
    params = request.path_params
    source = vhost.exchanges.get(_exchange_name(params["source"]))
    if source is None:   # RabbitMQ lists no bindings (200) for a missing exchange
        return []
    everything = (_default_bindings(vhost) if source.name == ""
                  else _bindings_from(source, vhost))
    return [binding for binding in everything if binding["destination_type"] == kind
            and binding["destination"] == params["destination"]]


async def queue_bindings_between(request: Request) -> Response:
    return listed(request, _between(request, "queue"), paginated=False)


async def exchange_bindings_between(request: Request) -> Response:
    return listed(request, _between(request, "exchange"), paginated=False)


async def one_queue_binding(request: Request) -> Response:
    return _one_binding(request, "queue")


async def one_exchange_binding(request: Request) -> Response:
    return _one_binding(request, "exchange")


def _one_binding(request: Request, kind: str) -> Response:
    wanted = request.path_params["props"]
    for binding in _between(request, kind):
        if binding["properties_key"] == wanted:
            return JSONResponse(binding)
    raise not_found()


ROUTES = [
    Route("/api/exchanges", list_exchanges),
    Route("/api/exchanges/{vhost}", list_exchanges),
    Route("/api/exchanges/{vhost}/{name}", get_exchange),
    Route("/api/exchanges/{vhost}/{name}/bindings/source", exchange_source_bindings),
    Route("/api/exchanges/{vhost}/{name}/bindings/destination",
          exchange_destination_bindings),
    Route("/api/queues", list_queues),
    Route("/api/queues/{vhost}", list_queues),
    Route("/api/queues/{vhost}/{name}", get_queue),
    Route("/api/queues/{vhost}/{name}/bindings", queue_bindings),
    Route("/api/bindings", list_bindings),
    Route("/api/bindings/{vhost}", list_bindings),
    Route("/api/bindings/{vhost}/e/{source}/q/{destination}", queue_bindings_between),
    Route("/api/bindings/{vhost}/e/{source}/e/{destination}", exchange_bindings_between),
    Route("/api/bindings/{vhost}/e/{source}/q/{destination}/{props}", one_queue_binding),
    Route("/api/bindings/{vhost}/e/{source}/e/{destination}/{props}",
          one_exchange_binding),
]
