"""Message TTL, expiry timers and dead-lettering in the core, on a fake clock."""

import logging
import struct

from pamqp import commands

from amqp_codec import InboundPublish
from broker.core.broker import Broker
from broker.core.rabbitmq_lines import LINE_3_10, Profile
from core_harness import Client, close_code, deliveries


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client_with_clock(profile: Profile | None = None):
    clock = FakeClock()
    client = Client(Broker(clock=clock, profile=profile))
    client.open_channel()
    return client, clock


def queue(client, name):
    return client.broker.vhosts["/"].queues[name]


def test_queue_ttl_expires_messages_for_get_and_counts():
    client, clock = client_with_clock()
    client.declare_queue(1, "q", arguments={"x-message-ttl": 100})
    client.publish(1, "", "q", b"old")
    clock.now += 0.05
    client.publish(1, "", "q", b"new")
    clock.now += 0.06
    assert queue(client, "q").message_count == 1
    (_, get_ok), _, (_, body) = client.method(1, commands.Basic.Get(queue="q", no_ack=True))
    assert body.value == b"new"


def test_per_message_expiration_uses_the_shorter_ttl():
    client, clock = client_with_clock()
    client.declare_queue(1, "q", arguments={"x-message-ttl": 10_000})
    client.publish(1, "", "q", b"m", properties=commands.Basic.Properties(expiration="50"))
    clock.now += 0.051
    assert queue(client, "q").message_count == 0


def test_ttl_zero_still_reaches_a_waiting_consumer():
    client, clock = client_with_clock()
    client.declare_queue(1, "q", arguments={"x-message-ttl": 0})
    client.method(1, commands.Basic.Consume(queue="q", consumer_tag="c", no_ack=True))
    assert len(deliveries(client.publish(1, "", "q", b"m"))) == 1


def test_expiry_timer_dead_letters_without_any_client_action():
    client, clock = client_with_clock()
    client.method(1, commands.Exchange.Declare(exchange="dlx", exchange_type="fanout"))
    client.declare_queue(1, "dead")
    client.method(1, commands.Queue.Bind(queue="dead", exchange="dlx"))
    client.declare_queue(1, "delay", arguments={"x-message-ttl": 100,
                                                "x-dead-letter-exchange": "dlx"})
    client.publish(1, "", "delay", b"later")
    scheduler = client.broker.scheduler
    assert scheduler.next_deadline() == 1000.1
    clock.now += 0.2
    scheduler.run_due()
    (entry,) = queue(client, "dead").ready
    headers = entry.message.headers
    assert entry.message.body == b"later"
    assert headers["x-first-death-reason"] == "expired"
    (death,) = headers["x-death"]
    assert (death["queue"], death["reason"], death["count"]) == ("delay", "expired", 1)
    assert entry.message.decoded_properties.expiration is None


def test_rejected_messages_go_to_the_dead_letter_exchange_with_its_routing_key():
    client, _ = client_with_clock()
    client.declare_queue(1, "dead")
    client.declare_queue(1, "work", arguments={"x-dead-letter-exchange": "",
                                               "x-dead-letter-routing-key": "dead"})
    client.publish(1, "", "work", b"bad")
    client.method(1, commands.Basic.Get(queue="work"))
    client.method(1, commands.Basic.Reject(delivery_tag=1, requeue=False))
    (entry,) = queue(client, "dead").ready
    assert entry.message.routing_key == "dead"
    assert entry.message.headers["x-death"][0]["reason"] == "rejected"


def test_max_length_drop_head_dead_letters_with_reason_maxlen():
    client, _ = client_with_clock()
    client.declare_queue(1, "dead")
    client.declare_queue(1, "short", arguments={"x-max-length": 1,
                                                "x-dead-letter-exchange": "",
                                                "x-dead-letter-routing-key": "dead"})
    client.publish(1, "", "short", b"first")
    client.publish(1, "", "short", b"second")
    (entry,) = queue(client, "dead").ready
    assert (entry.message.body, entry.message.headers["x-death"][0]["reason"]) == (
        b"first", "maxlen")


def test_expired_messages_do_not_cycle_back_into_their_queue():
    client, clock = client_with_clock()
    client.declare_queue(1, "loop", arguments={"x-message-ttl": 10,
                                               "x-dead-letter-exchange": ""})
    client.publish(1, "", "loop", b"m")
    clock.now += 1
    client.broker.scheduler.run_due()
    clock.now += 1
    client.broker.scheduler.run_due()
    assert queue(client, "loop").message_count == 0


def test_invalid_expiration_is_406():
    client, _ = client_with_clock()
    client.declare_queue(1, "q")
    frames = client.publish(1, "", "q", b"m",
                            properties=commands.Basic.Properties(expiration="soon"))
    assert close_code(frames) == 406


def test_x_expires_deletes_a_queue_left_unused():
    client, clock = client_with_clock()
    client.declare_queue(1, "idle", arguments={"x-expires": 1000})
    clock.now += 0.6
    client.declare_queue(1, "idle", arguments={"x-expires": 1000})   # redeclare: used
    clock.now += 0.6
    client.broker.scheduler.run_due()
    assert "idle" in client.broker.vhosts["/"].queues
    clock.now += 0.5
    client.broker.scheduler.run_due()
    assert "idle" not in client.broker.vhosts["/"].queues


def test_x_expires_never_deletes_a_queue_with_consumers():
    client, clock = client_with_clock()
    client.declare_queue(1, "busy", arguments={"x-expires": 100})
    client.method(1, commands.Basic.Consume(queue="busy", consumer_tag="c"))
    clock.now += 10
    client.broker.scheduler.run_due()
    assert "busy" in client.broker.vhosts["/"].queues
    client.method(1, commands.Basic.Cancel(consumer_tag="c"))
    clock.now += 0.2
    client.broker.scheduler.run_due()
    assert "busy" not in client.broker.vhosts["/"].queues


def _publish_with_x_death(client, death: bytes) -> None:
    """Publish to 'work' a message whose x-death array holds one table, `death` (its
    entries, encoded)."""
    array = b"F" + struct.pack(">I", len(death)) + death
    table = b"\x07x-death" + b"A" + struct.pack(">I", len(array)) + array
    properties = struct.pack(">H", 0x2000) + struct.pack(">I", len(table)) + table
    client.connection.handle(InboundPublish(1, "", "work", False, False, properties, b"m"))
    client.end_batch()


def _client_with_dead_letter_queues():
    """Under RabbitMQ 3.10, which reads the x-death a client published (4.x replaces it:
    tests/unit/test_dead_letter_lines.py)."""
    client, _ = client_with_clock(Profile(LINE_3_10))
    client.declare_queue(1, "dead")
    client.declare_queue(1, "work", arguments={"x-dead-letter-exchange": "",
                                               "x-dead-letter-routing-key": "dead"})
    return client


def test_an_earlier_x_death_is_copied_byte_for_byte():
    """Found by the in-process fuzzer: an earlier x-death holding a double that pamqp
    can only write back as a single float. As RabbitMQ, the entry is copied as it is."""
    client = _client_with_dead_letter_queues()
    death = b"\x01v" + b"d" + struct.pack(">d", 1e300)                # {"v": 1e300}
    _publish_with_x_death(client, death)
    client.method(1, commands.Basic.Get(queue="work"))
    replies = client.method(1, commands.Basic.Reject(delivery_tag=1, requeue=False))
    assert close_code(replies) is None
    [entry] = queue(client, "dead").ready
    assert death in entry.message.properties


def test_an_x_death_that_cannot_be_written_back_drops_the_message_quietly(caplog):
    """An earlier death of the same queue and reason whose count is the largest long:
    one more does not fit. The message is dropped with a warning (as the dead_letter
    module documents); the broker logs no error and carries on."""
    client = _client_with_dead_letter_queues()
    death = (b"\x05queue" + b"S" + struct.pack(">I", 4) + b"work" + b"\x06reason" + b"S"
             + struct.pack(">I", 8) + b"rejected" + b"\x05count" + b"l"
             + struct.pack(">q", 2 ** 63 - 1))
    _publish_with_x_death(client, death)
    client.method(1, commands.Basic.Get(queue="work"))
    with caplog.at_level(logging.WARNING):
        replies = client.method(1, commands.Basic.Reject(delivery_tag=1, requeue=False))
    assert close_code(replies) is None
    assert not queue(client, "dead").ready
    assert "event=dead_letter_dropped" in caplog.text
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
