"""A grammar of client-to-server AMQP 0-9-1 input, valid and hostile, for the fuzzers.

Everything is built as raw bytes (never through pamqp's encoder, which refuses much of
what a hostile client can send): field values of every type tag and unknown tags, field
tables nested thousands deep, short strings of any UTF-8 (CR/LF, NUL, 255 bytes) or of
invalid UTF-8, basic properties with any flag combination, the arguments of every method
pamqp knows, and whole sessions (handshake, channels, declares with `x-` arguments,
publishes, consumes, acks, confirms, transactions) in which every method can be random.

Every choice goes through a `Choices` object: `random.Random` makes them for the wire
fuzzer and for the in-process fuzzer (seeded by a hypothesis draw in the suite), and
libFuzzer's input under atheris (bench/fuzz_core.py --atheris). See amqp_mutation.py for
what is done to a session once it is generated.
"""

import random
import struct

from pamqp import commands

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = b"\xce"
KNOWN_TAGS = b"tbBsuIilLfdDSATFVx"
MAX_DEPTH = 3          # nesting of ordinary generated tables; deep ones are built flat
DEEP_NESTING = (50, 500, 3000)

# Names the generated sessions share, so that a session's declares, binds, publishes and
# consumes meet each other's entities; the unusual ones are legal for RabbitMQ.
QUEUE_NAMES = ("fuzz-q", "fuzz-q2", "", "café", "名前", "amq.gen-x", "fuzz\r\nq",
               "x" * 255, "amq.rabbitmq.reply-to", "fuzz-stream")
EXCHANGE_NAMES = ("", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "fuzz-x",
                  "fuzz-dlx", "échange", "amq.custom")
EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers", "x-unknown", "")
ROUTING_KEYS = ("fuzz-q", "fuzz-q2", "#", "*.a", "a.#.b", "", "café", "fuzz\nkey")
QUEUE_ARGUMENTS = (
    "x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes", "x-overflow",
    "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-priority",
    "x-queue-type", "x-queue-mode", "x-single-active-consumer", "x-max-age",
    "x-stream-max-segment-size-bytes", "x-queue-master-locator", "alternate-exchange",
)
CONSUME_ARGUMENTS = ("x-priority", "x-stream-offset", "x-cancel-on-ha-failover",
                     "x-credit")
HEADER_KEYS = ("x-death", "CC", "BCC", "x-match", "x-first-death-reason",
               "x-stream-offset", "x-delay", "x-received-from", "h1", "h2")
STRING_VALUES = ("direct", "fanout", "topic", "headers", "stream", "classic", "quorum",
                 "lazy", "reject-publish", "drop-head", "reject-publish-dlx", "all",
                 "any", "first", "last", "next", "1h", "expired", "rejected", "maxlen")


class Choices:
    """The grammar's source of decisions. Subclasses decide how each one is made."""

    def integer(self, low: int, high: int) -> int:
        raise NotImplementedError

    def raw(self, size: int) -> bytes:
        raise NotImplementedError

    def choice(self, options):
        return options[self.integer(0, len(options) - 1)]

    def chance(self, percent: int) -> bool:
        """True `percent` times in a hundred."""
        return self.integer(0, 99) < percent


class RandomChoices(Choices):
    """Decisions from a seeded random.Random (fast; the same seed gives the same input)."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    @classmethod
    def seeded(cls, seed) -> "RandomChoices":
        """Decisions from `random.Random(seed)`."""
        return cls(random.Random(seed))

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def raw(self, size: int) -> bytes:
        return self.rng.randbytes(size)


# -- primitive values -----------------------------------------------------------------

def boundary_integer(choices: Choices, bits: int, signed: bool) -> int:
    """An integer of the given width, often at or next to a boundary."""
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    kind = choices.integer(0, 5)
    if kind == 0:
        return choices.choice((low, high, 0, 1, -1 if signed else 2))
    if kind == 1:
        return choices.choice((low + 1, high - 1, high >> 1, (high >> 1) + 1))
    if kind == 2:
        return choices.integer(0, min(300, high))
    return choices.integer(low, high)


def text(choices: Choices, max_bytes: int = 255) -> bytes:
    """The bytes of a name or string: ASCII, any UTF-8, CR/LF, NUL, invalid UTF-8."""
    kind = choices.integer(0, 9)
    if kind <= 2:
        value = choices.choice((b"fuzz", b"", b"guest", b"/", b"amq.direct", b"q.1",
                                b"x-match", b"application/json"))
    elif kind == 3:
        value = choices.choice(("café", "名前", "😀", "é" * 127, "a\r\nb", "\r\n", "a\0b",
                                "x" * 255, "x" * 256, "amq.x\n")).encode()
    elif kind == 4:
        value = choices.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"caf\xe9", b"\x80" * 10,
                                b"\xf4\x90\x80\x80"))
    elif kind == 5:
        value = bytes(choices.integer(0x20, 0x7e) for _ in range(choices.integer(0, 20)))
    else:
        value = choices.raw(choices.integer(0, 40))
    return value[:max_bytes]


def short_string(value: bytes) -> bytes:
    return bytes([len(value) & 0xFF]) + value[:255]


def long_string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


# -- field tables ------------------------------------------------------------------------

def field_value(choices: Choices, depth: int = 0) -> bytes:
    """A type tag and its value: every tag RabbitMQ and pamqp know, and unknown ones."""
    tag = choices.choice(KNOWN_TAGS + b"?zZ\x00\xff") if choices.chance(95) else \
        choices.integer(0, 255)
    tag_byte = bytes([tag])
    if tag in b"FA" and depth >= MAX_DEPTH:
        tag_byte = b"V"
    return tag_byte + _tagged_value(choices, tag_byte, depth)


_INTEGER_TAGS = {b"b": (">b", 8, True), b"B": (">B", 8, False), b"s": (">h", 16, True),
                 b"u": (">H", 16, False), b"I": (">i", 32, True), b"i": (">I", 32, False),
                 b"l": (">q", 64, True), b"L": (">q", 64, True), b"T": (">Q", 64, False)}


def _tagged_value(choices: Choices, tag: bytes, depth: int) -> bytes:
    if tag in _INTEGER_TAGS:
        fmt, bits, signed = _INTEGER_TAGS[tag]
        return struct.pack(fmt, boundary_integer(choices, bits, signed))
    if tag == b"t":
        return bytes([choices.choice((0, 1, 2, 255))])
    if tag == b"f":
        return choices.raw(4)
    if tag == b"d":
        return choices.choice((struct.pack(">d", 1.5), b"\x7f\xf8" + bytes(6),
                               b"\x7f\xf0" + bytes(6), choices.raw(8)))
    if tag == b"D":
        return bytes([choices.choice((0, 2, 255))]) + struct.pack(
            ">i", boundary_integer(choices, 32, True))
    if tag in (b"S", b"x"):
        return long_string(text(choices, 300))
    if tag == b"F":
        return field_table(choices, depth + 1)
    if tag == b"A":
        items = b"".join(field_value(choices, depth + 1)
                         for _ in range(choices.integer(0, 4)))
        return long_string(items)
    if tag == b"V":
        return b""
    return choices.raw(choices.integer(0, 9))     # an unknown tag and some bytes


def field_table(choices: Choices, depth: int = 0, keys=()) -> bytes:
    """A field table with its 4-byte length; sometimes nested thousands deep."""
    if depth == 0 and choices.chance(3):
        return deeply_nested_table(choices.choice(DEEP_NESTING),
                                   choices.choice((b"F", b"A")))
    entries = []
    for _ in range(choices.integer(0, 5)):
        key = choices.choice(keys).encode() if keys and choices.chance(70) else text(choices)
        if keys and choices.chance(50):
            entries.append(short_string(key) + typed_argument(choices))
        else:
            entries.append(short_string(key) + field_value(choices, depth))
    return long_string(b"".join(entries))


def typed_argument(choices: Choices) -> bytes:
    """A value as an `x-` argument or header is usually given: a number or a string of
    the kind the broker interprets, or a table shaped like x-death."""
    kind = choices.integer(0, 4)
    if kind == 0:
        return b"l" + struct.pack(">q", boundary_integer(choices, 64, True))
    if kind == 1:
        return b"I" + struct.pack(">i", boundary_integer(choices, 32, True))
    if kind == 2:
        return b"S" + long_string(choices.choice(STRING_VALUES).encode())
    if kind == 3:
        return b"A" + long_string(b"F" + field_table(choices, 1, (
            "queue", "reason", "count", "exchange", "routing-keys", "time")))
    return field_value(choices)


def deeply_nested_table(depth: int, tag: bytes) -> bytes:
    """A field table holding tables (tag F) or arrays (tag A) nested `depth` deep, built
    without recursion."""
    inner = long_string(b"")
    for _ in range(depth - 1):
        if tag == b"F":
            inner = long_string(short_string(b"k") + b"F" + inner)
        else:
            inner = long_string(b"A" + inner)
    return long_string(short_string(b"k") + tag + inner)


# -- methods, properties, frames -----------------------------------------------------

def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + FRAME_END


def method_frame(channel: int, index: int, arguments: bytes) -> bytes:
    return frame(FRAME_METHOD, channel, struct.pack(">I", index) + arguments)


_NAME_FIELDS = {"queue": QUEUE_NAMES, "exchange": EXCHANGE_NAMES, "source": EXCHANGE_NAMES,
                "destination": EXCHANGE_NAMES, "routing_key": ROUTING_KEYS,
                "exchange_type": EXCHANGE_TYPES, "virtual_host": ("/", "", "/nope", "é")}
_TABLE_KEYS = {commands.Queue.Declare: QUEUE_ARGUMENTS, commands.Basic.Consume:
               CONSUME_ARGUMENTS, commands.Exchange.Declare: ("alternate-exchange",),
               commands.Queue.Bind: ("x-match", "h1", "h2"),
               commands.Exchange.Bind: ("x-match", "h1")}
_INTEGER_TYPES = {"octet": (">B", 8), "short": (">H", 16), "long": (">I", 32),
                  "longlong": (">Q", 64)}


def method_arguments(choices: Choices, method_class) -> bytes:
    """The encoded arguments of `method_class`, each drawn from the grammar."""
    out = bytearray()
    bits = bit_count = 0
    for name in method_class.attributes():
        amqp_type = method_class.amqp_type(name)
        if amqp_type == "bit":
            bits |= choices.chance(30) << bit_count
            bit_count += 1
            continue
        if bit_count:
            out.append(bits)
            bits = bit_count = 0
        if amqp_type in _INTEGER_TYPES:
            fmt, width = _INTEGER_TYPES[amqp_type]
            value = choices.integer(0, 5) if choices.chance(50) else \
                boundary_integer(choices, width, False)
            out += struct.pack(fmt, value)
        elif amqp_type == "shortstr":
            names = _NAME_FIELDS.get(name)
            value = choices.choice(names).encode() if names and choices.chance(80) else \
                text(choices)
            out += short_string(value)
        elif amqp_type == "longstr":
            out += long_string(text(choices, 300))
        else:
            out += field_table(choices, 0, _TABLE_KEYS.get(method_class, ()))
    if bit_count:
        out.append(bits)
    return bytes(out)


def random_method(choices: Choices, channel: int, classes=None) -> bytes:
    """A method frame of a random known method (or an unknown id) with random arguments."""
    if choices.chance(2):
        return method_frame(channel, choices.integer(0, 0xFFFFFFFF), choices.raw(8))
    method_class = choices.choice(classes or _METHOD_CLASSES)
    return method_frame(channel, method_class.index, method_arguments(choices, method_class))


_METHOD_CLASSES = tuple(commands.INDEX_MAPPING[index]
                        for index in sorted(commands.INDEX_MAPPING))
_PROPERTY_TYPES = [commands.Basic.Properties.amqp_type(name)
                   for name in commands.Basic.Properties.attributes()]


def basic_properties(choices: Choices) -> bytes:
    """Property flags and values: any set of the 14 properties, each drawn from the
    grammar (headers with x-death/CC/BCC, timestamps out of datetime's range,
    delivery_mode and priority of any octet), sometimes with the flags lying."""
    flags = 0
    values = bytearray()
    for position, amqp_type in enumerate(_PROPERTY_TYPES):
        if not choices.chance(35):
            continue
        flags |= 1 << (15 - position)
        if amqp_type == "shortstr":
            values += short_string(choices.choice((b"1000", b"-1", b"abc", b"0", b"guest",
                                                   b"")) if choices.chance(40)
                                   else text(choices))
        elif amqp_type == "table":
            values += field_table(choices, 0, HEADER_KEYS)
        elif amqp_type == "octet":
            values.append(choices.choice((1, 2, 0, 255, 9, 10)))
        else:
            values += struct.pack(">Q", boundary_integer(choices, 64, False))
    if choices.chance(5):
        flags |= choices.integer(0, 0xFFFF)          # flags that promise more than follows
    return struct.pack(">H", flags) + bytes(values)


def content_frames(choices: Choices, channel: int, body: bytes, frame_max: int) -> list:
    """A content header (class 60) and the body cut into body frames."""
    frames = [frame(FRAME_HEADER, channel, struct.pack(">HHQ", 60, 0, len(body))
                    + basic_properties(choices))]
    step = max(1, min(frame_max - 8, choices.choice((len(body) // 3, 4096, len(body) or 1))))
    frames += [frame(FRAME_BODY, channel, body[at:at + step])
               for at in range(0, len(body), step)]
    return frames


def publish_frames(choices: Choices, channel: int) -> list:
    arguments = method_arguments(choices, commands.Basic.Publish)
    body = choices.choice((b"", b"m", bytes(200), b"x" * 5000)) if choices.chance(80) else \
        choices.raw(choices.integer(0, 300))
    return [method_frame(channel, commands.Basic.Publish.index, arguments)] + \
        content_frames(choices, channel, body, 131072)


# -- sessions ----------------------------------------------------------------------------

def handshake_frames(choices: Choices, properties: bytes | None = None) -> list:
    """Start-Ok (client properties from the grammar unless given), Tune-Ok and Open,
    usually valid."""
    if properties is None:
        properties = _client_properties_like_pika() if choices.chance(60) else field_table(
            choices, 0, ("capabilities", "product", "platform", "connection_name"))
    user = b"guest" if choices.chance(85) else text(choices)
    response = b"\0" + user + b"\0guest"
    mechanism = b"PLAIN" if choices.chance(90) else choices.choice((b"AMQPLAIN", b"X", b""))
    start_ok = method_frame(0, commands.Connection.StartOk.index,
                            properties + short_string(mechanism) + long_string(response)
                            + short_string(b"en_US"))
    channel_max = 2047 if choices.chance(90) else boundary_integer(choices, 16, False)
    frame_max = 131072 if choices.chance(90) else boundary_integer(choices, 32, False)
    heartbeat = 0 if choices.chance(90) else choices.choice((1, 2, 60, 65535))
    tune_ok = method_frame(0, commands.Connection.TuneOk.index,
                           struct.pack(">HIH", channel_max, frame_max, heartbeat))
    vhost = b"/" if choices.chance(90) else text(choices)
    open_frame = method_frame(0, commands.Connection.Open.index,
                              short_string(vhost) + short_string(b"") + b"\0")
    return [start_ok, tune_ok, open_frame]


def _client_properties_like_pika() -> bytes:
    capabilities = b"".join(short_string(name) + b"t\x01" for name in (
        b"authentication_failure_close", b"basic.nack", b"connection.blocked",
        b"consumer_cancel_notify", b"publisher_confirms"))
    return long_string(short_string(b"product") + b"S" + long_string(b"fuzz")
                       + short_string(b"capabilities") + b"F" + long_string(capabilities))


_SESSION_METHODS = (
    commands.Queue.Declare, commands.Queue.Bind, commands.Queue.Unbind,
    commands.Queue.Purge, commands.Queue.Delete, commands.Exchange.Declare,
    commands.Exchange.Delete, commands.Exchange.Bind, commands.Exchange.Unbind,
    commands.Basic.Qos, commands.Basic.Consume, commands.Basic.Cancel, commands.Basic.Get,
    commands.Basic.Ack, commands.Basic.Nack, commands.Basic.Reject, commands.Basic.Recover,
    commands.Basic.RecoverAsync, commands.Confirm.Select, commands.Tx.Select,
    commands.Tx.Commit, commands.Tx.Rollback, commands.Channel.Flow, commands.Channel.Close,
    commands.Channel.Open,
)


def _table(entries: list) -> bytes:
    return long_string(b"".join(short_string(key.encode()) + value for key, value in entries))


def _string_value(value: str) -> bytes:
    return b"S" + long_string(value.encode())


def _method(channel: int, method_class, **fields) -> bytes:
    """A method frame built with pamqp from valid field values."""
    return method_frame(channel, method_class.index, method_class(**fields).marshal())


def _hostile_publish(choices: Choices, channel: int, exchange: str, routing_key: str,
                     headers: list) -> list:
    """A publish with the given header entries and, from the grammar, the properties
    the broker interprets: delivery_mode, priority, expiration, timestamp, user_id."""
    arguments = struct.pack(">H", 0) + short_string(exchange.encode()) + \
        short_string(routing_key.encode()) + b"\0"
    flags = 0x2000
    values = _table(headers)
    if choices.chance(50):
        flags |= 0x1000 | 0x0800
        values += bytes([choices.choice((1, 2, 0, 3, 255)), choices.integer(0, 255)])
    if choices.chance(50):
        flags |= 0x0100
        values += short_string(choices.choice((b"0", b"1", b"-1", b"abc", b"1e3",
                                               b"99999999999999999999", b"")))
    if choices.chance(30):
        flags |= 0x0040
        values += struct.pack(">Q", boundary_integer(choices, 64, False))
    if choices.chance(30):
        flags |= 0x0010
        values += short_string(choices.choice((b"guest", b"other", b"\xff", b"")))
    if choices.chance(15):          # the flags promise values that are cut short
        values = values[:choices.integer(0, max(len(values) - 1, 0))]
    body = b"dead letter me"
    return [method_frame(channel, commands.Basic.Publish.index, arguments),
            frame(FRAME_HEADER, channel, struct.pack(">HHQH", 60, 0, len(body), flags)
                  + values),
            frame(FRAME_BODY, channel, body)]


# Scenario queues expire when a session leaves them behind (long runs would pile up).
EXPIRES = b"I" + struct.pack(">i", 10000)


def _scenario_queue(choices: Choices, prefix: str) -> str:
    """A name of its own for a scenario's queue: its arguments differ from session to
    session, and redeclaring a queue with other arguments is only a 406."""
    return f"{prefix}-{choices.integer(0, 1 << 30)}"


def dead_letter_scenario(choices: Choices, channel: int) -> list:
    """A queue that dead-letters (reject and TTL) messages whose x-death and other
    headers come from the grammar, into a second queue that is read."""
    name = _scenario_queue(choices, "fuzz-dl")
    arguments = [("x-expires", EXPIRES), ("x-dead-letter-exchange", _string_value("")),
                 ("x-dead-letter-routing-key", _string_value("fuzz-dead")),
                 ("x-message-ttl", typed_argument(choices) if choices.chance(50) else
                  b"I" + struct.pack(">i", 0))]
    declare = method_frame(channel, commands.Queue.Declare.index, struct.pack(">H", 0)
                           + short_string(name.encode()) + b"\0" + _table(arguments))
    headers = [("x-death", typed_argument(choices)),
               (choices.choice(HEADER_KEYS), field_value(choices))]
    return [declare, _method(channel, commands.Queue.Declare, queue="fuzz-dead"),
            *_hostile_publish(choices, channel, "", name, headers),
            _method(channel, commands.Basic.Get, queue=name),
            _method(channel, commands.Basic.Reject, delivery_tag=1, requeue=False),
            _method(channel, commands.Basic.Get, queue="fuzz-dead", no_ack=True),
            _method(channel, commands.Queue.Delete, queue=name)]


def routing_scenario(choices: Choices, channel: int) -> list:
    """A headers binding with an x-match of any type, then publishes with CC/BCC and
    headers of any type through the headers and direct exchanges."""
    bind = method_frame(channel, commands.Queue.Bind.index, struct.pack(">H", 0)
                        + short_string(b"fuzz-q") + short_string(b"amq.headers")
                        + short_string(b"") + b"\0"
                        + _table([("x-match", typed_argument(choices)),
                                  ("h1", field_value(choices))]))
    headers = [(choices.choice(("CC", "BCC", "h1", "x-match")), typed_argument(choices))
               for _ in range(choices.integer(1, 3))]
    return [_method(channel, commands.Queue.Declare, queue="fuzz-q"), bind,
            *_hostile_publish(choices, channel, "amq.headers", "", headers),
            *_hostile_publish(choices, channel, "amq.direct", "fuzz-q", headers),
            _method(channel, commands.Basic.Get, queue="fuzz-q", no_ack=True)]


def stream_scenario(choices: Choices, channel: int) -> list:
    """A stream queue consumed from an x-stream-offset of any type."""
    declare = method_frame(channel, commands.Queue.Declare.index, struct.pack(">H", 0)
                           + short_string(b"fuzz-stream") + b"\2"
                           + _table([("x-queue-type", _string_value("stream"))]))
    consume = method_frame(channel, commands.Basic.Consume.index, struct.pack(">H", 0)
                           + short_string(b"fuzz-stream") + short_string(b"") + b"\0"
                           + _table([("x-stream-offset", typed_argument(choices))]))
    return [declare, _method(channel, commands.Basic.Qos, prefetch_count=10),
            *_hostile_publish(choices, channel, "", "fuzz-stream", []), consume]


def durable_scenario(choices: Choices, channel: int) -> list:
    """Persistent publishes (properties sometimes cut short) to a durable queue, in
    confirm or tx mode, then get, ack, purge."""
    mode = choices.choice((commands.Confirm.Select, commands.Tx.Select, None))
    name = _scenario_queue(choices, "fuzz-durable")
    arguments = [("x-expires", EXPIRES)]
    if choices.chance(30):
        arguments.append(("x-max-length", typed_argument(choices)))
    frames = [method_frame(channel, commands.Queue.Declare.index, struct.pack(">H", 0)
                           + short_string(name.encode()) + b"\2" + _table(arguments))]
    if mode is not None:
        frames.append(_method(channel, mode))
    for _ in range(choices.integer(1, 3)):
        frames += _hostile_publish(choices, channel, "", name,
                                   [("h", field_value(choices))])
    if mode is commands.Tx.Select:
        frames.append(_method(channel, commands.Tx.Commit))
    return frames + [_method(channel, commands.Basic.Get, queue=name),
                     _method(channel, commands.Basic.Ack, delivery_tag=1, multiple=True),
                     _method(channel, commands.Queue.Purge, queue=name),
                     _method(channel, commands.Queue.Delete, queue=name)]


SCENARIOS = (dead_letter_scenario, routing_scenario, stream_scenario, durable_scenario)


def session_frames(choices: Choices, steps: int | None = None) -> list:
    """A whole client session as a list of frames (the protocol header first): a
    handshake, then `steps` operations on a few channels, mostly well formed."""
    frames = [PROTOCOL_HEADER] + handshake_frames(choices)
    channels = [1]
    frames.append(method_frame(1, commands.Channel.Open.index, short_string(b"")))
    for _ in range(choices.integer(1, 25) if steps is None else steps):
        channel = choices.choice(channels) if choices.chance(90) else \
            boundary_integer(choices, 16, False)
        kind = choices.integer(0, 9)
        if kind <= 2:
            frames += publish_frames(choices, channel)
        elif kind == 3 and len(channels) < 4:
            channels.append(len(channels) + 1)
            frames.append(method_frame(channels[-1], commands.Channel.Open.index,
                                       short_string(b"")))
        elif kind == 4:
            frames.append(random_method(choices, channel))
        elif kind == 5 and choices.chance(20):
            frames.append(frame(FRAME_HEARTBEAT, 0, b""))
        elif kind == 6:
            frames += choices.choice(SCENARIOS)(choices, channel)
        else:
            frames.append(random_method(choices, channel, _SESSION_METHODS))
    if choices.chance(50):
        frames.append(method_frame(0, commands.Connection.Close.index,
                                   struct.pack(">H", 200) + short_string(b"bye")
                                   + struct.pack(">HH", 0, 0)))
    return frames
