"""Publisher flow control across sockets: a consumer connection whose output drained
wakes the publishing connections that stopped reading for it."""

import trio

THROTTLE_WAIT = 0.5   # a throttled publisher is read again after this at the latest


class DrainSignal:
    """Publisher flow control: throttled publishing connections wait here for consumer
    connections' output to drain (for THROTTLE_WAIT at most, so heartbeats and other
    traffic keep being read)."""

    def __init__(self):
        self._drained = trio.Event()

    def notify(self) -> None:
        self._drained.set()
        self._drained = trio.Event()

    async def wait(self, deadline: float) -> None:
        with trio.move_on_at(deadline):
            await self._drained.wait()
