"""Quorum queues (`x-queue-type: quorum`) on one node, as RabbitMQ 3.10, 4.0 and 4.3
have them (the vhost's line record says where they differ).

Warren keeps one replica: a quorum queue is a classic queue (queue.py) that also
- refuses, when declared, what RabbitMQ's quorum queues refuse (server-named,
  auto-delete, exclusive, non-durable, arguments of other queue types: queue_types.py);
- counts the deliveries of each message: every delivery carries the count of earlier
  ones that came back (reject or nack with requeue, Basic.Recover, the channel or
  connection closed with it unacked) in the `x-delivery-count` header, 0 at first;
- dead-letters (reason `delivery_limit`) or drops a message coming back more times
  than the delivery limit: the lower of `x-delivery-limit` and the policy and operator
  policy key `delivery-limit`; since RabbitMQ 4.0, 20 when neither sets one
  (`delivery_limit`);
- dead-letters at least once (at_least_once.py) by `x-dead-letter-strategy`, else the
  policy key `dead-letter-strategy`, followed when a policy changes.

The count lives in the message's headers, written when the message is queued and when
it comes back, so deliveries cost nothing more and classic queues are untouched. A
message that comes back is queued anew, under a new seq and with its new count, in the
queue file too, so the count survives a restart (RabbitMQ keeps it in its Raft log).

Its ready messages are in RabbitMQ's order (quorum_ready.py): messages handed back
first, in the order they came back, then the others by priority as the line has it
(none in 3.10, two weighted levels in 4.0, 32 strict ones in 4.3). RabbitMQ 3.10
requeues a reject, nack or recover at the back instead when the queue has no delivery
limit (`quorum_requeues_to_back_without_limit`). A restart keeps the handed-back ones
first: they are the messages recovered as redelivered.
"""

import struct

from amqp_codec import MalformedProperties, headers_entries, replace_properties
from amqp_codec.field_table import text_value

from .at_least_once import AtLeastOnce
from .errors import resource_locked
from .message import Message, QueueEntry
from .message_store import MEMORY_STORE
from .message import body_size
from .priority_queue import PriorityQueue
from .queue_limits import drop_overflow
from .quorum_ready import QuorumReady
from .rabbitmq_lines import QUORUM_DEFAULT_DELIVERY_LIMIT
from .upgrade_lint import QUORUM_DELIVERY_LIMIT

DEAD_LETTER_STRATEGY = "x-dead-letter-strategy"
DELIVERY_COUNT = "x-delivery-count"
ACQUIRED_COUNT = "x-acquired-count"
DELIVERY_LIMIT = "x-delivery-limit"
_COUNT_KEY = bytes([len(DELIVERY_COUNT)]) + DELIVERY_COUNT.encode()
_ACQUIRED_KEY = bytes([len(ACQUIRED_COUNT)]) + ACQUIRED_COUNT.encode()


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def delivery_limit(arguments: dict, definition: dict, line_default: int | None = None):
    """A quorum queue's delivery limit from its x-delivery-limit argument and the
    policy's delivery-limit (already the lower of policy and operator policy); None for
    no limit.

    RabbitMQ 3.10 (`line_default` None): the lower of the two; an argument that is not
    a number sets no limit (Erlang orders every number below other terms), and a
    negative one lets no message come back. RabbitMQ 4.0 and later (`line_default` 20):
    the line's default when neither is set or the one that applies is not an integer;
    of two, the lower, or the higher when one is negative; a negative limit is none."""
    argument = arguments.get(DELIVERY_LIMIT)
    policy = definition.get("delivery-limit")
    if line_default is None:
        limits: list = [value for value in (argument, policy) if _is_number(value)]
        return min(limits) if limits else None
    limit: object
    if argument is None or policy is None:
        limit = policy if argument is None else argument
    elif _is_number(argument) and _is_number(policy):
        limit = max(argument, policy) if min(argument, policy) < 0 else min(argument, policy)
    else:   # Erlang's min of a number and another term is the number
        limit = argument if _is_number(argument) else policy
    if not isinstance(limit, int) or isinstance(limit, bool):
        return line_default
    return None if limit < 0 else limit


def delivery_count(message: Message, header: str = DELIVERY_COUNT) -> int:
    """How many times the message came back to its quorum queue (its header; under
    RabbitMQ 4.3, x-delivery-count counts failed deliveries, x-acquired-count all)."""
    count = message.headers.get(header)
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def with_delivery_count(message: Message, count: int | None) -> Message:
    """A copy of the message whose x-delivery-count header is `count` (a signed 64-bit
    integer, field type 'l', after the other headers, as RabbitMQ writes it), or
    without that header for None. A message whose headers cannot be read is kept."""
    try:
        entries = headers_entries(message.properties)
    except MalformedProperties:
        return message
    headers = b"".join(raw for key, _value, raw in entries if key != DELIVERY_COUNT)
    if count is not None:
        headers += _COUNT_KEY + b"l" + struct.pack(">q", count)
    return message.with_properties(
        replace_properties(message.properties, headers=headers or None))


def with_counts(message: Message, delivered: int, acquired: int) -> Message:
    """A copy of the message with RabbitMQ 4.3's two counts: x-delivery-count (failed
    deliveries) and x-acquired-count (every return), each left out while 0."""
    try:
        entries = headers_entries(message.properties)
    except MalformedProperties:
        return message
    headers = b"".join(raw for key, _value, raw in entries
                       if key not in (DELIVERY_COUNT, ACQUIRED_COUNT))
    if delivered:
        headers += _COUNT_KEY + b"l" + struct.pack(">q", delivered)
    if acquired:
        headers += _ACQUIRED_KEY + b"l" + struct.pack(">q", acquired)
    return message.with_properties(
        replace_properties(message.properties, headers=headers or None))


class QuorumQueue(PriorityQueue):
    """A quorum queue with one replica: a queue that counts deliveries and delivers in
    RabbitMQ's order (a priority queue's machinery with a QuorumReady). Always durable
    and never exclusive (its kind refuses such a declaration)."""

    def __init__(self, vhost, name: str, durable: bool = True, exclusive_owner=None,
                 auto_delete: bool = False, arguments: dict | None = None,
                 store=MEMORY_STORE):
        super().__init__(vhost, name, durable, exclusive_owner, auto_delete, arguments,
                         store)
        self.delivery_limit = delivery_limit(self.arguments, {}, self._line_default())
        self._follow_dead_letter_strategy({})

    def enqueue(self, message: Message, publisher=None) -> bool:
        """RabbitMQ 3.10 delivers x-delivery-count 0 the first time; 4.x no count."""
        if self.vhost.profile.line.quorum_counts_first_delivery:
            message = with_delivery_count(message, 0)
        return super().enqueue(message, publisher)

    def apply_policy(self, definition: dict) -> None:
        super().apply_policy(definition)
        self.delivery_limit = delivery_limit(self.arguments, definition,
                                             self._line_default())
        self._follow_dead_letter_strategy(definition)

    def _follow_dead_letter_strategy(self, definition: dict) -> None:
        """Dead-letter at least once or at most once, as RabbitMQ's quorum queues decide
        it (rabbit_quorum_queue's dead_letter_handler) whenever their policy changes:
        the strategy is the argument, else the policy's; at-least-once applies only with
        a dead-letter exchange and overflow reject-publish. Switched off, the queue
        deletes the messages it still held for it; still on, it tries those that routed
        nowhere again at once (RabbitMQ's worker looks the exchange up again)."""
        argument = self.arguments.get(DEAD_LETTER_STRATEGY)
        strategy = (text_value(argument) if argument is not None
                    else definition.get("dead-letter-strategy"))
        dead_lettering = self.dead_lettering
        keeper = dead_lettering.keeper
        if (strategy == "at-least-once" and self.overflow == "reject-publish"
                and dead_lettering.exchange is not None):
            if keeper is None:
                dead_lettering.keeper = AtLeastOnce(self)
            else:
                keeper.retry_now()
        elif keeper is not None:
            dead_lettering.keeper = None
            keeper.switched_off()

    def _line_default(self) -> int | None:
        """The delivery limit of a quorum queue that sets none, in the vhost's line."""
        return self.vhost.profile.line.quorum_delivery_limit

    def _ordered_ready(self):
        return QuorumReady(self.vhost.profile.line.quorum_priorities)

    def requeue_abandoned(self, entries: list) -> None:
        self.requeue(entries, abandoned=True)

    def requeue(self, entries: list, failed: bool = True, abandoned: bool = False) -> None:
        """Messages come back (`abandoned`: their channel closed): each one's count
        goes up; those over the delivery limit are dead-lettered (reason
        delivery_limit) or dropped, the others go after the messages handed back
        before them, in the order they were first queued (RabbitMQ 3.10: to the back,
        unless the queue has a delivery limit or they were abandoned).

        Under RabbitMQ 4.3 only a failed delivery (a reject, the channel closed) counts
        in x-delivery-count and towards the limit; a nack or a recover hands the message
        back, counted in x-acquired-count only (which counts every return)."""
        if self.deleted:
            return
        limit = self.delivery_limit
        apart = self.vhost.profile.line.quorum_counts_acquisitions
        back, over = [], []
        for entry in sorted(entries, key=lambda entry: entry.seq):
            message = entry.message
            count = delivery_count(message) + (1 if failed or not apart else 0)
            if limit is not None and count > limit:
                over.append(entry)
                continue
            if count > QUORUM_DEFAULT_DELIVERY_LIMIT and limit is None:
                self._note_kept_past_later_limit()
            if apart:
                message = with_counts(message, count,
                                      delivery_count(message, ACQUIRED_COUNT) + 1)
            else:
                message = with_delivery_count(message, count)
            back.append(self._returned(entry, message))
        if over:
            self.discard(over, "delivery_limit")
        if back:
            self._readmit(back, abandoned)

    def _readmit(self, entries: list[QueueEntry], abandoned: bool) -> None:
        """Returned entries (in seq order) into the ready messages, then what a classic
        queue does after a requeue."""
        ready = self.ready
        place = ready.append if self._requeues_to_back() and not abandoned \
            else ready.put_back    # type: ignore[attr-defined]
        for entry in entries:
            place(entry)
        if self.max_length_bytes is not None:
            self.ready_bytes += sum(body_size(entry.message) for entry in entries)
        if self.max_length is not None or self.max_length_bytes is not None:
            drop_overflow(self)
        self.dispatch()
        if self._may_expire:
            self._arm_expiry()

    def _requeues_to_back(self) -> bool:
        """RabbitMQ 3.10 requeues what a client hands back at the back of a queue
        without a delivery limit."""
        return (self.vhost.profile.line.quorum_requeues_to_back_without_limit
                and self.delivery_limit is None)

    def _place_restored(self, entry: QueueEntry) -> None:
        """A recovered message that had been handed back goes with the handed-back
        ones (unless the line requeues to the back)."""
        if not entry.redelivered or self._requeues_to_back():
            super()._place_restored(entry)
            return
        self.ready.put_back(entry)     # type: ignore[attr-defined]
        if entry.message.body is None:
            self._paged.tail.put_back(entry)     # type: ignore[attr-defined]

    def _read_ahead(self) -> bool:
        """As PriorityQueue._read_ahead, and the head's body first when it is on disk:
        the weighted order of the paged-out messages may put another before it."""
        ready = self.ready
        paged = self._paged
        if ready and ready[0].message.body is None and ready[0].seq not in paged.reading:
            head = ready[0]
            paged.tail.remove(head)
            paged.reading[head.seq] = head
            self.store.read_bodies([head], self._bodies_read)
        return super()._read_ahead()

    def _note_kept_past_later_limit(self) -> None:
        """Under RabbitMQ 3.10, a message came back more often than 4.x allows by
        default: the upgrade lint says so."""
        vhost = self.vhost
        if vhost.profile.line.quorum_delivery_limit is None:
            vhost.lint.note(vhost.name, QUORUM_DELIVERY_LIMIT, (
                f"a message of quorum queue '{self.name}' came back more than "
                f"{QUORUM_DEFAULT_DELIVERY_LIMIT} times; RabbitMQ 4.0 and later drop (or "
                f"dead-letter) it after its {QUORUM_DEFAULT_DELIVERY_LIMIT}th return unless "
                "x-delivery-limit says otherwise"))

    def _returned(self, entry: QueueEntry, message: Message) -> QueueEntry:
        """The entry of a message coming back, `message` with its new counts: the next
        seq puts it at the tail. The queue file gets it anew, so that the counts
        survive a restart; it is written before the old record is acked, so that a
        crash between the two can duplicate the message, never lose it."""
        self._next_seq += 1
        returned = QueueEntry(message, self._next_seq, True, entry.expires_at)
        if self.stores_messages:
            self.store.append(returned)
            self.store.settle(entry)
        return returned

    def _successor(self):
        """x-single-active-consumer: the next consumer registered takes over (RabbitMQ
        3.10's quorum queues do not look at x-priority here)."""
        return self.consumers[0]

    def take(self):
        if self.single_active:
            raise resource_locked(
                f"cannot obtain access to locked queue '{self.name}' in vhost "
                f"'{self.vhost.name}'. basic.get operations are not supported by quorum "
                "queues with single active consumer")
        return super().take()

    def _republish(self, exchange, message: Message, reason: str, now) -> int | None:
        """Dead-lettered messages leave without the count (RabbitMQ adds it to
        deliveries only)."""
        return super()._republish(exchange, with_delivery_count(message, None), reason,
                                  now)

    def drop_messages(self) -> int:
        keeper = self.dead_lettering.keeper
        if keeper is not None:
            keeper.dropped()
        return super().drop_messages()
