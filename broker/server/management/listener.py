"""The management HTTP listener: hypercorn serving the ASGI app on the broker's loop."""

import logging
from typing import TYPE_CHECKING

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from broker.core.broker import Broker

from ..committer import GroupCommitter
from .app import build_app
from .context import ManagementContext
from .stats import DEFAULT_INTERVAL, StatsSampler

if TYPE_CHECKING:
    from ..listener import Server

log = logging.getLogger("warren.management")
# hypercorn's own messages ("Running on ..."): only its warnings and errors are kept
http_log = logging.getLogger("warren.management.http")
http_log.setLevel(logging.WARNING)


class ManagementListener:
    """Serves the management API on host:port (port 0: a free one)."""

    def __init__(self, broker: Broker, committer: GroupCommitter, host: str, port: int,
                 sample_interval: float = DEFAULT_INTERVAL):
        self.broker = broker
        self.sample_interval = sample_interval
        self.committer = committer
        self.host = host
        self.port = port

    async def run(self, server: "Server", task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; started (task_status) once the socket listens. Raises
        OSError when the address cannot be bound."""
        sampler = StatsSampler(self.broker, server, self.sample_interval)
        context = ManagementContext(self.broker, self.committer, server, sampler)
        config = Config()
        host = f"[{self.host}]" if ":" in self.host else self.host
        config.bind = [f"{host}:{self.port}"]
        config.accesslog = None
        config.errorlog = http_log
        config.graceful_timeout = 1.0
        config.include_server_header = False

        async def serving(task_status=trio.TASK_STATUS_IGNORED):
            app = build_app(context)   # Starlette's ASGI types are not hypercorn's TypedDicts:
            await serve(app, config, task_status=task_status)  # type: ignore[arg-type]

        async with trio.open_nursery() as nursery:
            binds = await nursery.start(serving)
            nursery.start_soon(sampler.run)
            self.port = int(binds[0].rsplit(":", 1)[1])
            log.info("event=management_listening host=%s port=%d", self.host, self.port)
            task_status.started()
