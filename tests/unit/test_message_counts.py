"""The core's message counters (broker/core/message_stats.py) as the management API and
its rate sampler read them: per channel, and retired into the vhost when a channel
closes so that totals never go backwards."""

from types import SimpleNamespace

import pytest
from pamqp import commands

from broker.config import ConfigError, load_settings
from broker.server.management.stats import StatsSampler, broker_counts
from core_harness import Client


def counting_client() -> Client:
    client = Client()
    client.open_channel()
    client.declare_queue(1, "q")
    return client


def counts_of(client: Client, channel: int = 1) -> dict:
    return client.connection.channels[channel].message_counts().as_dict()


def test_publishes_deliveries_and_acks_are_counted_per_channel():
    client = counting_client()
    client.method(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    for body in (b"a", b"b", b"c"):
        client.publish(1, "", "q", body)
    client.method(1, commands.Basic.Ack(delivery_tag=2, multiple=True))
    counts = counts_of(client)
    assert (counts["publish"], counts["deliver"], counts["ack"]) == (3, 3, 2)
    assert counts["deliver_no_ack"] == counts["get"] == 0


def test_gets_with_and_without_ack_and_empty_gets_are_counted_apart():
    client = counting_client()
    client.publish(1, "", "q", b"a")
    client.publish(1, "", "q", b"b")
    client.method(1, commands.Basic.Get(queue="q", no_ack=False))
    client.method(1, commands.Basic.Get(queue="q", no_ack=True))
    client.method(1, commands.Basic.Get(queue="q", no_ack=True))
    counts = counts_of(client)
    assert (counts["get"], counts["get_no_ack"], counts["get_empty"]) == (1, 1, 1)
    assert counts["deliver"] == 0


def test_a_requeued_message_delivered_again_counts_as_redelivered():
    client = counting_client()
    client.publish(1, "", "q", b"a")
    client.method(1, commands.Basic.Get(queue="q"))
    client.method(1, commands.Basic.Reject(delivery_tag=1, requeue=True))
    client.method(1, commands.Basic.Get(queue="q"))
    counts = counts_of(client)
    assert (counts["get"], counts["redeliver"]) == (2, 1)


def test_a_closed_channels_counts_are_retired_into_its_vhost():
    client = counting_client()
    client.publish(1, "", "q", b"a")
    client.publish(1, "", "q", b"b")
    client.method(1, commands.Channel.Close(reply_code=200, reply_text="bye"))
    assert client.broker.vhosts["/"].retired_counts.publish == 2
    assert broker_counts(client.broker).publish == 2   # not lost, not counted twice


def test_a_queues_published_count_is_every_message_it_accepted():
    client = counting_client()
    for _ in range(4):
        client.publish(1, "", "q", b"x")
    client.method(1, commands.Basic.Get(queue="q", no_ack=True))
    queue = client.broker.vhosts["/"].queues["q"]
    assert (queue.published, queue.message_count) == (4, 3)   # taken ones still count


def test_the_sampler_turns_counts_into_rates_per_second():
    client = counting_client()
    server = SimpleNamespace(transports=set())
    sampler = StatsSampler(client.broker, server, interval=2.0)
    channel = client.connection.channels[1]
    queue = client.broker.vhosts["/"].queues["q"]
    sampler.sample(now=10.0)
    assert sampler.rates("broker") == {}   # one sample: no rate yet
    for _ in range(6):
        client.publish(1, "", "q", b"x")
    sampler.sample(now=12.0)
    assert sampler.rates("broker")["publish"] == 3.0
    assert sampler.rates(channel)["publish"] == 3.0
    assert sampler.rates(queue)["publish"] == 3.0
    assert sampler.rates(queue)["messages_ready"] == 3.0


def test_the_sample_interval_is_read_from_the_management_section(tmp_path):
    path = tmp_path / "warren.toml"
    path.write_text("[management]\nsample_interval = 0.5\n")
    assert load_settings(str(path), {}).management.sample_interval == 0.5
    assert load_settings(None, {}).management.sample_interval == 5.0   # as RabbitMQ
    path.write_text("[management]\nsample_interval = 0\n")
    with pytest.raises(ConfigError, match="sample_interval"):
        load_settings(str(path), {})
