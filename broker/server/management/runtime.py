"""Live AMQP objects in RabbitMQ's shapes: /api/connections, /api/channels,
/api/consumers (and their per-vhost and per-connection variants), and DELETE of a
connection (320 CONNECTION_FORCED with the X-Reason header's text).

A management user sees their own connections (and their channels and consumers);
monitoring and administrator users see all of them."""

import datetime
import decimal
import socket
from typing import TYPE_CHECKING, Iterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response


from amqp_codec.reply_codes import ReplyCode
from broker.core.handshake import ConnectionState
from broker.core.message_stats import COUNTERS

from .auth import Caller
from .context import caller_of, context_of
from .encoded_paths import EncodedPathRoute as Route
from .errors import not_authorised, not_found
from .listing import listed
from .stats import StatsSampler, message_stats

if TYPE_CHECKING:
    from broker.core.channel import Channel
    from broker.core.queue_base import Consumer

    from ..transport import SocketTransport

NODE = f"warren@{socket.gethostname().split('.')[0]}"
CLOSED_BY_API = "Closed via management plugin"   # RabbitMQ's default reason

# RabbitMQ's per-process Erlang statistics: no Python equivalent, neutral values
_GARBAGE_COLLECTION = {"fullsweep_after": 0, "max_heap_size": 0, "min_bin_vheap_size": 0,
                       "min_heap_size": 0, "minor_gcs": 0}
_STATES = {ConnectionState.OPEN: "running", ConnectionState.CLOSING: "closing",
           ConnectionState.CLOSED: "closed"}


def plain(value):
    """An AMQP field value as JSON can carry it (bytes as text, decimals as numbers,
    timestamps as seconds)."""
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value


# -- names ---------------------------------------------------------------------------

def connection_name(transport: "SocketTransport") -> str:
    """RabbitMQ's name of a connection: "peer host:port -> local host:port"."""
    host, port = local_address(transport)
    return f"{transport.peer} -> {host}:{port}"


def local_address(transport: "SocketTransport") -> tuple[str, int]:
    try:
        host, port = transport.stream.socket.getsockname()[:2]
    except OSError:   # the socket is already closed
        return "", 0
    return host, port


def channel_name(transport: "SocketTransport", number: int) -> str:
    return f"{connection_name(transport)} ({number})"


def peer_port(transport: "SocketTransport") -> int:
    return int(transport.peer.rsplit(":", 1)[1])


EVERYONE = None   # open_transports' caller for a lookup before the visibility check


def open_transports(request: Request, caller: Caller | None,
                    vhost: str | None = None) -> Iterator["SocketTransport"]:
    """The opened connections the caller may see (in `vhost` only, when given)."""
    for transport in list(context_of(request).server.transports):
        connection = transport.connection
        if connection.vhost is None or connection.state is ConnectionState.CLOSED:
            continue
        if vhost is not None and connection.vhost.name != vhost:
            continue
        if caller is EVERYONE or _may_see(caller, transport):
            yield transport


def _may_see(caller: Caller, transport: "SocketTransport") -> bool:
    return caller.sees_all_vhosts() or transport.connection.user == caller.name


# -- shapes --------------------------------------------------------------------------

def connection_view(transport: "SocketTransport", sampler: StatsSampler) -> dict:
    connection = transport.connection
    host, port = local_address(transport)
    rates = sampler.rates(transport)
    tls = connection.tls is not None
    view = {
        "auth_mechanism": "PLAIN", "channel_max": connection.channel_max,
        "channels": len(connection.channels),
        "client_properties": plain(connection.client_properties),
        "connected_at": transport.connected_at,
        "frame_max": connection.framer.frame_max,
        "garbage_collection": _GARBAGE_COLLECTION, "host": host,
        "name": connection_name(transport), "node": NODE,
        "peer_cert_issuer": None, "peer_cert_subject": None, "peer_cert_validity": None,
        "peer_host": transport.address, "peer_port": peer_port(transport), "port": port,
        "protocol": "AMQP 0-9-1", "recv_cnt": 0, "recv_oct": transport.received_bytes,
        "recv_oct_details": {"rate": rates.get("recv_oct", 0.0)},
        "reductions": 0, "reductions_details": {"rate": 0.0}, "send_cnt": 0,
        "send_oct": transport.sent_bytes,
        "send_oct_details": {"rate": rates.get("send_oct", 0.0)},
        "send_pend": 0, "ssl": tls, "ssl_cipher": None, "ssl_hash": None,
        "ssl_key_exchange": None, "ssl_protocol": None,
        "state": _STATES.get(connection.state, "starting"),
        "timeout": connection.heartbeat, "type": "network", "user": connection.user,
        "user_who_performed_action": connection.user,
        "vhost": connection.vhost.name if connection.vhost is not None else "",
    }
    provided = connection.client_properties.get("connection_name")
    if provided is not None:
        view["user_provided_name"] = plain(provided)
    return view


def connection_details(transport: "SocketTransport") -> dict:
    return {"name": connection_name(transport), "peer_host": transport.address,
            "peer_port": peer_port(transport)}


def channel_view(transport: "SocketTransport", channel: "Channel",
                 sampler: StatsSampler) -> dict:
    connection = transport.connection
    transaction = channel.transaction
    return {
        "acks_uncommitted": len(transaction.acks) if transaction else 0,
        "confirm": channel.confirming,
        "connection_details": connection_details(transport),
        "consumer_count": len(channel.consumers),
        "garbage_collection": _GARBAGE_COLLECTION,
        "global_prefetch_count": channel.global_prefetch,
        "message_stats": message_stats(channel.message_counts(), sampler.rates(channel),
                                       COUNTERS),
        "messages_unacknowledged": len(channel.unacked),
        "messages_uncommitted": len(transaction.publishes) if transaction else 0,
        "messages_unconfirmed": channel.unconfirmed,
        "name": channel_name(transport, channel.number), "node": NODE,
        "number": channel.number, "pending_raft_commands": 0,
        "prefetch_count": channel.consumer_prefetch, "reductions": 0,
        "reductions_details": {"rate": 0.0},
        "state": "closing" if channel.closing else "running",
        "transactional": transaction is not None, "user": connection.user,
        "user_who_performed_action": connection.user, "vhost": channel.vhost.name,
    }


def channel_details(transport: "SocketTransport", number: int) -> dict:
    return {"connection_name": connection_name(transport),
            "name": channel_name(transport, number), "node": NODE, "number": number,
            "peer_host": transport.address, "peer_port": peer_port(transport),
            "user": transport.connection.user}


def consumer_view(transport: "SocketTransport", consumer: "Consumer") -> dict:
    queue = consumer.queue
    active = not queue.single_active or (bool(queue.consumers)
                                         and queue.consumers[0] is consumer)
    return {"arguments": plain(consumer.arguments), "ack_required": not consumer.no_ack,
            "active": active, "activity_status": "single_active" if (
                queue.single_active and active) else ("up" if active else "waiting"),
            "channel_details": channel_details(transport, consumer.channel.number),
            "consumer_tag": consumer.tag, "exclusive": consumer.exclusive,
            "prefetch_count": consumer.prefetch,
            "queue": {"name": queue.name, "vhost": queue.vhost.name}}


def consumers_of(request: Request, caller: Caller, vhost: str | None = None) -> list[dict]:
    return [consumer_view(transport, consumer)
            for transport in open_transports(request, caller, vhost)
            for channel in list(transport.connection.channels.values())
            for consumer in list(channel.consumers.values())]


# -- handlers ------------------------------------------------------------------------

def _vhost_param(request: Request) -> str:
    vhost = request.path_params["vhost"]
    if vhost not in context_of(request).broker.vhosts:
        raise not_found()
    return vhost


async def list_connections(request: Request) -> Response:
    caller = caller_of(request)
    vhost = _vhost_param(request) if "vhost" in request.path_params else None
    sampler = context_of(request).sampler
    return listed(request, [connection_view(transport, sampler)
                            for transport in open_transports(request, caller, vhost)])


def _named_connection(request: Request, caller: Caller) -> "SocketTransport":
    """The connection the path names; 401 when it is another user's and the caller may
    see only its own (as RabbitMQ), 404 when there is none."""
    name = request.path_params["name"]
    for transport in open_transports(request, EVERYONE):
        if connection_name(transport) == name:
            if not _may_see(caller, transport):
                raise not_authorised("Not authorised")
            return transport
    raise not_found()


async def get_connection(request: Request) -> Response:
    transport = _named_connection(request, caller_of(request))
    return JSONResponse(connection_view(transport, context_of(request).sampler))


async def delete_connection(request: Request) -> Response:
    transport = _named_connection(request, caller_of(request))
    reason = request.headers.get("x-reason") or CLOSED_BY_API
    transport.connection.close(ReplyCode.CONNECTION_FORCED, f"CONNECTION_FORCED - {reason}")
    return Response(status_code=204)


async def connection_channels(request: Request) -> Response:
    transport = _named_connection(request, caller_of(request))
    sampler = context_of(request).sampler
    return listed(request, [channel_view(transport, channel, sampler)
                            for channel in list(transport.connection.channels.values())])


async def list_channels(request: Request) -> Response:
    caller = caller_of(request)
    vhost = _vhost_param(request) if "vhost" in request.path_params else None
    sampler = context_of(request).sampler
    return listed(request, [channel_view(transport, channel, sampler)
                            for transport in open_transports(request, caller, vhost)
                            for channel in list(transport.connection.channels.values())])


async def get_channel(request: Request) -> Response:
    caller = caller_of(request)
    name = request.path_params["name"]
    sampler = context_of(request).sampler
    for transport in open_transports(request, caller):
        for channel in list(transport.connection.channels.values()):
            if channel_name(transport, channel.number) == name:
                return JSONResponse(channel_view(transport, channel, sampler))
    raise not_found()


async def list_consumers(request: Request) -> Response:
    caller = caller_of(request)
    vhost = _vhost_param(request) if "vhost" in request.path_params else None
    return listed(request, consumers_of(request, caller, vhost), paginated=False)


ROUTES = [
    Route("/api/connections", list_connections),
    Route("/api/vhosts/{vhost}/connections", list_connections),
    Route("/api/connections/{name}", get_connection),
    Route("/api/connections/{name}", delete_connection, methods=["DELETE"]),
    Route("/api/connections/{name}/channels", connection_channels),
    Route("/api/channels", list_channels),
    Route("/api/vhosts/{vhost}/channels", list_channels),
    Route("/api/channels/{name}", get_channel),
    Route("/api/consumers", list_consumers),
    Route("/api/consumers/{vhost}", list_consumers),
]
