"""Inbound (server side): bytes in, complete commands out, for one connection.

Reply codes follow RabbitMQ 3.10.8 (probed on 127.0.0.1:5673 with raw frames):

- bad frame end octet, unknown frame type, heartbeat with a payload, frame larger than
  frame_max, method frame shorter than 4 bytes: 501 FRAME_ERROR.
- undecodable method arguments (truncated, trailing bytes after Basic.Publish's, a
  shortstr that is not UTF-8): 501 FRAME_ERROR "cannot decode ..." with the class/method
  ids. A malformed field table in the arguments (unknown type tag, truncated) is 501 too,
  where RabbitMQ resets the socket without a Connection.Close; so is a table nested
  deeper than field_table.MAX_DEPTH (100), which RabbitMQ accepts.
- heartbeat on a channel other than 0, content header or body on channel 0, content
  header/body when no content is expected: 505 UNEXPECTED_FRAME.
- a method or body frame where a content header is expected, a method or header frame
  where a body frame is expected, a header whose class is not 60: 505 with class 60,
  method 40.
- Basic.Publish on channel 0: 504 CHANNEL_ERROR.
- unknown class/method id: RabbitMQ 3.10 crashes the connection process and resets the
  socket without a Connection.Close; we answer 503 COMMAND_INVALID, the code RabbitMQ
  uses for methods it does not implement on a channel.
- a body longer than body_size: RabbitMQ keeps waiting for more body frames; we answer
  501 FRAME_ERROR at once.
- frame size: like RabbitMQ, a frame payload of up to frame_max bytes is accepted
  (the spec would count the 8 bytes of frame overhead too); larger is 501.
- protocol header: 0-9-1, or the legacy 0-9 header RabbitMQ also accepts.
- Stricter than RabbitMQ: a content header payload shorter than 14 bytes and non-UTF-8
  exchange or routing key in Basic.Publish are 501 (RabbitMQ accepts both).
- a body_size above max_body_size: RabbitMQ closes the channel with 406 once the last
  body frame has arrived. The decoder decides on the content header: it keeps checking
  the frames of that body but drops their bytes, and hands over the publish with `body`
  None and the announced `body_size` after the last one, for the channel to refuse.
"""

from collections.abc import Callable
from struct import Struct, error as StructError
from typing import Protocol, cast

from pamqp import base, commands, common
from pamqp import decode as pamqp_decode

from .constants import (
    DEFAULT_FRAME_MAX, FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD,
    FRAME_OVERHEAD, FRAME_TYPES, PROTOCOL_HEADER,
)
from .errors import ProtocolError, ProtocolHeaderMismatch
from .fast_path import (
    PUBLISH_ARGUMENTS, decode_ack, decode_get, decode_publish, decode_publish_arguments,
)
from .field_table import decode_table
from .reply_codes import ReplyCode
from .wire_ids import ACK_INDEX, BASIC_CLASS, BASIC_PUBLISH, GET_INDEX, PUBLISH_INDEX

_FRAME_PREFIX = Struct(">BHI")      # type, channel, payload size
_METHOD_INDEX = Struct(">I")        # class_id << 16 | method_id
_CONTENT_HEADER = Struct(">HHQ")    # class_id, weight, body_size
_HEADER_FRAME = Struct(">BHIHHQ")   # a content header frame's prefix and fixed fields
_NO_LIMIT = 0xFFFFFFFF
MAX_BODY_SIZE = 128 * 1024 * 1024   # RabbitMQ's default max_message_size
_PROPERTIES_CACHE_SIZE = 256
# RabbitMQ also accepts the 0-9 header (AMQP 1-1-0-9) and speaks 0-9-1 to such clients.
ACCEPTED_HEADERS = (PROTOCOL_HEADER, b"AMQP\x01\x01\x00\x09")
# object.__new__, typed as what the fast path makes with it (a cast here, not per call)
_new = cast("Callable[[type], Publish]", object.__new__)
_DECODE_ERRORS = (StructError, ValueError, TypeError, IndexError, KeyError)
# pamqp's method classes by index; it annotates the table as dict[int, type]
_METHOD_CLASSES = cast("dict[int, type[base.Frame]]", commands.INDEX_MAPPING)

FRAME_ERROR = ReplyCode.FRAME_ERROR
UNEXPECTED_FRAME = ReplyCode.UNEXPECTED_FRAME


class InboundMethod:
    """A method without content, decoded by pamqp (or the Basic.Ack fast path)."""

    __slots__ = ("channel", "method")

    def __init__(self, channel: int, method: base.Frame):
        self.channel = channel
        self.method = method

    def __repr__(self) -> str:
        return f"InboundMethod({self.channel}, {self.method.name})"


class InboundPublish:
    """A complete Basic.Publish: method arguments, raw properties and the whole body.

    A publish whose content header announced more than the decoder's max_body_size has
    `body` None and the announced size in `body_size` (set only then): its body frames
    were checked and dropped.

    `decoded_cache` and `persistent_cache` start None: room for what a user of the
    publish learns from the raw properties later (their pamqp decoding, whether
    delivery_mode is 2), so that a class made as a publish_type has them set from the
    start."""

    __slots__ = ("channel", "exchange", "routing_key", "mandatory", "immediate",
                 "properties", "body", "decoded_cache", "persistent_cache", "body_size")
    body_size: int   # set only when body is None

    def __init__(self, channel: int, exchange: str, routing_key: str, mandatory: bool,
                 immediate: bool, properties: bytes = b"", body: bytes | None = b""):
        self.channel = channel
        self.exchange = exchange
        self.routing_key = routing_key
        self.mandatory = mandatory
        self.immediate = immediate
        self.properties = properties
        self.body = body
        self.decoded_cache: commands.Basic.Properties | None = None
        self.persistent_cache: bool | None = None

    def __repr__(self) -> str:
        size = self.body_size if self.body is None else len(self.body)
        return (f"InboundPublish({self.channel}, {self.exchange!r}, {self.routing_key!r}, "
                f"body={size} bytes)")


class Publish(Protocol):
    """A publish as the decoder makes it: an InboundPublish or an object of the
    Decoder's `publish_type` (a broker's message class). Code that may receive either
    types it with this protocol, not InboundPublish: a compiled build (mypyc) checks
    class annotations at run time."""

    channel: int
    exchange: str
    routing_key: str
    mandatory: bool
    immediate: bool
    properties: bytes
    body: bytes | None
    decoded_cache: commands.Basic.Properties | None
    persistent_cache: bool | None


class InboundHeartbeat:
    """A heartbeat frame (always channel 0)."""

    __slots__ = ("channel",)

    def __init__(self, channel: int = 0):
        self.channel = channel

    def __repr__(self) -> str:
        return f"InboundHeartbeat({self.channel})"


class _Content:
    """A channel's Basic.Publish waiting for its header (remaining < 0) or body frames.

    `chunks` is None while the body frames of an oversized message are being dropped."""

    __slots__ = ("publish", "remaining", "chunks")

    def __init__(self, publish: Publish):
        self.publish = publish
        self.remaining = -1
        self.chunks: list | None = []


def _is_tune_ok(item) -> bool:
    return type(item) is InboundMethod and isinstance(item.method, commands.Connection.TuneOk)


class Decoder:
    """Bytes in, complete commands out, for one connection (server side).

    A ProtocolHeaderMismatch or ProtocolError is final: close the connection after it.

    `publish_type` is the class publishes are made as: InboundPublish, or a class of the
    caller's with the same constructor and attributes (a broker's message class, so
    that the broker builds one object per message instead of two). A publish whose
    frames arrive whole in one read is made without calling the constructor, with
    every attribute of InboundPublish set but body_size (the two caches to None): the
    class must need nothing else set. A publish whose body is dropped
    (above max_body_size) is always made as an InboundPublish.
    """

    def __init__(self, frame_max: int = DEFAULT_FRAME_MAX, max_body_size: int = MAX_BODY_SIZE,
                 publish_type: type = InboundPublish, handshake_frame_max: int = 0):
        # With handshake_frame_max, the frames before a Connection.TuneOk may be no
        # larger (AMQP 0-9-1: frame-min-size, 4096, until the client's Tune-Ok).
        self.frame_max = handshake_frame_max or frame_max
        self._frame_max_after_tune_ok = frame_max if handshake_frame_max else 0
        self.publish_type = publish_type
        # Whether publishes can be made without a constructor call (below): not the
        # classes of a compiled build (mypyc), whose __new__ runs __init__ and which
        # object.__new__ refuses.
        make: object = publish_type.__new__
        self._made_by_object_new = make is object.__new__
        self.max_body_size = max_body_size   # larger bodies are dropped, not buffered
        self._header_seen = 0           # bytes of the protocol header received so far
        self._header_bytes = b""
        self._buffer = bytearray()      # an incomplete frame carried to the next feed
        self._content: dict[int, _Content] = {}
        # Publishers mostly repeat the same properties: queued messages share one copy.
        self._properties_seen: dict[bytes, bytes] = {}

    @property
    def awaiting_content(self) -> bool:
        """True while a Basic.Publish has arrived whose header or body has not."""
        return bool(self._content)

    @property
    def assembling_bytes(self) -> int:
        """Bytes held for messages not complete yet, and of a frame cut by a read."""
        held = len(self._buffer)
        for state in self._content.values():
            if state.chunks:
                held += sum(map(len, state.chunks))
        return held

    @property
    def header_received(self) -> bool:
        """True once the whole 8-byte protocol header has arrived and matched."""
        return self._header_seen == 8

    def feed(self, data) -> list:
        """Decode every complete frame in the stream so far; keep the incomplete tail."""
        if self._header_seen < 8:
            data = self._check_protocol_header(data)
        if type(data) is not bytes:
            data = bytes(data)
        if self._frame_max_after_tune_ok:
            return self._feed_until_tune_ok(data)
        out: list = []
        try:
            start = 0
            if self._buffer:
                # Finish the frame the last read cut off; only its bytes are copied.
                rest = self._complete_buffered_frame(data, out)
                if rest is None:
                    return out
                start = rest
            pos = self._decode_frames(data, out, start)
        except ProtocolError as error:
            error.decoded = out   # commands complete before the bad frame still count
            raise
        if pos < len(data):
            self._buffer += memoryview(data)[pos:]
        return out

    def tune(self, frame_max: int) -> None:
        """The negotiated frame_max, from the next byte decoded on (and the handshake
        limit, if still on, no longer applies)."""
        self.frame_max = frame_max
        self._frame_max_after_tune_ok = 0

    def _feed_until_tune_ok(self, data: bytes) -> list:
        """Before Connection.TuneOk: whole frames one at a time, under the handshake
        limit; what follows a decoded TuneOk (a client may send more in the same read)
        is read under frame_max. The handshake is a few small frames: copying is fine."""
        data = bytes(self._buffer) + data
        self._buffer.clear()
        out: list = []
        pos = 0
        tuned = False
        try:
            while not tuned and len(data) - pos >= 7:
                frame_type, channel, size = _FRAME_PREFIX.unpack_from(data, pos)
                self._check_frame_prefix(frame_type, channel, size)
                end = pos + size + FRAME_OVERHEAD
                if end > len(data):
                    break
                self._decode_frames(data[pos:end], out, 0)
                pos = end
                tuned = bool(out) and _is_tune_ok(out[-1])
        except ProtocolError as error:
            error.decoded = out
            raise
        if not tuned:
            self._buffer += memoryview(data)[pos:]
            return out
        self.tune(self._frame_max_after_tune_ok)
        try:
            out += self.feed(data[pos:])
        except ProtocolError as error:
            error.decoded = out + error.decoded
            raise
        return out

    def _check_protocol_header(self, data):
        """Match the start of the stream against an accepted header; return the rest."""
        seen = self._header_seen
        take = min(8 - seen, len(data))
        self._header_bytes += bytes(data[:take])
        if not any(header.startswith(self._header_bytes) for header in ACCEPTED_HEADERS):
            raise ProtocolHeaderMismatch(self._header_bytes)
        self._header_seen = seen + take
        return data[take:]

    def _complete_buffered_frame(self, data: bytes, out: list) -> int | None:
        """Add to the buffered partial frame what it lacks from data; once whole, decode
        it into out and return where the rest of data starts (None: still partial)."""
        buffer = self._buffer
        taken = 0
        if len(buffer) < 7:
            taken = min(7 - len(buffer), len(data))
            buffer += data[:taken]
            if len(buffer) < 7:
                return None
        frame_type, channel, size = _FRAME_PREFIX.unpack_from(buffer)
        self._check_frame_prefix(frame_type, channel, size)
        wanted = size + FRAME_OVERHEAD - len(buffer)
        if len(data) - taken < wanted:
            buffer += memoryview(data)[taken:]
            return None
        buffer += memoryview(data)[taken:taken + wanted]
        frame = bytes(buffer)
        buffer.clear()
        self._decode_frames(frame, out, 0)
        return taken + wanted

    def _check_frame_prefix(self, frame_type: int, channel: int, size: int) -> None:
        """Reject an oversized or unknown frame as soon as its 7-byte prefix is in."""
        frame_max = self.frame_max
        if frame_max and size > frame_max:
            # RabbitMQ 3.10's text: the payload size and the largest payload it names
            # (frame_max - 8; it lets payloads of up to frame_max through).
            raise ProtocolError(FRAME_ERROR, f"type {frame_type}, all octets = <<>>: "
                                f"{{frame_too_large,{size},{frame_max - 8}}}", channel)
        if frame_type not in FRAME_TYPES:
            raise ProtocolError(FRAME_ERROR, f"unknown frame type {frame_type}", channel)

    def _decode_frames(self, data: bytes, out: list, pos: int) -> int:
        """Decode whole frames from data[pos:] into out; return where the incomplete tail
        starts."""
        frame_max = self.frame_max
        limit = frame_max if frame_max else _NO_LIMIT
        body_limit = min(limit, self.max_body_size)
        content = self._content
        length = len(data)
        while length - pos >= 7:
            frame_type, channel, size = _FRAME_PREFIX.unpack_from(data, pos)
            end = pos + 7 + size                         # offset of the frame end octet
            if end >= length or size > limit:
                self._check_frame_prefix(frame_type, channel, size)
                break
            if data[end] != FRAME_END:
                raise ProtocolError(FRAME_ERROR, f"frame end octet {data[end]:#04x} instead "
                                    f"of 0xce after a frame of type {frame_type}", channel)
            if frame_type == FRAME_METHOD:   # the first frame of every publish
                whole = self._whole_publish(data, pos, end, channel, limit, body_limit,
                                            out)
                if whole:
                    pos = whole
                    continue
                self._method(data, pos + 7, end, channel, content, out)
            elif frame_type == FRAME_BODY:
                self._body(data, pos + 7, end, channel, content, out)
            elif frame_type == FRAME_HEADER:
                self._header(data, pos + 7, end, channel, content, out)
            elif frame_type == FRAME_HEARTBEAT:
                out.append(_heartbeat(channel, size))
            else:
                raise ProtocolError(FRAME_ERROR, f"unknown frame type {frame_type}", channel)
            pos = end + 1
        return pos

    def _whole_publish(self, data, pos, end, channel, limit, body_limit, out) -> int:
        """The common case in one step: a Basic.Publish method frame followed in `data` by
        its content header and one body frame that carries the whole body (or none),
        all well formed, the body within frame_max and max_body_size (`body_limit`).
        Returns where the next frame starts, or 0 to let the general path decode (and,
        where something is wrong, reject) the frames one by one. A method frame shorter
        than its header, method id and ticket (13 bytes) is left to the general path:
        slicing its arguments would start past their end."""
        if (end - pos < 13 or _METHOD_INDEX.unpack_from(data, pos + 7)[0] != PUBLISH_INDEX
                or channel in self._content or channel == 0):
            return 0
        length = len(data)
        header_pos = end + 1
        if length - header_pos < 7 + 14 + 1:
            return 0
        frame_type, header_channel, size, class_id, _weight, body_size = \
            _HEADER_FRAME.unpack_from(data, header_pos)
        header_end = header_pos + 7 + size
        if (frame_type != FRAME_HEADER or header_channel != channel or size < 14
                or size > limit or header_end >= length or data[header_end] != FRAME_END
                or class_id != BASIC_CLASS):
            return 0
        body = b""
        next_pos = header_end + 1
        if body_size:
            if length - next_pos < 7:
                return 0
            frame_type, body_channel, size = _FRAME_PREFIX.unpack_from(data, next_pos)
            body_end = next_pos + 7 + size
            if (frame_type != FRAME_BODY or body_channel != channel or size != body_size
                    or size > body_limit or body_end >= length
                    or data[body_end] != FRAME_END):
                return 0
            body = data[next_pos + 7:body_end]
            next_pos = body_end + 1
        # decode_publish inline (one call fewer per message): the arguments after the
        # ticket, decoded once per distinct raw bytes.
        arguments = data[pos + 13:end]
        decoded = PUBLISH_ARGUMENTS.get(arguments)
        if decoded is None:
            try:
                decoded = decode_publish_arguments(arguments)
            except _DECODE_ERRORS:
                return 0        # the general path reports it
        exchange, routing_key, mandatory, immediate = decoded
        raw_properties = data[header_pos + 19:header_end]
        properties = self._properties_seen.get(raw_properties)
        if properties is None:
            properties = self._shared_properties(raw_properties)
        publish: Publish
        if self._made_by_object_new:
            # Made without a constructor call (~1,000 instructions less per message
            # than calling it, callgrind, bench/core_hot_path.py): the attributes it
            # would set.
            publish = _new(self.publish_type)
            publish.channel = channel
            publish.exchange = exchange
            publish.routing_key = routing_key
            publish.mandatory = mandatory
            publish.immediate = immediate
            publish.properties = properties
            publish.body = body
            publish.decoded_cache = publish.persistent_cache = None
        else:
            publish = self.publish_type(channel, exchange, routing_key, mandatory, immediate,
                                        properties, body)
        out.append(publish)
        return next_pos

    def _method(self, data, start, end, channel, content, out) -> None:
        """A method frame: Basic.Publish opens content, anything else is complete."""
        if channel in content:
            raise _not_content(content[channel], channel)
        if end - start < 4:
            raise ProtocolError(FRAME_ERROR, "method frame shorter than 4 bytes", channel)
        index = _METHOD_INDEX.unpack_from(data, start)[0]
        if index == PUBLISH_INDEX:
            content[channel] = _Content(_publish(self.publish_type, data, start + 4, end,
                                                 channel))
        elif index == ACK_INDEX:
            out.append(InboundMethod(channel, _decode_or_raise(decode_ack, data, start, end,
                                                                channel, index)))
        elif index == GET_INDEX:
            out.append(InboundMethod(channel, _decode_or_raise(decode_get, data, start, end,
                                                                channel, index)))
        else:
            out.append(InboundMethod(channel, _pamqp_method(data, start, end, channel, index)))

    def _header(self, data, start, end, channel, content, out) -> None:
        """A content header: record the raw properties; body_size 0 completes the publish;
        a body_size above max_body_size has its body frames dropped as they come."""
        state = content.get(channel)
        if state is None or state.remaining >= 0:
            raise _unexpected_content(state, channel, "content header")
        if end - start < 14:
            raise ProtocolError(FRAME_ERROR, "content header shorter than 14 bytes",
                                channel)   # RabbitMQ names no class/method here
        class_id, _weight, body_size = _CONTENT_HEADER.unpack_from(data, start)
        if class_id != BASIC_CLASS:
            raise ProtocolError(UNEXPECTED_FRAME, "expected content header for class 60, "
                                f"got one for class {class_id} instead",
                                channel, *BASIC_PUBLISH)
        publish = state.publish
        publish.properties = self._shared_properties(data[start + 12:end])
        if body_size > self.max_body_size:
            # always an InboundPublish (a publish_type need not hold body_size)
            dropped = InboundPublish(channel, publish.exchange, publish.routing_key,
                                     publish.mandatory, publish.immediate,
                                     publish.properties, None)
            dropped.body_size = body_size
            state.publish = publish = dropped
            state.chunks = None
        if body_size:
            state.remaining = body_size
        else:
            del content[channel]
            out.append(publish)

    def _shared_properties(self, properties: bytes) -> bytes:
        """One copy of each property block a publisher repeats (queued messages share
        it)."""
        shared = self._properties_seen.get(properties)
        if shared is None:
            if len(self._properties_seen) >= _PROPERTIES_CACHE_SIZE:
                self._properties_seen.clear()
            shared = self._properties_seen[properties] = properties
        return shared

    def _body(self, data, start, end, channel, content, out) -> None:
        """A body frame: collect it (or drop it, for an oversized message); the last one
        completes the publish."""
        state = content.get(channel)
        if state is None or state.remaining < 0:
            raise _unexpected_content(state, channel, "content body")
        size = end - start
        remaining = state.remaining - size
        if remaining < 0:
            raise ProtocolError(FRAME_ERROR, "content body is longer than the announced "
                                "body_size", channel, *BASIC_PUBLISH)
        chunks = state.chunks
        if chunks is None:
            if remaining:
                state.remaining = remaining
                return
        elif remaining == 0 and not chunks:
            state.publish.body = data[start:end]
        else:
            chunks.append(data[start:end])
            if remaining:
                state.remaining = remaining
                return
            state.publish.body = b"".join(chunks)
        del content[channel]
        out.append(state.publish)


def _publish(publish_type: type, data: bytes, start: int, end: int,
             channel: int) -> Publish:
    """Decode Basic.Publish arguments (fast path) into a publish awaiting content."""
    if channel == 0:
        raise ProtocolError(ReplyCode.CHANNEL_ERROR, "unexpected method in connection "
                            "state running", 0, *BASIC_PUBLISH)
    try:
        return publish_type(channel, *decode_publish(data, start, end))
    except _DECODE_ERRORS as exc:
        raise _cannot_decode("Basic.Publish", exc, channel, PUBLISH_INDEX) from exc


def _decode_or_raise(decode, data, start, end, channel, index):
    """Run a fast-path decoder on method arguments; 501 when they are malformed."""
    try:
        return decode(data, start + 4, end)
    except _DECODE_ERRORS as exc:
        raise _cannot_decode(_METHOD_CLASSES[index].name, exc, channel, index) from exc


def _pamqp_method(data: bytes, start: int, end: int, channel: int, index: int) -> base.Frame:
    """Decode any method with pamqp: 503 for unknown ids, 501 for malformed arguments."""
    method_class = _METHOD_CLASSES.get(index)
    if method_class is None:
        raise ProtocolError(ReplyCode.COMMAND_INVALID, f"unknown method: class "
                            f"{index >> 16}, method {index & 0xFFFF}",
                            channel, index >> 16, index & 0xFFFF)
    method = method_class()
    try:
        _unmarshal(method, data[start + 4:end])
    except _DECODE_ERRORS as exc:
        raise _cannot_decode(method_class.name, exc, channel, index) from exc
    return method


def _unmarshal(method: base.Frame, data: bytes) -> None:
    """pamqp's Frame.unmarshal, except that tables go through field_table's bounded
    decoder (pamqp's recurses without a limit and is quadratic in a table's size)."""
    offset = 0
    bits = bit = 0              # the current octet of packed bits, the next bit in it
    value: common.FieldValue
    for name in method.__slots__:
        kind = method.amqp_type(name)
        if kind == "bit":
            if bit in (0, 8):
                bits, bit = data[offset], 0
                offset += 1
            value = bool(bits >> bit & 1)
            bit += 1
        else:
            bit = 0
            if kind == "table":
                value, offset = decode_table(data, offset)
            else:
                consumed, value = pamqp_decode.by_type(data[offset:], kind)
                offset += consumed
        setattr(method, name, value)


def _heartbeat(channel: int, size: int) -> InboundHeartbeat:
    if size:
        raise ProtocolError(FRAME_ERROR, f"heartbeat frame with a {size}-byte payload", channel)
    if channel:
        # RabbitMQ's words: the frame type and its (empty) payload as an Erlang binary
        raise ProtocolError(UNEXPECTED_FRAME, "type 8, all octets = <<>>", channel)
    return InboundHeartbeat(0)


def _cannot_decode(name: str, exc: Exception, channel: int, index: int) -> ProtocolError:
    return ProtocolError(FRAME_ERROR, f"cannot decode {name} arguments: {exc}",
                         channel, index >> 16, index & 0xFFFF)


def _not_content(state: _Content, channel: int) -> ProtocolError:
    """505 for a method frame on a channel that expects a content header or body."""
    if state.remaining < 0:
        text = "expected content header for class 60, got non content header frame instead"
    else:
        text = "expected content body, got non content body frame instead"
    return ProtocolError(UNEXPECTED_FRAME, text, channel, *BASIC_PUBLISH)


def _unexpected_content(state: _Content | None, channel: int, kind: str) -> ProtocolError:
    """505 for a header or body frame the channel does not expect."""
    if state is not None:
        return _not_content(state, channel)
    if channel == 0:
        return ProtocolError(UNEXPECTED_FRAME, f"{kind} frame on channel 0", 0)
    return ProtocolError(UNEXPECTED_FRAME, "expected method frame, got non method frame "
                         f"instead ({kind} frame)", channel)
