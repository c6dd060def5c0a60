"""Basic.Consume and Basic.Cancel on a channel: RabbitMQ's checks on a new consumer,
in its order and words (tag reuse, permission, exclusive use, consumer arguments,
global qos), then the consumer's registration with the channel and its queue."""

from typing import TYPE_CHECKING

from pamqp import commands

from amqp_codec.reply_codes import ReplyCode
from amqp_codec.wire_ids import BASIC_CONSUME

from .direct_reply import REPLY_QUEUE, consume_replies, stop_replies
from .errors import ChannelError, ConnectionFailure, precondition_failed
from .exchange import field_type_name
from .queue_base import QueueBase
from .queue_types import refuse_other_types_consumer_arguments
from .server_names import server_named

if TYPE_CHECKING:
    from .channel import Channel


def consume(channel: "Channel", method) -> str:
    """Basic.Consume: the new consumer's tag (Basic.ConsumeOk sent unless nowait)."""
    tag = method.consumer_tag or server_named("amq.ctag-")
    if tag in channel.consumers or tag == channel.reply_consumer_tag:
        raise ConnectionFailure(ReplyCode.NOT_ALLOWED,
                                f"attempt to reuse consumer tag '{tag}'", *BASIC_CONSUME)
    if method.queue == REPLY_QUEUE:   # no permission needed, as in RabbitMQ
        return consume_replies(channel, method, tag)
    vhost = channel.vhost
    name = channel.queue_name(method.queue)
    channel.access.read("queue", name)
    queue = vhost.queue(name, channel.connection)
    if (queue.has_exclusive_consumer()
            or (method.exclusive and (queue.consumers or queue.single_active))):
        raise ChannelError(ReplyCode.ACCESS_REFUSED,
                           f"queue '{queue.name}' in vhost '{vhost.name}' in "
                           "exclusive use")
    _check_consumer_arguments(method.arguments or {}, queue, vhost.name)
    consumer = queue.make_consumer(tag, channel, method.no_ack, method.exclusive,
                                   channel.consumer_prefetch, method.arguments)
    if channel.global_prefetch and not queue.honours_global_qos:
        raise ConnectionFailure(ReplyCode.NOT_IMPLEMENTED,
                                f"queue '{queue.name}' in vhost '{vhost.name}' "
                                "does not support global qos (consume on a channel "
                                "without Basic.Qos global=true)", *BASIC_CONSUME)
    channel.consumers[tag] = consumer
    if not method.nowait:
        channel.send(commands.Basic.ConsumeOk(consumer_tag=tag))
    queue.add_consumer(consumer)
    return tag


def _check_consumer_arguments(arguments: dict, queue: QueueBase, vhost: str) -> None:
    """406 in RabbitMQ's words for an argument the queue's type does not take, an
    x-priority that is not an integer, an x-cancel-on-ha-failover not a boolean."""
    refuse_other_types_consumer_arguments(arguments, queue.arguments, queue.name, vhost,
                                          queue.vhost.profile.line)
    priority = arguments.get("x-priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise precondition_failed(
            f"invalid arg 'x-priority' for queue '{queue.name}' in vhost "
            f"'{vhost}': \"expected integer, got {field_type_name(priority)}\"")
    failover = arguments.get("x-cancel-on-ha-failover", False)
    if not isinstance(failover, bool):
        raise precondition_failed(
            f"invalid arg 'x-cancel-on-ha-failover' for queue '{queue.name}' in vhost "
            f"'{vhost}': {{unacceptable_type,{field_type_name(failover)}}}")


def cancel(channel: "Channel", tag: str) -> None:
    """Basic.Cancel (the caller sends Basic.CancelOk)."""
    if tag == channel.reply_consumer_tag:
        stop_replies(channel)
        return
    consumer = channel.consumers.pop(tag, None)
    if consumer is not None:
        consumer.queue.remove_consumer(consumer)
