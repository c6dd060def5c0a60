"""Direct reply-to (RabbitMQ's amq.rabbitmq.reply-to): RPC replies go straight to the
requesting channel's consumer, with no reply queue. The requester consumes from the
pseudo-queue (no-ack, one consumer per channel), the broker writes the channel's token
into the reply_to of the requests it publishes, and a reply published to the default
exchange with that reply_to as its routing key is delivered to the consumer."""

from typing import TYPE_CHECKING

from pamqp import commands

from amqp_codec import replace_properties

from .errors import precondition_failed
from .message import Message
from .server_names import server_named

if TYPE_CHECKING:
    from .channel import Channel

REPLY_QUEUE = "amq.rabbitmq.reply-to"
REPLY_PREFIX = REPLY_QUEUE + "."


class DirectReplies:
    """Channels consuming from the pseudo-queue, each under a random token that the
    broker writes into the reply_to of the requests they publish."""

    def __init__(self):
        self._consumers: dict[str, tuple] = {}   # token -> (channel, consumer tag)

    def register(self, channel, consumer_tag: str) -> str:
        token = server_named("")
        self._consumers[token] = (channel, consumer_tag)
        return token

    def unregister(self, token: str) -> None:
        self._consumers.pop(token, None)

    def consumer_for(self, routing_key: str) -> tuple | None:
        """(channel, consumer tag) a reply routed to `routing_key` goes to, or None."""
        return self._consumers.get(routing_key[len(REPLY_PREFIX):])


def consume_replies(channel: "Channel", method, tag: str) -> str:
    """Basic.Consume from the pseudo-queue on `channel`, as consumer `tag`."""
    if not method.no_ack:
        raise precondition_failed("reply consumer cannot acknowledge")
    if channel.reply_token is not None:
        raise precondition_failed("reply consumer already set")
    channel.reply_token = channel.connection.broker.direct_replies.register(channel, tag)
    channel.reply_consumer_tag = tag
    if not method.nowait:
        channel.send(commands.Basic.ConsumeOk(consumer_tag=tag))
    return tag


def stop_replies(channel: "Channel") -> None:
    if channel.reply_token is not None:
        channel.connection.broker.direct_replies.unregister(channel.reply_token)
        channel.reply_token = channel.reply_consumer_tag = None


def with_reply_token(channel: "Channel", message: Message) -> Message:
    """A request asking for a direct reply gets this channel's token in reply_to
    (the other properties are kept byte for byte)."""
    if message.decoded_properties.reply_to != REPLY_QUEUE:
        return message
    if channel.reply_token is None:
        raise precondition_failed("fast reply consumer does not exist")
    reply_to = (REPLY_PREFIX + channel.reply_token).encode()
    return Message(message.exchange, message.routing_key,
                   replace_properties(message.properties, reply_to=reply_to),
                   message.body)


def route_reply(channel: "Channel", message: Message, mandatory: bool) -> bool:
    """A reply published on `channel` goes straight to the requester, or back to the
    publisher when mandatory and the requester is gone."""
    target = channel.connection.broker.direct_replies.consumer_for(message.routing_key)
    if target is not None:
        requester, consumer_tag = target
        requester.deliver_reply(consumer_tag, message)
    elif mandatory:
        channel.return_unroutable(message)
    return True
