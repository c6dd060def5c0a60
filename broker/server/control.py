"""The control socket: a Unix socket (`<data_dir>/control.sock` by default) through
which operators and tests change a running broker's users, vhosts, permissions, policies
and limits (broker/core/admin.py). One JSON object per line each way:

    {"op": "add_user", "args": {"name": "alice", "password": "s3cret"}}
    -> {"ok": true}
    -> {"ok": false, "error": "user 'alice' already exists"}

The reply is sent once the change is committed to the metadata store. The socket file
is made readable and writable by the broker's OS user only: whoever can use it can do
anything to the broker.
"""

import inspect
import json
import logging
import os
import types
import typing

import trio

from broker.core.admin import AdminError, Administration
from broker.core.broker import Broker

from .committer import GroupCommitter
from .testing.hooks import PREFIX as TEST_PREFIX
from .testing.hooks import TestHookError, TestHooks

log = logging.getLogger("warren.control")

CONTROL_SOCKET_NAME = "control.sock"   # in the data directory, unless configured
MAX_SOCKET_PATH = 107        # bytes: sun_path is 108 with its NUL
MAX_REQUEST_BYTES = 1 << 20   # a longer line closes the control connection
SOCKET_MODE = 0o600


# The JSON types of the arguments of Administration's operations, checked here before a
# call, the same way on both builds: the compiled build's methods have no annotations to
# read at run time, and they would refuse a wrong type with mypyc's own TypeError. An
# argument not listed (tags, limits, a policy's definition, a vhost's description) is
# checked by the operation itself. tests/unit/test_control_arguments.py keeps this
# table in step with broker/core/admin.py's annotations.
JsonTypes = tuple[type, ...]
STRING: JsonTypes = (str,)
STRING_OR_NULL: JsonTypes = (str, type(None))
BOOLEAN: JsonTypes = (bool,)
INTEGER: JsonTypes = (int,)
OBJECT_OR_NULL: JsonTypes = (dict, type(None))
# the topology operations act as a user, or as the operator (None)
_USER_OR_OPERATOR: dict[str, JsonTypes] = {"user": STRING_OR_NULL}
_BINDING: dict[str, JsonTypes] = {
    "vhost": STRING, "source": STRING, "destination_kind": STRING, "destination": STRING,
    "routing_key": STRING, "arguments": OBJECT_OR_NULL, **_USER_OR_OPERATOR}
_POLICY: dict[str, JsonTypes] = {
    "vhost": STRING, "name": STRING, "pattern": STRING, "priority": INTEGER,
    "apply_to": STRING}
ADMIN_ARGUMENT_TYPES: dict[str, dict[str, JsonTypes]] = {
    "add_user": {"name": STRING, "password": STRING_OR_NULL,
                 "password_hash": STRING_OR_NULL},
    "change_password": {"name": STRING, "password": STRING},
    "set_password_hash": {"name": STRING, "password_hash": STRING},
    "clear_password": {"name": STRING},
    "set_user_tags": {"name": STRING},
    "delete_user": {"name": STRING},
    "add_vhost": {"name": STRING},
    "update_vhost": {"name": STRING},
    "delete_vhost": {"name": STRING},
    "set_permissions": {"user": STRING, "vhost": STRING, "configure": STRING,
                        "write": STRING, "read": STRING},
    "clear_permissions": {"user": STRING, "vhost": STRING},
    "set_topic_permissions": {"user": STRING, "vhost": STRING, "exchange": STRING,
                              "write": STRING, "read": STRING},
    "clear_topic_permissions": {"user": STRING, "vhost": STRING,
                                "exchange": STRING_OR_NULL},
    "set_vhost_limits": {"vhost": STRING},
    "clear_vhost_limits": {"vhost": STRING},
    "set_user_limits": {"user": STRING},
    "clear_user_limits": {"user": STRING, "limit": STRING},
    "set_policy": _POLICY,
    "clear_policy": {"vhost": STRING, "name": STRING},
    "set_operator_policy": _POLICY,
    "clear_operator_policy": {"vhost": STRING, "name": STRING},
    "declare_exchange": {"vhost": STRING, "name": STRING, "type": STRING,
                         "durable": BOOLEAN, "auto_delete": BOOLEAN, "internal": BOOLEAN,
                         "arguments": OBJECT_OR_NULL, **_USER_OR_OPERATOR},
    "delete_exchange": {"vhost": STRING, "name": STRING, "if_unused": BOOLEAN,
                        **_USER_OR_OPERATOR},
    "declare_queue": {"vhost": STRING, "name": STRING, "durable": BOOLEAN,
                      "auto_delete": BOOLEAN, "arguments": OBJECT_OR_NULL,
                      **_USER_OR_OPERATOR},
    "delete_queue": {"vhost": STRING, "name": STRING, "if_unused": BOOLEAN,
                     "if_empty": BOOLEAN, **_USER_OR_OPERATOR},
    "purge_queue": {"vhost": STRING, "name": STRING, **_USER_OR_OPERATOR},
    "bind": _BINDING,
    "unbind": _BINDING,
}


class ControlSocket:
    """Serves admin requests on a Unix socket at `path`."""

    def __init__(self, broker: Broker, committer: GroupCommitter, path: str):
        self.admin = Administration(broker)
        self.committer = committer
        self.path = path
        # a test broker's hooks: "test.*" operations (broker/server/testing)
        self.test_hooks: TestHooks | None = None

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; started (task_status) once the socket listens."""
        listener = await self._listen()
        log.info("event=control_listening path=%s", self.path)
        task_status.started()
        try:
            await trio.serve_listeners(self._serve, [listener])
        finally:
            _remove(self.path)

    async def _listen(self) -> trio.SocketListener:
        _remove(self.path)   # left behind by a broker that was killed
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(self.path)
        os.chmod(self.path, SOCKET_MODE)
        sock.listen()
        return trio.SocketListener(sock)

    async def _serve(self, stream: trio.SocketStream) -> None:
        """One control connection; nothing raised here reaches the listener."""
        try:
            async with stream:
                await self._serve_requests(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception as error:
            log.error("event=control_connection_failed", exc_info=error)

    async def _serve_requests(self, stream: trio.SocketStream) -> None:
        pending = b""
        while True:
            data = await stream.receive_some()
            if not data:
                return
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                reply = await self._answer(line)
                await stream.send_all(json.dumps(reply).encode() + b"\n")
            if len(pending) > MAX_REQUEST_BYTES:
                await stream.send_all(json.dumps(_refused(
                    f"request longer than {MAX_REQUEST_BYTES} bytes")).encode() + b"\n")
                return

    async def _answer(self, line: bytes) -> dict:
        try:
            request = json.loads(line)
            operation, arguments = request["op"], request.get("args", {})
        except (ValueError, KeyError, TypeError):
            return _refused('expected {"op": NAME, "args": {...}} on one line')
        test_operation = (self.test_hooks.operation(operation)
                          if self.test_hooks is not None and isinstance(operation, str)
                          else None)
        method = test_operation or _operation(self.admin, operation)
        if method is None:
            return _refused(f"unknown operation {operation!r}" + (
                " (test operations need a broker started with --testing)"
                if str(operation).startswith(TEST_PREFIX) else ""))
        if not isinstance(arguments, dict):
            return _refused(f'"args" of {operation} must be a JSON object')
        if test_operation is not None:   # TestHooks.call checks their signature
            wrong = _mistyped_argument(arguments, _annotated_types(test_operation))
        else:
            wrong = (_unbound_argument(method, arguments)
                     or _mistyped_argument(arguments, ADMIN_ARGUMENT_TYPES[operation]))
        if wrong:
            return _refused(f"bad arguments for {operation}: {wrong}")
        if test_operation is not None:
            return await self._answer_test(operation, test_operation, arguments)
        try:
            method(**arguments)
        except AdminError as error:
            return _refused(str(error))
        except TypeError as error:
            return _refused(f"bad arguments for {operation}: {error}")
        log.info("event=admin_operation op=%s", operation)
        await self.committer.flush()
        if self.committer.persistence.has_pending():
            return _refused("applied, but the metadata store could not be written; "
                            "it is retried at the next commit (see the broker log)")
        return {"ok": True}


    async def _answer_test(self, name: str, operation, arguments: dict) -> dict:
        assert self.test_hooks is not None
        try:
            result = await self.test_hooks.call(operation, arguments)
        except TestHookError as error:
            return _refused(str(error))
        except Exception as error:   # a fault of the hook: this request fails, not more
            log.error("event=test_operation_failed op=%s", name, exc_info=error)
            return _refused(f"{name} failed in the broker: {error!r} (see the broker log)")
        log.debug("event=test_operation op=%s", name)
        return {"ok": True, "result": result}


def _operation(admin: Administration, name: object):
    """The Administration method serving the operation `name`, or None: the operations
    are ADMIN_ARGUMENT_TYPES' keys."""
    if not isinstance(name, str) or name not in ADMIN_ARGUMENT_TYPES:
        return None
    return getattr(admin, name)


def _unbound_argument(method, arguments: dict) -> str | None:
    """A missing or unknown argument, by the method's signature (inspect reads it from
    both builds and says it in the same words)."""
    try:
        inspect.signature(method).bind(**arguments)
    except TypeError as error:
        return str(error)
    return None


def _mistyped_argument(arguments: dict, types: dict[str, tuple[type, ...]]) -> str | None:
    """What is wrong with the first argument whose JSON type is not one of its `types`
    (a number for a name, an array for limits...), checked before the operation runs so
    that it never sees one."""
    for name, value in arguments.items():
        accepted = types.get(name)
        if accepted is None:
            continue
        if not isinstance(value, accepted) or (isinstance(value, bool)
                                               and bool not in accepted):
            names = " or ".join(_JSON_NAMES.get(kind, kind.__name__) for kind in accepted)
            return f"{name!r} must be {names}, not {_json_name(value)}"
    return None


def _annotated_types(function) -> dict[str, tuple[type, ...]]:
    """The types a test operation's annotations accept, by parameter (the test hooks
    are never compiled, so their annotations are there to read)."""
    # a test operation's first parameter names TestHooks only for type checkers
    hints = typing.get_type_hints(function, localns={"TestHooks": TestHooks})
    return {name: _accepted_types(hint) for name, hint in hints.items()
            if name != "return"}


def _accepted_types(hint) -> tuple[type, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(kind for part in typing.get_args(hint)
                     for kind in _accepted_types(part))
    kind = typing.get_origin(hint) or hint
    return (kind,) if isinstance(kind, type) else (object,)


_JSON_NAMES = {str: "a string", int: "an integer", dict: "an object", list: "an array",
               bool: "true or false", type(None): "null"}


def _json_name(value) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _refused(error: str) -> dict:
    return {"ok": False, "error": error}


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
