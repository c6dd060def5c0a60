"""The differential runner: one scripted client scenario, played against Warren and
against RabbitMQ in the same test, and the two transcripts compared entry by entry.

A scenario is written once, as a function of a `Session`. It drives a broker through
raw frames (raw_amqp.RawAmqpClient, for what clients refuse to send), pika or a Java
program, and records what the client saw under a step label: every method the broker
sent (class and method, reply code and text, message and consumer counts, ...),
content headers with the type tag of every table field, bodies, delivery order and
redelivered flags, how the connection ended. Names are made unique per play (the
session's token) and normalised back, as are names the broker generates, so the two
transcripts are equal exactly when the brokers behaved the same.

Where Warren differs from RabbitMQ on purpose (docs/compatibility.md), the scenario
declares a `Difference` for that step: both values are then checked, so a declared
difference that goes away fails too.
"""

import os
import re
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from pamqp import commands, header

from tests.support.rabbitmq_node import DEFAULT_LINE, LINES
from tests.support.raw_amqp import PeerClosed, RawAmqpClient, Timeout

READ_TIMEOUT = 10.0
GENERATED = ((re.compile(r"amq\.gen-[A-Za-z0-9_-]+"), "amq.gen-<generated>"),
             (re.compile(r"amq\.ctag-[A-Za-z0-9_-]+"), "amq.ctag-<generated>"))


@dataclass(frozen=True)
class Difference:
    """At `step`, Warren records `warren` and RabbitMQ `rabbitmq`, for `reason`."""

    step: str
    warren: object
    rabbitmq: object
    reason: str
    # The RabbitMQ lines where it shows (None: every line).
    lines: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    play: Callable[["Session"], None]
    differences: tuple[Difference, ...] = ()
    # Warren still differs somewhere in this scenario, not on purpose: a finding of the
    # sweep not fixed yet (docs/compatibility.md lists them). The test then requires a
    # difference, so the mark goes once Warren is fixed.
    unfixed: str = ""

    def __str__(self) -> str:
        return self.name


@dataclass
class Session:
    """One play of a scenario against one broker (anything with .host and .port)."""

    broker: object
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    transcript: list = field(default_factory=list)
    clients: list = field(default_factory=list)
    started: int = field(default_factory=lambda: int(time.time()))

    def name(self, local: str) -> str:
        """A queue or exchange name unique to this play (normalised in the transcript)."""
        return f"diff-{self.token}-{local}"

    def record(self, step: str, value) -> None:
        self.transcript.append((step, self._normalise(value)))

    def _normalise(self, value):
        if isinstance(value, bytes):
            return self._normalise(value.decode("utf-8", "backslashreplace"))
        if isinstance(value, str):
            value = value.replace(self.token, "<run>")
            for pattern, replacement in GENERATED:
                value = pattern.sub(replacement, value)
            return value
        if isinstance(value, dict):
            return {key: self._normalise(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            if self._stamped_during_the_play(value):
                return [*self._normalise(value[:-1]), "<during the play>"]
            return [self._normalise(item) for item in value]
        return value

    def _stamped_during_the_play(self, typed: list | tuple) -> bool:
        """A typed field or array item ([name,] 'T', seconds) holding a time between the
        play's start and now: the brokers stamp it (x-death's time) and two plays need not
        fall in the same second."""
        return len(typed) >= 2 and typed[-2] == "T" and isinstance(typed[-1], int) \
            and self.started <= typed[-1] <= time.time()

    # -- raw frames ---------------------------------------------------------------

    def raw(self, channel: int | None = 1, **handshake) -> RawAmqpClient:
        """A raw client that completed the handshake (and opened `channel`)."""
        client = RawAmqpClient(self.broker.host, self.broker.port, READ_TIMEOUT)
        self.clients.append(client)
        client.handshake(**handshake)
        if channel is not None:
            client.open_channel(channel)
        return client

    def send(self, client: RawAmqpClient, channel: int, method, step: str) -> None:
        """Send `method`; records the step only if the broker already closed the socket."""
        try:
            client.send_method(channel, method)
        except OSError:
            self.record(step, {"socket": "ended before sending"})

    def call(self, client: RawAmqpClient, channel: int, method, step: str):
        """Send `method`, record the broker's answer (one frame, or how the socket ended)."""
        try:
            client.send_method(channel, method)
        except OSError:
            self.record(step, {"socket": "ended before sending"})
            return None
        return self.read(client, step)

    def read(self, client: RawAmqpClient, step: str, timeout: float = READ_TIMEOUT):
        """Record the next frame the broker sends; returns its pamqp value (None if the
        socket ended or nothing came within `timeout`)."""
        try:
            received = client.read_frame_skip_heartbeats(timeout)
        except PeerClosed as closed:
            self.record(step, {"socket": "ended"})   # FIN or reset: timing, not semantics
            return None
        except Timeout:
            self.record(step, {"silence": timeout})
            return None
        self.record(step, describe_frame(received))
        if isinstance(received.value, commands.Connection.Close):
            client.send_method(0, commands.Connection.CloseOk())
        return received.value

    def read_message(self, client: RawAmqpClient, step: str):
        """Record a Basic.Deliver/GetOk/Return with its header and body."""
        method = self.read(client, step)
        if isinstance(method, (commands.Basic.Deliver, commands.Basic.GetOk,
                               commands.Basic.Return)):
            self.read(client, step + " header")
            self.read(client, step + " body")
        return method

    def close(self) -> None:
        for client in self.clients:
            client.close()


def describe_frame(received) -> dict:
    """What a client sees in a frame: the method and its fields, a content header's
    properties (table fields with their type tags), or a body."""
    value = received.value
    if isinstance(value, header.ContentHeader):
        properties = {name: item for name, item in dict(value.properties).items()
                      if item is not None and name != "headers"}
        if value.properties.headers is not None:
            properties["headers"] = typed_table(header_table_bytes(received.payload))
        return {"channel": received.channel, "header": value.body_size, **properties}
    if received.frame_type == 3:
        return {"channel": received.channel, "body": received.payload}
    return {"channel": received.channel, "method": value.name, **dict(value)}


def header_table_bytes(payload: bytes) -> bytes:
    """The encoded headers table of a content header payload (class, weight, size, flags,
    then the properties in order: headers is the third when present)."""
    flags = struct.unpack_from(">H", payload, 12)[0]
    offset = 14
    for bit in (15, 14):           # content-type, content-encoding: short strings
        if flags & (1 << bit):
            offset += 1 + payload[offset]
    size = struct.unpack_from(">I", payload, offset)[0]
    return payload[offset:offset + 4 + size]


def typed_table(data: bytes) -> list:
    """A field table as [(name, type tag, value)] sorted by name, nested tables and
    arrays alike: the tags show what pamqp's decoding hides (long 'l' versus int 'I', 'S' versus 'x')."""
    size = struct.unpack_from(">I", data, 0)[0]
    offset, end, fields = 4, 4 + size, []
    while offset < end:
        length = data[offset]
        name = data[offset + 1:offset + 1 + length].decode()
        offset += 1 + length
        tag, value, offset = _typed_value(data, offset)
        fields.append((name, tag, value))
    return sorted(fields)   # a table is a map: its order means nothing to a client


def _typed_value(data: bytes, offset: int):
    tag = chr(data[offset])
    offset += 1
    fixed = {"t": ">B", "b": ">b", "B": ">B", "s": ">h", "u": ">H", "I": ">i", "i": ">I",
             "l": ">q", "L": ">Q", "f": ">f", "d": ">d", "T": ">Q"}
    if tag in fixed:
        value = struct.unpack_from(fixed[tag], data, offset)[0]
        return tag, value, offset + struct.calcsize(fixed[tag])
    if tag in "Sx":
        length = struct.unpack_from(">I", data, offset)[0]
        return tag, data[offset + 4:offset + 4 + length].decode("utf-8", "backslashreplace"), \
            offset + 4 + length
    if tag == "F":
        length = struct.unpack_from(">I", data, offset)[0]
        return tag, typed_table(data[offset:offset + 4 + length]), offset + 4 + length
    if tag == "A":
        length = struct.unpack_from(">I", data, offset)[0]
        items, position, end = [], offset + 4, offset + 4 + length
        while position < end:
            item_tag, item, position = _typed_value(data, position)
            items.append((item_tag, item))
        return tag, items, end
    if tag == "V":
        return tag, None, offset
    if tag == "D":
        return tag, (data[offset], struct.unpack_from(">i", data, offset + 1)[0]), offset + 5
    raise ValueError(f"unknown field type {tag!r} at {offset}")


def play(scenario: Scenario, broker) -> list:
    session = Session(broker)
    try:
        scenario.play(session)
    finally:
        session.close()
    return session.transcript


def compared_lines() -> tuple[str, ...]:
    """The RabbitMQ lines the differential runner compares Warren with: the line of
    WARREN_TEST_RABBITMQ_LINE alone when it is set, or when WARREN_TEST_BROKER names the
    RabbitMQ to compare with (the default line then); else each line, against a
    throw-away node of its own."""
    line = os.environ.get("WARREN_TEST_RABBITMQ_LINE")
    if line is None and not os.environ.get("WARREN_TEST_BROKER"):
        return tuple(LINES)
    return (line or DEFAULT_LINE,)


def differences_between(scenario: Scenario, warren: list, rabbitmq: list,
                        line: str) -> list[str]:
    """Every entry where the transcripts (played under RabbitMQ `line`) differ other
    than as the scenario declares for that line, and every such declared difference
    that did not show as declared; [] when they agree."""
    declared = {difference.step: difference for difference in scenario.differences
                if difference.lines is None or line in difference.lines}
    found = []
    if [step for step, _ in warren] != [step for step, _ in rabbitmq]:
        found.append(f"steps differ:\n  Warren:   {[s for s, _ in warren]}\n"
                     f"  RabbitMQ: {[s for s, _ in rabbitmq]}")
    for (step, seen_warren), (_, seen_rabbitmq) in zip(warren, rabbitmq):
        expected = declared.get(step)
        if expected is None:
            if seen_warren != seen_rabbitmq:
                found.append(f"{step}:\n  Warren:   {seen_warren}\n  RabbitMQ: {seen_rabbitmq}")
        elif (seen_warren, seen_rabbitmq) != (expected.warren, expected.rabbitmq):
            found.append(f"{step} (declared difference: {expected.reason}):\n"
                         f"  Warren:   {seen_warren} (declared {expected.warren})\n"
                         f"  RabbitMQ: {seen_rabbitmq} (declared {expected.rabbitmq})")
    return found
