"""fdatasync through io_uring (IORING_OP_FSYNC with IORING_FSYNC_DATASYNC), its
completions counted on an eventfd registered with the ring.

The kernel runs each sync on an io-wq worker, a kernel thread that the scheduler may
place on any CPU the process may use. Native AIO (`aio_sync.py`) runs its syncs as work
items of the CPU that submitted them, so there they compete with the event loop for
that CPU (docs/history/benchmarks-rounds.md, issue 18, "io_uring").

Linux 5.6 or later on x86_64. The rings are shared memory: the kernel reads a
submission once `io_uring_enter` is called on this CPU, and writes each completion
before it moves the completion tail and signals the eventfd. x86's ordering of loads
and of stores makes plain reads and writes of the rings correct in that order; other
architectures would need barriers Python does not give, so there `start` returns None.
"""

import ctypes
import mmap
import os
import platform
import struct

from .eventfd_sync import EventfdSync, system_call_library

# io_uring_setup, io_uring_enter, io_uring_register: one numbering on every architecture
_SETUP, _ENTER, _REGISTER = 425, 426, 427
_OP_FSYNC = 3
_FSYNC_DATASYNC = 1
_SQE_ASYNC = 1 << 4             # straight to an io-wq worker (a sync always blocks)
_REGISTER_EVENTFD = 4
_OFF_SQ_RING, _OFF_CQ_RING, _OFF_SQES = 0, 0x8000000, 0x10000000
_FEAT_SINGLE_MMAP = 1
_SQE_SIZE = 64
# opcode, flags, ioprio, fd, off, addr, len, fsync_flags, user_data (the first 40 bytes)
_SQE = struct.Struct("<BBHiQQIIQ")
_CQE = struct.Struct("<QiI")    # user_data, res, flags
_U32 = struct.Struct("<I")


class _SqOffsets(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in (
        "head", "tail", "ring_mask", "ring_entries", "flags", "dropped", "array",
        "resv1")] + [("user_addr", ctypes.c_uint64)]


class _CqOffsets(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in (
        "head", "tail", "ring_mask", "ring_entries", "overflow", "cqes", "flags",
        "resv1")] + [("user_addr", ctypes.c_uint64)]


class _Params(ctypes.Structure):
    """struct io_uring_params of linux/io_uring.h."""

    _fields_ = [("sq_entries", ctypes.c_uint32), ("cq_entries", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("sq_thread_cpu", ctypes.c_uint32),
                ("sq_thread_idle", ctypes.c_uint32), ("features", ctypes.c_uint32),
                ("wq_fd", ctypes.c_uint32), ("resv", ctypes.c_uint32 * 3),
                ("sq_off", _SqOffsets), ("cq_off", _CqOffsets)]


class UringSync(EventfdSync):
    """One io_uring and the eventfd registered with it."""

    kind = "io_uring"

    def __init__(self, ring_fd: int, params: _Params, eventfd: int, libc):
        super().__init__(eventfd, params.sq_entries)
        self._ring_fd = ring_fd
        self._libc = libc
        self._maps: list[mmap.mmap] = []
        sq, cq = params.sq_off, params.cq_off
        sq_size = sq.array + params.sq_entries * 4
        cq_size = cq.cqes + params.cq_entries * _CQE.size
        if params.features & _FEAT_SINGLE_MMAP:
            self._sq_ring = self._cq_ring = self._map(max(sq_size, cq_size), _OFF_SQ_RING)
        else:
            self._sq_ring = self._map(sq_size, _OFF_SQ_RING)
            self._cq_ring = self._map(cq_size, _OFF_CQ_RING)
        self._sqes = self._map(params.sq_entries * _SQE_SIZE, _OFF_SQES)
        self._sq_tail, self._sq_array = sq.tail, sq.array
        self._sq_mask = _U32.unpack_from(self._sq_ring, sq.ring_mask)[0]
        self._cq_head, self._cq_tail, self._cqes = cq.head, cq.tail, cq.cqes
        self._cq_mask = _U32.unpack_from(self._cq_ring, cq.ring_mask)[0]
        self._in_flight = 0
        self._register_eventfd()

    @classmethod
    def start(cls, capacity: int) -> "UringSync | None":
        """A ring for `capacity` syncs at once with its eventfd, or None where io_uring
        cannot be used (not Linux on x86_64, too old a kernel, or io_uring disabled, as
        by the kernel.io_uring_disabled setting or a container's seccomp profile)."""
        if platform.system() != "Linux" or platform.machine() != "x86_64":
            return None
        libc = system_call_library()
        if libc is None:
            return None
        params = _Params()
        ring_fd = libc.syscall(_SETUP, ctypes.c_uint32(capacity), ctypes.byref(params))
        if ring_fd < 0:
            return None
        eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        try:
            return cls(ring_fd, params, eventfd, libc)
        except OSError:         # a ring that cannot be mapped or signal the eventfd
            os.close(ring_fd)
            os.close(eventfd)
            return None

    def _map(self, size: int, offset: int) -> mmap.mmap:
        area = mmap.mmap(self._ring_fd, size, offset=offset)
        self._maps.append(area)
        return area

    def _register_eventfd(self) -> None:
        descriptor = ctypes.c_int32(self._eventfd)
        if self._libc.syscall(_REGISTER, self._ring_fd, _REGISTER_EVENTFD,
                              ctypes.byref(descriptor), 1) < 0:
            error = ctypes.get_errno()
            raise OSError(error, f"io_uring_register: {os.strerror(error)}")

    def submit(self, descriptors: list[int]) -> None:
        count = len(descriptors)
        self._check_submit(count, busy=self._in_flight > 0)
        ring, sqes, mask = self._sq_ring, self._sqes, self._sq_mask
        tail = _U32.unpack_from(ring, self._sq_tail)[0]
        for number, fd in enumerate(descriptors):
            index = (tail + number) & mask
            _SQE.pack_into(sqes, index * _SQE_SIZE, _OP_FSYNC, _SQE_ASYNC, 0, fd, 0, 0, 0,
                           _FSYNC_DATASYNC, number)
            _U32.pack_into(ring, self._sq_array + index * 4, index)
        _U32.pack_into(ring, self._sq_tail, (tail + count) & 0xFFFFFFFF)
        started = self._libc.syscall(_ENTER, self._ring_fd, count, 0, 0, None, 0)
        if started < count:
            # What the kernel did not take leaves the ring, so that no later call
            # submits it; it ends at once, refused (or the whole call fails).
            _U32.pack_into(ring, self._sq_tail, (tail + max(started, 0)) & 0xFFFFFFFF)
        if started < 0:
            error = ctypes.get_errno()
            raise OSError(error, f"io_uring_enter: {os.strerror(error)}")
        self._in_flight = started
        self._refuse_from(started, count)

    def completed(self) -> list[tuple[int, int]]:
        ended = self._ended_at_once()
        ring = self._cq_ring
        head = _U32.unpack_from(ring, self._cq_head)[0]
        tail = _U32.unpack_from(ring, self._cq_tail)[0]
        while head != tail:
            number, result, _flags = _CQE.unpack_from(
                ring, self._cqes + (head & self._cq_mask) * _CQE.size)
            ended.append((number, result))
            head = (head + 1) & 0xFFFFFFFF
            self._in_flight -= 1
        _U32.pack_into(ring, self._cq_head, head)
        return ended

    def close(self) -> None:
        """Release the ring (the kernel finishes the syncs in flight) and the eventfd."""
        for area in self._maps:
            area.close()
        self._maps = []
        if self._ring_fd >= 0:
            os.close(self._ring_fd)
            self._ring_fd = -1
        self._close_eventfd()
