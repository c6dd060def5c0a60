"""The RabbitMQ lines Warren behaves as (3.10, 4.0, 4.3), one record each, and the
profile a broker or a virtual host runs under: a line with the operator's choices about
its deprecated features.

A record (`RabbitMQLine`) says, for one line, what differs from the other lines where
Warren's behaviour forks: the identity a client sees (Connection.Start's product and
version, the management API's rabbitmq_version), the deprecated features the line has
and whether each is permitted by default, the smallest frame_max a client may negotiate,
the largest message by default, quorum queues' delivery limit and counting, where a
quorum queue puts a message handed back and how it orders priorities, whether a
consumer timeout cancels a quorum consumer, the arguments its queue types take, whether
streams filter, and whose x-death dead-lettering reads and which routing keys it
records. The table of queue kinds
(queue_types.py) is RabbitMQ 3.10's; a line's differences from it are in its record.

A `Profile` is what the rooms consult: `profile.permits(feature)` where RabbitMQ asks
`rabbit_deprecated_features:is_permitted`, and the line's values otherwise. The broker
has one (the `rabbitmq` setting, default 4.3, with `deprecated_features.permit.<name>`
settings as RabbitMQ's configuration has them); a virtual host may run under another
line (its metadata), so that one test session can run the same test under each line.
What happens before a connection names its vhost (the identity, frame_max) follows the
broker's profile.
"""

from dataclasses import dataclass, field
from enum import Enum


class Phase(Enum):
    """Where a deprecated feature is on its way out (RabbitMQ's deprecation_phase)."""

    PERMITTED_BY_DEFAULT = "permitted_by_default"
    DENIED_BY_DEFAULT = "denied_by_default"
    REMOVED = "removed"


# The deprecated features Warren has behaviour for, by RabbitMQ's names.
GLOBAL_QOS = "global_qos"
TRANSIENT_NONEXCL_QUEUES = "transient_nonexcl_queues"
QUEUE_MASTER_LOCATOR = "queue_master_locator"

DEPRECATION_BLOG = "https://blog.rabbitmq.com/posts/2021/08/4.0-deprecation-announcements/"


@dataclass(frozen=True)
class DeprecatedFeature:
    """One of RabbitMQ's deprecated features, as /api/deprecated-features lists it."""

    name: str
    doc_url: str
    provided_by: str = "rabbit"
    # What a client sees where the feature is denied (the upgrade lint says it).
    when_denied: str = "it cannot be used"


FEATURES = {feature.name: feature for feature in (
    DeprecatedFeature(GLOBAL_QOS, DEPRECATION_BLOG + "#removal-of-global-qos",
                      when_denied="Basic.Qos global=true sets a limit per consumer, as "
                                  "global=false does"),
    DeprecatedFeature(TRANSIENT_NONEXCL_QUEUES, DEPRECATION_BLOG + "#removal-of-transient-non-exclusive-queues",
                      when_denied="declaring a queue neither durable nor exclusive closes "
                                  "the connection with 541 INTERNAL_ERROR"),
    DeprecatedFeature(QUEUE_MASTER_LOCATOR, "",
                      when_denied="declaring a classic queue with x-queue-master-locator "
                                  "closes the connection with 541 INTERNAL_ERROR"),
    DeprecatedFeature("classic_queue_mirroring",
                      DEPRECATION_BLOG + "#removal-of-classic-queue-mirroring"),
    DeprecatedFeature("ram_node_type", DEPRECATION_BLOG + "#removal-of-ram-nodes"),
    # AMQP 1.0's, which Warren does not speak: listed as RabbitMQ lists them.
    DeprecatedFeature("amqp_address_v1", "https://www.rabbitmq.com/docs/amqp#addresses"),
    DeprecatedFeature("amqp_filter_set_bug", "https://docs.oasis-open.org/amqp/core/v1.0/"
                      "os/amqp-core-messaging-v1.0-os.html#type-filter-set"),
    DeprecatedFeature("management_metrics_collection",
                      DEPRECATION_BLOG + "#disable-metrics-delivery-via-the-management-api--ui",
                      provided_by="rabbitmq_management_agent"),
)}

@dataclass(frozen=True)
class QuorumPriorities:
    """How a line's quorum queues order ready messages by their `priority` property
    (RabbitMQ 4.0's rabbit_fifo_q, 4.3's rabbit_fifo_pq): `levels` queues, FIFO each.

    With `high_above` set (4.0), a priority above it is level 1 (high), anything else
    level 0; otherwise (4.3) the level is the priority itself, at most levels - 1, and
    a message without one is at level `absent`. With `weight` set (4.0), every
    (weight + 1)th message taken from the levels is the older of the two heads, the
    others come from the highest level that has one; otherwise the highest level
    always goes first."""

    levels: int
    high_above: int | None = None
    absent: int = 0
    weight: int | None = None

    def level_of(self, priority: int | None) -> int:
        if self.high_above is not None:
            return 1 if priority is not None and priority > self.high_above else 0
        if priority is None:
            return self.absent
        return min(priority, self.levels - 1)


# RabbitMQ 4.0 (rabbit_fifo_q.erl): high (priority 5 and above) and normal, 2:1.
TWO_WEIGHTED_PRIORITIES = QuorumPriorities(levels=2, high_above=4, weight=2)
# RabbitMQ 4.3 (rabbit_fifo_pq.erl, rabbit_fifo.erl's msg_priority): 0-31, strict,
# 4 for a message without one.
STRICT_32_PRIORITIES = QuorumPriorities(levels=32, absent=4)

MIB = 1024 * 1024
# Stream filtering's arguments (RabbitMQ 3.13 and later: stream_filter.py).
STREAM_FILTER_SIZE_ARGUMENT = "x-stream-filter-size-bytes"
STREAM_FILTER_CONSUMER_ARGUMENTS = ("x-stream-filter", "x-stream-match-unfiltered")
# The delivery limit of a quorum queue that sets none, since RabbitMQ 4.0.
QUORUM_DEFAULT_DELIVERY_LIMIT = 20


@dataclass(frozen=True)
class RabbitMQLine:
    """One RabbitMQ line as Warren emulates it (see the module's docstring)."""

    name: str                 # "4.3": what `warren serve --rabbitmq` takes
    version: str              # the release whose behaviour is the reference: "4.3.6"
    # The deprecated features the line has, with their phases (3.10 has none: the
    # mechanism came with 3.12).
    deprecations: dict[str, Phase] = field(default_factory=dict)
    frame_min_size: int = 4096          # the smallest frame_max Tune-Ok may give
    max_message_size: int = 128 * MIB   # bytes, when the operator sets none
    quorum_delivery_limit: int | None = None   # a quorum queue's, when nothing sets one
    # A quorum queue's first delivery says x-delivery-count 0 (3.10); later lines say
    # nothing until the message came back.
    quorum_counts_first_delivery: bool = False
    # RabbitMQ 4.3: x-delivery-count counts failed deliveries only (a reject, a closed
    # channel) and x-acquired-count every return (a nack and a recover too).
    quorum_counts_acquisitions: bool = False
    # A message handed back to a quorum queue goes into its returns, delivered before
    # every ready message, in the order they came back (4.x). RabbitMQ 3.10 does so
    # only for a queue with a delivery limit or a closed channel's messages, and
    # requeues a reject, nack or recover otherwise at the back.
    quorum_requeues_to_back_without_limit: bool = False
    # The priority levels of a quorum queue's messages (None: FIFO, as 3.10).
    quorum_priorities: QuorumPriorities | None = None
    # RabbitMQ 4.3: only quorum queues time deliveries out, and a timed-out consumer is
    # cancelled (Basic.Cancel) with its timed-out messages returned, the channel left
    # open; before, any queue's delivery closes the channel with 406.
    consumer_timeout_cancels: bool = False
    # Exchange types Warren has that the line does not (declaring one is refused as an
    # unknown type), and how an unknown type is refused: 503 closing the connection up
    # to 3.x, 406 closing the channel since 4.0.
    missing_exchange_types: frozenset[str] = frozenset()
    unknown_exchange_type_closes_channel: bool = True
    # Where the line's queue types take other arguments than 3.10's (the table of
    # kinds, queue_types.py, is 3.10's): declaration arguments a kind also takes, by
    # x-queue-type; consumer arguments a kind also takes; consumer arguments no kind
    # knows any more (ignored, as unknown arguments are).
    queue_arguments_added: dict[str, tuple[str, ...]] = field(default_factory=dict)
    consumer_arguments_added: dict[str, tuple[str, ...]] = field(default_factory=dict)
    consumer_arguments_dropped: frozenset[str] = frozenset()
    # Declaration arguments the line takes without checking their values.
    unchecked_queue_arguments: frozenset[str] = frozenset()
    # Since 4.0 a declaration without x-queue-type is one of the default type
    # (classic), so a redeclaration names the type it got ("received 'classic' but
    # current is 'quorum'"); 3.10 says "received none".
    declares_default_queue_type: bool = False
    # 4.3 compares a stream's x-max-age in milliseconds ('1D' and '24h' are equal) and
    # says so in its refusal.
    compares_max_age_in_milliseconds: bool = False
    # Stream filtering (RabbitMQ 3.13 and later): a stream consumer's x-stream-filter and
    # x-stream-match-unfiltered select messages by their x-stream-filter-value header,
    # and a stream's x-stream-filter-size-bytes must be 16-255 (refused with
    # `stream_filter_size_refusal`). Without it all three are unknown arguments (3.10).
    stream_filtering: bool = False
    stream_filter_size_refusal: str = "Invalid value for x-stream-filter-size-bytes"
    # (Where x-stream-filter-size-bytes is one of the stream's declaration arguments,
    # 4.3's, its type is checked as other integer arguments', another queue type refuses
    # it, and a redeclaration compares it; 4.0's stream does not list it.)
    # Dead-lettering (dead_letter.py). Up to 3.x the x-death header of the message is its
    # history, whoever wrote it: a client that re-publishes a dead-lettered message
    # with its headers continues the count. Since 4.0 only the history the broker wrote
    # counts: a client's x-death is replaced by a fresh one.
    reads_client_x_death: bool = False
    # Since 4.0 every death also sets x-last-death-reason, -queue and -exchange.
    writes_last_death: bool = True
    # An x-death entry's routing-keys: up to 3.x the routing key, then the CC keys. Since
    # 4.0 the routing key, the CC and the BCC keys, less the first occurrence of each
    # BCC key (RabbitMQ's mc:record_death): a BCC key that is also the routing key or a
    # CC key takes that one out (key k1, CC [k2], BCC [k1]: [k2, k1]).
    death_keys_less_bcc: bool = True

    # A 403 names the permission missing ("write access to exchange ..."): 4.0 and
    # later; 3.10 says "access to exchange ...".
    access_refusal_names_permission: bool = True
    # A vhost's queue limit is checked after the declaration's arguments (4.0 and
    # later: rabbit_queue_type:declare); 3.10 checks it first.
    queue_limit_after_arguments: bool = True
    # The user channel limit's 530 shows the limit in parentheses ("limit of (2)") up
    # to 4.0; 4.3 shows it bare.
    limits_in_parentheses: bool = True
    # A stream's refusal of a consumer without a prefetch count or with automatic acks
    # names "stream queue 'S' in vhost 'V'" (4.0 and later); 3.10 "'queue 'S' ...'"
    # and "stream queues queue 'S' ...".
    stream_refusals_say_stream: bool = True
    # The broker speaks AMQP 1.0 too, and offers its header to a client whose protocol
    # header it does not take (4.0 and later; handshake.header_refusal).
    offers_amqp_1_0: bool = True
    # The fewest priorities of a classic queue given x-max-priority: 4.x makes 0 into 1
    # (two priorities: rabbit_priority_queue's max(1, ...)); 3.10 takes 0 as FIFO.
    least_max_priority: int = 1
    # Topic permissions name an exchange that exists (4.3; #16587); earlier lines take
    # any name.
    topic_permissions_need_exchange: bool = False

    def phase(self, feature: str) -> Phase | None:
        return self.deprecations.get(feature)


def latest_phase(feature: str) -> Phase:
    """The phase of `feature` in the newest line that has it."""
    return [line.deprecations[feature] for line in LINES.values()
            if feature in line.deprecations][-1]


LINE_3_10 = RabbitMQLine("3.10", "3.10.8", quorum_counts_first_delivery=True,
                         access_refusal_names_permission=False,
                         queue_limit_after_arguments=False,
                         stream_refusals_say_stream=False, offers_amqp_1_0=False,
                         least_max_priority=0,
                         quorum_requeues_to_back_without_limit=True,
                         missing_exchange_types=frozenset(["x-local-random"]),
                         unknown_exchange_type_closes_channel=False,
                         reads_client_x_death=True, writes_last_death=False,
                         death_keys_less_bcc=False)

LINE_4_0 = RabbitMQLine(
    "4.0", "4.0.5",
    deprecations={GLOBAL_QOS: Phase.PERMITTED_BY_DEFAULT,
                  TRANSIENT_NONEXCL_QUEUES: Phase.PERMITTED_BY_DEFAULT,
                  QUEUE_MASTER_LOCATOR: Phase.PERMITTED_BY_DEFAULT,
                  "amqp_address_v1": Phase.PERMITTED_BY_DEFAULT,
                  "classic_queue_mirroring": Phase.REMOVED,
                  "ram_node_type": Phase.PERMITTED_BY_DEFAULT,
                  "management_metrics_collection": Phase.PERMITTED_BY_DEFAULT},
    max_message_size=16 * MIB, quorum_delivery_limit=QUORUM_DEFAULT_DELIVERY_LIMIT,
    queue_arguments_added={"classic": ("x-queue-leader-locator",)},
    consumer_arguments_added={"stream": STREAM_FILTER_CONSUMER_ARGUMENTS},
    consumer_arguments_dropped=frozenset(["x-cancel-on-ha-failover"]),
    declares_default_queue_type=True, stream_filtering=True,
    # (two spaces: 4.0.5's text)
    stream_filter_size_refusal="Invalid value for  x-stream-filter-size-bytes",
    quorum_priorities=TWO_WEIGHTED_PRIORITIES)

LINE_4_3 = RabbitMQLine(
    "4.3", "4.3.6",
    deprecations={GLOBAL_QOS: Phase.DENIED_BY_DEFAULT,
                  TRANSIENT_NONEXCL_QUEUES: Phase.PERMITTED_BY_DEFAULT,
                  QUEUE_MASTER_LOCATOR: Phase.DENIED_BY_DEFAULT,
                  "amqp_address_v1": Phase.DENIED_BY_DEFAULT,
                  "amqp_filter_set_bug": Phase.DENIED_BY_DEFAULT,
                  "classic_queue_mirroring": Phase.REMOVED,
                  "ram_node_type": Phase.REMOVED,
                  "management_metrics_collection": Phase.PERMITTED_BY_DEFAULT},
    frame_min_size=8192, max_message_size=16 * MIB,
    quorum_delivery_limit=QUORUM_DEFAULT_DELIVERY_LIMIT, quorum_counts_acquisitions=True,
    queue_arguments_added={"classic": ("x-queue-leader-locator",),
                           "quorum": ("x-consumer-timeout",
                                      "x-consumer-disconnected-timeout"),
                           "stream": (STREAM_FILTER_SIZE_ARGUMENT,)},
    consumer_arguments_added={"quorum": ("x-consumer-timeout",),
                              "stream": STREAM_FILTER_CONSUMER_ARGUMENTS},
    consumer_arguments_dropped=frozenset(["x-cancel-on-ha-failover"]),
    unchecked_queue_arguments=frozenset(["x-queue-mode"]),
    declares_default_queue_type=True, compares_max_age_in_milliseconds=True,
    stream_filtering=True, quorum_priorities=STRICT_32_PRIORITIES,
    consumer_timeout_cancels=True, limits_in_parentheses=False,
    topic_permissions_need_exchange=True)

LINES = {line.name: line for line in (LINE_3_10, LINE_4_0, LINE_4_3)}
DEFAULT_LINE = LINE_4_3


class UnknownLine(ValueError):
    """A line Warren does not emulate, or a permit for a feature it does not have."""


def line_named(name: str) -> RabbitMQLine:
    try:
        return LINES[name]
    except KeyError:
        raise UnknownLine(f"RabbitMQ line '{name}' is not one Warren emulates; "
                          f"choose one of {', '.join(LINES)}") from None


@dataclass(frozen=True)
class Profile:
    """A line with the operator's `deprecated_features.permit.<name>` settings: what the
    rooms consult where behaviour forks between RabbitMQ lines."""

    line: RabbitMQLine = DEFAULT_LINE
    # The operator's settings, feature name -> permitted (RabbitMQ's configuration).
    permits: dict[str, bool] = field(default_factory=dict)

    def permits_feature(self, feature: str) -> bool:
        """RabbitMQ's is_permitted: a removed feature never is; a line without the
        feature (3.10) always permits it; otherwise the operator's setting, else the
        phase's default."""
        phase = self.line.phase(feature)
        if phase is None:
            return True
        if phase is Phase.REMOVED:
            return False
        return self.permits.get(feature, phase is Phase.PERMITTED_BY_DEFAULT)

    def with_line(self, line: RabbitMQLine) -> "Profile":
        """The same operator settings under another line (a vhost's own line)."""
        return self if line is self.line else Profile(line, self.permits)

    def usage_note(self, feature: str, permitted: bool) -> str | None:
        """What the upgrade lint says of a use of `feature` under this profile: what
        denial changed, or which later line denies it by default; None when no line
        treats the use otherwise."""
        effect = FEATURES[feature].when_denied
        if not permitted:
            return (f"{feature} is denied under RabbitMQ {self.line.name}: {effect} "
                    f"(deprecated_features.permit.{feature} = true permits it)")
        denying = [line.name for line in LINES.values() if line.phase(feature)
                   in (Phase.DENIED_BY_DEFAULT, Phase.REMOVED)]
        if not denying:
            return None
        return (f"{feature} used under RabbitMQ {self.line.name}; RabbitMQ {denying[0]} "
                f"denies it by default: {effect}")

    def state(self, feature: str) -> str:
        """"permitted" or "denied", as /api/deprecated-features says."""
        return "permitted" if self.permits_feature(feature) else "denied"

    def denial_text(self, feature: str) -> str:
        """What RabbitMQ says when a client uses a denied feature (its 541's text)."""
        phase = self.line.phase(feature)
        if phase is Phase.PERMITTED_BY_DEFAULT:
            return (f"Feature `{feature}` is deprecated.\n"
                    "Its use is not permitted per the configuration (overriding the "
                    "default, which is permitted):\n"
                    f"    \"deprecated_features.permit.{feature} = false\"\n"
                    "Its use will not be permitted by default in a future minor RabbitMQ "
                    "version and the feature will be removed from a future major "
                    "RabbitMQ version; actual versions to be determined.\n"
                    "To continue using this feature when it is not permitted by default, "
                    "set the following parameter in your configuration:\n"
                    f"    \"deprecated_features.permit.{feature} = true\"")
        return (f"Feature `{feature}` is deprecated.\n"
                "By default, this feature is not permitted anymore.\n"
                "The feature will be removed from a future major RabbitMQ version, "
                "regardless of the configuration; actual version to be determined.\n"
                "To continue using this feature when it is not permitted by default, "
                "set the following parameter in your configuration:\n"
                f"    \"deprecated_features.permit.{feature} = true\"")


def make_profile(line_name: str, permits: dict[str, object]) -> Profile:
    """The profile `warren serve` runs under: a known line, permits of features some
    line has, each true or false (UnknownLine otherwise): the operator's values, of any
    type until checked here."""
    line = line_named(line_name)
    checked: dict[str, bool] = {}
    for feature, permitted in permits.items():
        if feature not in FEATURES:
            raise UnknownLine(f"deprecated_features.permit.{feature}: no such deprecated "
                              f"feature; known: {', '.join(sorted(FEATURES))}")
        if not isinstance(permitted, bool):
            raise UnknownLine(f"deprecated_features.permit.{feature} must be true or "
                              f"false, got {permitted!r}")
        checked[feature] = permitted
    return Profile(line, checked)
