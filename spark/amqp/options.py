"""The options of the ``amqp`` data source, parsed and checked once, in the driver.

Spark hands a data source its options as a case-insensitive dict of strings. Each mode
(batch read, stream read of a plain queue, stream read of stream queues -- selected by
the startingOffset option --, write) accepts its own set; anything else is an error that
names the option and, where the option belongs to another mode, says which one. Option
names in messages are the public spellings (``maxMessagesPerTrigger``), not the
lower-cased keys Spark stores.
"""

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit


DEFAULT_URL = "amqp://guest:guest@localhost:5672/%2F"
# Largest Basic.Qos prefetch_count (a short in AMQP 0-9-1).
MAX_PREFETCH = 65535
# Plain queues: Spark's fixed cost per micro-batch (planning, offset and commit log
# writes) is about 0.2 s, so larger batches read faster; 2 x this stays within
# MAX_PREFETCH.
DEFAULT_MAX_MESSAGES_PER_TRIGGER = 30_000
# Stream queues (startingOffset given): batches are read in parallel by executor tasks
# and never held by the driver, so they may be larger.
DEFAULT_STREAM_MAX_MESSAGES_PER_TRIGGER = 100_000
DEFAULT_STREAM_MAX_MESSAGES_PER_PARTITION = 25_000
DEFAULT_STREAM_PREFETCH = 2_000
STARTING_OFFSET_NAMES = ("first", "last", "next")


class AmqpOptionError(ValueError):
    """An option of the ``amqp`` data source is missing, unknown or has a bad value."""


def redact_url(url: str) -> str:
    """`url` with its password replaced by ``***``, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


# Public spelling of every option, by the lower-case key Spark stores.
_PUBLIC = {name.lower(): name for name in (
    "url", "queue", "prefetch", "maxMessagesPerTrigger", "maxMessages", "startingOffset",
    "maxMessagesPerPartition", "exchange", "routingKey", "mandatory", "checkpointLocation",
    "maxBytesPerTrigger", "failOnDataLoss", "startingTimestamp", "filter", "matchUnfiltered",
)}

_READ_ONLY_HINT = "it is a reader option; writers take url, exchange, routingKey, mandatory"
_WRITE_ONLY_HINT = "it is a writer option"
_STREAM_QUEUE_HINT = "it applies to readStream on stream queues, with startingOffset"
_PLAIN_STREAM_HINT = "it applies to readStream on plain queues (without startingOffset)"
_HINTS = {
    "batch-read": {
        "startingoffset": "stream queues are read with readStream (use "
                          "trigger(availableNow=True) for a one-off read); batch reads take "
                          "plain queues only",
        "maxmessagesperpartition": _STREAM_QUEUE_HINT,
        "failondataloss": _STREAM_QUEUE_HINT, "startingtimestamp": _STREAM_QUEUE_HINT,
        "filter": _STREAM_QUEUE_HINT, "matchunfiltered": _STREAM_QUEUE_HINT,
        "maxbytespertrigger": _PLAIN_STREAM_HINT,
        "maxmessagespertrigger": "it applies to readStream; a batch read takes maxMessages",
        "prefetch": "it applies to readStream; a batch read sets its own prefetch",
        "exchange": _WRITE_ONLY_HINT, "routingkey": _WRITE_ONLY_HINT,
        "mandatory": _WRITE_ONLY_HINT,
    },
    "stream-read": {
        "maxmessagesperpartition": _STREAM_QUEUE_HINT + " (without it the queue is read "
                                   "as a plain queue, by one consumer)",
        "maxmessages": "it applies to batch reads; readStream takes maxMessagesPerTrigger",
        "failondataloss": _STREAM_QUEUE_HINT, "filter": _STREAM_QUEUE_HINT,
        "matchunfiltered": _STREAM_QUEUE_HINT,
        "exchange": _WRITE_ONLY_HINT, "routingkey": _WRITE_ONLY_HINT,
        "mandatory": _WRITE_ONLY_HINT,
    },
    "write": {
        "queue": "writers publish to an exchange: to send to one queue use the default "
                 "exchange (exchange '' is the default) with routingKey set to the queue name",
        "prefetch": _READ_ONLY_HINT, "maxmessagespertrigger": _READ_ONLY_HINT,
        "maxmessages": _READ_ONLY_HINT, "startingoffset": _READ_ONLY_HINT,
        "maxmessagesperpartition": _READ_ONLY_HINT, "maxbytespertrigger": _READ_ONLY_HINT,
        "failondataloss": _READ_ONLY_HINT, "startingtimestamp": _READ_ONLY_HINT,
        "filter": _READ_ONLY_HINT, "matchunfiltered": _READ_ONLY_HINT,
    },
    "stream-queue-read": {
        "maxmessages": "it applies to batch reads of plain queues; readStream takes "
                       "maxMessagesPerTrigger",
        "maxbytespertrigger": _PLAIN_STREAM_HINT + "; stream queues take "
                              "maxMessagesPerTrigger",
        "exchange": _WRITE_ONLY_HINT, "routingkey": _WRITE_ONLY_HINT,
        "mandatory": _WRITE_ONLY_HINT,
    },
}


_MODE_NAMES = {"batch-read": "batch read", "stream-read": "stream read",
               "stream-queue-read": "stream read of stream queues (startingOffset)",
               "write": "write"}


def _normalized(options) -> dict:
    """The options with lower-case keys (Spark's CaseInsensitiveDict already has them)."""
    return {str(key).lower(): value for key, value in dict(options).items()}


def _check_keys(options: dict, allowed: set, mode: str) -> None:
    for key in options:
        if key in allowed:
            continue
        public = _PUBLIC.get(key, key)
        hint = _HINTS[mode].get(key)
        accepted = ", ".join(sorted(_PUBLIC[k] for k in allowed if k != "checkpointlocation"))
        raise AmqpOptionError(
            f"unknown option {public!r} for {_MODE_NAMES[mode]}"
            + (f" ({hint})" if hint else "") + f"; accepted options: {accepted}")


def _get(options, name: str):
    return options.get(name.lower())


def _int_option(options, name: str, default, minimum: int, maximum: int | None = None):
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise AmqpOptionError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise AmqpOptionError(f"option {name} must be {bound}, got {value}")
    return value


def _bool_option(options, name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise AmqpOptionError(f"option {name} must be true or false, got {raw!r}")


def _url(options) -> str:
    url = _get(options, "url") or DEFAULT_URL
    if urlsplit(url).scheme not in ("amqp", "amqps"):
        raise AmqpOptionError(
            f"option url must be amqp://user:password@host:port/vhost (amqps:// for TLS), "
            f"got {redact_url(url)!r}")
    import pika  # here: the options travel to processes that never connect

    try:
        pika.URLParameters(url)
    except Exception as error:  # pika raises ValueError, TypeError, ... for bad parts
        raise AmqpOptionError(f"option url {redact_url(url)!r} is invalid: {error}") from None
    return url


def _queue(options) -> str:
    queue = _get(options, "queue")
    if not queue:
        raise AmqpOptionError("option queue is required: the name of the queue to read")
    return queue


@dataclass(frozen=True)
class StreamReadOptions:
    """Options of ``spark.readStream.format("amqp")``."""

    url: str
    queues: tuple  # the queue option, split at commas: one consumer each
    max_messages_per_trigger: int
    prefetch: int  # 0: no limit; per queue
    max_bytes_per_trigger: int | None = None  # body bytes; None: no limit

    @property
    def queue(self) -> str:
        """The queues as one name (the offsets' ``queue``): a single queue's own name."""
        return ",".join(self.queues)

    @classmethod
    def parse(cls, options) -> "StreamReadOptions":
        options = _normalized(options)
        _check_keys(options, {"url", "queue", "prefetch", "maxmessagespertrigger",
                              "maxbytespertrigger"}, "stream-read")
        limit = _int_option(options, "maxMessagesPerTrigger",
                            DEFAULT_MAX_MESSAGES_PER_TRIGGER, 1)
        default_prefetch = 2 * limit if 2 * limit <= MAX_PREFETCH else 0
        prefetch = _int_option(options, "prefetch", default_prefetch, 0, MAX_PREFETCH)
        if prefetch and prefetch <= limit:
            # The messages of the last batch stay unacknowledged until Spark plans the
            # next batch; with prefetch <= batch size the broker would stop delivering
            # and no next batch could ever be planned.
            raise AmqpOptionError(
                f"option prefetch ({prefetch}) must be greater than maxMessagesPerTrigger "
                f"({limit}), or 0 for no limit: a batch's messages are acknowledged only "
                f"when Spark plans the next batch, so the broker must be allowed to deliver "
                f"more than one batch")
        return cls(_url(options), _queue_names(options, "queues"), limit, prefetch,
                   _int_option(options, "maxBytesPerTrigger", None, 1))


def is_stream_queue_read(options) -> bool:
    """Whether a readStream reads stream queues: the startingOffset (or
    startingTimestamp) option selects it."""
    options = _normalized(options)
    return "startingoffset" in options or "startingtimestamp" in options


def _starting_offset(options):
    """startingOffset, or ("timestamp", milliseconds since the epoch) for
    startingTimestamp."""
    if _get(options, "startingTimestamp") is not None:
        if _get(options, "startingOffset") is not None:
            raise AmqpOptionError(
                "options startingOffset and startingTimestamp both say where to start: "
                "give only one")
        return ("timestamp", _int_option(options, "startingTimestamp", None, 0))
    raw = _get(options, "startingOffset")
    text = str(raw).strip()
    if text.lower() in STARTING_OFFSET_NAMES:
        return text.lower()
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise AmqpOptionError(
            f"option startingOffset must be first, last, next or an offset (an integer "
            f">= 0), got {raw!r}")
    return value


def _queue_names(options, what: str) -> tuple:
    """The queue option split at commas; `what` names them in errors ("streams")."""
    names = tuple(name.strip() for name in _queue(options).split(","))
    if not all(names):
        raise AmqpOptionError(
            f"option queue names {what} separated by commas; got an empty name in "
            f"{_get(options, 'queue')!r}")
    if len(set(names)) != len(names):
        raise AmqpOptionError(f"option queue names one of its {what} twice: "
                              f"{_get(options, 'queue')!r}")
    return names


@dataclass(frozen=True)
class StreamQueueReadOptions:
    """Options of ``spark.readStream.format("amqp")`` on stream queues (startingOffset
    given): exactly-once reads of offset ranges, see stream_queue_reader.py."""

    url: str
    streams: tuple  # the queue option, split at commas
    starting_offset: object  # "first", "last", "next", an int or ("timestamp", ms)
    max_messages_per_trigger: int
    max_messages_per_partition: int
    prefetch: int  # Basic.Qos prefetch_count of each partition's consumer
    fail_on_data_loss: bool = True  # offsets removed by retention before they were read
    # Stream filtering: only messages whose x-stream-filter-value header is one of these
    # (none: every message), and with match_unfiltered those without one too.
    filter_values: tuple = ()
    match_unfiltered: bool = False

    @classmethod
    def parse(cls, options) -> "StreamQueueReadOptions":
        options = _normalized(options)
        _check_keys(options, {"url", "queue", "startingoffset", "maxmessagespertrigger",
                              "maxmessagesperpartition", "prefetch", "failondataloss",
                              "startingtimestamp", "filter", "matchunfiltered"},
                    "stream-queue-read")
        filter_values = _filter_values(options)
        match_unfiltered = _bool_option(options, "matchUnfiltered", False)
        if _get(options, "matchUnfiltered") is not None and not filter_values:
            raise AmqpOptionError(
                "option matchUnfiltered applies with option filter (without a filter "
                "every message is read)")
        return cls(
            _url(options), _queue_names(options, "streams"), _starting_offset(options),
            _int_option(options, "maxMessagesPerTrigger",
                        DEFAULT_STREAM_MAX_MESSAGES_PER_TRIGGER, 1),
            _int_option(options, "maxMessagesPerPartition",
                        DEFAULT_STREAM_MAX_MESSAGES_PER_PARTITION, 1),
            # Streams refuse consumers without a prefetch: 0 is not allowed here.
            _int_option(options, "prefetch", DEFAULT_STREAM_PREFETCH, 1, MAX_PREFETCH),
            _bool_option(options, "failOnDataLoss", True), filter_values, match_unfiltered)


def _filter_values(options) -> tuple:
    """The filter option split at commas: the x-stream-filter-value values to read."""
    raw = _get(options, "filter")
    if raw is None:
        return ()
    values = tuple(value.strip() for value in str(raw).split(","))
    if not all(values):
        raise AmqpOptionError(
            f"option filter names values separated by commas; got an empty value in "
            f"{raw!r} (option matchUnfiltered reads the messages without a value)")
    return values


@dataclass(frozen=True)
class BatchReadOptions:
    """Options of ``spark.read.format("amqp")``."""

    url: str
    queue: str
    max_messages: int | None  # None: every message ready when the read starts

    @classmethod
    def parse(cls, options) -> "BatchReadOptions":
        options = _normalized(options)
        _check_keys(options, {"url", "queue", "maxmessages"}, "batch-read")
        return cls(_url(options), _queue(options),
                   _int_option(options, "maxMessages", None, 1))


@dataclass(frozen=True)
class WriteOptions:
    """Options of ``df.write.format("amqp")`` and ``df.writeStream.format("amqp")``."""

    url: str
    exchange: str
    routing_key: str | None
    mandatory: bool

    @classmethod
    def parse(cls, options) -> "WriteOptions":
        options = _normalized(options)
        # Spark passes writeStream's checkpointLocation to the sink as well.
        _check_keys(options, {"url", "exchange", "routingkey", "mandatory",
                              "checkpointlocation"}, "write")
        return cls(_url(options), _get(options, "exchange") or "",
                   _get(options, "routingKey"), _bool_option(options, "mandatory", False))
