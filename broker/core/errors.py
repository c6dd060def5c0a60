"""AMQP errors raised by the core. Each carries the reply code the client is sent."""

from amqp_codec.reply_codes import ReplyCode


class AMQPError(Exception):
    """Base of errors that close a channel or a connection with a reply code."""

    def __init__(self, reply_code: ReplyCode, text: str, class_id: int = 0,
                 method_id: int = 0):
        super().__init__(f"{reply_code.name} - {text}")
        self.reply_code = reply_code
        self.text = text
        self.class_id = class_id
        self.method_id = method_id

    @property
    def reply_text(self) -> str:
        """The text sent in Channel.Close / Connection.Close, worded as RabbitMQ does:
        the code's name and the text, or the name alone without a text (RabbitMQ's
        answer when its own code fails, e.g. an exchange type's)."""
        if not self.text:
            return self.reply_code.name
        return f"{self.reply_code.name} - {self.text}"


class ChannelError(AMQPError):
    """Closes the channel the offending command arrived on (311-313, 403-406)."""


class ConnectionFailure(AMQPError):
    """Closes the whole connection (320, 402, 501-506, 530, 540, 541)."""


def not_found(text: str) -> ChannelError:
    return ChannelError(ReplyCode.NOT_FOUND, text)


def precondition_failed(text: str) -> ChannelError:
    return ChannelError(ReplyCode.PRECONDITION_FAILED, text)


def access_refused(text: str) -> ChannelError:
    return ChannelError(ReplyCode.ACCESS_REFUSED, text)


def resource_locked(text: str) -> ChannelError:
    return ChannelError(ReplyCode.RESOURCE_LOCKED, text)
