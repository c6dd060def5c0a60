"""Memory and disk alarms: when the broker's resident memory passes its high watermark or
free disk space in the data directory falls below its limit, publishing connections are
blocked (RabbitMQ's resource alarms) until the resource recovers."""

import logging
import os
from dataclasses import dataclass

import trio

log = logging.getLogger("warren.server")

CHECK_INTERVAL = 1.0


@dataclass
class AlarmLimits:
    memory_high_watermark: float = 0.4      # fraction of the machine's RAM
    disk_free_limit: int = 50_000_000       # bytes that must stay free (RabbitMQ: 50 MB)


def resident_memory() -> int:
    """This process's resident set size in bytes (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def total_memory() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def free_disk(path: str) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


class ResourceAlarm:
    """Which alarms are raised now, and an event that is set while none is."""

    def __init__(self, limits: AlarmLimits, data_dir: str, on_change,
                 read_memory=resident_memory, read_disk=free_disk):
        self.memory_limit = int(limits.memory_high_watermark * total_memory())
        self.disk_limit = limits.disk_free_limit
        self.data_dir = data_dir
        self.raised: frozenset[str] = frozenset()
        self.clear = trio.Event()
        self.clear.set()
        self._on_change = on_change          # called with the set of raised alarms
        self._read_memory = read_memory
        self._read_disk = read_disk

    def check(self) -> None:
        raised = set()
        if self._read_memory() > self.memory_limit:
            raised.add("memory")
        if self._read_disk(self.data_dir) < self.disk_limit:
            raised.add("disk")
        self._update(frozenset(raised))

    def _update(self, raised: frozenset) -> None:
        if raised == self.raised:
            return
        log.warning("event=resource_alarm raised=%s", ",".join(sorted(raised)) or "none")
        self.raised = raised
        if raised and self.clear.is_set():
            self.clear = trio.Event()
        elif not raised:
            self.clear.set()
        self._on_change(raised)

    async def run(self, interval: float = CHECK_INTERVAL) -> None:
        while True:
            self.check()
            await trio.sleep(interval)
