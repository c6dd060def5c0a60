"""fdatasync without a worker thread: the kernel syncs, and says so on an eventfd
that an event loop waits on like a socket.

A commit that only writes queue files (the confirm path) would otherwise hand its
`fdatasync` to a worker thread, and the thread and the event loop then wait for each
other's GIL before, during and after it (docs/history/benchmarks-rounds.md, issue 18, "confirms without
a worker thread"). With a `KernelSync` the loop writes the batch (a `pwrite` into the
page cache), submits the syncs, goes on serving connections, and is woken through the
eventfd when the kernel has finished them.

Two kernel interfaces can do it: io_uring (`uring_sync.py`), whose syncs run on kernel
threads that may use any CPU, and native AIO (`aio_sync.py`), whose syncs run on the
submitting CPU. `open_kernel_sync` takes the first that works in the data directory
and returns None where neither does; callers then sync in a thread.
"""

import select
import tempfile

from .aio_sync import AioSync
from .eventfd_sync import EventfdSync
from .uring_sync import UringSync

CAPACITY = 128          # syncs in flight at most (one per queue file of a commit)
KINDS = ("io_uring", "aio")     # in the order they are tried
_BACKENDS: dict[str, type[UringSync] | type[AioSync]] = {"io_uring": UringSync,
                                                          "aio": AioSync}


KernelSync = EventfdSync      # what open_kernel_sync returns, of either kind


def open_kernel_sync(directory: str, kinds: tuple[str, ...] = KINDS) -> KernelSync | None:
    """The first of `kinds` whose sync of a temporary file in `directory` worked, or
    None (not Linux, both interfaces refused, or a file system that refuses them)."""
    for kind in kinds:
        kernel_sync = _BACKENDS[kind].start(CAPACITY)
        if kernel_sync is None:
            continue
        if _syncs_in(kernel_sync, directory):
            return kernel_sync
        kernel_sync.close()
    return None


def _syncs_in(kernel_sync: KernelSync, directory: str) -> bool:
    try:
        with tempfile.TemporaryFile(dir=directory) as probe:
            probe.write(b"probe")
            probe.flush()
            kernel_sync.submit([probe.fileno()])
            select.select([kernel_sync.fileno()], [], [], 5.0)
            return kernel_sync.completed() == [(0, 0)]
    except OSError:
        return False
