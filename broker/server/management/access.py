"""Users, vhosts, permissions, topic permissions and limits over HTTP, in RabbitMQ 3.10's
shapes: /api/users, /api/vhosts, /api/permissions, /api/topic-permissions,
/api/vhost-limits, /api/user-limits, and the runtime and global parameters Warren has
(none but its cluster name).

Writes need the administrator tag, as in RabbitMQ; a management user reads the vhosts it
may open (and their limits), monitoring and administrator users read all of them. Every
change goes through Administration and is committed before the reply.
"""

import socket
from collections import Counter
from contextlib import contextmanager

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from broker.core.access_control import User
from broker.core.admin import AdminError
from broker.core.definitions import vhost_metadata_json
from broker.core.limits import USER_LIMITS, VHOST_LIMITS
from broker.core.passwords import SHA256_ALGORITHM

from .auth import ADMINISTRATOR, MANAGEMENT, POLICYMAKER, Caller
from .bodies import json_body
from .context import caller_of, context_of
from .encoded_paths import EncodedPathRoute as Route
from .errors import bad_request, not_authorised, not_found
from .listing import listed
from .stats import unacked_by_queue

NODE_NAME = "warren@" + socket.gethostname().split(".")[0]


def node_name() -> str:
    return NODE_NAME


# -- users -----------------------------------------------------------------------------

def user_json(user: User, limits: dict) -> dict:
    return {"name": user.name, "password_hash": user.password_hash,
            "hashing_algorithm": user.algorithm or SHA256_ALGORITHM,
            "tags": list(user.tags), "limits": dict(limits)}


async def list_users(request: Request) -> Response:
    caller_of(request, ADMINISTRATOR)
    broker = context_of(request).broker
    return listed(request, [user_json(user, broker.limits.users.get(user.name, {}))
                            for user in broker.access.users.values()])


async def users_without_permissions(request: Request) -> Response:
    caller_of(request, ADMINISTRATOR)
    broker = context_of(request).broker
    holders = {user for user, _vhost in broker.access.permissions}
    return listed(request, [user_json(user, broker.limits.users.get(user.name, {}))
                            for user in broker.access.users.values()
                            if user.name not in holders], paginated=False)


async def user(request: Request) -> Response:
    caller_of(request, ADMINISTRATOR)
    context = context_of(request)
    name = request.path_params["name"]
    if request.method == "PUT":
        return await _put_user(request, name)
    found = _user(context, name)
    if request.method == "DELETE":
        context.admin.delete_user(name)
        await context.commit()
        return Response(status_code=204)
    return JSONResponse(user_json(found, context.broker.limits.users.get(name, {})))


async def _put_user(request: Request, name: str) -> Response:
    context = context_of(request)
    body = _object(await json_body(request))
    if "tags" not in body:
        raise bad_request("tags_not_present")
    _check_algorithm(body)
    password, password_hash = body.get("password"), body.get("password_hash")
    exists = name in context.broker.access.users
    with _admin_refusals():
        if exists:
            _replace_user(context, name, password, password_hash, body["tags"])
        else:
            context.admin.add_user(name, password, password_hash, body["tags"])
    await context.commit()
    return Response(status_code=204 if exists else 201)


def _replace_user(context, name: str, password, password_hash, tags) -> None:
    """An existing user's new password (or hash, or none: as in RabbitMQ, a PUT without
    either clears it) and tags."""
    admin = context.admin
    if password is not None:
        admin.change_password(name, password)
    elif password_hash:
        admin.set_password_hash(name, password_hash)
    else:
        admin.clear_password(name)
    admin.set_user_tags(name, tags)


def _check_algorithm(body: dict) -> None:
    algorithm = body.get("hashing_algorithm")
    if algorithm not in (None, "", SHA256_ALGORITHM):
        raise bad_request(f"hashing_algorithm {algorithm!r} is not supported: Warren "
                          f"takes password hashes made with {SHA256_ALGORITHM} only "
                          "(set a password instead)")


async def bulk_delete_users(request: Request) -> Response:
    caller_of(request, ADMINISTRATOR)
    context = context_of(request)
    body = _object(await json_body(request))
    names = body.get("users")
    if not isinstance(names, list):
        raise bad_request("[{key_missing,users}]")
    missing = [name for name in names if name not in context.broker.access.users]
    if missing:
        raise bad_request(f"no_such_user: {missing[0]}")
    for name in names:
        context.admin.delete_user(name)
    await context.commit()
    return Response(status_code=204)


def _user(context, name: str) -> User:
    found = context.broker.access.users.get(name)
    if found is None:
        raise not_found()
    return found


# -- vhosts ----------------------------------------------------------------------------

def vhost_json(vhost, unacked_counts: Counter) -> dict:
    """A vhost as RabbitMQ lists it; its message counts are those of its queues now
    (`unacked_counts`: unacked deliveries by queue, stats.unacked_by_queue)."""
    queues = vhost.queues.values()
    ready = sum(queue.message_count for queue in queues)
    unacked = sum(unacked_counts.get(queue, 0) for queue in queues)
    metadata = vhost.metadata
    return {"name": vhost.name, "description": metadata.description,
            "tags": list(metadata.tags),
            "default_queue_type": metadata.default_queue_type or "undefined",
            "metadata": vhost_metadata_json(metadata), "tracing": False,
            "rabbitmq_line": vhost.profile.line.name,
            "cluster_state": {node_name(): "running"},
            "messages": ready + unacked, "messages_ready": ready,
            "messages_unacknowledged": unacked}


def visible_vhosts(context, caller: Caller) -> list:
    """The vhosts `caller` may see: all for monitoring and administrator users, the ones
    it may open for the others."""
    vhosts = context.broker.vhosts
    if caller.sees_all_vhosts():
        return list(vhosts.values())
    return [vhost for name, vhost in vhosts.items()
            if context.broker.access.may_open(caller.name, name)]


async def list_vhosts(request: Request) -> Response:
    caller = caller_of(request, MANAGEMENT)
    context = context_of(request)
    unacked_counts, _sizes = unacked_by_queue(context.broker)
    return listed(request, [vhost_json(vhost, unacked_counts)
                            for vhost in visible_vhosts(context, caller)])


async def vhost(request: Request) -> Response:
    context = context_of(request)
    name = request.path_params["vhost"]
    if request.method == "GET":
        caller = caller_of(request, MANAGEMENT)
        unacked_counts, _sizes = unacked_by_queue(context.broker)
        return JSONResponse(vhost_json(_visible_vhost(context, caller, name),
                                       unacked_counts))
    caller = caller_of(request, ADMINISTRATOR)
    if request.method == "DELETE":
        _vhost(context, name)
        context.admin.delete_vhost(name)
        await context.commit()
        return Response(status_code=204)
    body = _object(await json_body(request))
    description, tags = body.get("description", ""), body.get("tags", [])
    existing = context.broker.vhosts.get(name)
    if existing is not None:
        # as RabbitMQ: description and tags replaced, the default queue type kept unless given
        default_queue_type = body.get("default_queue_type",
                                      existing.metadata.default_queue_type)
        rabbitmq_line = body.get("rabbitmq_line", existing.metadata.rabbitmq_line)
        with _admin_refusals():
            context.admin.update_vhost(name, description, tags, default_queue_type,
                                       rabbitmq_line)
        await context.commit()
        return Response(status_code=204)
    with _admin_refusals():
        context.admin.add_vhost(name, description, tags, body.get("default_queue_type"),
                                body.get("rabbitmq_line"))
        # RabbitMQ gives the user who creates a vhost over HTTP every permission on it
        context.admin.set_permissions(caller.name, name, ".*", ".*", ".*")
    await context.commit()
    return Response(status_code=201)


def _vhost(context, name: str):
    found = context.broker.vhosts.get(name)
    if found is None:
        raise not_found()
    return found


def _visible_vhost(context, caller: Caller, name: str):
    found = _vhost(context, name)
    if not caller.sees_all_vhosts() and not context.broker.access.may_open(caller.name,
                                                                           name):
        raise not_found()
    return found


# -- permissions -----------------------------------------------------------------------

def _permissions(context, user=None, vhost=None) -> list[dict]:
    return [{"user": holder, "vhost": host, "configure": permissions.configure,
             "write": permissions.write, "read": permissions.read}
            for (holder, host), permissions in context.broker.access.permissions.items()
            if user in (None, holder) and vhost in (None, host)]


def _topic_permissions(context, user=None, vhost=None) -> list[dict]:
    return [{"user": holder, "vhost": host, "exchange": permission.exchange,
             "write": permission.write, "read": permission.read}
            for (holder, host), by_exchange
            in context.broker.access.topic_permissions.items()
            if user in (None, holder) and vhost in (None, host)
            for permission in by_exchange.values()]


async def list_permissions(request: Request) -> Response:
    caller_of(request, ADMINISTRATOR)
    return listed(request, _permissions(context_of(request)), paginated=False)


async def list_topic_permissions(request: Request) -> Response:
    caller_of(request, ADMINISTRATOR)
    return listed(request, _topic_permissions(context_of(request)), paginated=False)


async def permissions_of_user(request: Request) -> Response:
    return _permissions_where(request, "user", _user)


async def permissions_in_vhost(request: Request) -> Response:
    return _permissions_where(request, "vhost", _vhost)


def _permissions_where(request: Request, key: str, find) -> Response:
    """The permissions, or topic permissions for a .../topic-permissions path, of the
    user or in the vhost the path names (`key`: "user" or "vhost"; `find` looks it up,
    404 when missing)."""
    caller_of(request, ADMINISTRATOR)
    context = context_of(request)
    name = find(context, request.path_params["name" if key == "user" else "vhost"]).name
    listing = (_topic_permissions if request.url.path.endswith("/topic-permissions")
               else _permissions)
    return listed(request, listing(context, **{key: name}), paginated=False)


async def permission(request: Request) -> Response:
    caller_of(request, ADMINISTRATOR)
    context = context_of(request)
    user, vhost_name = request.path_params["user"], request.path_params["vhost"]
    if request.method == "PUT":
        body = _required(await json_body(request), ("configure", "write", "read"))
        _check_user_and_vhost(context, user, vhost_name)
        exists = (user, vhost_name) in context.broker.access.permissions
        with _admin_refusals():
            context.admin.set_permissions(user, vhost_name, body["configure"],
                                          body["write"], body["read"])
        await context.commit()
        return Response(status_code=204 if exists else 201)
    found = _permissions(context, user, vhost_name)
    if not found:
        raise not_found()
    if request.method == "DELETE":
        context.admin.clear_permissions(user, vhost_name)
        await context.commit()
        return Response(status_code=204)
    return JSONResponse(found[0])


async def topic_permission(request: Request) -> Response:
    caller_of(request, ADMINISTRATOR)
    context = context_of(request)
    user, vhost_name = request.path_params["user"], request.path_params["vhost"]
    if request.method == "PUT":
        body = _required(await json_body(request), ("exchange", "write", "read"))
        _check_user_and_vhost(context, user, vhost_name)
        exists = any(p["exchange"] == body["exchange"]
                     for p in _topic_permissions(context, user, vhost_name))
        with _admin_refusals():
            context.admin.set_topic_permissions(user, vhost_name, body["exchange"],
                                                body["write"], body["read"])
        await context.commit()
        return Response(status_code=204 if exists else 201)
    found = _topic_permissions(context, user, vhost_name)
    if not found:
        raise not_found()
    if request.method == "DELETE":
        context.admin.clear_topic_permissions(user, vhost_name)
        await context.commit()
        return Response(status_code=204)
    return JSONResponse(found)


def _check_user_and_vhost(context, user: str, vhost_name: str) -> None:
    if user not in context.broker.access.users or vhost_name not in context.broker.vhosts:
        raise bad_request("vhost_or_user_not_found")


# -- limits ----------------------------------------------------------------------------

async def list_vhost_limits(request: Request) -> Response:
    caller = caller_of(request, MANAGEMENT)
    context = context_of(request)
    if "vhost" in request.path_params:
        names = {_visible_vhost(context, caller, request.path_params["vhost"]).name}
    else:
        names = {vhost.name for vhost in visible_vhosts(context, caller)}
    return listed(request, [{"vhost": name, "value": dict(limits)}
                            for name, limits in context.broker.limits.vhosts.items()
                            if limits and name in names], paginated=False)


async def list_user_limits(request: Request) -> Response:
    """Every user's limits for an administrator, the caller's own for the others."""
    caller = caller_of(request, MANAGEMENT)
    context = context_of(request)
    name = request.path_params.get("name")
    if name is not None:
        _user(context, name)
    return listed(request, [{"user": user, "value": dict(limits)}
                            for user, limits in context.broker.limits.users.items()
                            if limits and name in (None, user)
                            and (caller.has(ADMINISTRATOR) or user == caller.name)],
                  paginated=False)


async def vhost_limit(request: Request) -> Response:
    caller_of(request, ADMINISTRATOR)
    context = context_of(request)
    vhost_name, limit = request.path_params["vhost"], request.path_params["limit"]
    _vhost(context, vhost_name)
    current = dict(context.broker.limits.vhosts.get(vhost_name, {}))
    if request.method == "PUT":
        current[limit] = await _limit_value(request, limit, VHOST_LIMITS, "limits")
    else:
        current.pop(limit, None)
    with _admin_refusals():
        context.admin.set_vhost_limits(vhost_name, current)
    await context.commit()
    return Response(status_code=204)


async def user_limit(request: Request) -> Response:
    caller_of(request, ADMINISTRATOR)
    context = context_of(request)
    name, limit = request.path_params["name"], request.path_params["limit"]
    _user(context, name)
    with _admin_refusals():
        if request.method == "PUT":
            value = await _limit_value(request, limit, USER_LIMITS, "user-limits")
            context.admin.set_user_limits(name, {limit: value})
        else:
            context.admin.clear_user_limits(name, limit)
    await context.commit()
    return Response(status_code=204)


async def _limit_value(request: Request, limit: str, known: tuple, where: str) -> int:
    body = _required(await json_body(request), ("value",))
    value = body["value"]
    if limit not in known:
        raise bad_request(f"Validation failed\n\nUnrecognised terms "
                          f"[{{<<\"{limit}\">>,{value}}}] in {where}\n")
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"Validation failed\n\n{limit} should be a number, actually "
                          f"was {value!r}\n")
    return value


# -- parameters ------------------------------------------------------------------------

def _parameters_caller(request: Request) -> Caller:
    """Parameters are for policymakers; RabbitMQ words the refusal as for an object."""
    caller = caller_of(request, MANAGEMENT)
    if not caller.has(POLICYMAKER):
        raise not_authorised("User not authorised to access object")
    return caller


async def list_parameters(request: Request) -> Response:
    """Warren has no runtime parameters besides policies (listed under /api/policies)."""
    _parameters_caller(request)
    return listed(request, [], paginated=False)


async def put_parameter(request: Request) -> Response:
    _parameters_caller(request)
    await json_body(request)
    component = request.path_params["component"]
    raise bad_request(f"Validation failed\n\ncomponent {component} not found\n")


async def list_global_parameters(request: Request) -> Response:
    _parameters_caller(request)
    cluster_name = context_of(request).broker.server_properties()["cluster_name"]
    return listed(request, [{"name": "cluster_name", "value": cluster_name}],
                  paginated=False)


# -- shared ----------------------------------------------------------------------------

def _object(body) -> dict:
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    return body


def _required(body, keys: tuple[str, ...]) -> dict:
    body = _object(body)
    missing = [key for key in keys if key not in body]
    if missing:
        raise bad_request("[" + ",".join(f"{{key_missing,{key}}}" for key in missing)
                          + "]")
    return body


@contextmanager
def _admin_refusals():
    """An AdminError becomes RabbitMQ's 400 with the reason."""
    try:
        yield
    except AdminError as error:
        raise bad_request(error.reason or str(error)) from None


ROUTES = [
    Route("/api/users", list_users),
    Route("/api/users/without-permissions", users_without_permissions),
    Route("/api/users/bulk-delete", bulk_delete_users, methods=["POST"]),
    Route("/api/users/{name}/permissions", permissions_of_user),
    Route("/api/users/{name}/topic-permissions", permissions_of_user),
    Route("/api/users/{name}", user, methods=["GET", "PUT", "DELETE"]),
    Route("/api/vhosts", list_vhosts),
    Route("/api/vhosts/{vhost}/permissions", permissions_in_vhost),
    Route("/api/vhosts/{vhost}/topic-permissions", permissions_in_vhost),
    Route("/api/vhosts/{vhost}", vhost, methods=["GET", "PUT", "DELETE"]),
    Route("/api/permissions", list_permissions),
    Route("/api/permissions/{vhost}/{user}", permission,
          methods=["GET", "PUT", "DELETE"]),
    Route("/api/topic-permissions", list_topic_permissions),
    Route("/api/topic-permissions/{vhost}/{user}", topic_permission,
          methods=["GET", "PUT", "DELETE"]),
    Route("/api/vhost-limits", list_vhost_limits),
    Route("/api/vhost-limits/{vhost}/{limit}", vhost_limit,
          methods=["PUT", "DELETE"]),
    Route("/api/vhost-limits/{vhost}", list_vhost_limits),
    Route("/api/user-limits", list_user_limits),
    Route("/api/user-limits/{name}", list_user_limits),
    Route("/api/user-limits/{name}/{limit}", user_limit, methods=["PUT", "DELETE"]),
    Route("/api/parameters", list_parameters),
    Route("/api/parameters/{component}", list_parameters),
    Route("/api/parameters/{component}/{vhost}/{name}", put_parameter,
          methods=["PUT"]),
    Route("/api/parameters/{component}/{vhost}", list_parameters),
    Route("/api/global-parameters", list_global_parameters),
]
