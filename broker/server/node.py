"""One Warren node assembled from its settings: the metadata and message storage, the
core broker restored from them, and the server with its listeners. `warren serve` runs
one on the main thread; the test broker (broker/testing) runs one on a thread of its
own, with the test hooks switched on."""

import json
import logging
import os
import sys
import time

import trio

from broker import __version__
from broker.config import ServeSettings
from broker.core import definitions
from broker.core.admin import Administration
from broker.core.broker import Broker
from storage.kernel_sync import open_kernel_sync

from .admission import default_connection_caps, raise_file_limit
from .committer import GroupCommitter
from .control import CONTROL_SOCKET_NAME, MAX_SOCKET_PATH, ControlSocket
from .durability import DurableStorage
from .listener import Server
from .management.listener import ManagementListener
from .testing.clock import VirtualClock
from .testing.hooks import TestHooks
from .tls import TlsListener, server_context

log = logging.getLogger("warren.server")


class DefinitionsRefused(Exception):
    """The definitions file named by load_definitions cannot be applied (the text says
    why and what to do)."""


class Node:
    """Storage, broker and server of one node. `run()` serves until the server stops
    (a signal on the main thread, or `server.request_stop()`); `close()` closes the
    storage. With `testing`, the control socket also answers the test hooks' operations
    (broker/server/testing), and the node runs on a VirtualClock that they advance."""

    def __init__(self, settings: ServeSettings, testing: bool = False):
        self.settings = settings
        tls = (TlsListener(settings.tls, server_context(settings.tls))
               if settings.tls.port is not None else None)   # ConfigError: nothing opened
        _fill_connection_caps(settings.limits)
        os.makedirs(settings.data_dir, exist_ok=True)
        self.virtual_clock = VirtualClock() if testing else None
        wall_clock = self.virtual_clock.wall_time if self.virtual_clock else time.time
        self.storage = DurableStorage(settings.data_dir, settings.metadata_url, wall_clock)
        self.kernel_sync = open_kernel_sync(self.storage.queues_dir)
        log.debug("event=commit_sync mode=%s",
                  self.kernel_sync.kind if self.kernel_sync else "worker_thread")
        self.broker = Broker(settings.limits, persistence=self.storage.persistence,
                             version=__version__, loopback_users=settings.loopback_users,
                             profile=settings.profile())
        if self.virtual_clock is not None:
            self.broker.scheduler.clock = self.virtual_clock.current_time
            self.broker.scheduler.wall_clock = self.virtual_clock.wall_time
        self.broker.auth_mechanisms = tuple(settings.auth_mechanisms)
        self.storage.restore(self.broker)
        if settings.load_definitions:
            self._load_definitions(settings.load_definitions)
        self.committer = GroupCommitter(self.storage.persistence, self.storage.apply_changes,
                                        self.storage.sync_stores,
                                        self.storage.maintain_stores, self.kernel_sync)
        self.server = Server(self.broker, settings.host, settings.port, self.committer,
                             settings.alarms, settings.data_dir,
                             control=self._control_socket(), tls=tls,
                             plain_listener=settings.tls.plain_listener,
                             management=self._management_listener())
        self.test_hooks: TestHooks | None = None
        if testing:
            self.test_hooks = TestHooks(self.server)
            if self.server.control is not None:
                self.server.control.test_hooks = self.test_hooks

    async def run(self) -> None:
        await self.server.run()

    def close(self) -> None:
        self.storage.close(self.broker)
        if self.kernel_sync is not None:
            self.kernel_sync.close()

    def _load_definitions(self, path: str) -> None:
        try:
            with open(path, "rb") as handle:
                document = json.load(handle)
            definitions.apply(Administration(self.broker), document)
        except (OSError, ValueError) as error:   # DefinitionsError is a ValueError
            self.close()
            raise DefinitionsRefused(
                f"cannot load definitions from {path}: {error} (fix the file or remove "
                "load_definitions / --load-definitions)") from error
        log.info("event=definitions_loaded path=%s", path)

    def _control_socket(self) -> ControlSocket | None:
        path = self.settings.control_socket
        if path is None:
            path = os.path.join(self.settings.data_dir, CONTROL_SOCKET_NAME)
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            logging.getLogger("warren.control").warning(
                "event=control_socket_disabled path=%s reason=%r", path,
                f"Unix socket paths are limited to {MAX_SOCKET_PATH} bytes: set "
                "control_socket to a shorter path")
            return None
        return ControlSocket(self.broker, self.committer, path) if path else None

    def _management_listener(self) -> ManagementListener | None:
        management = self.settings.management
        if management.port == 0:
            return None
        host = management.host or self.settings.host
        port = management.port      # a port number, or "auto": a free port (0)
        return ManagementListener(self.broker, self.committer, host,
                                  port if isinstance(port, int) else 0,
                                  management.sample_interval)


def _fill_connection_caps(limits) -> None:
    """Connection caps left at 0 are worked out from the open-file limit (raised to its
    hard limit first), so sockets can never use up the broker's file descriptors."""
    file_limit = raise_file_limit()
    connection_max, unauthenticated_max = default_connection_caps(file_limit)
    limits.connection_max = limits.connection_max or connection_max
    limits.unauthenticated_connection_max = (limits.unauthenticated_connection_max
                                             or unauthenticated_max)
    log.debug("event=connection_caps file_limit=%d connection_max=%d "
              "unauthenticated_connection_max=%d", file_limit, limits.connection_max,
              limits.unauthenticated_connection_max)


# How long a thread may hold the GIL while another waits for it (Python's default is
# 5 ms). The event loop handles a whole read of frames without releasing the GIL;
# meanwhile the group commit's worker thread waits for it before it can write, and
# after the fsync before it can wake the loop, and every confirm waits with it. At
# 1 ms the worker gets in sooner (docs/history/benchmarks-rounds.md, issue 18, round 2).
GIL_SWITCH_INTERVAL = 0.001


def run_until_stopped(node: Node) -> None:
    """Run the node on this thread until its server stops, then close its storage. A
    test node runs on its virtual clock. The GIL switch interval is the process's: a
    process that embeds the broker (the pytest plugin's thread mode) gets its own back
    when the node stops."""
    previous_interval = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    try:
        trio.run(node.run, clock=node.virtual_clock)
    finally:
        sys.setswitchinterval(previous_interval)
        node.close()
