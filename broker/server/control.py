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
        mistyped = _mistyped_argument(method, arguments)
        if mistyped:
            return _refused(f"bad arguments for {operation}: {mistyped}")
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
    if not isinstance(name, str) or name.startswith("_"):
        return None
    method = getattr(admin, name, None)
    return method if callable(method) else None


def _mistyped_argument(method, arguments: dict) -> str | None:
    """What is wrong with the first argument whose JSON type the method's annotation
    does not accept (a number for a name, an array for limits...), checked before the
    method runs so that it never sees one."""
    # a test operation's first parameter names TestHooks only for type checkers
    hints = typing.get_type_hints(method, localns={"TestHooks": TestHooks})
    for name, value in arguments.items():
        hint = hints.get(name)
        if hint is None:
            continue
        accepted = _accepted_types(hint)
        if not isinstance(value, accepted) or (isinstance(value, bool)
                                               and bool not in accepted):
            names = " or ".join(_JSON_NAMES.get(kind, kind.__name__) for kind in accepted)
            return f"{name!r} must be {names}, not {_json_name(value)}"
    return None


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
