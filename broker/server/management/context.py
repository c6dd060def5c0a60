"""What the management handlers work with: the broker, its Administration, the commit
that makes a change durable, and the server's live state (sockets, alarms, listeners)."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.requests import Request

from broker.core.admin import Administration
from broker.core.broker import Broker

from ..committer import GroupCommitter
from .auth import MANAGEMENT, Caller, authenticate
from .errors import ApiError
from .stats import StatsSampler

if TYPE_CHECKING:
    from ..listener import Server


@dataclass
class ManagementContext:
    broker: Broker
    committer: GroupCommitter
    server: "Server"
    sampler: StatsSampler
    admin: Administration = field(init=False)

    def __post_init__(self):
        self.admin = Administration(self.broker)

    async def commit(self) -> None:
        """Wait until the changes made so far are in the metadata store: a write's reply
        is sent after this, as the control socket's is."""
        await self.committer.flush()
        if self.committer.persistence.has_pending():
            raise ApiError(500, "internal_server_error",
                           "applied, but the metadata store could not be written; it is "
                           "retried at the next commit (see the broker log)")


def context_of(request: Request) -> ManagementContext:
    return request.app.state.context


def caller_of(request: Request, tag: str = MANAGEMENT) -> Caller:
    """The authenticated caller, who must hold `tag` (401 otherwise, as RabbitMQ)."""
    caller = authenticate(context_of(request).broker, request)
    caller.require(tag)
    return caller
