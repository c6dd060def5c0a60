"""Frame mode of the wire fuzzer: long runs of mutated frames on logged-in connections.

Session mode (wire_fuzz.py) spends most of its time generating whole sessions in
Python and logging in, and the broker closes a session after ~3.5 mutated frames. Frame
mode logs in once per connection, opens channels, declares what it needs, then streams
chunks of mutated frames until the broker closes the connection (it reconnects and
counts it), the connection's frame cap, or the end of the batch's budget.

Frames are cheap because each worker process builds a `FramePool` once, from the seed
sessions' post-handshake frames and from grammar frames, with the grammar's and the
mutation module's generators; while streaming, a unit (one or a few frames) is a pick
from the pool put on a fuzz channel, and a publish is assembled from a publish method,
a property block and a body, each picked on its own, with a body_size that matches and
the body split at a picked size. Warren's decoder sorts the pool once: what it reads
makes up almost all units (property blocks and header tables, bodies and their splits,
routing keys and exchange names, table values inside method arguments, channel numbers
among the open channels, heartbeats); what is sure to close its channel (delivery tags,
user_id, expiration) is sent 1 % of the time; what breaks the framing or the connection
(what the decoder refuses, bit flips, length fields, frame types, end octets,
truncation, a body_size its bodies do not match, a method on a channel that is not
open) 0.2 % of the time. The sorting decides how often a piece is sent, never what
counts as a failure.

Counts (per connection, summed in `FrameTotals`; docs/fuzzing.md says more):
- frames / mutated frames written (mutated: differs from the seed or grammar frame it
  was made from; setup, seed frames as they were, syncs and heartbeats do not count);
- read: every chunk ends with a Basic.Qos on a channel of its own, and the Qos-Ok that
  answers it says the broker has read everything before it; after our Connection.Close
  answered by Close-Ok, everything was read;
- processed: mutated frames read less those the broker may have dropped because it was
  closing their channel (AMQP 0-9-1 §2.3.5.2), counted conservatively;
- connections (closed by the broker, stalled, dropped), channel closes, 541 closes;
- hangs: the broker stopped reading, or did not close the connection in time after our
  Close or EOF.

Connections that end with a 541, a hang, or without any Connection.Close (the broker
exited or dropped the socket) keep their bytes (the login and the last 256 KiB) as a
reproducer, sent again with `bench/fuzz_wire.py --replay FILE`.
"""

import asyncio
import collections
import multiprocessing
import random
import struct
from dataclasses import dataclass, field

from amqp_codec.decoder import Decoder
from amqp_codec.errors import ProtocolError
from amqp_codec.properties import MalformedProperties, decode_properties
from tests.support.amqp_grammar import (_SESSION_METHODS, EXCHANGE_NAMES, FRAME_BODY, FRAME_HEADER,
                                        FRAME_HEARTBEAT, FRAME_METHOD, PROTOCOL_HEADER, ROUTING_KEYS,
                                        SCENARIOS, RandomChoices, _client_properties_like_pika,
                                        basic_properties, boundary_integer, field_table, frame,
                                        long_string, method_frame, random_method, short_string, text)
from tests.support.amqp_mutation import (change_table_tags, flip_bits, insert_or_delete_bytes,
                                         replace_arguments_tail, set_end_octet, set_frame_type,
                                         set_length_field, truncate)
from tests.support.fuzz_seeds import load_seed_sessions
from pamqp import commands
from tests.support.wire_fuzz import CONNECT_TIMEOUT, HANG_DEADLINE, INTERNAL_ERROR

CHANNELS = 16                 # channels 1..CHANNELS carry the fuzz
SYNC_CHANNEL = CHANNELS + 1   # carries the Basic.Qos that closes each chunk
CHUNK_UNITS = 32              # units per write, then a sync
IN_FLIGHT = 2                 # chunks written and not yet answered
STALL = 3.0                   # seconds without an answer: stop sending (EOF), await the close
CONNECTION_FRAMES = 20_000    # then a clean Connection.Close and a new connection
POOL_SIZE = 1500
BREAKING_SHARE = 0.002        # of units: end the connection (or were made to)
CLOSING_SHARE = 0.01          # of units: close their channel
TAIL_BYTES = 256 * 1024
MAX_KEPT_PER_WORKER = 20
QUEUES = ("fuzz-frames-a", "fuzz-frames-b")   # bounded, shared, one consumed

_CHANNEL_CLOSE, _CONNECTION_CLOSE, _CONNECTION_CLOSE_OK = 0x00140028, 0x000A0032, 0x000A0033
_QOS_OK = 0x003C000B
_DELIVERY_TAGGED = {commands.Basic.Ack.index, commands.Basic.Nack.index,
                    commands.Basic.Reject.index}
_CHANNEL_CLOSING = _DELIVERY_TAGGED | {commands.Tx.Commit.index, commands.Tx.Rollback.index}
_NOT_STREAMED = (10, 20)      # connection and channel methods: the stream manages those
_STREAM_METHODS = tuple(method for method in _SESSION_METHODS if method.index >> 16 != 20)
PLAIN_PUBLISH = method_frame(1, commands.Basic.Publish.index, struct.pack(">H", 0)
                             + short_string(b"") + short_string(QUEUES[1].encode()) + b"\0")
_BREAKING = (flip_bits, set_length_field, set_frame_type, set_end_octet, truncate,
             insert_or_delete_bytes)


def _method(channel: int, method) -> bytes:
    return method_frame(channel, method.index, method.marshal())


def _on_channel(data: bytes, channel: bytes) -> bytes:
    return data[:1] + channel + data[3:]


def _index(data: bytes) -> int:
    return struct.unpack_from(">I", data, 7)[0] if len(data) >= 11 and data[0] == 1 else 0


def _exclusive_declare(data: bytes) -> bytes:
    """A Queue.Declare made exclusive (its queue goes with the connection, so long runs
    do not pile up queues and messages); other frames as they are."""
    if _index(data) != commands.Queue.Declare.index or len(data) < 14:
        return data
    at = 14 + data[13]        # the bits octet after ticket and queue name
    if at >= len(data) - 1:
        return data
    return data[:at] + bytes([data[at] | 0x04]) + data[at + 1:]


def _warren_reads(frames: list) -> bool:
    """Whether Warren's decoder reads these frames (methods, publishes with their
    content) and their property blocks without an error, and they hold none of the
    methods RabbitMQ answers with a connection error (540 NOT_IMPLEMENTED)."""
    try:
        items = Decoder().feed(PROTOCOL_HEADER + b"".join(frames))
        for item in items:
            if hasattr(item, "properties"):
                decode_properties(item.properties)
    except (ProtocolError, MalformedProperties):
        return False
    return not any(_not_implemented(getattr(item, "method", None)) for item in items)


def _closes_its_channel(method_frame_bytes: bytes, properties: bytes | None) -> bool:
    if _index(method_frame_bytes) in _CHANNEL_CLOSING:
        return True   # no delivery is unacknowledged (the consumer is no-ack), no tx.select
    if properties is None:
        return False
    decoded = decode_properties(properties)
    expiration = decoded.expiration
    return decoded.user_id not in (None, "guest") or (
        expiration is not None and not (expiration.isascii() and expiration.isdigit()))


def _not_implemented(method) -> bool:
    if isinstance(method, commands.Basic.Qos):
        return method.prefetch_size != 0
    if isinstance(method, (commands.Basic.Recover, commands.Basic.RecoverAsync)):
        return not method.requeue
    return False


def _units_of(frames: list) -> list:
    """Post-handshake frames of a recorded session, grouped into units (a method and
    the content that belongs to it); connection and channel methods are left out."""
    units, current = [], None
    for data in frames:
        if len(data) < 8 or data[:4] == b"AMQP":
            continue
        if data[0] == FRAME_METHOD:
            current = None
            if _index(data) >> 16 in _NOT_STREAMED or data[1:3] == b"\0\0":
                continue
            current = [data]
            units.append(current)
        elif data[0] in (FRAME_HEADER, FRAME_BODY) and current is not None:
            current.append(data)
    return units


class FramePool:
    """What a worker streams, built once: pieces of publishes, single methods, frame
    sequences and breaking frames, each as (bytes on channel 1, mutated)."""

    def __init__(self, rng: random.Random, seeds: list):
        self.rng = rng
        choices = self.choices = RandomChoices(rng)
        seed_units = [unit for session in seeds for unit in _units_of(session)]
        seed_methods = []
        self.publishes, self.properties, self.bodies = [], [], []
        self.methods, self.sequences, self.breaking = [], [], []
        self.closing = []      # units that close their channel (the broker refuses them)
        for unit in seed_units:
            unit = [_on_channel(data, b"\0\1") for data in unit]
            if _index(unit[0]) == commands.Basic.Publish.index and len(unit) >= 2:
                self.publishes.append((unit[0], False))
                self.properties.append((unit[1][19:-1], False))
                self.bodies += [(b"".join(data[7:-1] for data in unit[2:]), False)]
            elif len(unit) == 1:
                seed_methods.append(_exclusive_declare(unit[0]))
                self._keep_or_break(self.methods, (seed_methods[-1], False))
        seed_methods = seed_methods or [_method(1, commands.Basic.Qos())]
        seed_headers = [unit[1] for unit in seed_units if len(unit) >= 2
                        and unit[1][0] == FRAME_HEADER and len(unit[1]) >= 21]
        for _ in range(POOL_SIZE):
            self._keep_or_break(self.publishes, (self._publish_method(), True))
            self._keep_or_break(self.properties, self._property_block(seed_headers))
            self.bodies.append(self._body())
            self._keep_or_break(self.methods, self._method(seed_methods))
        for _ in range(POOL_SIZE // 10):
            sequence = choices.choice(SCENARIOS)(choices, 1)
            pairs = [(data, data[0] == FRAME_HEADER) for data in sequence]
            (self.sequences if _warren_reads(sequence) else self.breaking).append(pairs)
        for _ in range(POOL_SIZE // 5):
            self.breaking.append(self._breaking())

    def _keep_or_break(self, pieces: list, piece: tuple) -> None:
        """Pieces that Warren's decoder reads go to `pieces`; the others (invalid UTF-8,
        unknown table tags, truncated tables or property blocks...) end the connection:
        they become breaking units, which are sent rarely. Pieces that are sure to close
        their channel (acks of unknown delivery tags, a user_id that is not the user, an
        expiration that is not a number) become closing units, sent now and then: while
        the broker closes a channel it drops the frames that follow on it."""
        data, mutated = piece
        if pieces is self.properties:
            unit = [(PLAIN_PUBLISH, False),
                    (frame(FRAME_HEADER, 1, struct.pack(">HHQ", 60, 0, 1) + data), mutated),
                    (frame(FRAME_BODY, 1, b"b"), False)]
        elif pieces is self.publishes:
            unit = [piece, (frame(FRAME_HEADER, 1, struct.pack(">HHQH", 60, 0, 0, 0)), False)]
        else:
            unit = [piece]
        if not _warren_reads([data for data, _ in unit]):
            self.breaking.append(unit)
        elif _closes_its_channel(unit[0][0], data if pieces is self.properties else None):
            self.closing.append(unit)
        else:
            pieces.append(piece)

    def _publish_method(self) -> bytes:
        choices = self.choices
        exchange = choices.choice(("", "", "", "amq.direct", "amq.fanout", "amq.topic",
                                   "amq.headers")).encode() if choices.chance(95) else \
            choices.choice(EXCHANGE_NAMES).encode()
        routing_key = choices.choice(QUEUES).encode() if choices.chance(60) else \
            choices.choice(ROUTING_KEYS).encode() if choices.chance(60) else text(choices)
        bits = 1 if choices.chance(10) else 0          # mandatory: returned when unroutable
        return method_frame(1, commands.Basic.Publish.index, struct.pack(">H", 0)
                            + short_string(exchange) + short_string(routing_key)
                            + bytes([bits]))

    def _property_block(self, seed_headers: list) -> tuple:
        """Grammar properties, or a seed's with its tables' type tags changed."""
        choices = self.choices
        if seed_headers and choices.chance(30):
            original = choices.choice(seed_headers)
            mutated = change_table_tags(choices, original)[19:-1]
            return mutated, mutated != original[19:-1]
        if choices.chance(40):    # a header table of every kind, the rest plain
            return struct.pack(">H", 0x2000) + field_table(choices), True
        return basic_properties(choices), True

    def _body(self) -> tuple:
        choices = self.choices
        size = choices.choice((0, 1, 10, 200, 1000, 5000, 20000))
        return choices.raw(size), size > 0

    def _method(self, seed_methods: list) -> tuple:
        choices = self.choices
        if choices.chance(40):
            return _exclusive_declare(random_method(choices, 1, _STREAM_METHODS)), True
        original = choices.choice(seed_methods)
        if _index(original) in _DELIVERY_TAGGED:
            tag = struct.pack(">Q", boundary_integer(choices, 64, False))
            mutated = frame(FRAME_METHOD, 1, original[7:11] + tag + original[19:-1])
        elif len(original) >= 12 and choices.chance(50):
            mutated = change_table_tags(choices, original)
        elif len(original) >= 12 and choices.chance(70):
            mutated = replace_arguments_tail(choices, original)
        else:
            mutated = original
        mutated = _exclusive_declare(mutated)
        return mutated, mutated != original

    def _breaking(self) -> list:
        """A frame that breaks framing or the connection's state."""
        choices = self.choices
        kind = choices.integer(0, 9)
        if kind == 0:      # a method on a channel that is not open
            data, _ = choices.choice(self.methods)
            return [(_on_channel(data, struct.pack(">H", choices.integer(100, 65535))), True)]
        if kind == 1:      # a body_size that its bodies do not match
            body, _ = choices.choice(self.bodies)
            size = len(body) + choices.choice((1, -1 if body else 1, 1 << 40))
            header = frame(FRAME_HEADER, 1, struct.pack(">HHQ", 60, 0, size) + b"\0\0")
            return [(PLAIN_PUBLISH, False), (header, True),
                    (frame(FRAME_BODY, 1, body), bool(body))]
        data, _ = choices.choice(self.methods + self.publishes)
        return [(choices.choice(_BREAKING)(choices, data), True)]

    def publish(self, channel: bytes) -> tuple:
        """A publish assembled from picked pieces: (frames, mutated frames)."""
        pick = self.rng.choice
        method, method_mutated = pick(self.publishes)
        properties, properties_mutated = pick(self.properties)
        body, body_mutated = pick(self.bodies)
        frames = [_on_channel(method, channel),
                  b"\2" + channel + struct.pack(">IHHQ", 12 + len(properties), 60, 0,
                                                len(body)) + properties + b"\xce"]
        split_mutated = False
        if body:
            step = pick((len(body), len(body), 1000, 4096, max(len(body) // 3, 1)))
            split_mutated = step < len(body)
            prefix = struct.pack(">B", FRAME_BODY) + channel
            frames += [prefix + struct.pack(">I", len(piece)) + piece + b"\xce"
                       for piece in (body[at:at + step] for at in range(0, len(body), step))]
        mutated = method_mutated + properties_mutated + \
            (len(frames) - 2) * (body_mutated or split_mutated)
        return frames, mutated

    def unit(self, channel: bytes) -> tuple:
        """The next unit on `channel` (2 bytes): (frames, mutated frames)."""
        roll = self.rng.random()
        if roll < BREAKING_SHARE:
            return self.breaking_unit()
        if roll < BREAKING_SHARE + CLOSING_SHARE:
            pairs = self.rng.choice(self.closing)
            return ([_on_channel(data, channel) for data, _ in pairs],
                    sum(mutated for _, mutated in pairs))
        if roll < 0.55:
            return self.publish(channel)
        if roll < 0.92:
            data, mutated = self.rng.choice(self.methods)
            return [_on_channel(data, channel)], int(mutated)
        if roll < 0.97:
            pairs = self.rng.choice(self.sequences)
            return ([_on_channel(data, channel) for data, _ in pairs],
                    sum(mutated for _, mutated in pairs))
        return [HEARTBEAT], 0

    def breaking_unit(self) -> tuple:
        """A unit that ends the connection, or was made to."""
        if self.rng.random() < 0.2:                 # a channel's method on channel 0
            return [_on_channel(self.rng.choice(self.methods)[0], b"\0\0")], 1
        pairs = self.rng.choice(self.breaking)      # on channel 1, as they were made
        return [data for data, _ in pairs], sum(mutated for _, mutated in pairs)


def login_frames() -> bytes:
    """A valid handshake, the channels, and the bounded queues with a consumer."""
    frames = [PROTOCOL_HEADER,
              method_frame(0, commands.Connection.StartOk.index,
                           _client_properties_like_pika() + short_string(b"PLAIN")
                           + long_string(b"\0guest\0guest") + short_string(b"en_US")),
              _method(0, commands.Connection.TuneOk(channel_max=2047, frame_max=131072,
                                                    heartbeat=0)),
              _method(0, commands.Connection.Open(virtual_host="/"))]
    for channel in range(1, SYNC_CHANNEL + 1):
        frames += channel_setup(channel, opened=False)
    return b"".join(frames)


def channel_setup(channel: int, opened: bool = True) -> list:
    """Open `channel` (after a Close-Ok when the broker closed it) and set it up: the
    bounded queues on every fuzz channel, a consumer on channel 1."""
    frames = [_method(channel, commands.Channel.CloseOk())] if opened else []
    frames.append(_method(channel, commands.Channel.Open()))
    if channel == SYNC_CHANNEL:
        return frames
    arguments = {"x-max-length": 100, "x-expires": 60000}
    frames += [_method(channel, commands.Queue.Declare(queue=name, arguments=arguments))
               for name in QUEUES]
    if channel == 1:
        frames.append(_method(channel, commands.Basic.Consume(queue=QUEUES[0], no_ack=True)))
    return frames


SYNC = _method(SYNC_CHANNEL, commands.Basic.Qos(prefetch_count=0))
CLOSE = _method(0, commands.Connection.Close(reply_code=200, reply_text="bye",
                                                    class_id=0, method_id=0))
CLOSE_OK = _method(0, commands.Connection.CloseOk())
HEARTBEAT = frame(FRAME_HEARTBEAT, 0, b"")


@dataclass
class ConnectionResult:
    outcome: str = "ours"   # "ours" (our clean close), "closed" (the broker's Close),
    frames: int = 0         # "stalled" (no answer for STALL s: we sent EOF, it closed),
    #                         "dropped" (no Close: EOF or reset), "hang", "refused"
    mutated: int = 0
    frames_read: int = 0
    mutated_read: int = 0
    mutated_processed: int = 0   # read, less those on channels the broker was closing
    channel_closes: int = 0
    close_codes: list = field(default_factory=list)
    local_port: int = 0
    sent: bytes = field(default=b"", repr=False)   # a reproducer, when worth keeping

    @property
    def internal_errors(self) -> int:
        return sum(1 for _, code in self.close_codes if code == INTERNAL_ERROR)

    @property
    def worth_keeping(self) -> bool:
        return self.outcome in ("dropped", "hang") or self.internal_errors > 0


class _Watcher:
    """Reads what the broker sends: sync answers, channel closes, its Close."""

    def __init__(self, reader: asyncio.StreamReader):
        self.reader = reader
        self.answered = 0                 # Qos-Oks on the sync channel so far
        self.closed_channels: list = []   # (channel, answered when it closed), not reopened
        self.close_codes: list = []
        self.connection_closed = False    # the broker's Connection.Close
        self.close_ok = False
        self.eof = asyncio.Event()
        self.progress = asyncio.Event()
        self._buffer = bytearray()

    async def run(self) -> None:
        try:
            while chunk := await self.reader.read(262144):
                self._buffer += chunk
                self._parse()
        except (ConnectionError, OSError):
            pass
        finally:
            self.eof.set()
            self.progress.set()

    def _parse(self) -> None:
        buffer, position, end = self._buffer, 0, len(self._buffer)
        while end - position >= 8:
            frame_type, channel, size = struct.unpack_from(">BHI", buffer, position)
            if end - position < size + 8:
                break
            if frame_type == FRAME_METHOD and size >= 4:
                self._method(channel, buffer, position + 7)
            position += size + 8
        del buffer[:position]

    def _method(self, channel: int, buffer, at: int) -> None:
        index = struct.unpack_from(">I", buffer, at)[0]
        if index == _QOS_OK and channel == SYNC_CHANNEL:
            self.answered += 1
        elif index == _CHANNEL_CLOSE:
            self.closed_channels.append((channel, self.answered))
            self.close_codes.append(("channel", struct.unpack_from(">H", buffer, at + 4)[0]))
        elif index == _CONNECTION_CLOSE:
            self.connection_closed = True
            self.close_codes.append(("connection",
                                     struct.unpack_from(">H", buffer, at + 4)[0]))
        elif index == _CONNECTION_CLOSE_OK:
            self.close_ok = True
        else:
            return
        self.progress.set()


class _Chunks:
    """What a connection wrote, chunk by chunk (each chunk ends with a sync): the
    totals after it, its mutated frames per channel, and how many of those may have
    been dropped because the broker was closing their channel."""

    def __init__(self, login: bytes):
        self.totals: list = []           # (frames, mutated) after each chunk
        self.by_channel: list = []
        self.dropped: list = []
        self.login = login
        self.tail: collections.deque = collections.deque()
        self.tail_size = 0

    def add(self, data: bytes, totals: tuple, by_channel: list) -> None:
        self.totals.append(totals)
        self.by_channel.append(by_channel)
        self.dropped.append(0)
        self.keep(data)

    def keep(self, data: bytes) -> None:
        """Keep the last TAIL_BYTES written, chunk-aligned, for a reproducer."""
        self.tail.append(data)
        self.tail_size += len(data)
        while self.tail_size > TAIL_BYTES and len(self.tail) > 1:
            self.tail_size -= len(self.tail.popleft())

    def channel_closed(self, channel: int, answered: int) -> None:
        """The broker closed `channel` after reading chunk `answered`-1: it dropped that
        channel's frames until our Close-Ok, which the next chunk starts with (counted
        from the chunk after the last answered one: an upper bound)."""
        for chunk in range(answered, len(self.totals)):
            self.dropped[chunk] += self.by_channel[chunk][channel]

    def note_reads(self, result: ConnectionResult, chunks_read: int) -> None:
        if chunks_read:
            result.frames_read, result.mutated_read = self.totals[chunks_read - 1]
            result.mutated_processed = result.mutated_read - sum(self.dropped[:chunks_read])

    def bytes(self) -> bytes:
        return self.login + b"".join(self.tail)


async def stream_connection(host: str, port: int, pool: FramePool, budget: list,
                            deadline: float = HANG_DEADLINE) -> ConnectionResult:
    """One connection: log in, then stream units until the broker closes it, the
    connection's frame cap, or `budget[0]` (mutated frames, shared) is used."""
    result = ConnectionResult()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                CONNECT_TIMEOUT)
    except (OSError, asyncio.TimeoutError):
        result.outcome = "refused"
        return result
    result.local_port = writer.get_extra_info("sockname")[1]
    watcher = _Watcher(reader)
    reading = asyncio.ensure_future(watcher.run())
    chunks = _Chunks(login_frames())
    stalled = False
    try:
        writer.write(chunks.login)
        while budget[0] > 0 and result.frames < CONNECTION_FRAMES and not (
                watcher.connection_closed or watcher.eof.is_set()):
            if not _reopen_closed_channels(watcher, chunks, result, writer):
                break
            data, mutated, by_channel = _chunk(pool)
            writer.write(data)
            result.frames += mutated[0]
            result.mutated += mutated[1]
            budget[0] -= mutated[1]
            chunks.add(data, (result.frames, result.mutated), by_channel)
            await asyncio.wait_for(writer.drain(), deadline)
            try:
                await _wait_for_answers(watcher, chunks, STALL)
            except asyncio.TimeoutError:
                stalled = True   # e.g. a length field promised more than follows
                break
        if stalled:
            writer.write_eof()   # the broker must close the connection within deadline
        elif watcher.connection_closed:
            writer.write(CLOSE_OK)
        elif not watcher.eof.is_set():
            writer.write(CLOSE)
            writer.write_eof()   # after its Close-Ok the broker waits for our end to close
            chunks.keep(CLOSE)
        await asyncio.wait_for(watcher.eof.wait(), deadline)
    except asyncio.TimeoutError:
        result.outcome = "hang"
    except OSError:
        pass
    finally:
        writer.close()
        reading.cancel()
    result.close_codes = watcher.close_codes
    if result.outcome != "hang":
        result.outcome = "ours" if watcher.close_ok else \
            "closed" if watcher.connection_closed else "stalled" if stalled else "dropped"
    chunks.note_reads(result, len(chunks.totals) if result.outcome == "ours" else
                      min(watcher.answered, len(chunks.totals)))
    if result.worth_keeping:
        result.sent = chunks.bytes()
    return result


def _chunk(pool: FramePool) -> tuple:
    """CHUNK_UNITS units on random fuzz channels and a sync: (bytes, (frames, mutated
    frames), mutated frames per channel)."""
    frames, mutated, by_channel = [], 0, [0] * (SYNC_CHANNEL + 1)
    for _ in range(CHUNK_UNITS):
        channel = pool.rng.randint(1, CHANNELS)
        unit, unit_mutated = pool.unit(_CHANNEL_BYTES[channel])
        frames += unit
        mutated += unit_mutated
        by_channel[channel] += unit_mutated
    frames.append(SYNC)
    return b"".join(frames), (len(frames), mutated), by_channel


_CHANNEL_BYTES = [struct.pack(">H", channel) for channel in range(SYNC_CHANNEL + 1)]


def _reopen_closed_channels(watcher: _Watcher, chunks: _Chunks, result: ConnectionResult,
                            writer) -> bool:
    """Close-Ok and reopen every channel the broker closed; False when it closed the
    sync channel (the connection then ends: its syncs would go unanswered)."""
    frames = []
    while watcher.closed_channels:
        channel, answered = watcher.closed_channels.pop(0)
        result.channel_closes += 1
        if channel > CHANNELS:
            return False
        chunks.channel_closed(channel, answered)
        frames += channel_setup(channel)
    if frames:
        data = b"".join(frames)
        writer.write(data)
        chunks.keep(data)
        result.frames += len(frames)
    return True


async def _wait_for_answers(watcher: _Watcher, chunks: _Chunks, deadline: float) -> None:
    """Until at most IN_FLIGHT chunks are unanswered (or the broker closed something)."""
    while len(chunks.totals) - watcher.answered > IN_FLIGHT and not (
            watcher.closed_channels or watcher.connection_closed or watcher.eof.is_set()):
        watcher.progress.clear()
        await asyncio.wait_for(watcher.progress.wait(), deadline)


@dataclass
class FrameTotals:
    connections: int = 0
    closed_by_broker: int = 0
    frames: int = 0
    mutated: int = 0
    frames_read: int = 0
    mutated_read: int = 0
    mutated_processed: int = 0
    channel_closes: int = 0
    hangs: int = 0
    stalled: int = 0
    dropped: int = 0
    internal_errors: int = 0
    close_codes: collections.Counter = field(default_factory=collections.Counter)

    def add(self, result: ConnectionResult) -> None:
        if result.outcome == "refused":
            return
        self.connections += 1
        self.closed_by_broker += result.outcome == "closed"
        self.frames += result.frames
        self.mutated += result.mutated
        self.frames_read += result.frames_read
        self.mutated_read += result.mutated_read
        self.mutated_processed += result.mutated_processed
        self.channel_closes += result.channel_closes
        self.hangs += result.outcome == "hang"
        self.dropped += result.outcome == "dropped"
        self.stalled += result.outcome == "stalled"
        self.internal_errors += result.internal_errors
        self.close_codes.update(result.close_codes)

    def summary(self, elapsed: float) -> str:
        elapsed = max(elapsed, 1e-9)
        return (f"{self.connections} connections ({self.closed_by_broker} closed by the "
                f"broker, {self.stalled} stalled, {self.dropped} dropped), {self.frames} "
                f"frames written "
                f"({self.mutated} mutated), read {self.frames_read} ({self.mutated_read} "
                f"mutated, {self.mutated_processed} not on a closing channel): "
                f"{self.mutated_processed / elapsed:.0f} mutated frames processed/s; "
                f"channel closes {self.channel_closes}, hangs {self.hangs}, "
                f"541 closes {self.internal_errors}")


_POOLS: dict = {}


def worker_pool(seed: int, worker: int) -> FramePool:
    """The worker's pool, built once per process."""
    key = (seed, worker)
    if key not in _POOLS:
        _POOLS[key] = FramePool(random.Random(f"{seed}:pool:{worker}"), load_seed_sessions())
    return _POOLS[key]


def run_frames_share(arguments: tuple) -> list:
    """One worker's share of a batch: `connections` concurrent streams until `budget`
    mutated frames are written (picklable for multiprocessing)."""
    host, port, seed, worker, batch, budget, connections, deadline = arguments
    pool = worker_pool(seed, worker)
    pool.rng.seed(f"{seed}:frames:{batch}:{worker}")
    return asyncio.run(_run_streams(host, port, pool, [budget], connections, deadline))


async def _run_streams(host, port, pool, budget, connections, deadline) -> list:
    results = []

    async def stream():
        while budget[0] > 0:
            result = await stream_connection(host, port, pool, budget, deadline)
            if result.outcome == "refused":
                budget[0] = 0          # the broker is gone: the caller finds out
            kept = sum(1 for r in results if r.sent)
            if kept >= MAX_KEPT_PER_WORKER:
                result.sent = b""
            results.append(result)

    await asyncio.gather(*(stream() for _ in range(connections)))
    return results


class FrameRunner:
    """Runs batches of frame streams on `workers` processes x `connections` sockets."""

    def __init__(self, workers: int, connections: int, deadline: float = HANG_DEADLINE):
        self.workers, self.connections, self.deadline = workers, connections, deadline
        self._pool = multiprocessing.get_context("spawn").Pool(workers) \
            if workers > 1 else None

    def run_batch(self, host: str, port: int, seed: int, batch: int, budget: int) -> list:
        jobs = [(host, port, seed, worker, batch, budget // self.workers, self.connections,
                 self.deadline) for worker in range(self.workers)]
        if self._pool is None:
            return [result for job in jobs for result in run_frames_share(job)]
        return [result for share in self._pool.map(run_frames_share, jobs)
                for result in share]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
