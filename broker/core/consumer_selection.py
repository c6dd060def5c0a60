"""Which consumer a classic queue serves next when that is not plain round-robin: by
x-priority (lower ones get messages only while every higher one is blocked, as in
RabbitMQ), or, with x-single-active-consumer, the active one only, and its hand-over.

The queue keeps the round-robin of equal consumers (its hot path) and asks a
`ConsumerSelection` otherwise; the selection holds the queue's `consumers` deque, in
order, and no back pointer.
"""

from collections import deque

from .queue_base import Consumer


class ConsumerSelection:
    """The order of a queue's consumers: highest x-priority first, in turn within a
    priority; with x-single-active-consumer, the active one first and the others
    waiting in the order they came."""

    __slots__ = ("consumers", "single_active", "handing_over")

    def __init__(self, consumers: deque[Consumer], single_active: bool):
        self.consumers = consumers
        self.single_active = single_active
        # x-single-active-consumer: the active consumer that went while it still held
        # unacked messages; its successor waits until they are all settled or back.
        self.handing_over: Consumer | None = None

    def next(self) -> Consumer | None:
        """The consumer to serve next, or None when none can take a message."""
        consumers = self.consumers
        if self.single_active:
            gone = self.handing_over
            if gone is not None:
                if gone.unacked:
                    return None     # its messages may come back ahead of the ready ones
                self.handing_over = None
            consumer = consumers[0]     # the active one
            return consumer if consumer.channel.can_deliver(consumer) else None
        for index, consumer in enumerate(consumers):
            if consumer.channel.can_deliver(consumer):
                del consumers[index]
                self.insert(consumer)   # to the end of its priority group
                return consumer
        return None

    def add(self, consumer: Consumer) -> None:
        if self.single_active:
            self.consumers.append(consumer)    # waits, in order, unless the first
        else:
            self.insert(consumer)

    def insert(self, consumer: Consumer) -> None:
        """Place `consumer` after every other of its priority or higher."""
        consumers = self.consumers
        for index, other in enumerate(consumers):
            if other.priority < consumer.priority:
                consumers.insert(index, consumer)
                return
        consumers.append(consumer)

    def hand_over(self, gone: Consumer, successor: Consumer) -> bool:
        """x-single-active-consumer: the active consumer `gone` went and `successor`
        takes over. Whether it can be served at once: while `gone` still has unacked
        messages, which may come back ahead of the ready ones, the new one is served
        nothing, from the moment the last of them is acked, rejected or requeued on.
        (Its Basic.Cancel and its channel's close are two round trips apart, and a
        dispatch in between, for another reason, must not hand it the ready ones.)"""
        consumers = self.consumers
        consumers.remove(successor)
        consumers.appendleft(successor)
        if gone.unacked:
            self.handing_over = gone
            return False
        return True


def all_stalled(consumers: deque[Consumer]) -> bool:
    """Whether there are consumers and every one waits for its connection's socket (the
    clients read slower than the queue is fed): publisher flow control."""
    for consumer in consumers:     # a loop: called for every publish to a long backlog
        if consumer.channel.connection.transport.writable:
            return False
    return bool(consumers)
