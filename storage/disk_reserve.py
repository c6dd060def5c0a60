"""Space set aside in the data directory for the writes that free space: ack records
(tombstones), the segment a drained queue starts, compaction. A full disk otherwise
leaves consumers unable to record acks, so nothing could ever be deleted.

The reserve is a file of `size` bytes, allocated with posix_fallocate (real blocks, not
a sparse hole). When a write fails for lack of space, the broker releases it (the file
is removed), and claims it again once the disk has room for it above the free-space
limit."""

import logging
import os

from .segment_file import O_CLOEXEC

log = logging.getLogger("warren.storage")

RESERVE_FILE = "disk-reserve"


class DiskReserve:
    """A preallocated file that is given back to the file system when space runs out."""

    def __init__(self, directory: str, size: int):
        self.path = os.path.join(directory, RESERVE_FILE)
        self.size = size
        try:
            self.held = os.path.getsize(self.path) >= size   # left by an earlier run
        except OSError:
            self.held = False
        self.released = False       # given back for lack of space, not claimed since

    def claim(self) -> bool:
        """Allocate the reserve (blocking). False if the space is not there."""
        if self.held or not self.size:
            return self.held
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | O_CLOEXEC, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.size)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as error:
            log.debug("event=disk_reserve_unavailable path=%s error=%r", self.path, error)
            self._remove()
            return False
        self.held = True
        self.released = False
        log.info("event=disk_reserve_claimed path=%s bytes=%d", self.path, self.size)
        return True

    def release(self) -> None:
        """Give the reserved space back (removing a file needs no space)."""
        if self.held:
            self._remove()
            self.held = False
            self.released = True
            log.warning("event=disk_reserve_released path=%s bytes=%d", self.path,
                        self.size)

    def _remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
