"""What a publish must pass before it is routed, in RabbitMQ's order and words: the
exchange (permission, existence, not internal, topic permission), then the properties
that need a look (user_id, expiration, a direct reply's reply_to, CC/BCC headers).
Channel.publish comes here only off its common path: for an exchange not in the
channel's publish cache, and for a message whose property flags ask for a check."""

from typing import TYPE_CHECKING

from amqp_codec.reply_codes import ReplyCode

from .access_control import CACHED_DECISIONS, IMPERSONATOR
from .direct_reply import with_reply_token
from .errors import ChannelError, precondition_failed
from .exchange import Exchange
from .message import Message
from .sender_routing import sender_routed

if TYPE_CHECKING:
    from .channel import Channel


def publish_target(channel: "Channel", command) -> Exchange:
    """The exchange a publish goes to, after RabbitMQ's checks in its order: write
    permission (403 before 404), existence (404), not internal (403), then the user's
    topic permission on the routing key. Unless that last check applies, the exchange
    joins the channel's publish cache (ChannelAccess.publish_targets), so the next
    publishes to it skip these checks until permissions change or the exchange is
    deleted."""
    access = channel.access
    vhost = channel.vhost
    name = command.exchange
    access.write("exchange", name)
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        exchange = vhost.exchange(name)   # 404
    if exchange.internal:
        raise ChannelError(ReplyCode.ACCESS_REFUSED,
                           f"cannot publish to internal exchange '{exchange.name}' "
                           f"in vhost '{vhost.name}'")
    if access.topics is not None and exchange.kind == "topic":
        access.topic("write", exchange.name, command.routing_key)
        return exchange    # checked per routing key: not cached
    targets = access.publish_targets
    if len(targets) >= CACHED_DECISIONS:
        targets.clear()
    targets[name] = exchange
    return exchange


def checked(channel: "Channel", message: Message) -> Message:
    """`message` once its user_id and expiration are found valid, with this channel's
    reply token and its CC/BCC routing keys where it asks for them."""
    if message.has_user_id():
        _check_user_id(channel, message)
    if message.has_expiration():
        _check_expiration(message)
    if message.has_reply_to():
        message = with_reply_token(channel, message)
    if message.may_name_recipients():
        message = sender_routed(message)
    return message


def _check_user_id(channel: "Channel", message: Message) -> None:
    """RabbitMQ's validated user id: user_id, when set, must be the login user, unless
    the user had the impersonator tag when it logged in."""
    user_id = message.decoded_properties.user_id
    connection = channel.connection
    if user_id != connection.user and IMPERSONATOR not in connection.user_tags:
        raise precondition_failed(   # (a user_id that is not UTF-8 shows as '?')
            f"user_id property set to '{user_id}' but authenticated user was "
            f"'{connection.user}'")


def _check_expiration(message: Message) -> None:
    try:
        message.expiration_ms()
    except ValueError:
        raise precondition_failed(
            f"invalid expiration '{message.decoded_properties.expiration}': "
            "expected a non-negative integer of milliseconds") from None
