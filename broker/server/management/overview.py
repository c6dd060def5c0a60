"""/api/overview and /api/nodes: the broker as a whole, in RabbitMQ 3.10's shapes.

Warren is one node: /api/nodes lists it under the name RabbitMQ would give a node on
this host ("warren@host"). Erlang-specific figures (reductions, garbage collection, run
queue, Mnesia and message-store I/O) have no Python equivalent and are RabbitMQ's
neutral values (0, [], {})."""

import os
import platform
import resource
import threading
import time

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from broker import __version__
from broker.core.delayed_exchange import DELAYED_KIND
from broker.core.hash_exchanges import (CONSISTENT_HASH_KIND, LOCAL_RANDOM_KIND,
                                        MODULUS_HASH_KIND)
from broker.core.rabbitmq_lines import FEATURES, Profile, latest_phase
from broker.core.vhost import EXCHANGE_CLASSES

from ..alarms import free_disk, held_memory
from .auth import MANAGEMENT, MONITORING, Caller
from .context import ManagementContext, caller_of, context_of
from .encoded_paths import EncodedPathRoute as Route
from .errors import not_found
from .runtime import NODE, open_transports
from .stats import broker_counts, message_stats, unacked_by_queue, with_rates
from .topology_read import visible_vhosts

STARTED = time.monotonic()
_EXCHANGE_DESCRIPTIONS = {
    "direct": "AMQP direct exchange, as per the AMQP specification",
    "fanout": "AMQP fanout exchange, as per the AMQP specification",
    "headers": "AMQP headers exchange, as per the AMQP specification",
    "topic": "AMQP topic exchange, as per the AMQP specification",
    DELAYED_KIND: "Delayed Message Exchange",
    CONSISTENT_HASH_KIND: "Consistent Hashing Exchange",
    MODULUS_HASH_KIND: "Modulus Hashing Exchange",
    LOCAL_RANDOM_KIND: "Picks one random local binding (queue) to route via (to).",
}
_CHURN = ("channel_closed", "channel_created", "connection_closed", "connection_created",
          "queue_created", "queue_declared", "queue_deleted")
_DISK_COUNTERS = ("disk_reads", "disk_writes")


def exchange_types(profile: Profile) -> list[dict]:
    """The exchange types of the broker's RabbitMQ line."""
    kinds = sorted(set(EXCHANGE_CLASSES) - profile.line.missing_exchange_types)
    return [{"name": kind, "description": _EXCHANGE_DESCRIPTIONS[kind], "enabled": True}
            for kind in kinds]


def listeners(context: ManagementContext) -> list[dict]:
    server = context.server
    found: list[tuple[str, str, int | None]] = []   # a port is None until it is bound
    if server.plain_listener:
        found.append(("amqp", server.host, server.port))
    if server.tls is not None:
        found.append(("amqp/ssl", server.host, server.tls.port))
    if server.management is not None:
        found.append(("http", server.management.host, server.management.port))
    return [{"node": NODE, "protocol": protocol, "ip_address": host, "port": port,
             "socket_opts": {}} for protocol, host, port in found if port is not None]


def contexts(context: ManagementContext) -> list[dict]:
    management = context.server.management
    if management is None:
        return []
    return [{"ssl_opts": [], "node": NODE, "description": "RabbitMQ Management",
             "path": "/", "cowboy_opts": "[]", "ip": management.host,
             "port": str(management.port)}]


async def overview(request: Request) -> Response:
    caller = caller_of(request)
    context = context_of(request)
    vhosts = visible_vhosts(request, caller)
    names = {vhost.name for vhost in vhosts}
    counts = broker_counts(context.broker, None if caller.sees_all_vhosts() else names)
    rates = context.sampler.rates("broker") if caller.sees_all_vhosts() else {}
    stats = message_stats(counts, rates)
    stats.update(with_rates({name: 0 for name in _DISK_COUNTERS}, {}))
    unacked, _sizes = unacked_by_queue(context.broker)
    queues = [queue for vhost in vhosts for queue in vhost.queues.values()]
    ready = sum(queue.message_count for queue in queues)
    unacked_total = sum(unacked.get(queue, 0) for queue in queues)
    transports = list(open_transports(request, caller))
    channels = [channel for transport in transports
                for channel in transport.connection.channels.values()]
    # The identity of the RabbitMQ release the broker's line emulates (tools branch on
    # these), with Warren's own in warren_version.
    rabbitmq_version = context.broker.profile.line.version
    return JSONResponse({
        "management_version": rabbitmq_version, "rates_mode": "basic",
        "sample_retention_policies": {"global": [600, 3600, 28800, 86400],
                                      "basic": [600, 3600], "detailed": [600]},
        "exchange_types": exchange_types(context.broker.profile), "product_version": rabbitmq_version,
        "product_name": "RabbitMQ", "rabbitmq_version": rabbitmq_version,
        "warren_version": __version__,
        "cluster_name": context.broker.server_properties()["cluster_name"],
        "erlang_version": f"none (Python {platform.python_version()})",
        "erlang_full_version": f"none (Python {platform.python_version()})",
        "release_series_support_status": "supported", "disable_stats": False,
        "enable_queue_totals": False,
        "message_stats": dict(sorted(stats.items())),
        "churn_rates": with_rates({name: 0 for name in _CHURN}, {}),
        "queue_totals": with_rates({"messages": ready + unacked_total,
                                    "messages_ready": ready,
                                    "messages_unacknowledged": unacked_total}, rates),
        "object_totals": {
            "channels": len(channels), "connections": len(transports),
            "consumers": sum(len(channel.consumers) for channel in channels),
            "exchanges": sum(len(vhost.exchanges) for vhost in vhosts),
            "queues": len(queues)},
        "statistics_db_event_queue": 0, "node": NODE,
        "listeners": listeners(context), "contexts": contexts(context),
    })


def _process_figures(data_dir: str) -> tuple[int, int]:
    """Free disk bytes and open file descriptors (run in a thread: they touch disk)."""
    return free_disk(data_dir), len(os.listdir("/proc/self/fd"))


async def node_view(request: Request, caller: Caller) -> dict:
    context = context_of(request)
    server = context.server
    alarm = server.alarm
    disk_free, fd_used = await trio.to_thread.run_sync(_process_figures, alarm.data_dir)
    fd_total = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    used = held_memory(context.broker, server.transports)
    view = {
        "applications": [], "auth_mechanisms": [
            {"name": name, "description": "", "enabled": True}
            for name in context.broker.auth_mechanisms],
        "cluster_links": [], "config_files": [], "contexts": contexts(context),
        "db_dir": alarm.data_dir, "disk_free": disk_free,
        "disk_free_alarm": "disk" in alarm.raised, "disk_free_limit": alarm.disk.limit,
        "enabled_plugins": ["rabbitmq_management", "rabbitmq_prometheus"],
        "exchange_types": exchange_types(context.broker.profile), "fd_total": fd_total,
        "fd_used": fd_used,
        "log_files": ["<stdout>"], "mem_alarm": "memory" in alarm.raised,
        "mem_calculation_strategy": "allocated", "mem_limit": alarm.memory_limit,
        "mem_used": used, "name": NODE, "net_ticktime": 0, "os_pid": str(os.getpid()),
        "partitions": [], "proc_total": 0, "proc_used": threading.active_count(),
        "processors": os.cpu_count() or 1, "rates_mode": "basic", "run_queue": 0,
        "running": True, "sockets_total": fd_total, "sockets_used": len(server.transports),
        "type": "disc", "uptime": int((time.monotonic() - STARTED) * 1000),
    }
    for name in ("disk_free", "fd_used", "mem_used", "proc_used", "sockets_used"):
        view[name + "_details"] = {"rate": 0.0}
    return view


async def list_nodes(request: Request) -> Response:
    caller = caller_of(request, MONITORING)
    return JSONResponse([await node_view(request, caller)])


async def get_node(request: Request) -> Response:
    caller = caller_of(request, MONITORING)
    if request.path_params["name"] != NODE:
        raise not_found()
    return JSONResponse(await node_view(request, caller))


def deprecated_feature_json(feature: str, profile: Profile) -> dict:
    """A deprecated feature as RabbitMQ's /api/deprecated-features/used lists it, in
    the broker's line (a feature the line lacks, with its phase in the newest line)."""
    described = FEATURES[feature]
    phase = profile.line.phase(feature) or latest_phase(feature)
    return {"name": feature, "desc": "", "deprecation_phase": phase.value,
            "doc_url": described.doc_url, "provided_by": described.provided_by}


async def deprecated_features(request: Request) -> Response:
    """RabbitMQ's deprecated features of the broker's line, permitted or denied."""
    caller_of(request, MANAGEMENT)
    profile = context_of(request).broker.profile
    return JSONResponse([{**deprecated_feature_json(feature, profile),
                          "state": profile.state(feature)}
                         for feature in sorted(profile.line.deprecations)])


async def used_deprecated_features(request: Request) -> Response:
    """The deprecated features a client used (or tried) on an existing vhost since the
    broker started (the upgrade lint's notes)."""
    caller_of(request, MANAGEMENT)
    broker = context_of(request).broker
    return JSONResponse([deprecated_feature_json(feature, broker.profile)
                         for feature in broker.lint.used_features()])


ROUTES = [
    Route("/api/overview", overview),
    Route("/api/deprecated-features", deprecated_features),
    Route("/api/deprecated-features/used", used_deprecated_features),
    Route("/api/nodes", list_nodes),
    Route("/api/nodes/{name}", get_node),
]
