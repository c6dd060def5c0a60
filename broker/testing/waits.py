"""Waiting for a Warren test broker from a test: TestVhost methods that return once the
broker saw something happen (a consumer, a binding, a publish, acks, an empty queue, a
dead letter), or raise WaitTimeout saying what it saw instead. The broker checks as it
works (no polling); `timeout` is in real seconds. Warren only: on another broker they
raise NotOnThisBroker (a skip under pytest)."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .control_client import ControlClient

DEFAULT_TIMEOUT = 5.0
# The control socket waits this much longer than the wait itself for the answer.
ANSWER_MARGIN = 30.0


class WaitTimeout(AssertionError):
    """The broker did not see what a wait expected in time; the text says what it saw."""


class Waits:
    """TestVhost methods waiting on the broker (mixin; uses TestVhost.hooks)."""

    if TYPE_CHECKING:
        vhost: str

        def hooks(self, needed_for: str) -> "ControlClient": ...

    def _wait(self, operation: str, timeout: float, **arguments) -> None:
        from .control_client import BrokerRefused

        control = self.hooks(operation)
        try:
            control.call(f"test.{operation}", timeout=timeout + ANSWER_MARGIN,
                         vhost=self.vhost, seconds=timeout, **arguments)
        except BrokerRefused as refusal:
            raise WaitTimeout(str(refusal)) from None

    def wait_for_consumer(self, queue: str, count: int = 1,
                          timeout: float = DEFAULT_TIMEOUT) -> None:
        """Until `queue` has at least `count` consumers."""
        self._wait("wait_for_consumer", timeout, queue=queue, count=count)

    def wait_for_binding(self, exchange: str, queue: str, routing_key: str | None = None,
                         timeout: float = DEFAULT_TIMEOUT) -> None:
        """Until `exchange` binds `queue` (with `routing_key`, when given)."""
        self._wait("wait_for_binding", timeout, exchange=exchange, queue=queue,
                   routing_key=routing_key)

    def wait_until_published(self, exchange: str, routing_key: str | None = None,
                             count: int = 1, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Until `count` messages were published to `exchange` ("" the default one),
        with `routing_key` when given, since the vhost was created."""
        self._wait("wait_until_published", timeout, exchange=exchange,
                   routing_key=routing_key, count=count)

    def wait_until_acked(self, queue: str, count: int | None = None,
                         message_id: str | None = None,
                         timeout: float = DEFAULT_TIMEOUT) -> None:
        """Until consumers acked `count` messages of `queue` in all (1 when neither
        `count` nor `message_id` is given) and, with `message_id`, that message."""
        self._wait("wait_until_acked", timeout, queue=queue, count=count,
                   message_id=message_id)

    def wait_until_nacked(self, queue: str, count: int | None = None,
                          message_id: str | None = None,
                          timeout: float = DEFAULT_TIMEOUT) -> None:
        """As wait_until_acked, for Basic.Nack."""
        self._wait("wait_until_nacked", timeout, queue=queue, count=count,
                   message_id=message_id)

    def wait_until_rejected(self, queue: str, count: int | None = None,
                            message_id: str | None = None,
                            timeout: float = DEFAULT_TIMEOUT) -> None:
        """As wait_until_acked, for Basic.Reject."""
        self._wait("wait_until_rejected", timeout, queue=queue, count=count,
                   message_id=message_id)

    def wait_until_empty(self, queue: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Until `queue` has no ready and no unacked messages."""
        self._wait("wait_until_empty", timeout, queue=queue)

    def wait_until_dead_lettered(self, queue: str | None = None, count: int = 1,
                                 message_id: str | None = None,
                                 timeout: float = DEFAULT_TIMEOUT) -> None:
        """Until `count` messages were dead-lettered from `queue` (any queue when
        None) and, with `message_id`, that message."""
        self._wait("wait_until_dead_lettered", timeout, queue=queue, count=count,
                   message_id=message_id)
