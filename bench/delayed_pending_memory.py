"""Memory per pending delayed message held by an x-delayed-message exchange.

    python3 bench/delayed_pending_memory.py --messages 1000000 [--size 16] [--persistent]

In process, on the core: a durable x-delayed-message exchange with its store in a
temporary data directory holds `--messages` messages of `--size` body bytes (x-delay
one hour, so none is released), published the way a channel hands them over (Message
with raw properties); the store's queue file is synced every 10,000 messages, as the
group commit does. Prints the process's RSS before and after and the bytes per pending
message: the exchange keeps an index in memory, the bodies are in the store's file
(see docs/delayed-messages.md, "Memory").
"""

import argparse
import gc
import tempfile

from pamqp import commands

from amqp_codec import encode_properties
from broker.core.broker import Broker
from broker.core.delayed_exchange import DelayedExchange, delay_ms
from broker.core.message import Message
from broker.core.persistence import Persistence
from broker.server.delayed_store import DurableDelayedStore
from storage.queue_file import QueueFile

SYNC_EVERY = 10_000


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
    parser.add_argument("--persistent", action="store_true",
                        help="delivery mode 2 (default: transient, written for paging)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="delayed-bench-") as directory:
        vhost = Broker().vhosts["/"]
        exchange = DelayedExchange("delayed", durable=True,
                                   arguments={"x-delayed-type": "direct"})
        store = DurableDelayedStore(QueueFile(directory), Persistence(), "bench", None,
                                    "delayed", True)
        exchange.attach(vhost, store)
        properties = encode_properties(commands.Basic.Properties(
            headers={"x-delay": 3_600_000}, delivery_mode=2 if options.persistent else 1))
        body = b"x" * options.size
        gc.collect()
        before = rss_bytes()
        for number in range(options.messages):
            message = Message("delayed", "k", properties, bytes(body))
            exchange.hold(message, delay_ms(message) + number % 1000)
            if number % SYNC_EVERY == SYNC_EVERY - 1:
                store.sync()
        store.sync()
        gc.collect()
        after = rss_bytes()
        print(f"pending={exchange.pending} body_bytes={options.size} "
              f"persistent={options.persistent} "
              f"rss_before_mib={before / 2**20:.1f} rss_after_mib={after / 2**20:.1f} "
              f"bytes_per_pending={(after - before) / options.messages:.0f}")
        store.close()


if __name__ == "__main__":
    main()
