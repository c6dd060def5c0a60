"""Channel-level AMQP methods: each handler turns one method into channel/vhost
operations and sends the reply. Connection.handle routes methods here by type.

Names: like RabbitMQ 3.10, queue and exchange names lose their CR and LF characters in
exchange.declare/delete/bind/unbind and queue.declare/bind/unbind/delete, and keep them
in queue.purge, basic.consume, basic.get and basic.publish (probed on 3.10.8); routing
keys and consumer tags are never changed.
"""

from pamqp import commands

from .channel import Channel
from .consuming import cancel, consume
from .direct_reply import REPLY_QUEUE
from .errors import not_found
from .observation import NACK
from .transactions import commit_tx, rollback_tx, select_tx

_CR_LF = str.maketrans("", "", "\r\n")


def stripped(name: str) -> str:
    """A queue or exchange name without CR and LF, as RabbitMQ stores it."""
    return name.translate(_CR_LF)


def exchange_declare(channel: Channel, method) -> None:
    channel.vhost.declare_exchange(
        stripped(method.exchange), method.exchange_type, method.passive, method.durable,
        method.auto_delete, method.internal, method.arguments or {}, channel.access)
    if not method.nowait:
        channel.send(commands.Exchange.DeclareOk())


def exchange_delete(channel: Channel, method) -> None:
    channel.vhost.delete_exchange(stripped(method.exchange), method.if_unused,
                                  channel.access)
    if not method.nowait:
        channel.send(commands.Exchange.DeleteOk())


def exchange_bind(channel: Channel, method) -> None:
    vhost = channel.vhost
    destination_name, source = _authorized_exchange_binding(channel, method)
    vhost.exchange(source)   # as RabbitMQ, a missing source is named before the destination
    vhost.bind(vhost.exchange(destination_name), source, method.routing_key,
               method.arguments or {})
    if not method.nowait:
        channel.send(commands.Exchange.BindOk())


def exchange_unbind(channel: Channel, method) -> None:
    destination_name, source = _authorized_exchange_binding(channel, method)
    destination = channel.vhost.exchanges.get(destination_name)
    if destination is not None:   # unbinding a missing exchange succeeds, as in RabbitMQ 3.x
        channel.vhost.unbind(destination, source, method.routing_key, method.arguments or {})
    if not method.nowait:
        channel.send(commands.Exchange.UnbindOk())


def _authorized_exchange_binding(channel: Channel, method):
    """(destination name, source name) of an exchange.bind/unbind, after the
    permission checks RabbitMQ makes for it."""
    destination_name, source = stripped(method.destination), stripped(method.source)
    channel.vhost.authorize_binding(channel.access, "exchange", destination_name, source,
                                    method.routing_key)
    return destination_name, source


def queue_declare(channel: Channel, method) -> None:
    if method.queue.startswith(REPLY_QUEUE):
        _declare_reply_queue(channel, method)
        return
    queue = channel.vhost.declare_queue(
        stripped(method.queue), channel.connection, method.passive, method.durable,
        method.exclusive, method.auto_delete, method.arguments or {}, channel.access)
    if queue.exclusive_owner is channel.connection:
        channel.connection.exclusive_queues[queue.name] = queue
    channel.last_queue_name = queue.name
    if not method.nowait:
        connection = channel.connection
        connection.write(connection.framer.encode_queue_declare_ok(
            channel.number, queue.name, queue.message_count, queue.consumer_count))


def _declare_reply_queue(channel: Channel, method) -> None:
    """Direct reply-to's pseudo-queue, as RabbitMQ answers a declare of it (passive or
    not, and with no permission needed): amq.rabbitmq.reply-to itself, and a reply
    address while its requester consumes, exist with one consumer; any other name
    under the prefix is a 404."""
    name = stripped(method.queue)
    if (name != REPLY_QUEUE
            and channel.connection.broker.direct_replies.consumer_for(name) is None):
        raise not_found(f"no queue '{name}' in vhost '{channel.vhost.name}'")
    channel.last_queue_name = name
    if not method.nowait:
        connection = channel.connection
        connection.write(connection.framer.encode_queue_declare_ok(
            channel.number, name, 0, 1))


def _binding_key(channel: Channel, method) -> str:
    """The routing key of a queue.bind/unbind: with no queue and no key given, the
    last declared queue's name, as RabbitMQ reads it."""
    if not method.queue and not method.routing_key:
        return channel.queue_name("")
    return method.routing_key


def queue_bind(channel: Channel, method) -> None:
    vhost = channel.vhost
    name = channel.queue_name(stripped(method.queue))
    exchange, routing_key = stripped(method.exchange), _binding_key(channel, method)
    vhost.authorize_binding(channel.access, "queue", name, exchange, routing_key)
    vhost.exchange(exchange)   # as RabbitMQ, a missing exchange is named before the queue
    queue = vhost.queue(name, channel.connection)
    vhost.bind(queue, exchange, routing_key, method.arguments or {})
    if not method.nowait:
        channel.send(commands.Queue.BindOk())


def queue_unbind(channel: Channel, method) -> None:
    vhost = channel.vhost
    name = channel.queue_name(stripped(method.queue))
    exchange, routing_key = stripped(method.exchange), _binding_key(channel, method)
    vhost.authorize_binding(channel.access, "queue", name, exchange, routing_key)
    queue = vhost.queues.get(name)
    if queue is not None:   # unbinding a missing queue succeeds, as in RabbitMQ 3.x
        source = vhost.exchanges.get(exchange)
        arguments = method.arguments or {}
        # as RabbitMQ, another connection's exclusive queue is refused only when the
        # binding exists: unbinding what is not bound succeeds
        if source is not None and source.has_binding(queue, routing_key, arguments):
            vhost.check_exclusive(queue, channel.connection)
        vhost.unbind(queue, exchange, routing_key, arguments)
    channel.send(commands.Queue.UnbindOk())


def queue_purge(channel: Channel, method) -> None:
    name = channel.queue_name(method.queue)
    channel.access.read("queue", name)
    queue = channel.vhost.queue(name, channel.connection)
    count = queue.purge()
    if not method.nowait:
        channel.send(commands.Queue.PurgeOk(message_count=count))


def queue_delete(channel: Channel, method) -> None:
    vhost = channel.vhost
    name = channel.queue_name(stripped(method.queue))
    channel.access.configure("queue", name)
    queue = vhost.queues.get(name)

    def answer(count: int) -> None:
        if not method.nowait:
            channel.send(commands.Queue.DeleteOk(message_count=count))

    if queue is None:
        answer(0)   # RabbitMQ answers DeleteOk for a queue that does not exist
    else:
        vhost.check_exclusive(queue, channel.connection)
        vhost.delete_queue(queue, method.if_unused, method.if_empty, answer)


def basic_qos(channel: Channel, method) -> None:
    channel.set_qos(method.prefetch_size, method.prefetch_count, method.global_)
    channel.send(commands.Basic.QosOk())


def basic_consume(channel: Channel, method) -> None:
    consume(channel, method)


def basic_cancel(channel: Channel, method) -> None:
    cancel(channel, method.consumer_tag)
    if not method.nowait:
        channel.send(commands.Basic.CancelOk(consumer_tag=method.consumer_tag))


def basic_get(channel: Channel, method) -> None:
    channel.get(method)


def basic_ack(channel: Channel, method) -> None:
    channel.ack(method.delivery_tag, method.multiple)


def basic_nack(channel: Channel, method) -> None:
    channel.reject(method.delivery_tag, method.multiple, method.requeue, NACK)


def basic_reject(channel: Channel, method) -> None:
    channel.reject(method.delivery_tag, False, method.requeue)


def basic_recover(channel: Channel, method) -> None:
    channel.recover(method.requeue)
    channel.send(commands.Basic.RecoverOk())


def basic_recover_async(channel: Channel, method) -> None:
    channel.recover(method.requeue)


def channel_flow(channel: Channel, method) -> None:
    channel.set_flow(method.active)
    channel.send(commands.Channel.FlowOk(active=method.active))


def channel_flow_ok(channel: Channel, method) -> None:
    """The client confirmed a flow change we never send; nothing to do."""


def confirm_select(channel: Channel, method) -> None:
    channel.confirms.select()
    if not method.nowait:
        channel.send(commands.Confirm.SelectOk())


def tx_select(channel: Channel, method) -> None:
    select_tx(channel)
    channel.send(commands.Tx.SelectOk())


def tx_commit(channel: Channel, method) -> None:
    commit_tx(channel)
    channel.send(commands.Tx.CommitOk())


def tx_rollback(channel: Channel, method) -> None:
    rollback_tx(channel)
    channel.send(commands.Tx.RollbackOk())


HANDLERS = {
    commands.Exchange.Declare: exchange_declare,
    commands.Exchange.Delete: exchange_delete,
    commands.Exchange.Bind: exchange_bind,
    commands.Exchange.Unbind: exchange_unbind,
    commands.Queue.Declare: queue_declare,
    commands.Queue.Bind: queue_bind,
    commands.Queue.Unbind: queue_unbind,
    commands.Queue.Purge: queue_purge,
    commands.Queue.Delete: queue_delete,
    commands.Basic.Qos: basic_qos,
    commands.Basic.Consume: basic_consume,
    commands.Basic.Cancel: basic_cancel,
    commands.Basic.Get: basic_get,
    commands.Basic.Ack: basic_ack,
    commands.Basic.Nack: basic_nack,
    commands.Basic.Reject: basic_reject,
    commands.Basic.Recover: basic_recover,
    commands.Basic.RecoverAsync: basic_recover_async,
    commands.Channel.Flow: channel_flow,
    commands.Channel.FlowOk: channel_flow_ok,
    commands.Confirm.Select: confirm_select,
    commands.Tx.Select: tx_select,
    commands.Tx.Commit: tx_commit,
    commands.Tx.Rollback: tx_rollback,
}
