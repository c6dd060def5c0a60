"""At-least-once dead-lettering of quorum queues (broker/core/at_least_once.py): a
dead-lettered message leaves its queue's store only after the commit that made it
durable in its targets; one that routes nowhere is kept and tried again; without
x-overflow reject-publish the queue dead-letters at most once, as RabbitMQ does. The
strategy comes from the argument, else the policy key `dead-letter-strategy`, and
follows policy changes."""

import pytest

from pamqp import commands

from amqp_codec import InboundMethod, InboundPublish, encode_properties
from broker.core.admin import Administration
from broker.core.at_least_once import RETRY_SECONDS
from broker.core.broker import Broker
from broker.core.persistence import Persistence
from core_harness import Client

PERSISTENT = encode_properties(commands.Basic.Properties(delivery_mode=2))


class SettleRecordingStore:
    """A durable store that records what is appended and settled, by body."""

    def __init__(self, persistence: Persistence, name: str, log: list):
        self.persistence = persistence
        self.store_id = name
        self.name = name
        self.log = log

    def append(self, entry) -> None:
        self.log.append(("append", self.name, entry.message.body))
        self.persistence.store_written(self)

    def settle(self, entry) -> None:
        self.log.append(("settle", self.name, entry.message.body))
        self.persistence.store_touched(self)

    def delivered(self, entry) -> None:
        pass

    def drop(self) -> None:
        self.log.append(("drop", self.name, None))

    def synced(self) -> None:
        pass


class Setup:
    """A broker with recording stores and a clock the test moves; a channel open."""

    def __init__(self):
        self.now = 1000.0
        self.log: list = []
        self.persistence = Persistence()
        self.persistence.store_factory = lambda vhost, queue: SettleRecordingStore(
            self.persistence, queue, self.log)
        self.client = Client(Broker(persistence=self.persistence, clock=lambda: self.now))
        self.client.open_channel()
        self.admin = Administration(self.client.broker)

    def source(self, overflow: str = "reject-publish", dead_letter_exchange="dlx",
               strategy: str | None = "at-least-once"):
        arguments = {"x-queue-type": "quorum", "x-overflow": overflow,
                     "x-dead-letter-exchange": dead_letter_exchange}
        if strategy is not None:
            arguments["x-dead-letter-strategy"] = strategy
        return self.client.declare_queue(1, "src", durable=True, arguments=arguments)

    def policy(self, definition: dict) -> None:
        self.admin.set_policy("/", "dls", "^src$", definition, apply_to="queues")

    def held(self) -> int | None:
        """Dead-lettered messages src holds for at-least-once dead-lettering; None when
        it dead-letters at most once."""
        keeper = self.client.broker.vhosts["/"].queues["src"].dead_lettering.keeper
        return None if keeper is None else keeper.pending

    def target(self):
        self.client.method(1, commands.Exchange.Declare(exchange="dlx", exchange_type="fanout",
                                                         durable=True))
        self.client.declare_queue(1, "dst", durable=True)
        self.client.method(1, commands.Queue.Bind(queue="dst", exchange="dlx"))

    def publish_and_reject_without_commit(self, body: bytes) -> None:
        """Publish `body` to src (committed), take it with Basic.Get and reject it
        without requeue; the reject's batch is not committed."""
        connection = self.client.connection
        self.client.connection.handle(InboundPublish(1, "", "src", False, False, PERSISTENT,
                                                     body))
        self.commit()
        frames = self.client.method(1, commands.Basic.Get(queue="src"))
        get_ok = next(method for _, method in frames if isinstance(method, commands.Basic.GetOk))
        self.log.clear()
        connection.handle(InboundMethod(1, commands.Basic.Reject(
            delivery_tag=get_ok.delivery_tag, requeue=False)))

    def commit(self) -> None:
        _, stores, writes = self.persistence.take_pending()
        self.persistence.committed(stores, writes)


def test_the_source_settles_only_after_the_commit_that_holds_the_target():
    setup = Setup()
    setup.target()
    setup.source()
    setup.publish_and_reject_without_commit(b"m")
    assert setup.log == [("append", "dst", b"m")]     # in the target, still in the source
    setup.commit()
    assert setup.log == [("append", "dst", b"m"), ("settle", "src", b"m")]


def test_without_reject_publish_the_queue_dead_letters_at_most_once():
    setup = Setup()
    setup.target()
    setup.source(overflow="drop-head")
    setup.publish_and_reject_without_commit(b"m")
    assert setup.log == [("settle", "src", b"m"), ("append", "dst", b"m")]


def test_a_message_that_routes_nowhere_is_kept_and_tried_again():
    setup = Setup()
    setup.source()
    setup.publish_and_reject_without_commit(b"m")
    setup.commit()
    assert setup.log == []                        # kept: no exchange yet
    setup.target()
    setup.now += RETRY_SECONDS
    setup.client.broker.scheduler.run_due()
    assert setup.log[-1] == ("append", "dst", b"m")
    setup.commit()
    assert setup.log[-1] == ("settle", "src", b"m")
    queue = setup.client.broker.vhosts["/"].queues["src"]
    assert queue.dead_lettering.keeper.pending == 0 and queue.message_count == 0


def test_a_deleted_queue_takes_what_it_kept_with_it():
    setup = Setup()
    setup.source()
    setup.publish_and_reject_without_commit(b"m")
    setup.client.method(1, commands.Queue.Delete(queue="src"))
    setup.target()
    setup.now += RETRY_SECONDS
    setup.client.broker.scheduler.run_due()
    assert ("append", "dst", b"m") not in setup.log


@pytest.mark.parametrize("argument, policy, held", [
    (None, "at-least-once", 1),
    (None, "at-most-once", None),
    ("at-most-once", "at-least-once", None),    # the argument wins, as in RabbitMQ
    ("at-least-once", "at-most-once", 1),
])
def test_the_argument_else_the_policy_sets_the_strategy(argument, policy, held):
    setup = Setup()
    setup.source(strategy=argument)
    setup.policy({"dead-letter-strategy": policy})
    setup.publish_and_reject_without_commit(b"m")
    assert setup.held() == held
    assert setup.log == ([] if held else [("settle", "src", b"m")])


@pytest.mark.parametrize("overflow, argument_exchange, policy, at_least_once", [
    ("reject-publish", "dlx", {}, True),
    ("drop-head", "dlx", {}, False),
    ("reject-publish", None, {}, False),                               # no exchange
    ("reject-publish", None, {"dead-letter-exchange": "dlx"}, True),   # the policy's
])
def test_at_least_once_needs_reject_publish_and_a_dead_letter_exchange(
        overflow, argument_exchange, policy, at_least_once):
    setup = Setup()
    arguments = {"x-queue-type": "quorum", "x-overflow": overflow}
    if argument_exchange is not None:
        arguments["x-dead-letter-exchange"] = argument_exchange
    setup.client.declare_queue(1, "src", durable=True, arguments=arguments)
    setup.policy({"dead-letter-strategy": "at-least-once", **policy})
    assert setup.held() == (0 if at_least_once else None)


def test_a_policy_switching_to_at_most_once_deletes_what_was_held():
    setup = Setup()
    setup.source(strategy=None)
    setup.policy({"dead-letter-strategy": "at-least-once"})
    setup.publish_and_reject_without_commit(b"m")
    setup.commit()
    assert setup.held() == 1 and setup.log == []
    setup.policy({"dead-letter-strategy": "at-most-once"})
    assert setup.held() is None and setup.log == [("settle", "src", b"m")]
    setup.target()
    setup.now += RETRY_SECONDS
    setup.client.broker.scheduler.run_due()
    assert setup.log == [("settle", "src", b"m")]


def test_a_policy_change_tries_what_routed_nowhere_again_at_once():
    setup = Setup()
    setup.source(strategy=None)
    setup.policy({"dead-letter-strategy": "at-least-once"})
    setup.publish_and_reject_without_commit(b"m")
    setup.commit()
    setup.target()
    setup.policy({"dead-letter-strategy": "at-least-once", "message-ttl": 60000})
    assert setup.log == [("append", "dst", b"m")]
    setup.commit()
    assert setup.log[-1] == ("settle", "src", b"m") and setup.held() == 0
