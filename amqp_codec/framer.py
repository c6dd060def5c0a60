"""One connection's wire protocol (server side), sans-IO (tests: test_framer.py).

A `Framer` turns the bytes a client sends into commands (its Decoder) and the broker's
replies into bytes (the encoders, offered as methods). It holds the connection's one
frame_max: the decoder refuses inbound frames above it and the content encoders cut
outbound bodies to fit it. Until Connection.TuneOk it is the value the framer was made
with (the server's own frame_max, the most it offers in Connection.Tune), but inbound
frames read before a TuneOk are held to `handshake_frame_max` when given (the broker
passes frame-min-size, 4096: AMQP 0-9-1 allows no larger frame before Tune-Ok); `tune`
sets the negotiated frame_max for both directions at once.

Methods that do not depend on frame_max are the encoder functions themselves. The hot
one, `encode_deliver`, is the struct fast path made for the framer's frame_max
(fast_path.deliver_encoder), so a delivery costs one call, as before the framer; the
other content encoders pass frame_max on to theirs.
"""

from .constants import DEFAULT_FRAME_MAX
from .decoder import MAX_BODY_SIZE, Decoder, InboundPublish
from .encoder import (
    encode_basic_ack, encode_basic_nack, encode_connection_start, encode_get_ok,
    encode_method, encode_queue_declare_ok, encode_return,
)
from .fast_path import deliver_encoder


class Framer:
    """Bytes in, commands out, and commands in, bytes out, for one connection."""

    def __init__(self, frame_max: int = DEFAULT_FRAME_MAX,
                 max_body_size: int = MAX_BODY_SIZE, publish_type: type = InboundPublish,
                 handshake_frame_max: int = 0):
        self._decoder = Decoder(frame_max, max_body_size, publish_type,   # see Decoder
                                handshake_frame_max)
        # Decoder.feed(data) -> every complete command in the stream so far; raises
        # ProtocolHeaderMismatch or ProtocolError (final: close the connection).
        self.feed = self._decoder.feed
        self.encode_deliver = deliver_encoder(frame_max)

    @property
    def frame_max(self) -> int:
        """The largest frame either way (0: no limit)."""
        return self._decoder.frame_max

    @property
    def max_body_size(self) -> int:
        """The largest message body accepted; a larger one is dropped as it comes."""
        return self._decoder.max_body_size

    def limit_body_size(self, max_body_size: int) -> None:
        """Accept message bodies up to `max_body_size` from the next publish on."""
        self._decoder.max_body_size = max_body_size

    def tune(self, frame_max: int) -> None:
        """Connection.TuneOk agreed on `frame_max`: inbound frames above it are refused
        from the next byte decoded on, and outbound bodies are cut to fit it."""
        self._decoder.tune(frame_max)
        self.encode_deliver = deliver_encoder(frame_max)

    # -- inbound state ----------------------------------------------------------------

    @property
    def header_received(self) -> bool:
        """The protocol header has arrived (answer with Connection.Start)."""
        return self._decoder.header_received

    @property
    def awaiting_content(self) -> bool:
        """A Basic.Publish has arrived whose content header or body has not."""
        return self._decoder.awaiting_content

    @property
    def assembling_bytes(self) -> int:
        """Bytes held for messages not complete yet and for a frame a read cut off."""
        return self._decoder.assembling_bytes

    # -- outbound ---------------------------------------------------------------------
    # encode_deliver(channel, consumer_tag, delivery_tag, redelivered, exchange,
    # routing_key, properties, body): set in __init__ and tune (deliver_encoder).

    encode_method = staticmethod(encode_method)
    encode_connection_start = staticmethod(encode_connection_start)
    encode_queue_declare_ok = staticmethod(encode_queue_declare_ok)
    encode_basic_ack = staticmethod(encode_basic_ack)
    encode_basic_nack = staticmethod(encode_basic_nack)

    def encode_get_ok(self, channel: int, delivery_tag: int, redelivered: bool,
                      exchange: str, routing_key: str, message_count: int,
                      properties: bytes, body) -> bytes | tuple:
        """Basic.GetOk, its content header and body frames."""
        return encode_get_ok(channel, delivery_tag, redelivered, exchange, routing_key,
                             message_count, properties, body, self._decoder.frame_max)

    def encode_return(self, channel: int, reply_code: int, reply_text: str, exchange: str,
                      routing_key: str, properties: bytes, body) -> bytes | tuple:
        """Basic.Return, its content header and body frames."""
        return encode_return(channel, reply_code, reply_text, exchange, routing_key,
                             properties, body, self._decoder.frame_max)
