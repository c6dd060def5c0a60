"""Wait operations: each returns once a condition on a test vhost holds, or refuses
after `seconds` REAL seconds with what was expected and what the broker saw.

A wait is a predicate, checked at once and then whenever the broker has done a round
of work: while any wait is pending, a trio Instrument (PendingWaits) re-checks the
pending predicates before the loop waits for I/O, that is after every runnable task
has stepped. With no wait pending the instrument is not installed, so a broker pays
nothing for it. Counts are cumulative for the vhost (a fresh vhost per test)."""

import time
from typing import TYPE_CHECKING, Callable

import trio

from broker.core.observation import ACK, NACK, REJECT
from broker.core.vhost import VirtualHost

from .inspection import find_queue, recorder_of, unacked_counts, vhost_of
from .refusal import TestHookError

if TYPE_CHECKING:
    from .hooks import TestHooks

DEFAULT_SECONDS = 5.0
SHOWN = 10   # the most message ids or routing keys a timeout's text lists


class Waiter:
    """One pending wait: its predicate and the event set once it holds."""

    def __init__(self, holds: Callable[[], bool]):
        self.holds = holds
        self.done = trio.Event()


class PendingWaits(trio.abc.Instrument):
    """The pending waits of one test broker, re-checked once per loop iteration."""

    def __init__(self):
        self.waiters: set[Waiter] = set()

    def before_io_wait(self, timeout: float) -> None:
        for waiter in list(self.waiters):
            if waiter.holds():
                self.waiters.discard(waiter)
                waiter.done.set()

    def add(self, waiter: Waiter) -> None:
        if not self.waiters:
            trio.lowlevel.add_instrument(self)
        self.waiters.add(waiter)

    def discard(self, waiter: Waiter) -> None:
        self.waiters.discard(waiter)
        if not self.waiters:
            try:
                trio.lowlevel.remove_instrument(self)
            except KeyError:
                pass   # trio dropped it already (it raised; trio logged why)




async def wait_until(hooks: "TestHooks", holds: Callable[[], bool], seconds: float,
                     expected: str, seen: Callable[[], str]) -> None:
    """Return once `holds()`; after `seconds` real seconds refuse with
    "<expected>: <seen()>". Virtual time may move trio's clock faster than real time,
    so the deadline is re-armed on the real time left whenever it fires."""

    if seconds <= 0:
        raise TestHookError(f"{expected}: the timeout must be positive, not {seconds}")
    if holds():
        return
    deadline = time.monotonic() + seconds
    pending = hooks.pending_waits
    waiter = Waiter(holds)
    pending.add(waiter)
    try:
        while not waiter.done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TestHookError(f"{expected}: {seen()}")
            with trio.move_on_after(left):
                await waiter.done.wait()
    finally:
        pending.discard(waiter)


# -- what a timeout says the broker saw -----------------------------------------------

def describe_queue(hooks: "TestHooks", vhost: VirtualHost, name: str) -> str:
    queue = vhost.queues.get(name)
    if queue is None:
        return f"vhost {vhost.name!r} has no queue {name!r} (its queues: " \
               f"{sorted(vhost.queues)[:SHOWN]})"
    unacked = unacked_counts(hooks, vhost).get(name, 0)
    return (f"queue {name!r} has {queue.message_count} ready, {unacked} unacked, "
            f"{queue.consumer_count} consumers")


def _plural(count: int, word: str, plural: str = "") -> str:
    return f"{count} {word}" if count == 1 else f"{count} {plural or word + 's'}"


def _call(name: str, *shown: object, **options: object) -> str:
    """How the wait was called, for its timeout's text: name('q', count=3)."""
    parts = [repr(value) for value in shown]
    parts += [f"{key}={value!r}" for key, value in options.items() if value is not None]
    return f"{name}({', '.join(parts)})"


# -- operations ---------------------------------------------------------------------------

async def wait_for_consumer(hooks: "TestHooks", vhost: str, queue: str, count: int = 1,
                            seconds: float | int = DEFAULT_SECONDS) -> None:
    found = vhost_of(hooks, vhost)

    def holds() -> bool:
        target = found.queues.get(queue)
        return target is not None and target.consumer_count >= count

    await wait_until(hooks, holds, seconds, _call("wait_for_consumer", queue, count=count),
                     lambda: f"in {seconds} s, {describe_queue(hooks, found, queue)}")


async def wait_for_binding(hooks: "TestHooks", vhost: str, exchange: str, queue: str,
                           routing_key: str | None = None,
                           seconds: float | int = DEFAULT_SECONDS) -> None:
    found = vhost_of(hooks, vhost)

    def keys() -> list[str] | None:
        source = found.exchanges.get(exchange)
        if source is None:
            return None
        return [key for (destination, key, _), _arguments in source.bindings.items()
                if destination.name == queue and destination is found.queues.get(queue)]

    def holds() -> bool:
        bound = keys()
        if not bound:
            return False
        return routing_key is None or routing_key in bound

    def seen() -> str:
        bound = keys()
        if bound is None:
            return f"in {seconds} s, vhost {vhost!r} has no exchange {exchange!r}"
        return (f"in {seconds} s, exchange {exchange!r} binds queue {queue!r} with "
                f"routing keys {sorted(bound)[:SHOWN]}")

    await wait_until(hooks, holds, seconds,
                     _call("wait_for_binding", exchange, queue, routing_key=routing_key),
                     seen)


async def wait_until_published(hooks: "TestHooks", vhost: str, exchange: str,
                               routing_key: str | None = None, count: int = 1,
                               seconds: float | int = DEFAULT_SECONDS) -> None:
    recorder = recorder_of(vhost_of(hooks, vhost))

    def published() -> int:
        if routing_key is not None:
            return recorder.published_counts[exchange, routing_key]
        return sum(number for (name, _key), number in recorder.published_counts.items()
                   if name == exchange)

    def seen() -> str:
        by_key = {key: number for (name, key), number in recorder.published_counts.items()
                  if name == exchange}
        elsewhere = sorted({name for name, _key in recorder.published_counts} - {exchange})
        return (f"{_plural(published(), 'publish', 'publishes')} in {seconds} s "
                f"(to {exchange!r} by routing key: {dict(list(by_key.items())[:SHOWN])}; "
                f"other exchanges published to: {elsewhere[:SHOWN]})")

    await wait_until(hooks, lambda: published() >= count, seconds,
                     _call("wait_until_published", exchange, routing_key=routing_key,
                           count=count), seen)


async def _wait_until_settled(hooks: "TestHooks", outcome: str, vhost: str, queue: str,
                              count: int | None, message_id: str | None,
                              seconds: float) -> None:
    found = vhost_of(hooks, vhost)
    recorder = recorder_of(found)
    wanted = 1 if count is None and message_id is None else count

    def holds() -> bool:
        settlements = recorder.queue_settlements(queue)
        return ((wanted is None or settlements.counts[outcome] >= wanted)
                and (message_id is None
                     or message_id in settlements.message_ids(outcome)))

    def seen() -> str:
        settlements = recorder.queue_settlements(queue)
        ids = settlements.message_ids(outcome)
        others = {name: number for name, number in settlements.counts.items()
                  if name != outcome}
        return (f"{_plural(settlements.counts[outcome], outcome)} in {seconds} s "
                f"(message ids: {ids[-SHOWN:]}"
                + (f"; also {others}" if others else "")
                + f"); {describe_queue(hooks, found, queue)}")

    await wait_until(hooks, holds, seconds,
                     _call(f"wait_until_{outcome}ed", queue, count=count,
                           message_id=message_id),
                     seen)


async def wait_until_acked(hooks: "TestHooks", vhost: str, queue: str,
                           count: int | None = None, message_id: str | None = None,
                           seconds: float | int = DEFAULT_SECONDS) -> None:
    await _wait_until_settled(hooks, ACK, vhost, queue, count, message_id, seconds)


async def wait_until_nacked(hooks: "TestHooks", vhost: str, queue: str,
                            count: int | None = None, message_id: str | None = None,
                            seconds: float | int = DEFAULT_SECONDS) -> None:
    await _wait_until_settled(hooks, NACK, vhost, queue, count, message_id, seconds)


async def wait_until_rejected(hooks: "TestHooks", vhost: str, queue: str,
                              count: int | None = None, message_id: str | None = None,
                              seconds: float | int = DEFAULT_SECONDS) -> None:
    await _wait_until_settled(hooks, REJECT, vhost, queue, count, message_id, seconds)


async def wait_until_empty(hooks: "TestHooks", vhost: str, queue: str,
                           seconds: float | int = DEFAULT_SECONDS) -> None:
    found = vhost_of(hooks, vhost)
    target = find_queue(found, queue)

    def holds() -> bool:
        return (target.message_count == 0
                and not unacked_counts(hooks, found).get(queue, 0))

    await wait_until(hooks, holds, seconds, _call("wait_until_empty", queue),
                     lambda: f"in {seconds} s, {describe_queue(hooks, found, queue)}")


async def wait_until_dead_lettered(hooks: "TestHooks", vhost: str,
                                   queue: str | None = None, count: int = 1,
                                   message_id: str | None = None,
                                   seconds: float | int = DEFAULT_SECONDS) -> None:
    from .recorder import message_id as id_of

    recorder = recorder_of(vhost_of(hooks, vhost))

    def dead() -> int:
        if queue is None:
            return sum(recorder.dead_letter_counts.values())
        return recorder.dead_letter_counts[queue]

    def ids() -> list:
        return [id_of(record.message) for record in recorder.dead_letters
                if queue in (None, record.queue)]

    def holds() -> bool:
        return dead() >= count and (message_id is None or message_id in ids())

    def seen() -> str:
        return (f"{dead()} dead-lettered in {seconds} s (message ids: {ids()[-SHOWN:]}; "
                f"by source queue: {dict(recorder.dead_letter_counts)})")

    await wait_until(hooks, holds, seconds,
                     _call("wait_until_dead_lettered", queue=queue, count=count,
                           message_id=message_id), seen)


OPERATIONS = {"wait_for_consumer": wait_for_consumer, "wait_for_binding": wait_for_binding,
              "wait_until_published": wait_until_published,
              "wait_until_acked": wait_until_acked, "wait_until_nacked": wait_until_nacked,
              "wait_until_rejected": wait_until_rejected,
              "wait_until_empty": wait_until_empty,
              "wait_until_dead_lettered": wait_until_dead_lettered}
