"""One AMQP channel: publishing and routing, the deliveries to its consumers and their
acks, Basic.Get, qos, and closing. The colder parts are beside it, as functions of the
channel or collaborators: the publish checks (publish_checks.py), confirm mode
(confirms.py), tx mode (transactions.py), Basic.Consume and Basic.Cancel
(consuming.py), direct reply-to (direct_reply.py) and delayed holds
(delayed_exchange.py)."""

import logging
from typing import TYPE_CHECKING

from pamqp import commands

from amqp_codec.reply_codes import ReplyCode
from amqp_codec.wire_ids import BASIC_PUBLISH, BASIC_QOS, BASIC_RECOVER, CHANNEL_FLOW

from .access_control import ChannelAccess
from .confirms import Confirms
from .consumer_timeout import AckWatch, timed_out_error
from .delayed_exchange import delay_ms, hold_published, hold_reached
from .direct_reply import REPLY_PREFIX, route_reply, stop_replies
from .errors import ChannelError, ConnectionFailure, precondition_failed
from .message import CHECKED_HIGH_BITS, USER_ID_BIT, Message, PublishedMessage, QueueEntry
from .message_stats import MessageCounts
from .observation import ACK, REJECT
from .publish_checks import checked, publish_target
from .rabbitmq_lines import GLOBAL_QOS
from .queue_base import Consumer, ConsumerChannel, DeliveredOffset, QueueBase
from .transactions import Transaction, undo_settlements
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
        self.access = ChannelAccess(
            connection.broker.access, connection.user, self.vhost.name,
            self.vhost.profile.line.access_refusal_names_permission)
        self.closing = False
        self.consumers: dict[str, Consumer] = {}
        self.unacked: dict[int, Delivery] = {}
        # Tags of deliveries a consumer timeout handed back (RabbitMQ 4.3): acking
        # one later is no error.
        self.released_tags: set[int] = set()
        self.next_delivery_tag = 1
        self.holds: list = []   # delayed exchanges a routed message reached (reused)
        self.consumer_prefetch = 0
        self.global_prefetch = 0
        # Unacked deliveries the channel-wide limit does not count, as RabbitMQ's
        # limiter: Basic.Get deliveries since the last global Basic.Qos (which counts
        # every delivery then unacked), less the Basic.Get deliveries settled since.
        self.uncounted_unacked = 0
        self.confirming = False        # Confirm.Select received (Connection reads it too)
        self.confirms = Confirms(self)
        self.last_queue_name = ""
        self.reply_token: str | None = None       # consuming amq.rabbitmq.reply-to
        self.reply_consumer_tag: str | None = None
        self.transaction: Transaction | None = None
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

    def _next_tag(self) -> int:
        """A new delivery tag. `deliver` and `deliver_at_once` take theirs inline, after
        encoding (which may raise), without a call per message."""
        tag = self.next_delivery_tag
        self.next_delivery_tag = tag + 1
        return tag

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
        tag = self._next_tag()
        consumer.unacked += 1
        self.unacked[tag] = Delivery(tag, consumer.queue, entry, consumer)
        if self.ack_watch is None:
            self.ack_watch = AckWatch(self, tag)
        connection = self.connection
        connection.write(connection.framer.encode_deliver(
            self.number, consumer.tag, tag, False, exchange, routing_key, properties, body))

    def deliver_reply(self, consumer_tag: str, message: Message) -> None:
        """Deliver a direct reply (direct_reply.route_reply) to this channel's reply
        consumer: no-ack, not queued."""
        if self.closing:
            return
        tag = self._next_tag()
        self.connection.write(self.connection.framer.encode_deliver(
            self.number, consumer_tag, tag, False, message.exchange, message.routing_key,
            message.properties, message.body))

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
                f"{self.connection.framer.max_body_size}")
        self.published += 1
        access = self.access
        exchange = access.publish_targets.get(command.exchange)
        if (exchange is None or exchange.deleted
                or access.generation != access.access.generation):
            exchange = publish_target(self, command)
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
            message = checked(self, message)
        if self.transaction is not None:
            self.transaction.publishes.append((exchange, message, command.mandatory))
            return
        if not self.confirming:
            self.route(exchange, message, command.mandatory)
            return
        faults = self.vhost.faults
        if faults is not None and faults.refuses_publish():
            accepted = False   # a test broker's injected fault (publish_faults.py)
        else:
            accepted = self.route(exchange, message, command.mandatory)
        if not accepted:
            self.confirms.nacked.append(self.published)
        self.connection.confirms_pending(self)

    def route(self, exchange, message: Message, mandatory: bool) -> bool:
        """Deliver to every bound queue; False if any queue refused the message."""
        if exchange.delays_messages:
            delay = delay_ms(message)
            if delay:
                return hold_published(self, exchange, message, mandatory, delay)
        # VirtualHost.route's common case inline (one call fewer per message, ~500
        # instructions): an exchange bound to queues only, no CC/BCC keys, and a
        # destination found or no alternate exchange to try.
        if message.extra_routing_keys or exchange.exchange_bindings:
            queues = self.vhost.route(exchange, message, self.holds)
        else:
            queues = exchange.route(message)
            if queues:
                if type(queues) is not tuple:   # a direct exchange's is one already
                    queues = tuple(queues)    # a copy: enqueueing may unbind
            elif exchange.alternate is not None:
                queues = self.vhost.route(exchange, message, self.holds)
        # A direct reply is looked for only among what the default exchange routed
        # nowhere: no queue is named under amq.* (a reserved prefix), and the default
        # exchange has no alternate; the test costs ~900 instructions per message.
        if (not queues and not exchange.name
                and message.routing_key.startswith(REPLY_PREFIX)):
            return route_reply(self, message, mandatory)
        observer = self.vhost.observer
        if observer is not None:
            observer.published(exchange, message, len(queues))
        if self.holds:
            return hold_reached(self, queues, message, mandatory)
        accepted = True
        if queues:
            for queue in queues:
                if not queue.enqueue(message, self.connection):
                    accepted = False
        elif mandatory:
            self.counts.return_unroutable += 1
            self.return_unroutable(message)
            if observer is not None:
                observer.returned(message)
        else:
            self.counts.drop_unroutable += 1
            if observer is not None:
                observer.dropped(message)
        return accepted

    def return_unroutable(self, message: Message) -> None:
        """Basic.Return of a mandatory message that reached no queue."""
        self.connection.write(self.connection.framer.encode_return(
            self.number, ReplyCode.NO_ROUTE, "NO_ROUTE", message.exchange,
            message.routing_key, message.properties, message.body))

    def flush_confirms(self) -> None:
        """The connection's end of a batch: confirm what was published since."""
        self.confirms.flush()

    # -- Basic.Get, qos and flow ---------------------------------------------------

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
        tag = self._next_tag()
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
        if global_ and not self.vhost.permits(GLOBAL_QOS):
            global_ = False   # RabbitMQ 4.3: a per-consumer limit, as global=false
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
            self.settle_acked(deliveries)

    def reject(self, delivery_tag: int, multiple: bool, requeue: bool,
               outcome: str = REJECT) -> None:
        """Basic.Reject, or Basic.Nack with `outcome` NACK (told apart for observers)."""
        deliveries = self._take(delivery_tag, multiple)
        if self.transaction is not None:
            self.transaction.rejects.append((deliveries, requeue, outcome))
            return
        self.settle_rejected(deliveries, requeue, outcome)

    def recover(self, requeue: bool) -> None:
        if not requeue:
            raise ConnectionFailure(ReplyCode.NOT_IMPLEMENTED, "requeue=false",
                                    *BASIC_RECOVER)
        deliveries = list(self.unacked.values())
        self.unacked.clear()
        self.settle_rejected(deliveries, True, None)

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
            if delivery_tag not in self.released_tags:
                raise precondition_failed(f"unknown delivery tag {delivery_tag}")
            self.released_tags.discard(delivery_tag)
            if not multiple:
                return []
        if not multiple:
            return [unacked.pop(delivery_tag)]
        return [unacked.pop(tag) for tag in [t for t in unacked if t <= delivery_tag]]

    def settle_acked(self, deliveries: list[Delivery]) -> None:
        """The client acked `deliveries` (taken from `unacked`): their queues settle
        them."""
        queues = self._release(deliveries)
        self.counts.ack += len(deliveries)
        observer = self.vhost.observer
        if observer is not None:
            observer.settled(deliveries, ACK, False)
        for delivery in deliveries:
            delivery.queue.settle(delivery.entry)
        self._after_release(queues)

    def settle_rejected(self, deliveries: list[Delivery], requeue: bool,
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
        failed = outcome == REJECT   # a nack or a recover hands the messages back
        for queue, entries in by_queue.items():
            queue.requeue(entries, failed)
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
            undo_settlements(self, self.transaction)
            self.transaction = None
        if self.ack_watch is not None:
            self.ack_watch.stop()
            self.ack_watch = None
        stop_replies(self)
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
            queue.requeue_abandoned(entries)
        for queue in queues - set(by_queue):
            queue.dispatch()

