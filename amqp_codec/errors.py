"""Errors raised by the codec. Each carries the AMQP reply code the peer must be sent."""

from .reply_codes import ReplyCode


class ProtocolHeaderMismatch(Exception):
    """The peer did not open with AMQP 0-9-1's protocol header.

    The server answers with its own header (``PROTOCOL_HEADER``) and closes the socket.
    """


class ProtocolError(Exception):
    """A protocol violation that closes the connection with ``reply_code``.

    ``channel``, ``class_id`` and ``method_id`` name the frame that caused it, when known,
    so Connection.Close can report them.
    """

    def __init__(self, reply_code: ReplyCode, text: str, channel: int = 0,
                 class_id: int = 0, method_id: int = 0):
        super().__init__(f"{reply_code.name} - {text}")
        self.reply_code = reply_code
        self.text = text
        self.channel = channel
        self.class_id = class_id
        self.method_id = method_id
        self.decoded: list = []   # set by Decoder.feed: commands decoded before the error

    @property
    def reply_text(self) -> str:
        """The text for Connection.Close: ``NAME - explanation``, as RabbitMQ words it."""
        return f"{self.reply_code.name} - {self.text}"
