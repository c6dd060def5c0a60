"""A well-behaved client that keeps working while a test attacks the broker.

Every fault-isolation test runs its hostile input with a `RunningBystander` beside it: a
pika client in its own thread that publishes with confirms to its own queue and consumes
what it published, without pause, for as long as the `with` block lasts. On exit it
checks that its connection stayed open the whole time and that every confirmed message
came back exactly once, in order; then one more round trip on a fresh connection proves
the broker still accepts clients.

    with RunningBystander(broker) as bystander:
        ...hostile input on another connection...
    # leaving the block raised AssertionError if the bystander was disturbed
"""

import threading
import uuid

import pika

# How long one bystander operation may wait for the broker before the check fails.
OPERATION_TIMEOUT = 30


class RunningBystander:
    """Publish, confirm and consume in a background thread; check on exit."""

    def __init__(self, broker):
        self.broker = broker
        self.confirmed: list[bytes] = []
        self.received: list[bytes] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._progress = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="bystander", daemon=True)

    def __enter__(self) -> "RunningBystander":
        self._thread.start()
        if not self._ready.wait(OPERATION_TIMEOUT):
            raise AssertionError("the bystander could not connect within "
                                 f"{OPERATION_TIMEOUT} s")
        if self.error is not None:
            raise AssertionError(f"the bystander failed to start: {self.error!r}")
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self._wait_for_a_round_after(len(self.received))
        self._stop.set()
        self._thread.join(OPERATION_TIMEOUT * 2)
        if exc_type is not None:
            return
        self.check()

    def _wait_for_a_round_after(self, received: int) -> None:
        """Let the bystander finish one more round than it had when the test's block
        ended, so every check covers traffic after the attack too."""
        with self._progress:
            self._progress.wait_for(
                lambda: len(self.received) > received or self.error is not None
                or not self._thread.is_alive(), OPERATION_TIMEOUT)

    def check(self) -> None:
        assert not self._thread.is_alive(), "the bystander hung"
        assert self.error is None, f"the bystander was disturbed: {self.error!r}"
        assert self.confirmed, "the bystander confirmed nothing while the test ran"
        assert self.received == self.confirmed, (
            f"the bystander got {len(self.received)} of {len(self.confirmed)} confirmed "
            "messages back (or out of order)")
        assert_broker_serves(self.broker)

    def _run(self) -> None:
        connection = None
        try:
            connection = _connect(self.broker)
            channel = connection.channel()
            channel.confirm_delivery()
            queue = channel.queue_declare("", exclusive=True).method.queue
            self._ready.set()
            while not self._stop.is_set():
                self._round(channel, queue)
            connection.close()
        except BaseException as error:   # reported by check() in the test's thread
            self.error = error
        finally:
            self._ready.set()
            with self._progress:
                self._progress.notify_all()
            if connection is not None and connection.is_open:
                try:
                    connection.close()
                except Exception:
                    pass

    def _round(self, channel, queue: str) -> None:
        """Publish a few confirmed messages, then consume exactly those."""
        bodies = [uuid.uuid4().bytes for _ in range(5)]
        for body in bodies:
            channel.basic_publish("", queue, body, mandatory=True)
            self.confirmed.append(body)
        for method, _properties, body in channel.consume(
                queue, inactivity_timeout=OPERATION_TIMEOUT):
            if method is None:
                raise AssertionError("a confirmed message was not delivered within "
                                     f"{OPERATION_TIMEOUT} s")
            channel.basic_ack(method.delivery_tag)
            if len(self.received) + 1 == len(self.confirmed):
                with self._progress:
                    self.received.append(body)
                    self._progress.notify_all()
                break
            self.received.append(body)
        channel.cancel()


def _connect(broker) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=broker.host, port=broker.port, heartbeat=0, connection_attempts=1,
        blocked_connection_timeout=OPERATION_TIMEOUT, socket_timeout=OPERATION_TIMEOUT,
        stack_timeout=OPERATION_TIMEOUT))


def assert_broker_serves(broker) -> None:
    """A fresh connection can declare a queue and get back what it published."""
    connection = _connect(broker)
    try:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        body = uuid.uuid4().bytes
        channel.basic_publish("", queue, body)
        for method, _properties, received in channel.consume(
                queue, auto_ack=True, inactivity_timeout=OPERATION_TIMEOUT):
            assert method is not None, "the broker did not deliver to a fresh client"
            assert received == body
            break
    finally:
        connection.close()
