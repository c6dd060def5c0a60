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
    """406 in RabbitMQ's words for an argument the queue's type does not take (under
    the vhost's RabbitMQ line), an x-priority or an x-consumer-timeout (4.3's quorum
    queues) that is not an integer, an x-cancel-on-ha-failover (3.10) not a boolean."""
    taken = refuse_other_types_consumer_arguments(arguments, queue.arguments, queue.name,
                                                  vhost, queue.vhost.profile.line)
    for name, check in CONSUMER_ARGUMENT_CHECKS.items():
        if name in arguments and name in taken:
            problem = check(arguments[name])
            if problem is not None:
                raise precondition_failed(
                    f"invalid arg '{name}' for queue '{queue.name}' in vhost '{vhost}': "
                    f"{problem}")


def _integer(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"\"expected integer, got {field_type_name(value)}\""
    return None


def _non_negative_integer(value: object) -> str | None:
    problem = _integer(value)
    if problem is None and isinstance(value, int) and value < 0:
        return f"{{value_negative,{value}}}"
    return problem


def _boolean(value: object) -> str | None:
    if not isinstance(value, bool):
        return f"{{unacceptable_type,{field_type_name(value)}}}"
    return None


CONSUMER_ARGUMENT_CHECKS = {"x-priority": _integer,
                            "x-consumer-timeout": _non_negative_integer,
                            "x-cancel-on-ha-failover": _boolean}


def cancel(channel: "Channel", tag: str) -> None:
    """Basic.Cancel (the caller sends Basic.CancelOk)."""
    if tag == channel.reply_consumer_tag:
        stop_replies(channel)
        return
    consumer = channel.consumers.pop(tag, None)
    if consumer is not None:
        consumer.queue.remove_consumer(consumer)
