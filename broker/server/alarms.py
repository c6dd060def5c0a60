"""Memory and disk alarms: when the memory the broker holds passes its high watermark or
free disk space in the data directory falls below its limit, publishing connections are
blocked (RabbitMQ's resource alarms) until the resource recovers.

Memory is the broker's own accounting of what it holds, not the process's resident set
size: CPython rarely gives freed memory back to the system, so an alarm on RSS would never
clear once raised. `held_memory` is the reading (docs/configuration.md). Free disk space
is read every second and, between readings, lowered by what each commit wrote
(`DiskSpace.wrote`, from the committer), so the alarm fires before a fast publisher fills
the disk; a failed write raises it at once."""

import logging
import os
import threading

import trio

from broker.config import AlarmLimits
from storage.disk_reserve import DiskReserve

log = logging.getLogger("warren.server")

CHECK_INTERVAL = 1.0


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


class DiskSpace:
    """Free space in the data directory as the disk alarm sees it: the last statvfs
    reading less the bytes committed since. The committer reports every commit from
    its worker thread (`wrote`, `write_failed`); statvfs is read again once the writes
    since the last reading have used half of the room above the limit, so a disk far
    from full costs no system call per commit and one near the limit is read often.
    """

    def __init__(self, data_dir: str, limit: int, reserve: DiskReserve | None = None,
                 read_disk=free_disk):
        self.data_dir = data_dir
        self.limit = limit
        self.reserve = reserve
        self._read_disk = read_disk
        self._free: int | None = None       # None until the first reading
        self._written = 0                   # bytes committed since that reading
        self.write_error: str | None = None     # the last commit failed with this
        self._lock = threading.Lock()       # the loop and the committer's thread

    @property
    def low(self) -> bool:
        """Below the limit, or the last commit failed. Once the reserve was released,
        the limit counts it too until it is claimed back, so that claiming it back does
        not raise the alarm again."""
        if self.write_error is not None:
            return True
        if self._free is None:
            return False
        limit = self.limit
        if self.reserve is not None and self.reserve.released:
            limit += self.reserve.size
        return self._free - self._written < limit

    def measure(self) -> None:
        """Read statvfs (and claim the reserve back when the disk has room for it)."""
        with self._lock:
            self._measure()

    def _measure(self) -> None:
        free = self._read_disk(self.data_dir)
        reserve = self.reserve
        if (reserve is not None and not reserve.held and self.write_error is None
                and free >= self.limit + reserve.size and reserve.claim()):
            free = self._read_disk(self.data_dir)
        self._free, self._written = free, 0

    def wrote(self, size: int) -> None:
        """A commit succeeded and wrote `size` bytes (committer's worker thread)."""
        with self._lock:
            if self.write_error is not None:
                self.write_error = None
                self._measure()
                return
            self._written += size
            if self._free is None or self._written * 2 >= self._free - self.limit:
                self._measure()

    def write_failed(self, reason: str) -> None:
        """A commit failed (committer's worker thread): hand the reserve back to the
        file system, so that the acks consumers send can still be written."""
        with self._lock:
            self.write_error = reason
            if self.reserve is not None:
                self.reserve.release()


class ResourceAlarm:
    """Which alarms are raised now, and an event that is set while none is."""

    def __init__(self, limits: AlarmLimits, data_dir: str, on_change, read_memory,
                 read_disk=free_disk):
        self.memory_limit = limits.memory_limit(total_memory())
        reserve = None
        if limits.disk_reserve:
            reserve = DiskReserve(data_dir, limits.disk_reserve)
        self.disk = DiskSpace(data_dir, limits.disk_free_limit, reserve, read_disk)
        self.data_dir = data_dir
        self.raised: frozenset[str] = frozenset()
        self.measured: frozenset[str] = frozenset()   # what the readings say
        self.forced: frozenset[str] = frozenset()     # raised by a test, not a reading
        self.clear = trio.Event()
        self.clear.set()
        self._on_change = on_change          # called with the set of raised alarms
        self._read_memory = read_memory      # bytes held (see held_memory)
        self._held = 0                       # the last memory reading, for the log
        self._failing = False                # the last reading failed (logged once)

    def check(self) -> None:
        raised = set()
        self._held = self._read_memory()
        if self._held > self.memory_limit:
            raised.add("memory")
        self.disk.measure()
        if self.disk.low:
            raised.add("disk")
        self.measured = frozenset(raised)
        self._update(self.measured | self.forced)

    def check_disk(self) -> None:
        """Re-evaluate the disk alarm alone, without a reading (after each commit)."""
        low = self.disk.low
        if low != ("disk" in self.measured):
            self.measured = (self.measured | {"disk"} if low
                             else self.measured - {"disk"})
            self._update(self.measured | self.forced)

    def force(self, kind: str, raised: bool) -> None:
        """A test broker raises (`raised`) or clears the `kind` alarm whatever the
        readings say; readings do not clear a forced alarm. Once cleared, the alarm is
        what the last reading said."""
        self.forced = self.forced | {kind} if raised else self.forced - {kind}
        self._update(self.measured | self.forced)

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
