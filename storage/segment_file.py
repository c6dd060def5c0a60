"""Segment files: the file handling that queue files (queue_file.py) and stream logs
(stream_log.py) share.

Both keep their records in a directory of their own, in numbered segment files
`00000001.seg`, `00000002.seg`, ... of which the newest (the active one) is open for
appending. This module creates the directory and the segment files durably, appends to
the active segment with `pwrite` and cuts a failed write back, and cuts a torn tail off
at recovery. `SegmentLog` is the part of the two stores built on that: their flags,
their two locks and the active segment.
"""

import errno
import logging
import os
import shutil
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger("warren.storage")

SEGMENT_SUFFIX = ".seg"

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


class StorageError(Exception):
    """The store cannot be used: an earlier write or fsync failed, or it is closed."""


def segment_name(number: int) -> str:
    return f"{number:08d}{SEGMENT_SUFFIX}"


def segment_numbers(directory: str | os.PathLike[str]) -> list[int]:
    """The numbers of the segment files in `directory`, ascending ([] if it is missing)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    numbers = []
    for name in names:
        stem, suffix = name[:-len(SEGMENT_SUFFIX)], name[-len(SEGMENT_SUFFIX):]
        if suffix == SEGMENT_SUFFIX and stem.isdigit():
            numbers.append(int(stem))
    return sorted(numbers)


def fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_directory(path: str) -> None:
    """Create `path` (and missing parents) durably: each new entry's parent is fsynced."""
    path = os.path.abspath(path)
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
        except FileExistsError:
            pass
        fsync_directory(os.path.dirname(directory))


def create_segment_file(path: str, header: bytes) -> int:
    """Create a segment file holding just `header`; its descriptor, open for writing.
    When the header cannot be written whole (ENOSPC...), no file is left behind: a
    header-less file would only confuse recovery."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC, 0o644)
    try:
        if os.pwrite(fd, header, 0) != len(header):
            raise OSError(errno.ENOSPC, "short write of a segment header", path)
    except OSError:
        os.close(fd)
        os.unlink(path)
        raise
    return fd


def read_file(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def truncate_file(path: str, size: int) -> None:
    """Cut the file at `path` to `size` bytes, durably (recovery drops a torn tail)."""
    fd = os.open(path, os.O_WRONLY | O_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def settle_damage(path: str, size: int, damaged: list[tuple[int, int]],
                  tail: tuple[int, int] | None, newest: bool, unit: str, causes: str,
                  problems: list[str]) -> int:
    """(recovery) Note as a problem each damaged span (position, length) that the scan of
    the segment file at `path` (`size` bytes) skipped, and settle its `tail`, the bytes
    after its last valid record: cut off when the segment is the newest (a torn tail is
    the normal result of a crash mid-write: no problem), else noted. Returns the file's
    size after. `unit` names what positions count in the messages, `causes` what made a
    span damaged."""
    for position, length in damaged:
        problems.append(f"{path}: {unit} {position}: {length} damaged bytes skipped "
                        f"({causes})")
    if tail is None:
        return size
    position, length = tail
    if newest:
        truncate_file(path, position)
        log.info(f"event=torn_tail_dropped path=%s {unit}=%d bytes=%d", path, position, length)
        return position
    problems.append(f"{path}: {unit} {position}: segment truncated or damaged; {length} "
                    f"trailing bytes hold no record")
    return size


class Segment:
    """One segment file: its number, `size` (where the next write goes: the bytes that
    hold its header and its valid records) and `fd` (open for writing while active)."""

    __slots__ = ("number", "size", "fd")

    def __init__(self, number: int, size: int):
        self.number = number
        self.size = size
        self.fd: int | None = None


SegmentT = TypeVar("SegmentT", bound=Segment)


class SegmentLog(Generic[SegmentT]):
    """A store kept in segment files: what `QueueFile` and `StreamLog` share.

    Threads. The event-loop side (appends) only touches memory, under the short `_lock`.
    The flusher side (writing, syncing, deleting segments) does blocking I/O and
    serializes on `_sync_lock`; it touches `_active` and the segments' sizes. A write
    or sync that fails is cut back (`_append`), so the segment ends where it did and the
    store stays usable; only when the cut fails too is it unusable (`_failed`) until a
    restart recovers it from disk.
    """

    def _setup_files(self, directory: str | os.PathLike[str]) -> None:
        self.directory: str = os.fspath(directory)
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._closed = False
        self._dropped = False
        self._active: SegmentT | None = None
        self._next_segment = 1
        self._directory_exists = False
        self._failed: BaseException | None = None
        self.written_bytes = 0      # bytes ever written to segments (disk accounting)
        # Tests: called with a step name at crash-relevant points.
        self._checkpoint: Callable[[str], None] | None = None

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise StorageError(f"{self.directory}: an earlier write failed "
                               f"({self._failed!r}); recover from disk") from self._failed

    def _usable(self) -> bool:
        """(flusher side, under `_sync_lock`) Whether the store is open for writing:
        False once dropped or closed; StorageError after a write that was not cut back."""
        self._check_usable()
        return not (self._dropped or self._closed)

    def _dropped_meanwhile(self) -> bool:
        """`_dropped` read again (a type checker takes an earlier test of it as still
        true, but another thread may have dropped the store since)."""
        return self._dropped

    def _step(self, name: str) -> None:
        if self._checkpoint is not None:
            self._checkpoint(name)

    def _path(self, number: int) -> str:
        return os.path.join(self.directory, segment_name(number))

    def _ensure_directory(self) -> None:
        if not self._directory_exists:
            make_directory(self.directory)
            self._directory_exists = True

    def _append(self, segment: SegmentT, data: bytes | bytearray, sync: bool) -> int:
        """Write `data` at the end of `segment` (`size`, which the caller moves once the
        write counts as done), fdatasynced with `sync`; return where it ends. When the
        write or sync fails, the segment is cut back (`_cut_back`) and the error raised."""
        fd = segment.fd
        assert fd is not None, "only the open active segment is written to"
        offset = segment.size
        view = memoryview(data)
        try:
            while view:
                written = os.pwrite(fd, view, offset)
                view = view[written:]
                offset += written
            self._step("written")
            if sync:
                self._sync_segment(fd, segment)
        except OSError as error:
            self._cut_back(segment, error)
            raise
        return offset

    def _sync_segment(self, fd: int, segment: SegmentT) -> None:
        """Make what was written to `segment` durable through `fd`."""
        fdatasync(fd)

    def _cut_back(self, segment: SegmentT, error: OSError) -> None:
        """A write failed: remove whatever part of it reached the file (a later write
        that is shorter must not leave old records behind it), so the segment ends
        where it did and the write can be tried again. If even that fails, the store is
        unusable until recovery."""
        log.debug("event=segment_write_failed path=%s error=%r",
                  self._path(segment.number), error)
        fd = segment.fd
        assert fd is not None, "only the open active segment is written to"
        try:
            os.ftruncate(fd, segment.size)
        except OSError as truncate_error:
            self._failed = truncate_error

    def _close_active(self) -> None:
        segment = self._active
        if segment is not None and segment.fd is not None:
            os.close(segment.fd)
            segment.fd = None
        self._active = None

    def sync(self) -> int:
        """Write what was appended and make it durable (the store's own)."""
        raise NotImplementedError

    def close(self, flush: bool = True) -> None:
        """Sync (unless `flush` is False, which loses what was not synced) and close.

        Call it once the loop has stopped appending: later appends raise StorageError.
        """
        if flush and self._failed is None:
            self.sync()
        with self._sync_lock:
            with self._lock:
                self._closed = True
                self._discard_buffered()
            if flush and self._failed is None:
                self._seal_active()
            self._close_active()

    def drop(self) -> None:
        """The store was deleted: forget everything and remove its directory (blocking)."""
        with self._sync_lock:
            with self._lock:
                self._dropped = True
                self._forget()
            self._close_active()
            shutil.rmtree(self.directory, ignore_errors=True)
            try:
                fsync_directory(os.path.dirname(os.path.abspath(self.directory)))
            except OSError:
                pass

    def _discard_buffered(self) -> None:
        """(close, drop; under `_lock`) Forget what was appended and not written."""
        raise NotImplementedError

    def _forget(self) -> None:
        """(drop; under `_lock`) Forget what was appended, and the segments."""
        raise NotImplementedError

    def _seal_active(self) -> None:
        """(close, after a sync) Leave the active segment as a restart finds it best."""
