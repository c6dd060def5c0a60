"""Consumer (delivery acknowledgement) timeouts in the core, on a fake clock: when a
channel is closed, what it says, what happens to its deliveries, which timeout applies
(RabbitMQ 3.10's rules); under RabbitMQ 4.3, the cancel of a quorum queue's consumer."""

from pamqp import commands

from broker.core.broker import Broker, BrokerConfig
from broker.core.policy import POLICY, make_policy
from broker.core.rabbitmq_lines import LINE_3_10, LINE_4_3, Profile
from core_harness import Client, deliveries

TIMEOUT_MS = 1000
TEXT = ("PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout "
        "value used: {} ms. This timeout value can be configured, see consumers doc guide "
        "to learn more")


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client_with_clock(consumer_timeout=TIMEOUT_MS, line=LINE_3_10):
    clock = FakeClock()
    client = Client(Broker(BrokerConfig(consumer_timeout=consumer_timeout), clock=clock,
                           profile=Profile(line)))
    client.open_channel(1)
    client.open_channel(2)
    return client, clock


def advance(client, clock, seconds: float, step: float = 0.01) -> list:
    """Let `seconds` pass on the fake clock, running the timers as they fall due; the
    frames written meanwhile."""
    end = clock.now + seconds
    while clock.now < end:
        clock.now = min(end, clock.now + step)
        client.broker.scheduler.run_due()
    return client.transport.frames()


def channel_closes(frames: list) -> list:
    return [(number, frame.reply_code, frame.reply_text, frame.class_id, frame.method_id)
            for number, frame in frames if isinstance(frame, commands.Channel.Close)]


def consume_one(client, queue="q", no_ack=False, channel=1, arguments=None):
    client.declare_queue(channel, queue, arguments=arguments or {})
    client.method(channel, commands.Basic.Consume(queue=queue, consumer_tag="c",
                                                  no_ack=no_ack))
    frames = client.publish(channel, "", queue, b"late")
    assert [body for _, body in deliveries(frames)] == [b"late"]


def test_an_unacked_delivery_closes_its_channel_with_406_and_rabbitmqs_text():
    client, clock = client_with_clock()
    consume_one(client)
    assert channel_closes(advance(client, clock, 0.9)) == []
    closes = channel_closes(advance(client, clock, 0.6))
    assert closes == [(1, 406, TEXT.format(TIMEOUT_MS), 0, 0)]


def test_the_timed_out_delivery_is_requeued_and_redelivered_elsewhere():
    client, clock = client_with_clock()
    consume_one(client)
    advance(client, clock, 1.5)
    frames = client.method(2, commands.Basic.Get(queue="q", no_ack=True))
    ok = frames[0][1]
    assert isinstance(ok, commands.Basic.GetOk) and ok.redelivered


def test_a_delivery_acked_in_time_leaves_the_channel_open_and_the_timer_stops():
    client, clock = client_with_clock()
    consume_one(client)
    advance(client, clock, 0.8)
    client.method(1, commands.Basic.Ack(delivery_tag=1))
    assert channel_closes(advance(client, clock, 5.0)) == []
    assert client.connection.channels[1].ack_watch is None


def test_deliveries_keep_their_own_age_while_newer_ones_arrive():
    """A steady stream of acked deliveries does not hide an old unacked one, and a
    newer unacked one does not time out early when the old one is acked."""
    client, clock = client_with_clock()
    consume_one(client)                     # tag 1, never acked until 0.9 s
    advance(client, clock, 0.5)
    client.publish(1, "", "q", b"newer")    # tag 2, at 0.5 s
    advance(client, clock, 0.4)
    client.method(1, commands.Basic.Ack(delivery_tag=1))
    assert channel_closes(advance(client, clock, 0.55)) == []    # tag 2 is 0.95 s old
    assert channel_closes(advance(client, clock, 0.6))[0][1] == 406


def test_no_ack_consumers_are_never_timed_out():
    client, clock = client_with_clock()
    consume_one(client, no_ack=True)
    assert client.connection.channels[1].ack_watch is None
    assert channel_closes(advance(client, clock, 10.0, step=0.1)) == []


def test_an_unacked_basic_get_times_out_too():
    client, clock = client_with_clock()
    client.declare_queue(1, "q")
    client.publish(1, "", "q", b"got")
    client.method(1, commands.Basic.Get(queue="q"))
    assert channel_closes(advance(client, clock, 1.5))[0][:2] == (1, 406)


def test_other_channels_and_the_connection_go_on():
    client, clock = client_with_clock()
    consume_one(client)
    advance(client, clock, 1.5)
    client.method(1, commands.Channel.CloseOk())
    frames = client.method(2, commands.Queue.Declare(queue="q", passive=True))
    assert isinstance(frames[0][1], commands.Queue.DeclareOk)
    assert frames[0][1].message_count == 1
    assert not client.transport.closed


def test_zero_turns_the_broker_timeout_off():
    client, clock = client_with_clock(consumer_timeout=0)
    consume_one(client)
    assert channel_closes(advance(client, clock, 120.0, step=1.0)) == []


def test_the_queue_argument_overrides_the_broker_timeout():
    client, clock = client_with_clock(consumer_timeout=0)
    consume_one(client, arguments={"x-consumer-timeout": 200})
    closes = channel_closes(advance(client, clock, 0.35))
    assert closes == [(1, 406, TEXT.format(200), 0, 0)]


def test_a_policy_overrides_the_broker_timeout_and_the_lower_of_policy_and_argument_wins():
    client, clock = client_with_clock()
    vhost = client.broker.vhosts["/"]
    consume_one(client, arguments={"x-consumer-timeout": 5000})
    vhost.policies.put(make_policy("/", POLICY, "p", "^q$", {"consumer-timeout": 300}))
    vhost.apply_policies()   # takes effect at the channel's next check (5000 / 4 ms)
    closes = channel_closes(advance(client, clock, 1.5))
    assert closes == [(1, 406, TEXT.format(300), 0, 0)]


# -- RabbitMQ 4.3 -----------------------------------------------------------------------

QUORUM = {"x-queue-type": "quorum"}


def consume_quorum(client, arguments=None) -> None:
    client.method(1, commands.Queue.Declare(queue="q", durable=True, arguments=QUORUM))
    client.method(1, commands.Basic.Consume(queue="q", consumer_tag="c",
                                            arguments=arguments or {}))
    assert [body for _, body in deliveries(client.publish(1, "", "q", b"late"))] == [
        b"late"]


def cancels(frames: list) -> list:
    return [(number, frame.consumer_tag) for number, frame in frames
            if isinstance(frame, commands.Basic.Cancel)]


def test_under_4_3_classic_deliveries_never_time_out():
    client, clock = client_with_clock(line=LINE_4_3)
    consume_one(client)
    frames = advance(client, clock, 60)
    assert channel_closes(frames) == [] and cancels(frames) == []


def test_under_4_3_a_quorum_consumer_is_cancelled_and_its_message_handed_back():
    """The channel stays open, the message goes back counted as handed back
    (x-acquired-count), and a later ack of its tag is no error."""
    client, clock = client_with_clock(line=LINE_4_3)
    consume_quorum(client)
    assert cancels(advance(client, clock, 0.9)) == []
    frames = advance(client, clock, 0.6)
    assert cancels(frames) == [(1, "c")] and channel_closes(frames) == []
    assert channel_closes(client.method(1, commands.Basic.Ack(delivery_tag=1))) == []
    frames = client.method(2, commands.Basic.Get(queue="q", no_ack=True))
    ok, header = frames[0][1], frames[1][1]
    assert isinstance(ok, commands.Basic.GetOk) and ok.redelivered
    assert header.properties.headers == {"x-acquired-count": 1}
    assert channel_closes(client.method(1, commands.Basic.Ack(delivery_tag=7))) == [
        (1, 406, "PRECONDITION_FAILED - unknown delivery tag 7", 60, 80)]


def test_under_4_3_a_timed_out_basic_get_closes_the_channel_saying_minus_one():
    client, clock = client_with_clock(line=LINE_4_3)
    client.method(1, commands.Queue.Declare(queue="q", durable=True, arguments=QUORUM))
    client.publish(1, "", "q", b"g")
    client.method(1, commands.Basic.Get(queue="q"))
    assert channel_closes(advance(client, clock, 1.5)) == [(1, 406, TEXT.format(-1), 0, 0)]


def test_under_4_3_a_client_without_cancel_notification_gets_its_channel_closed():
    clock = FakeClock()
    client = Client(Broker(BrokerConfig(consumer_timeout=TIMEOUT_MS), clock=clock,
                           profile=Profile(LINE_4_3)), capabilities={})
    client.open_channel(1)
    consume_quorum(client)
    frames = advance(client, clock, 1.5)
    assert cancels(frames) == []
    assert channel_closes(frames) == [(1, 406, TEXT.format(-1), 0, 0)]


def test_under_4_3_a_consumers_own_timeout_replaces_its_queues():
    """x-consumer-timeout on Basic.Consume (RabbitMQ 4.3's quorum queues), longer or
    shorter than the broker's."""
    client, clock = client_with_clock(line=LINE_4_3)
    consume_quorum(client, {"x-consumer-timeout": 3000})
    assert cancels(advance(client, clock, 2.9)) == []
    assert cancels(advance(client, clock, 1.7)) == [(1, "c")]
    client, clock = client_with_clock(consumer_timeout=0, line=LINE_4_3)
    consume_quorum(client, {"x-consumer-timeout": 200})
    assert cancels(advance(client, clock, 0.35)) == [(1, "c")]
