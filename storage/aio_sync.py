"""fdatasync through Linux's native AIO (`io_submit` with IOCB_CMD_FDSYNC), its
completions counted on an eventfd.

The kernel runs each sync as a work item of the CPU that submitted it, so the sync
competes with the event loop for that CPU; `uring_sync.py` does not, and is tried
first (`kernel_sync.open_kernel_sync`). AIO stays for where io_uring is refused (e.g.
the default seccomp profile of container runtimes) or the architecture is not x86_64.

Linux only (4.18 or later: older kernels refuse IOCB_CMD_FDSYNC), on the architectures
whose system call numbers are listed below.
"""

import ctypes
import os
import platform

from .eventfd_sync import EventfdSync, system_call_library

# io_setup, io_destroy, io_getevents, io_submit
_SYSCALLS = {
    "x86_64": (206, 207, 208, 209),
    "aarch64": (0, 1, 4, 2),
}
_IOCB_CMD_FDSYNC = 3
_IOCB_FLAG_RESFD = 1


class _IoCb(ctypes.Structure):
    """struct iocb of linux/aio_abi.h (little-endian layout)."""

    _fields_ = [("data", ctypes.c_uint64), ("key", ctypes.c_uint32),
                ("rw_flags", ctypes.c_int32), ("lio_opcode", ctypes.c_uint16),
                ("reqprio", ctypes.c_int16), ("fildes", ctypes.c_uint32),
                ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64),
                ("offset", ctypes.c_int64), ("reserved2", ctypes.c_uint64),
                ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32)]


class _IoEvent(ctypes.Structure):
    """struct io_event of linux/aio_abi.h."""

    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64),
                ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class AioSync(EventfdSync):
    """One AIO context and its eventfd."""

    kind = "aio"

    def __init__(self, context: int, eventfd: int, capacity: int, syscalls: tuple, libc):
        super().__init__(eventfd, capacity)
        self._context = context
        _setup, self._destroy, self._getevents, self._submit = syscalls
        self._libc = libc
        self._in_flight: set[int] = set()           # request numbers not ended yet
        # One control block per request number, made once: a submit fills in the
        # descriptors (building ctypes objects cost more than the system call).
        self._blocks = (_IoCb * capacity)()
        for number, block in enumerate(self._blocks):
            block.data = number
            block.lio_opcode = _IOCB_CMD_FDSYNC
            block.flags = _IOCB_FLAG_RESFD
            block.resfd = eventfd
        self._pointers = (ctypes.POINTER(_IoCb) * capacity)(
            *(ctypes.pointer(block) for block in self._blocks))
        self._events = (_IoEvent * capacity)()
        self._no_wait = _Timespec(0, 0)
        # The system calls' fixed arguments, converted once.
        self._context_arg = ctypes.c_ulong(context)
        self._getevents_args = (ctypes.c_long(0), ctypes.c_long(capacity), self._events,
                                ctypes.byref(self._no_wait))

    @classmethod
    def start(cls, capacity: int) -> "AioSync | None":
        """An AIO context for `capacity` syncs at once with its eventfd, or None (not
        Linux, an unknown architecture, or AIO refused)."""
        syscalls = _SYSCALLS.get(platform.machine())
        if syscalls is None or not hasattr(os, "eventfd"):
            return None
        libc = system_call_library()
        if libc is None:
            return None
        context = ctypes.c_ulong(0)
        if libc.syscall(syscalls[0], capacity, ctypes.byref(context)) != 0:
            return None
        eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        return cls(context.value, eventfd, capacity, syscalls, libc)

    def submit(self, descriptors: list[int]) -> None:
        self._check_submit(len(descriptors), busy=bool(self._in_flight))
        blocks = self._blocks
        for number, fd in enumerate(descriptors):
            blocks[number].fildes = fd
        started = self._libc.syscall(self._submit, self._context_arg,
                                     ctypes.c_long(len(descriptors)), self._pointers)
        if started < 0:
            error = ctypes.get_errno()
            raise OSError(error, f"io_submit: {os.strerror(error)}")
        self._in_flight = set(range(started))
        self._refuse_from(started, len(descriptors))

    def completed(self) -> list[tuple[int, int]]:
        ended = self._ended_at_once()
        if self._in_flight:
            count = self._libc.syscall(self._getevents, self._context_arg,
                                       *self._getevents_args)
            for event in self._events[:max(count, 0)]:
                self._in_flight.discard(event.data)
                ended.append((event.data, event.res))
        return ended

    def close(self) -> None:
        """Release the context (waits for syncs in flight) and the eventfd."""
        if self._context:
            self._libc.syscall(self._destroy, ctypes.c_ulong(self._context))
            self._context = 0
            self._in_flight = set()
        self._close_eventfd()
