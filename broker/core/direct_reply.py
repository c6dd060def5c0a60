"""Direct reply-to (RabbitMQ's amq.rabbitmq.reply-to): RPC replies go straight to the
requesting channel's consumer, with no reply queue."""

from .server_names import server_named

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
