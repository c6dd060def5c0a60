"""A published message as the broker holds it: raw properties, body, routing data."""

from amqp_codec import decode_properties


class Message:
    """One published message, shared by reference by every queue it was routed to.

    `properties` is the raw content-header property block exactly as the publisher sent
    it, forwarded untouched to consumers; it is decoded only when a feature needs a field.
    """

    __slots__ = ("exchange", "routing_key", "properties", "body", "_decoded")

    def __init__(self, exchange: str, routing_key: str, properties: bytes, body: bytes):
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties = properties
        self.body = body
        self._decoded = None

    @property
    def decoded_properties(self):
        """The pamqp Basic.Properties of this message, decoded once on first use."""
        if self._decoded is None:
            self._decoded = decode_properties(self.properties)
        return self._decoded

    @property
    def headers(self) -> dict:
        return self.decoded_properties.headers or {}


class QueueEntry:
    """A message's place in one queue: the shared Message plus per-queue state."""

    __slots__ = ("message", "seq", "redelivered")

    def __init__(self, message: Message, seq: int, redelivered: bool = False):
        self.message = message
        self.seq = seq
        self.redelivered = redelivered
