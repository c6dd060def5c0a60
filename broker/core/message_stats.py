"""Message counters for the management API's `message_stats` and the Prometheus
metrics: cumulative counts kept where the work happens (one integer increment each),
read and turned into rates by the server's statistics sampler.

A channel keeps `MessageCounts` (`Channel.message_counts()`); when it closes, its
counts are added to its vhost's `retired_counts`, so that a vhost's (and the broker's) totals are the retired counts plus
those of its live channels, and never go backwards. The messages a queue accepted are
its sequence numbers; deliveries and acks are counted per channel only: one more
attribute on Queue costs every message 1,360 instructions (2.5 %, measured with
bench/core_hot_path.py): the instance then likely passes CPython's limit of 30
attributes for a shared key table.
"""

COUNTERS = (
    "publish",             # messages received from publishers
    "confirm",             # publisher confirms sent (Basic.Ack/Nack of confirm mode)
    "return_unroutable",   # mandatory messages returned as unroutable
    "drop_unroutable",     # messages that reached no queue and were dropped
    "deliver",             # Basic.Deliver to consumers that ack
    "deliver_no_ack",      # Basic.Deliver to no-ack consumers
    "get",                 # Basic.Get-Ok that needs an ack
    "get_no_ack",          # Basic.Get-Ok with no_ack
    "get_empty",           # Basic.Get-Empty
    "ack",                 # deliveries acknowledged
    "redeliver",           # deliveries (and gets) with redelivered=true
)


class MessageCounts:
    """Cumulative counts of one channel (or the retired channels of a vhost)."""

    __slots__ = COUNTERS

    def __init__(self):
        self.publish = 0
        self.confirm = 0
        self.return_unroutable = 0
        self.drop_unroutable = 0
        self.deliver = 0
        self.deliver_no_ack = 0
        self.get = 0
        self.get_no_ack = 0
        self.get_empty = 0
        self.ack = 0
        self.redeliver = 0

    def add(self, other: "MessageCounts") -> None:
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNTERS}
