"""`[limits]` channel_max and frame_max from the configuration file: offered in
Connection.Tune, and enforced with RabbitMQ 3.10's errors once negotiated (the same
errors as for values a client lowers itself, tests/integration/test_protocol_negotiation.py,
which also run against RabbitMQ). Each attack runs on its own connection to a dedicated
broker while a RunningBystander publishes and consumes beside it."""

from pamqp import commands
import pytest

from tests.support.bystander import RunningBystander
from tests.support.raw_amqp import FRAME_BODY, connect, raw_frame

pytestmark = pytest.mark.warren_only(
    "Warren's [limits] configuration file, on a Warren broker of its own (broker_factory)")


def test_configured_channel_max_and_frame_max_are_offered_and_enforced(broker_factory,
                                                                       tmp_path):
    config = tmp_path / "warren.toml"
    config.write_text("[limits]\nchannel_max = 3\nframe_max = 8192\n")
    broker = broker_factory("--config", str(config))
    with RunningBystander(broker):
        # heartbeat=0; channel_max and frame_max: what the broker offers
        with connect(broker.host, broker.port) as client:
            assert (client.tune.channel_max, client.tune.frame_max) == (3, 8192)
            for number in (1, 2, 3):
                client.open_channel(number)
            client.send_method(4, commands.Channel.Open())
            channels = client.wait_for_connection_close()
        with connect(broker.host, broker.port) as client:
            client.open_channel(1)
            client.send_raw(raw_frame(FRAME_BODY, 1, bytes(8193)))
            frames = client.wait_for_connection_close()
    assert (channels.reply_code, channels.reply_text) == (
        530, "NOT_ALLOWED - number of channels opened (3) has reached the negotiated "
             "channel_max (3)")
    assert (frames.reply_code, frames.reply_text) == (
        501, "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,8193,8184}")
    assert broker.process.poll() is None
