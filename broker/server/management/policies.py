"""Policies and operator policies over HTTP, in RabbitMQ 3.10's shapes: /api/policies and
/api/operator-policies, each with `/{vhost}` and `/{vhost}/{name}`.

A policymaker manages the policies of the vhosts it may open (an administrator: of all);
operator policies are for administrators only; a management user lists the policies of
its vhosts. Changes go through Administration and are committed before the reply.
"""

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from broker.core.admin import AdminError
from broker.core.policy import OPERATOR_POLICY, POLICY, Policy

from .access import visible_vhosts
from .auth import ADMINISTRATOR, MANAGEMENT, POLICYMAKER, Caller
from .bodies import json_body
from .context import caller_of, context_of
from .encoded_paths import EncodedPathRoute as Route
from .errors import ApiError, bad_request, not_authorised, not_found
from .listing import listed

_KIND_OF_PATH = {"policies": POLICY, "operator-policies": OPERATOR_POLICY}


def policy_json(policy: Policy) -> dict:
    return {"vhost": policy.vhost, "name": policy.name, "pattern": policy.pattern,
            "apply-to": policy.apply_to, "definition": dict(policy.definition),
            "priority": policy.priority}


def _kind(request: Request) -> str:
    return _KIND_OF_PATH[request.url.path.split("/")[2]]


def _reader(request: Request) -> Caller:
    """Any management user reads the policies of the vhosts it sees."""
    return caller_of(request, MANAGEMENT)


async def list_policies(request: Request) -> Response:
    caller = _reader(request)
    context = context_of(request)
    kind = _kind(request)
    vhosts = visible_vhosts(context, caller)
    if "vhost" in request.path_params:
        name = request.path_params["vhost"]
        vhosts = [vhost for vhost in vhosts if vhost.name == name]
        if not vhosts:
            raise not_found()
    return listed(request, [policy_json(policy) for vhost in vhosts
                            for policy in vhost.policies.by_kind[kind].values()],
                  paginated=False)


async def policy(request: Request) -> Response:
    kind = _kind(request)
    vhost_name, name = request.path_params["vhost"], request.path_params["name"]
    context = context_of(request)
    if request.method == "GET":
        _reader(request)
        return JSONResponse(policy_json(_policy(context, kind, vhost_name, name)))
    caller = caller_of(request, POLICYMAKER if kind == POLICY else ADMINISTRATOR)
    _check_vhost_access(context, caller, vhost_name)
    if request.method == "DELETE":
        _policy(context, kind, vhost_name, name)
        _clear(context, kind, vhost_name, name)
        await context.commit()
        return Response(status_code=204)
    return await _put(request, kind, vhost_name, name)


async def _put(request: Request, kind: str, vhost_name: str, name: str) -> Response:
    context = context_of(request)
    body = await json_body(request)
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    missing = [key for key in ("pattern", "definition") if key not in body]
    if missing:
        raise bad_request("[" + ",".join(f"{{key_missing,{key}}}" for key in missing)
                          + "]")
    if vhost_name not in context.broker.vhosts:
        raise ApiError(404, "not_found", "vhost_not_found")
    exists = name in context.broker.vhosts[vhost_name].policies.by_kind[kind]
    setter = (context.admin.set_policy if kind == POLICY
              else context.admin.set_operator_policy)
    try:
        setter(vhost_name, name, body["pattern"], body["definition"],
               body.get("priority", 0), body.get("apply-to", "all"))
    except AdminError as error:
        raise bad_request(str(error)) from None
    await context.commit()
    return Response(status_code=204 if exists else 201)


def _clear(context, kind: str, vhost_name: str, name: str) -> None:
    if kind == POLICY:
        context.admin.clear_policy(vhost_name, name)
    else:
        context.admin.clear_operator_policy(vhost_name, name)


def _policy(context, kind: str, vhost_name: str, name: str) -> Policy:
    vhost = context.broker.vhosts.get(vhost_name)
    found = vhost.policies.by_kind[kind].get(name) if vhost else None
    if found is None:
        raise not_found()
    return found


def _check_vhost_access(context, caller: Caller, vhost_name: str) -> None:
    """A policymaker changes policies only in the vhosts it may open, as in RabbitMQ."""
    if caller.has(ADMINISTRATOR) or vhost_name not in context.broker.vhosts:
        return
    if not context.broker.access.may_open(caller.name, vhost_name):
        raise not_authorised("User not authorised to access object")


ROUTES = [
    route
    for prefix in ("/api/policies", "/api/operator-policies")
    for route in (
        Route(prefix, list_policies),
        Route(prefix + "/{vhost}/{name}", policy, methods=["GET", "PUT", "DELETE"]),
        Route(prefix + "/{vhost}", list_policies),
    )
]
