"""Memory per pending delayed message held by an x-delayed-message exchange.

    python3 bench/delayed_pending_memory.py --messages 1000000 [--size 16]

In process, on the core: a broker with a transient x-delayed-message exchange holds
`--messages` messages of `--size` body bytes (x-delay one hour, so none is released),
published the way a channel hands them over (Message with raw properties). Prints the
process's RSS before and after and the bytes per pending message. The held messages
keep their bodies in memory (see docs/delayed-messages.md, "Memory").
"""

import argparse
import gc

from pamqp import commands

from amqp_codec import encode_properties
from broker.core.broker import Broker
from broker.core.delayed_exchange import DelayedExchange, delay_ms
from broker.core.message import Message


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=16)
    options = parser.parse_args()
    vhost = Broker().vhosts["/"]
    exchange = DelayedExchange("delayed", arguments={"x-delayed-type": "direct"})
    exchange.attach(vhost, None)
    properties = encode_properties(commands.Basic.Properties(
        headers={"x-delay": 3_600_000}))
    body = b"x" * options.size
    gc.collect()
    before = rss_bytes()
    for number in range(options.messages):
        message = Message("delayed", "k", properties, bytes(body))
        exchange.hold(message, delay_ms(message) + number % 1000)
    gc.collect()
    after = rss_bytes()
    print(f"pending={exchange.pending} body_bytes={options.size} "
          f"rss_before_mib={before / 2**20:.1f} rss_after_mib={after / 2**20:.1f} "
          f"bytes_per_pending={(after - before) / options.messages:.0f}")


if __name__ == "__main__":
    main()
