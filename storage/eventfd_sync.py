"""What the kernel sync interfaces (`uring_sync.py`, `aio_sync.py`) share: an eventfd
the kernel signals when a sync ends, a bound on the syncs of one submit, and the
requests the kernel did not take, which end at once, refused."""

import ctypes
import errno
import os


def system_call_library():
    """The C library, to make system calls through its `syscall` with errno kept; None
    where there is none to load (not a Unix, or a Python without ctypes' support)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
    except (OSError, AttributeError):
        return None
    return libc


class EventfdSync:
    """`submit` starts an fdatasync of each descriptor (numbered 0, 1, ...; OSError when
    the kernel refuses them all); once `fileno()` is readable, `completed()` gives
    (number, 0 or -errno) for each that ended since the last call. One caller at a time,
    on one thread, and one submit at a time."""

    kind = ""

    def __init__(self, eventfd: int, capacity: int):
        self._eventfd = eventfd
        self.capacity = capacity
        self._refused: list[tuple[int, int]] = []   # syncs the kernel did not take

    def fileno(self) -> int:
        """The eventfd: readable when a submitted sync has ended."""
        return self._eventfd

    def submit(self, descriptors: list[int]) -> None:
        raise NotImplementedError

    def completed(self) -> list[tuple[int, int]]:
        raise NotImplementedError

    def close(self) -> None:
        self._close_eventfd()

    def _check_submit(self, count: int, busy: bool) -> None:
        if busy:
            raise RuntimeError(f"{type(self).__name__}.submit: the previous syncs have "
                               "not ended")
        if count > self.capacity:
            raise OSError(errno.EAGAIN, f"more than {self.capacity} syncs at once")

    def _refuse_from(self, started: int, count: int) -> None:
        """The kernel took only the first `started` of `count` syncs."""
        self._refused = [(number, -errno.EAGAIN) for number in range(started, count)]

    def _ended_at_once(self) -> list[tuple[int, int]]:
        """Reset the eventfd; the refused syncs, which end now."""
        try:
            os.eventfd_read(self._eventfd)
        except BlockingIOError:
            pass
        ended, self._refused = self._refused, []
        return ended

    def _close_eventfd(self) -> None:
        if self._eventfd >= 0:
            os.close(self._eventfd)
            self._eventfd = -1
