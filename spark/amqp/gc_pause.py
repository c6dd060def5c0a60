"""Python's cyclic garbage collector held off while the source turns deliveries into rows.

Every delivery leaves a few container objects (the Delivery, its ReceivedProperties)
alive until its rows are built. CPython's cyclic collector counts them as they are
made, and once enough of them have survived two younger collections it runs a full
collection, which walks every tracked object of the process: in a Python worker that
has imported pyspark and pyarrow, a full collection per few thousand deliveries cost
about a third of the stream reader's CPU (docs/history/spark-rounds.md, round 6). The objects the
source makes hold no reference cycles (they are freed by reference counting as soon as
their rows exist), so the collector has nothing to find in them.

``cyclic_gc_paused()`` disables the collector for the code inside it and enables it
again afterwards (if it was enabled when the first of overlapping pauses began, in any
thread). Only the source's own work runs inside a pause: the collector is back on
before a generator yields rows to Spark. Any cycle made meanwhile is collected by the
first collection after the pause.
"""

import contextlib
import gc
import threading

_lock = threading.Lock()
_active = 0  # pauses under way, in all threads
_enable_after = False  # whether the collector was enabled when the first one began


@contextlib.contextmanager
def cyclic_gc_paused():
    """Run the body with the cyclic garbage collector disabled."""
    global _active, _enable_after
    with _lock:
        if _active == 0:
            _enable_after = gc.isenabled()
            gc.disable()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _enable_after:
                gc.enable()
