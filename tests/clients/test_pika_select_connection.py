"""pika's asynchronous SelectConnection driven by its own ioloop.

Each scenario is a chain of callbacks; the ioloop stops when the connection has closed.
A bounded `ioloop.call_later` is only a safety net that stops a scenario that hangs (the
test then fails on `timed_out`); it is never used to wait for something to happen.
"""

import pika
import pika.exceptions

from tests.support.pika_helpers import _test_deadline, names, params, unique  # noqa: F401  (fixtures)

SAFETY_TIMEOUT = 10.0


class Scenario:
    """Runs a SelectConnection until it closes; records what happened."""

    def __init__(self, target, on_channel_open=None, **connection_kwargs):
        self.timed_out = False
        self.open_error = None
        self.close_reason = None
        self.events = []
        self._on_channel_open = on_channel_open
        self.connection = pika.SelectConnection(
            params(target, **connection_kwargs),
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_close)

    def run(self):
        timer = self.connection.ioloop.call_later(SAFETY_TIMEOUT, self._on_timeout)
        self.connection.ioloop.start()
        self.connection.ioloop.remove_timeout(timer)
        return self

    def _on_open(self, connection):
        self.events.append("connection open")
        connection.channel(on_open_callback=self._channel_opened)

    def _channel_opened(self, channel):
        self.events.append("channel open")
        self._on_channel_open(self, channel)

    def _on_open_error(self, connection, error):
        self.open_error = error
        connection.ioloop.stop()

    def _on_close(self, connection, reason):
        self.close_reason = reason
        connection.ioloop.stop()

    def _on_timeout(self):
        self.timed_out = True
        if self.connection.is_open:
            self.connection.close()
        else:
            self.connection.ioloop.stop()

    def finish(self):
        """Close the connection normally (ends the scenario)."""
        if self.connection.is_open:
            self.connection.close()

    def assert_clean_close(self):
        assert not self.timed_out, f"scenario timed out after {self.events}"
        assert self.open_error is None
        assert isinstance(self.close_reason, pika.exceptions.ConnectionClosedByClient)
        assert self.close_reason.reply_code == 200


def test_open_and_close(warren):
    def on_channel_open(scenario, channel):
        channel.add_on_close_callback(
            lambda ch, reason: (scenario.events.append("channel closed"), scenario.finish()))
        channel.close()

    scenario = Scenario(warren, on_channel_open).run()
    scenario.assert_clean_close()
    assert scenario.events == ["connection open", "channel open", "channel closed"]


def test_declare_publish_consume_ack(warren):
    bodies = [f"message {n}".encode() for n in range(5)]
    received = []
    state = {}

    def on_channel_open(scenario, channel):
        state["channel"] = channel
        channel.basic_qos(prefetch_count=2, callback=lambda frame: declare(scenario, channel))

    def declare(scenario, channel):
        channel.queue_declare("", exclusive=True,
                              callback=lambda frame: declared(scenario, channel, frame))

    def declared(scenario, channel, frame):
        queue = frame.method.queue
        assert queue.startswith("amq.gen-")
        state["queue"] = queue
        for body in bodies:
            channel.basic_publish("", queue, body,
                                  pika.BasicProperties(content_type="text/plain"))
        state["tag"] = channel.basic_consume(
            queue, lambda ch, method, properties, body: on_message(scenario, ch, method,
                                                                    properties, body))

    def on_message(scenario, channel, method, properties, body):
        received.append((method.redelivered, properties.content_type, body))
        channel.basic_ack(method.delivery_tag)
        if len(received) == len(bodies):
            channel.basic_cancel(state["tag"], callback=lambda frame: cancelled(scenario, frame))

    def cancelled(scenario, frame):
        scenario.events.append(("cancel ok", frame.method.consumer_tag))
        state["channel"].queue_declare(state["queue"], passive=True,
                                       callback=lambda f: checked(scenario, f))

    def checked(scenario, frame):
        state["remaining"] = (frame.method.message_count, frame.method.consumer_count)
        scenario.finish()

    scenario = Scenario(warren, on_channel_open).run()
    scenario.assert_clean_close()
    assert received == [(False, "text/plain", body) for body in bodies]
    assert ("cancel ok", state["tag"]) in scenario.events
    assert state["remaining"] == (0, 0)


def test_topic_exchange_routing(warren, names):
    exchange = names.exchange()
    received = []

    def on_channel_open(scenario, channel):
        channel.exchange_declare(exchange, "topic",
                                 callback=lambda frame: declare_queue(scenario, channel))

    def declare_queue(scenario, channel):
        channel.queue_declare("", exclusive=True,
                              callback=lambda frame: bind(scenario, channel, frame.method.queue))

    def bind(scenario, channel, queue):
        channel.queue_bind(queue, exchange, "logs.*.error",
                           callback=lambda frame: publish(scenario, channel, queue))

    def publish(scenario, channel, queue):
        for key in ["logs.web.error", "logs.web.info", "logs.db.error", "other.db.error"]:
            channel.basic_publish(exchange, key, key.encode())
        channel.basic_publish(exchange, "logs.end.error", b"end")
        channel.basic_consume(queue, lambda ch, method, properties, body: on_message(
            scenario, method, body), auto_ack=True)

    def on_message(scenario, method, body):
        received.append((method.routing_key, body))
        if body == b"end":
            scenario.finish()

    scenario = Scenario(warren, on_channel_open).run()
    scenario.assert_clean_close()
    assert received == [("logs.web.error", b"logs.web.error"),
                        ("logs.db.error", b"logs.db.error"),
                        ("logs.end.error", b"end")]


def test_channel_error_is_reported_and_connection_continues(warren):
    missing = unique("missing")
    state = {}

    def on_channel_open(scenario, channel):
        channel.add_on_close_callback(lambda ch, reason: channel_closed(scenario, reason))
        channel.queue_declare(missing, passive=True)

    def channel_closed(scenario, reason):
        state["reason"] = reason
        scenario.connection.channel(on_open_callback=lambda ch: second_channel(scenario, ch))

    def second_channel(scenario, channel):
        channel.queue_declare("", exclusive=True,
                              callback=lambda frame: declared(scenario, frame))

    def declared(scenario, frame):
        state["queue"] = frame.method.queue
        scenario.finish()

    scenario = Scenario(warren, on_channel_open).run()
    scenario.assert_clean_close()
    assert isinstance(state["reason"], pika.exceptions.ChannelClosedByBroker)
    assert state["reason"].reply_code == 404
    assert state["queue"].startswith("amq.gen-")


def test_wrong_credentials_reported_to_open_error_callback(warren):
    scenario = Scenario(warren, credentials=pika.PlainCredentials(warren.user, "wrong")).run()
    assert not scenario.timed_out
    assert isinstance(scenario.open_error, pika.exceptions.ProbableAuthenticationError)
    assert scenario.events == []
