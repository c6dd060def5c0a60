"""The test hooks' entry point: the operations a test broker answers on its control
socket, by name ("test.<name>"), each a function of this module's modules taking the
`TestHooks` and the request's arguments."""

import inspect
import logging
from typing import TYPE_CHECKING, Any, Callable

from broker.core.admin import AdminError, Administration

from . import clock, faults, inspection, leftovers, sandbox, waits
from .refusal import TestHookError

if TYPE_CHECKING:
    from ..listener import Server

log = logging.getLogger("warren.testing")

PREFIX = "test."
# Each module's OPERATIONS: {name: function(hooks, **arguments) -> JSON value}; the
# function may be async (a wait).
OPERATION_MODULES = (sandbox, inspection, waits, faults, clock, leftovers)


class TestHooks:
    """What the operations reach: the server (its transports, alarm and committer) and
    the core broker."""

    def __init__(self, server: "Server"):
        self.server = server
        self.broker = server.broker
        self.committer = server.committer
        self.admin = Administration(server.broker)
        self.pending_waits = waits.PendingWaits()   # re-checked while any is pending
        # the broker's own consumer timeout while a test has set another one
        self.usual_consumer_timeout: int | None = None
        self.operations: dict[str, Callable[..., Any]] = {}
        for module in OPERATION_MODULES:
            self.operations.update(module.OPERATIONS)

    def operation(self, name: str) -> Callable[..., Any] | None:
        """The function serving "test.<name>", or None."""
        if not name.startswith(PREFIX):
            return None
        return self.operations.get(name[len(PREFIX):])

    async def call(self, function: Callable[..., Any], arguments: dict) -> Any:
        """Run an operation; AdminError and TestHookError come back as refusals."""
        try:
            inspect.signature(function).bind(self, **arguments)
        except TypeError as error:
            raise TestHookError(f"bad arguments: {error}") from None
        try:
            result = function(self, **arguments)
            if inspect.isawaitable(result):
                result = await result
        except AdminError as error:
            raise TestHookError(str(error)) from error
        return result

    async def committed(self) -> None:
        """Wait until metadata changes made so far are in the metadata store."""
        await self.committer.flush()
        if self.committer.persistence.has_pending():
            raise TestHookError("applied, but the metadata store could not be written; "
                                "it is retried at the next commit (see the broker log)")
