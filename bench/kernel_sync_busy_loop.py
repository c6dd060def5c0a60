"""How long a kernel sync takes while the thread that submitted it keeps its CPU busy,
as the event loop does while a commit's fdatasync runs: io_uring against native AIO
(storage/kernel_sync.py), and a worker thread for reference.

    python3 bench/kernel_sync_busy_loop.py [--seconds 2] [--rounds 3] [--bytes 100000]

Each sync follows a write of --bytes to a file in a temporary directory under the
current one (so on the file system of the data directory, if run there). While it
runs, the submitting thread does small pieces of Python work and polls for the end.
Prints, per kind, syncs per second, the median sync in microseconds, and the pieces of
work done per second (how much of its CPU the loop kept).
"""

import argparse
import os
import select
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storage.kernel_sync import KINDS, open_kernel_sync  # noqa: E402


def some_work() -> int:
    total = 0
    for number in range(200):
        total += number
    return total


def sync_in_kernel(kernel_sync, fd: int) -> int:
    """One sync while working; returns the pieces of work done meanwhile."""
    pieces = 0
    kernel_sync.submit([fd])
    ended: dict = {}
    while not ended:
        ready, _, _ = select.select([kernel_sync.fileno()], [], [], 0)
        if ready:
            ended.update(kernel_sync.completed())
        else:
            some_work()
            pieces += 1
    if ended[0] != 0:
        raise OSError(-ended[0], os.strerror(-ended[0]))
    return pieces


def sync_in_thread(fd: int) -> int:
    pieces = 0
    worker = threading.Thread(target=os.fdatasync, args=(fd,))
    worker.start()
    while worker.is_alive():
        some_work()
        pieces += 1
    worker.join()
    return pieces


def measure(kind: str, directory: str, seconds: float, size: int) -> tuple:
    kernel_sync = None if kind == "thread" else open_kernel_sync(directory, kinds=(kind,))
    if kind != "thread" and kernel_sync is None:
        return None
    fd = os.open(os.path.join(directory, f"{kind}.data"), os.O_RDWR | os.O_CREAT, 0o600)
    data = b"x" * size
    durations = []
    pieces = 0
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            os.write(fd, data)
            started = time.perf_counter()
            pieces += sync_in_thread(fd) if kernel_sync is None \
                else sync_in_kernel(kernel_sync, fd)
            durations.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        if kernel_sync is not None:
            kernel_sync.close()
    return len(durations) / seconds, statistics.median(durations) * 1e6, pieces / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bytes", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=".") as directory:
        for _ in range(args.rounds):
            for kind in (*KINDS, "thread"):
                result = measure(kind, directory, args.seconds, args.bytes)
                load = open("/proc/loadavg").read().split()[0]
                if result is None:
                    print(f"{kind:8s} not available here")
                    continue
                rate, median, work = result
                print(f"{kind:8s} {rate:7.0f} syncs/s  median sync {median:7.0f} us  "
                      f"work {work:9.0f} pieces/s  (load {load})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
