"""Memory and disk alarms: when the memory the broker holds passes its high watermark or
free disk space in the data directory falls below its limit, publishing connections are
blocked (RabbitMQ's resource alarms) until the resource recovers.

Memory is the broker's own accounting of what it holds, not the process's resident set
size: CPython rarely gives freed memory back to the system, so an alarm on RSS would never
clear once raised. `held_memory` is the reading (docs/configuration.md)."""

import logging
import os
from dataclasses import dataclass

import trio

log = logging.getLogger("warren.server")

CHECK_INTERVAL = 1.0


@dataclass
class AlarmLimits:
    memory_high_watermark: float = 0.4      # fraction of the machine's RAM
    memory_high_watermark_absolute: int | None = None   # bytes; replaces the fraction
    disk_free_limit: int = 50_000_000       # bytes that must stay free (RabbitMQ: 50 MB)

    def memory_limit(self) -> int:
        if self.memory_high_watermark_absolute is not None:
            return self.memory_high_watermark_absolute
        return int(self.memory_high_watermark * total_memory())


def held_memory(broker, transports) -> int:
    """Bytes the broker holds for its clients: what queued and unacked messages cost
    (Queue.held_bytes) and every connection's output and partly received input."""
    held = 0
    for vhost in broker.vhosts.values():
        for queue in vhost.queues.values():
            held += queue.held_bytes
    for transport in transports:
        held += transport.held_bytes
    return held


def total_memory() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def free_disk(path: str) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


class ResourceAlarm:
    """Which alarms are raised now, and an event that is set while none is."""

    def __init__(self, limits: AlarmLimits, data_dir: str, on_change, read_memory,
                 read_disk=free_disk):
        self.memory_limit = limits.memory_limit()
        self.disk_limit = limits.disk_free_limit
        self.data_dir = data_dir
        self.raised: frozenset[str] = frozenset()
        self.clear = trio.Event()
        self.clear.set()
        self._on_change = on_change          # called with the set of raised alarms
        self._read_memory = read_memory      # bytes held (see held_memory)
        self._read_disk = read_disk
        self._held = 0                       # the last memory reading, for the log
        self._failing = False                # the last reading failed (logged once)

    def check(self) -> None:
        raised = set()
        self._held = self._read_memory()
        if self._held > self.memory_limit:
            raised.add("memory")
        if self._read_disk(self.data_dir) < self.disk_limit:
            raised.add("disk")
        self._update(frozenset(raised))

    def _update(self, raised: frozenset) -> None:
        if raised == self.raised:
            return
        log.warning("event=resource_alarm raised=%s held_memory=%d memory_limit=%d",
                    ",".join(sorted(raised)) or "none", self._held, self.memory_limit)
        self.raised = raised
        if raised and self.clear.is_set():
            self.clear = trio.Event()
        elif not raised:
            self.clear.set()
        self._on_change(raised)

    def check_and_survive(self) -> None:
        """One check; a reading that fails (an OSError when file descriptors run out,
        say) leaves the alarms as they are, is logged once, and is tried again."""
        try:
            self.check()
        except Exception as error:
            if not self._failing:
                log.exception("event=alarm_reading_failed error=%r hint=%r", error,
                              "alarms keep their state; retrying every check interval")
            self._failing = True
            return
        if self._failing:
            log.warning("event=alarm_reading_recovered")
            self._failing = False

    async def run(self, interval: float = CHECK_INTERVAL) -> None:
        while True:
            self.check_and_survive()
            await trio.sleep(interval)
