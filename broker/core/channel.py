"""One AMQP channel: its state machine, consumers, deliveries, acks and confirms."""

import logging
from typing import TYPE_CHECKING

from pamqp import commands

from amqp_codec import replace_properties
from amqp_codec.reply_codes import ReplyCode
from amqp_codec.wire_ids import (BASIC_CONSUME, BASIC_PUBLISH, BASIC_QOS, BASIC_RECOVER,
                                 CHANNEL_FLOW)

from .access_control import CACHED_DECISIONS, IMPERSONATOR, ChannelAccess
from .delayed_exchange import delay_ms
from .consumer_timeout import AckWatch, timed_out_error
from .direct_reply import REPLY_PREFIX, REPLY_QUEUE
from .errors import ChannelError, ConnectionFailure, precondition_failed
from .exchange import Exchange, field_type_name
from .message import CHECKED_HIGH_BITS, USER_ID_BIT, Message, PublishedMessage, QueueEntry
from .message_stats import MessageCounts
from .observation import ACK, REJECT
from .queue_base import Consumer, ConsumerChannel, QueueBase
from .queue_types import refuse_other_types_consumer_arguments
from .sender_routing import sender_routed
from .server_names import server_named
from .stream_queue import DeliveredOffset
from .vhost import VirtualHost

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger("warren.channel")

class Delivery:
    """A message handed to the client and not yet acked: `entry` is what its queue
    settles, discards or requeues (a QueueEntry, or a stream's DeliveredOffset)."""

    __slots__ = ("tag", "queue", "entry", "consumer")

    def __init__(self, tag: int, queue: QueueBase, entry: QueueEntry | DeliveredOffset,
                 consumer: Consumer | None):
        self.tag = tag
        self.queue = queue
        self.entry = entry
        self.consumer = consumer


class Channel(ConsumerChannel["Connection"]):
    """The per-channel state machine. Handlers raise ChannelError/ConnectionFailure."""

    def __init__(self, connection: "Connection", number: int):
        self.connection = connection
        self.number = number
        assert connection.vhost is not None, "channels open after Connection.Open"
        self.vhost: VirtualHost = connection.vhost
        self.access = ChannelAccess(connection.broker.access, connection.user,
                                    self.vhost.name)
        self.closing = False
        self.consumers: dict[str, Consumer] = {}
        self.unacked: dict[int, Delivery] = {}
        self.next_delivery_tag = 1
        self._holds: list = []   # delayed exchanges a routed message reached (reused)
        self.consumer_prefetch = 0
        self.global_prefetch = 0
        # Unacked deliveries the channel-wide limit does not count, as RabbitMQ's
        # limiter: Basic.Get deliveries since the last global Basic.Qos (which counts
        # every delivery then unacked), less the Basic.Get deliveries settled since.
        self.uncounted_unacked = 0
        self.confirming = False
        # Publishes are numbered by `published` (every publish, the message counter
        # too); confirm sequence numbers count from the Confirm.Select: published -
        # confirm_base. acked_seq and nacked_seqs hold `published` numbers.
        self.confirm_base = 0
        self.acked_seq = 0
        self.nacked_seqs: list[int] = []
        self.last_queue_name = ""
        self.reply_token: str | None = None       # consuming amq.rabbitmq.reply-to
        self.reply_consumer_tag: str | None = None
        self.transaction: "Transaction | None" = None
        self.ack_watch: AckWatch | None = None   # while deliveries are unacked
        self.published = 0             # the channel's message counts (and publish numbers)
        self.counts = MessageCounts()   # (message_counts() has them all)
        self.counts_retired = False     # added to the vhost's retired counts

    def message_counts(self) -> MessageCounts:
        """The channel's cumulative message counts (broker/core/message_stats.py); the
        hot path keeps publishes and deliveries in the cheapest form: a counter of its
        own and the delivery tag."""
        counts = MessageCounts()
        counts.add(self.counts)
        counts.publish = self.published
        counts.deliver = (self.next_delivery_tag - 1 - counts.deliver_no_ack - counts.get
                          - counts.get_no_ack)
        return counts

    # -- delivery (called by queues) -------------------------------------------------

    def can_deliver(self, consumer: Consumer) -> bool:
        if self.closing or not self.connection.transport.writable:
            return False
        if self.global_prefetch and self._global_limit_reached(consumer):
            return False    # (no-ack consumers too, as RabbitMQ)
        if consumer.no_ack:
            return True
        return not consumer.prefetch or consumer.unacked < consumer.prefetch

    def _global_limit_reached(self, consumer: Consumer) -> bool:
        return (len(self.unacked) - self.uncounted_unacked >= self.global_prefetch
                and consumer.queue.honours_global_qos)

    def deliver(self, consumer: Consumer, entry: QueueEntry) -> None:
        """Send `entry` to `consumer`. The frames are encoded before any state changes,
        so when encoding raises, the message is still the queue's. A no-ack delivery
        is the queue's to settle (Queue.settle) once this returns."""
        tag = self.next_delivery_tag
        message = entry.message
        connection = self.connection
        frames = connection.framer.encode_deliver(
            self.number, consumer.tag, tag, entry.redelivered, message.exchange,
            message.routing_key, message.properties, message.body)
        self.next_delivery_tag = tag + 1
        if entry.redelivered:
            self.counts.redeliver += 1
        if consumer.no_ack:
            self.counts.deliver_no_ack += 1
        else:
            queue = consumer.queue
            consumer.unacked += 1
            self.unacked[tag] = Delivery(tag, queue, entry, consumer)
            if self.ack_watch is None:
                self.ack_watch = AckWatch(self, tag)
        connection.write(frames)

    def deliver_at_once(self, consumer: Consumer, message: Message) -> None:
        """Send a message its queue hands straight to a no-ack consumer, without
        queueing it: never redelivered, nothing to settle (`deliver` otherwise)."""
        tag = self.next_delivery_tag
        connection = self.connection
        frames = connection.framer.encode_deliver(
            self.number, consumer.tag, tag, False, message.exchange, message.routing_key,
            message.properties, message.body)
        self.next_delivery_tag = tag + 1
        self.counts.deliver_no_ack += 1
        connection.write(frames)

    def deliver_record(self, consumer: Consumer, entry: DeliveredOffset, exchange: str,
                       routing_key: str, properties: bytes, body: bytes) -> None:
        """Deliver a message read from a stream; `entry` is what an ack hands back to
        the queue."""
        tag = self.next_delivery_tag
        self.next_delivery_tag = tag + 1
        consumer.unacked += 1
        self.unacked[tag] = Delivery(tag, consumer.queue, entry, consumer)
        if self.ack_watch is None:
            self.ack_watch = AckWatch(self, tag)
        connection = self.connection
        connection.write(connection.framer.encode_deliver(
            self.number, consumer.tag, tag, False, exchange, routing_key, properties, body))

    def acks_timed_out(self, timeout_ms: int) -> None:
        """The oldest unacked delivery waited longer than `timeout_ms` (AckWatch): the
        channel is closed with 406, as RabbitMQ does, and its deliveries requeued."""
        log.warning("event=consumer_timeout channel=%d timeout_ms=%d unacked=%d peer=%s",
                    self.number, timeout_ms, len(self.unacked), self.connection.peer)
        self.connection.close_channel(self.number, timed_out_error(self.number, timeout_ms))

    def consumer_cancelled_by_broker(self, consumer: Consumer) -> None:
        """The consumer's queue went away: forget the consumer, tell the client."""
        self.consumers.pop(consumer.tag, None)
        if self.connection.supports("consumer_cancel_notify") and not self.closing:
            self.send(commands.Basic.Cancel(consumer_tag=consumer.tag, nowait=True))

    def send(self, method) -> None:
        self.connection.send_method(self.number, method)

    # -- publishing ----------------------------------------------------------------

    def publish(self, command) -> None:
        if command.immediate:
            raise ConnectionFailure(ReplyCode.NOT_IMPLEMENTED, "immediate=true",
                                    *BASIC_PUBLISH)
        if command.body is None:   # the decoder dropped a body above max_message_size
            raise precondition_failed(
                f"message size {command.body_size} is larger than configured max size "
                f"{self.connection.broker.config.max_message_size}")
        self.published += 1
        access = self.access
        exchange = access.publish_targets.get(command.exchange)
        if (exchange is None or exchange.deleted
                or access.generation != access.access.generation):
            exchange = self._publish_target(command)
        properties = command.properties
        # A publish the decoder made as a PublishedMessage is the message; one made as
        # an InboundPublish (a direct session's, a test's) is copied into one.
        message: Message
        if type(command) is PublishedMessage:
            message = command
        else:
            message = Message(command.exchange, command.routing_key, properties, command.body)
        # user_id, expiration, reply_to or headers (for CC and BCC) set: each needs a look.
        # One test of the flag bytes for the common case of none, inline: as a method
        # call it cost ~570 instructions per message (callgrind, bench/core_hot_path.py).
        if len(properties) >= 2 and (properties[0] & CHECKED_HIGH_BITS
                                     or properties[1] & USER_ID_BIT):
            message = self._checked(message)
        if self.transaction is not None:
            self.transaction.publishes.append((exchange, message, command.mandatory))
            return
        if not self.confirming:
            self._route(exchange, message, command.mandatory)
            return
        faults = self.vhost.faults
        if faults is not None and faults.refuses_publish():
            accepted = False   # a test broker's injected fault (publish_faults.py)
        else:
            accepted = self._route(exchange, message, command.mandatory)
        if not accepted:
            self.nacked_seqs.append(self.published)
        self.connection.confirms_pending(self)

    def _publish_target(self, command) -> Exchange:
        """The exchange a publish goes to, after RabbitMQ's checks in its order: write
        permission (403 before 404), existence (404), not internal (403), then the
        user's topic permission on the routing key. Unless that last check applies, the
        exchange joins the channel's publish cache (ChannelAccess.publish_targets), so
        the next publishes to it skip these checks until permissions change or the
        exchange is deleted."""
        access = self.access
        name = command.exchange
        access.write("exchange", name)
        exchange = self.vhost.exchanges.get(name)
        if exchange is None:
            exchange = self.vhost.exchange(name)   # 404
        if exchange.internal:
            raise ChannelError(ReplyCode.ACCESS_REFUSED,
                               f"cannot publish to internal exchange '{exchange.name}' "
                               f"in vhost '{self.vhost.name}'")
        if access.topics is not None and exchange.kind == "topic":
            access.topic("write", exchange.name, command.routing_key)
            return exchange    # checked per routing key: not cached
        targets = access.publish_targets
        if len(targets) >= CACHED_DECISIONS:
            targets.clear()
        targets[name] = exchange
        return exchange

    def _checked(self, message: Message) -> Message:
        if message.has_user_id():
            self._check_user_id(message)
        if message.has_expiration():
            self._check_expiration(message)
        if message.has_reply_to():
            message = self._with_reply_token(message)
        if message.may_name_recipients():
            message = sender_routed(message)
        return message

    def _check_user_id(self, message: Message) -> None:
        """RabbitMQ's validated user id: user_id, when set, must be the login user,
        unless the user had the impersonator tag when it logged in."""
        user_id = message.decoded_properties.user_id
        connection = self.connection
        if user_id != connection.user and IMPERSONATOR not in connection.user_tags:
            raise precondition_failed(   # (a user_id that is not UTF-8 shows as '?')
                f"user_id property set to '{user_id}' but authenticated user was "
                f"'{connection.user}'")

    @staticmethod
    def _check_expiration(message: Message) -> None:
        try:
            message.expiration_ms()
        except ValueError:
            raise precondition_failed(
                f"invalid expiration '{message.decoded_properties.expiration}': "
                "expected a non-negative integer of milliseconds") from None

    def _with_reply_token(self, message: Message) -> Message:
        """A request asking for a direct reply gets this channel's token in reply_to
        (the other properties are kept byte for byte)."""
        if message.decoded_properties.reply_to != REPLY_QUEUE:
            return message
        if self.reply_token is None:
            raise precondition_failed("fast reply consumer does not exist")
        reply_to = (REPLY_PREFIX + self.reply_token).encode()
        return Message(message.exchange, message.routing_key,
                       replace_properties(message.properties, reply_to=reply_to),
                       message.body)

    def _route(self, exchange, message: Message, mandatory: bool) -> bool:
        """Deliver to every bound queue; False if any queue refused the message."""
        if exchange.delays_messages:
            delay = delay_ms(message)
            if delay:
                return self._hold(exchange, message, mandatory, delay)
        # VirtualHost.route's common case inline (one call fewer per message, ~500
        # instructions): an exchange bound to queues only, no CC/BCC keys, and a
        # destination found or no alternate exchange to try.
        if message.extra_routing_keys or exchange.exchange_bindings:
            queues = self.vhost.route(exchange, message, self._holds)
        else:
            queues = exchange.route(message)
            if queues:
                if type(queues) is not tuple:   # a direct exchange's is one already
                    queues = tuple(queues)    # a copy: enqueueing may unbind
            elif exchange.alternate is not None:
                queues = self.vhost.route(exchange, message, self._holds)
        # A direct reply is looked for only among what the default exchange routed
        # nowhere: no queue is named under amq.* (a reserved prefix), and the default
        # exchange has no alternate; the test costs ~900 instructions per message.
        if (not queues and not exchange.name
                and message.routing_key.startswith(REPLY_PREFIX)):
            return self._reply(message, mandatory)
        observer = self.vhost.observer
        if observer is not None:
            observer.published(exchange, message, len(queues))
        if self._holds:
            return self._hold_reached(queues, message, mandatory)
        accepted = True
        if queues:
            for queue in queues:
                if not queue.enqueue(message, self.connection):
                    accepted = False
        elif mandatory:
            self.counts.return_unroutable += 1
            self.connection.write(self.connection.framer.encode_return(
                self.number, 312, "NO_ROUTE", message.exchange, message.routing_key,
                message.properties, message.body))
            if observer is not None:
                observer.returned(message)
        else:
            self.counts.drop_unroutable += 1
            if observer is not None:
                observer.dropped(message)
        return accepted

    def _hold(self, exchange, message: Message, mandatory: bool, delay: int) -> bool:
        """A delayed message is held by its exchange, to be routed when it is due. A
        mandatory one that nothing bound now would route is returned at once (on this
        channel, which may be gone by the due time) and not held."""
        if mandatory and not self.vhost.route(exchange, message):
            self.connection.write(self.connection.framer.encode_return(
                self.number, 312, "NO_ROUTE", message.exchange, message.routing_key,
                message.properties, message.body))
            return True
        exchange.hold(message, delay)
        return True

    def _hold_reached(self, queues, message: Message, mandatory: bool) -> bool:
        """The message reached delayed exchanges through exchange-to-exchange bindings
        or as an alternate exchange: each holds it, as the plugin does, and the queues
        reached on the way get it at once. A mandatory one that reached no queue and
        that none of these exchanges would route now is returned and held nowhere, as
        one published to a delayed exchange."""
        holds = self._holds[:]
        self._holds.clear()
        if mandatory and not queues and not any(self.vhost.route(exchange, message)
                                                for exchange, _delay in holds):
            self.connection.write(self.connection.framer.encode_return(
                self.number, 312, "NO_ROUTE", message.exchange, message.routing_key,
                message.properties, message.body))
            return True
        for exchange, delay in holds:
            exchange.hold(message, delay)
        accepted = True
        for queue in queues:
            if not queue.enqueue(message, self.connection):
                accepted = False
        return accepted

    def _reply(self, message: Message, mandatory: bool) -> bool:
        """A reply to a direct reply-to request goes straight to the requester."""
        target = self.connection.broker.direct_replies.consumer_for(message.routing_key)
        if target is not None:
            channel, consumer_tag = target
            channel.deliver_reply(consumer_tag, message)
        elif mandatory:
            self.connection.write(self.connection.framer.encode_return(
                self.number, 312, "NO_ROUTE", message.exchange, message.routing_key,
                message.properties, message.body))
        return True

    def deliver_reply(self, consumer_tag: str, message: Message) -> None:
        if self.closing:
            return
        tag = self.next_delivery_tag
        self.next_delivery_tag = tag + 1
        self.connection.write(self.connection.framer.encode_deliver(
            self.number, consumer_tag, tag, False, message.exchange, message.routing_key,
            message.properties, message.body))

    def flush_confirms(self) -> None:
        """Confirm every publish routed since the last flush: one Basic.Ack per
        contiguous range (multiple=true), a Basic.Nack for each refused message."""
        if self.closing:
            return
        observer = self.vhost.observer
        if observer is not None:
            nacks = len(self.nacked_seqs)
            observer.confirming(self, self.published - self.acked_seq - nacks, nacks)
        faults = self.vhost.faults
        if faults is not None and faults.confirm_delay:
            faults.hold_confirms(self, self.published, self.nacked_seqs)
            self.nacked_seqs = []
            return
        self.confirm_through(self.published, self.nacked_seqs)
        self.nacked_seqs.clear()

    def confirm_through(self, published: int, nacked: list[int]) -> None:
        """Confirm the publishes up to `published`: those in `nacked` with Basic.Nack,
        the others with Basic.Ack (one per contiguous range)."""
        write = self.connection.write
        for seq in nacked:
            self._ack_through(seq - 1)
            write(self.connection.framer.encode_basic_nack(
                self.number, seq - self.confirm_base, False))
            self.counts.confirm += 1
            self.acked_seq = seq
        self._ack_through(published)

    @property
    def unconfirmed(self) -> int:
        """Publishes of confirm mode not confirmed yet."""
        return self.published - self.acked_seq if self.confirming else 0

    def _ack_through(self, seq: int) -> None:
        if seq > self.acked_seq:
            self.connection.write_confirm(self.number, seq - self.confirm_base,
                                          seq - self.acked_seq > 1)
            self.counts.confirm += seq - self.acked_seq
            self.acked_seq = seq

    # -- consuming -----------------------------------------------------------------

    def consume(self, method) -> str:
        tag = method.consumer_tag or server_named("amq.ctag-")
        if tag in self.consumers or tag == self.reply_consumer_tag:
            raise ConnectionFailure(ReplyCode.NOT_ALLOWED,
                                    f"attempt to reuse consumer tag '{tag}'",
                                    *BASIC_CONSUME)
        if method.queue == REPLY_QUEUE:   # no permission needed, as in RabbitMQ
            return self._consume_replies(method, tag)
        name = self.queue_name(method.queue)
        self.access.read("queue", name)
        queue = self.vhost.queue(name, self.connection)
        if (queue.has_exclusive_consumer()
                or (method.exclusive and (queue.consumers or queue.single_active))):
            raise ChannelError(ReplyCode.ACCESS_REFUSED,
                               f"queue '{queue.name}' in vhost '{self.vhost.name}' in "
                               "exclusive use")
        self._check_consumer_arguments(method.arguments or {}, queue)
        consumer = queue.make_consumer(tag, self, method.no_ack, method.exclusive,
                                       self.consumer_prefetch, method.arguments)
        if self.global_prefetch and not queue.honours_global_qos:
            raise ConnectionFailure(ReplyCode.NOT_IMPLEMENTED,
                                    f"queue '{queue.name}' in vhost '{self.vhost.name}' "
                                    "does not support global qos (consume on a channel "
                                    "without Basic.Qos global=true)", *BASIC_CONSUME)
        self.consumers[tag] = consumer
        if not method.nowait:
            self.send(commands.Basic.ConsumeOk(consumer_tag=tag))
        queue.add_consumer(consumer)
        return tag

    def _check_consumer_arguments(self, arguments: dict, queue: QueueBase) -> None:
        """406 in RabbitMQ's words for an argument the queue's type does not take, an
        x-priority that is not an integer, an x-cancel-on-ha-failover not a boolean."""
        refuse_other_types_consumer_arguments(arguments, queue.arguments, queue.name,
                                              self.vhost.name)
        priority = arguments.get("x-priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise precondition_failed(
                f"invalid arg 'x-priority' for queue '{queue.name}' in vhost "
                f"'{self.vhost.name}': \"expected integer, got "
                f"{field_type_name(priority)}\"")
        failover = arguments.get("x-cancel-on-ha-failover", False)
        if not isinstance(failover, bool):
            raise precondition_failed(
                f"invalid arg 'x-cancel-on-ha-failover' for queue '{queue.name}' in vhost "
                f"'{self.vhost.name}': {{unacceptable_type,{field_type_name(failover)}}}")

    def _consume_replies(self, method, tag: str) -> str:
        if not method.no_ack:
            raise precondition_failed("reply consumer cannot acknowledge")
        if self.reply_token is not None:
            raise precondition_failed("reply consumer already set")
        self.reply_token = self.connection.broker.direct_replies.register(self, tag)
        self.reply_consumer_tag = tag
        if not method.nowait:
            self.send(commands.Basic.ConsumeOk(consumer_tag=tag))
        return tag

    def _stop_replies(self) -> None:
        if self.reply_token is not None:
            self.connection.broker.direct_replies.unregister(self.reply_token)
            self.reply_token = self.reply_consumer_tag = None

    def cancel(self, tag: str) -> None:
        if tag == self.reply_consumer_tag:
            self._stop_replies()
            return
        consumer = self.consumers.pop(tag, None)
        if consumer is not None:
            consumer.queue.remove_consumer(consumer)

    def get(self, method) -> None:
        name = self.queue_name(method.queue)
        self.access.read("queue", name)
        queue = self.vhost.queue(name, self.connection)
        entry = queue.take()
        counts = self.counts
        if entry is None:
            counts.get_empty += 1
            self.send(commands.Basic.GetEmpty())
            return
        tag = self.next_delivery_tag
        self.next_delivery_tag = tag + 1
        if entry.redelivered:
            counts.redeliver += 1
        if method.no_ack:
            counts.get_no_ack += 1
            queue.settle(entry)
        else:
            counts.get += 1
            self.unacked[tag] = Delivery(tag, queue, entry, None)
            self.uncounted_unacked += 1
            if self.ack_watch is None:
                self.ack_watch = AckWatch(self, tag)
            queue.store.delivered(entry)
        message = entry.message
        self.connection.write(self.connection.framer.encode_get_ok(
            self.number, tag, entry.redelivered, message.exchange, message.routing_key,
            queue.message_count, message.properties, message.body))

    def set_qos(self, prefetch_size: int, prefetch_count: int, global_: bool) -> None:
        if prefetch_size:
            raise ConnectionFailure(ReplyCode.NOT_IMPLEMENTED,
                                    f"prefetch_size!=0 ({prefetch_size})", *BASIC_QOS)
        if global_:
            self.global_prefetch = prefetch_count
            self.uncounted_unacked = 0   # from now on every unacked delivery counts
        else:
            self.consumer_prefetch = prefetch_count
            self.global_prefetch = 0     # as RabbitMQ 3.x: lifts the channel-wide limit
        self.redispatch()

    def set_flow(self, active: bool) -> None:
        """Channel.Flow from the client. RabbitMQ 3.x refuses active=false with 540;
        so does Warren, so clients see the same behaviour on both."""
        if not active:
            raise ConnectionFailure(ReplyCode.NOT_IMPLEMENTED, "active=false", *CHANNEL_FLOW)
        self.redispatch()

    def redispatch(self) -> None:
        """Offer messages again to every queue this channel consumes from."""
        for queue in {consumer.queue for consumer in self.consumers.values()}:
            queue.dispatch()

    # -- acknowledgements ----------------------------------------------------------

    def queue_name(self, name: str) -> str:
        """`name`, or for "" the queue last declared on this channel (as RabbitMQ)."""
        if name:
            return name
        if not self.last_queue_name:
            raise ChannelError(ReplyCode.NOT_FOUND, "no previously declared queue")
        return self.last_queue_name

    def ack(self, delivery_tag: int, multiple: bool) -> None:
        deliveries = self._take(delivery_tag, multiple)
        if self.transaction is not None:
            self.transaction.acks.extend(deliveries)
        else:
            self._settle(deliveries)

    def reject(self, delivery_tag: int, multiple: bool, requeue: bool,
               outcome: str = REJECT) -> None:
        """Basic.Reject, or Basic.Nack with `outcome` NACK (told apart for observers)."""
        deliveries = self._take(delivery_tag, multiple)
        if self.transaction is not None:
            self.transaction.rejects.append((deliveries, requeue, outcome))
            return
        self._reject(deliveries, requeue, outcome)

    def recover(self, requeue: bool) -> None:
        if not requeue:
            raise ConnectionFailure(ReplyCode.NOT_IMPLEMENTED, "requeue=false",
                                    *BASIC_RECOVER)
        deliveries = list(self.unacked.values())
        self.unacked.clear()
        self._reject(deliveries, True, None)

    def _take(self, delivery_tag: int, multiple: bool) -> list[Delivery]:
        """Remove and return the deliveries a tag names; an unknown tag is a 406.

        With `multiple`, tag 0 means every unacked delivery; otherwise the tag itself must
        be unacked, and every delivery up to it is taken (RabbitMQ's rule).
        """
        unacked = self.unacked
        if multiple and delivery_tag == 0:
            deliveries = list(unacked.values())
            unacked.clear()
            return deliveries
        if delivery_tag not in unacked:
            raise precondition_failed(f"unknown delivery tag {delivery_tag}")
        if not multiple:
            return [unacked.pop(delivery_tag)]
        return [unacked.pop(tag) for tag in [t for t in unacked if t <= delivery_tag]]

    def _settle(self, deliveries: list[Delivery]) -> None:
        queues = self._release(deliveries)
        self.counts.ack += len(deliveries)
        observer = self.vhost.observer
        if observer is not None:
            observer.settled(deliveries, ACK, False)
        for delivery in deliveries:
            delivery.queue.settle(delivery.entry)
        self._after_release(queues)

    def _reject(self, deliveries: list[Delivery], requeue: bool,
                outcome: str | None) -> None:
        """Requeue or discard (dead-letter) `deliveries`; `outcome` is how the client
        settled them (None for Basic.Recover)."""
        queues = self._release(deliveries)
        observer = self.vhost.observer
        if observer is not None and outcome is not None:
            observer.settled(deliveries, outcome, requeue)
        by_queue: dict[QueueBase, list] = {}
        for delivery in deliveries:
            if requeue:
                by_queue.setdefault(delivery.queue, []).append(delivery.entry)
            else:
                delivery.queue.discard([delivery.entry], "rejected")
        for queue, entries in by_queue.items():
            queue.requeue(entries)
        self._after_release(queues)

    def _release(self, deliveries: list[Delivery]) -> set:
        queues = set()
        for delivery in deliveries:
            consumer = delivery.consumer
            if consumer is not None:
                consumer.unacked -= 1
                queues.add(consumer.queue)
            else:   # a Basic.Get: RabbitMQ's limiter does not count its ack
                self.uncounted_unacked -= 1
        return queues

    def _after_release(self, queues: set) -> None:
        if self.global_prefetch:
            self.redispatch()
        else:
            for queue in queues:
                queue.dispatch()

    # -- transactions and confirms -------------------------------------------------

    def select_confirm(self) -> None:
        if self.transaction is not None:
            raise precondition_failed(
                "cannot switch from tx to confirm mode")
        if not self.confirming:   # publishes before Confirm.Select are not confirmed
            self.confirm_base = self.acked_seq = self.published
        self.confirming = True

    def select_tx(self) -> None:
        if self.confirming:
            raise precondition_failed("cannot switch from confirm to tx mode")
        if self.transaction is None:
            self.transaction = Transaction()

    def commit(self) -> None:
        transaction = self._require_tx()
        self.transaction = Transaction()
        for exchange, message, mandatory in transaction.publishes:
            self._route(exchange, message, mandatory)
        self._settle(transaction.acks)
        for deliveries, requeue, outcome in transaction.rejects:
            self._reject(deliveries, requeue, outcome)
        if transaction.acks or transaction.rejects:
            self.vhost.persistence.barrier()   # CommitOk once the acks are on disk

    def rollback(self) -> None:
        transaction = self._require_tx()
        self.transaction = Transaction()
        self._undo_settlements(transaction)

    def _undo_settlements(self, transaction: "Transaction") -> None:
        """The acks, nacks and rejects of an uncommitted transaction did not happen:
        their deliveries are unacked again."""
        pending = transaction.acks + [d for ds, _, _ in transaction.rejects for d in ds]
        for delivery in sorted(pending, key=_by_tag):
            self.unacked[delivery.tag] = delivery
        if pending and self.ack_watch is None:
            self.ack_watch = AckWatch(self, max(map(_by_tag, pending)))

    def _require_tx(self) -> "Transaction":
        if self.transaction is None:
            raise precondition_failed("channel is not transactional")
        return self.transaction

    # -- closing -------------------------------------------------------------------

    def shutdown(self) -> None:
        """The channel is gone (closed or connection lost): cancel, requeue unacked,
        including what an uncommitted transaction acked (as RabbitMQ, which rolls it
        back)."""
        self.closing = True
        if not self.counts_retired:   # counted once, however often shutdown runs
            self.vhost.retired_counts.add(self.message_counts())
            self.counts_retired = True
        if self.transaction is not None:
            self._undo_settlements(self.transaction)
            self.transaction = None
        if self.ack_watch is not None:
            self.ack_watch.stop()
            self.ack_watch = None
        self._stop_replies()
        for consumer in list(self.consumers.values()):
            consumer.queue.remove_consumer(consumer)
        self.consumers.clear()
        deliveries = list(self.unacked.values())
        self.unacked.clear()
        queues = self._release(deliveries)
        by_queue: dict[QueueBase, list] = {}
        for delivery in deliveries:
            by_queue.setdefault(delivery.queue, []).append(delivery.entry)
        for queue, entries in by_queue.items():
            queue.requeue(entries)
        for queue in queues - set(by_queue):
            queue.dispatch()


class Transaction:
    """Publishes and acks buffered on a tx channel until Tx.Commit."""

    __slots__ = ("publishes", "acks", "rejects")

    def __init__(self):
        self.publishes: list = []
        self.acks: list[Delivery] = []
        self.rejects: list = []


def _by_tag(delivery: Delivery) -> int:
    return delivery.tag
