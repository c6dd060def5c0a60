"""Running a node: the process settings the broker runs under."""

import sys

from broker.server.node import GIL_SWITCH_INTERVAL, run_until_stopped


class RecordingNode:
    """Stands in for a Node: records the GIL switch interval it runs under."""

    virtual_clock = None

    def __init__(self):
        self.switch_interval = None
        self.closed = False

    async def run(self) -> None:
        self.switch_interval = sys.getswitchinterval()

    def close(self) -> None:
        self.closed = True


def test_the_node_runs_with_a_short_gil_switch_interval():
    """The group commit's worker thread waits for the GIL between its steps: the event
    loop must hand it over sooner than Python's default 5 ms."""
    before = sys.getswitchinterval()
    node = RecordingNode()
    try:
        run_until_stopped(node)
        after = sys.getswitchinterval()
    finally:
        sys.setswitchinterval(before)
    assert node.switch_interval == GIL_SWITCH_INTERVAL
    assert GIL_SWITCH_INTERVAL < 0.005
    assert node.closed
    assert after == before      # an embedding process (thread mode) gets its own back
