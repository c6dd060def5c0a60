"""The source's schema and the writer's columns, checked in the driver.

Only pyspark's types here: Spark's planner workers import this module (through
``source``) to get the schema and check a DataFrame before any task starts, and they
have no use for pyarrow or pika (messages.py), whose import takes a few hundred
milliseconds in each of those Python processes.
"""

from pyspark.sql.types import (
    BinaryType, BooleanType, ByteType, IntegerType, LongType, MapType, ShortType,
    StringType, StructField, StructType, TimestampType,
)

SCHEMA = StructType([
    StructField("body", BinaryType()),
    StructField("routing_key", StringType()),
    StructField("exchange", StringType()),
    StructField("content_type", StringType()),
    StructField("headers", MapType(StringType(), StringType())),
    StructField("message_id", StringType()),
    StructField("correlation_id", StringType()),
    StructField("timestamp", TimestampType()),
    StructField("delivery_mode", IntegerType()),
    StructField("redelivered", BooleanType()),
    StructField("queue", StringType()),
    StructField("offset", LongType()),
])


def check_read_schema(schema) -> None:
    """The source produces SCHEMA only; a user-specified schema must be exactly that."""
    if schema is not None and schema != SCHEMA:
        raise ValueError(
            "the amqp source has a fixed schema; do not pass a different one with "
            f".schema(...). Expected {SCHEMA.simpleString()}, got {schema.simpleString()}")


_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
_HEADER_VALUE_TYPES = (StringType, BooleanType) + _INTEGRAL
# Columns of the source's schema that mean nothing to a publish; a DataFrame read from a
# queue can be written back unchanged, and these are ignored (not used as the target).
IGNORED_COLUMNS = ("exchange", "redelivered", "queue", "offset")
WRITER_COLUMNS = ("body", "routing_key", "headers", "content_type", "message_id",
                  "correlation_id", "timestamp", "delivery_mode")


def _type_ok(column: str, data_type) -> bool:
    if column == "body":
        return isinstance(data_type, (BinaryType, StringType))
    if column == "headers":
        return (isinstance(data_type, MapType) and isinstance(data_type.keyType, StringType)
                and isinstance(data_type.valueType, _HEADER_VALUE_TYPES))
    if column == "timestamp":
        return isinstance(data_type, (TimestampType,) + _INTEGRAL)
    if column == "delivery_mode":
        return isinstance(data_type, _INTEGRAL)
    return isinstance(data_type, StringType)


_EXPECTED_TYPES = {
    "body": "binary or string",
    "headers": "map<string, string|boolean|integer type>",
    "timestamp": "timestamp (or integer seconds since the epoch)",
    "delivery_mode": "integer (1 transient, 2 persistent)",
}


def check_write_schema(schema: StructType, default_routing_key) -> None:
    """Reject, in the driver, a DataFrame the writer could not publish."""
    names = schema.fieldNames()
    if "body" not in names:
        raise ValueError(
            f"the amqp writer needs a column named body (binary or string); "
            f"the DataFrame has {names}")
    for field in schema.fields:
        if field.name in IGNORED_COLUMNS:
            continue
        if field.name not in WRITER_COLUMNS:
            raise ValueError(
                f"the amqp writer does not know column {field.name!r}; it uses "
                f"{', '.join(WRITER_COLUMNS)} (and ignores {', '.join(IGNORED_COLUMNS)}). "
                f"Drop or rename the column, or put it in headers")
        if not _type_ok(field.name, field.dataType):
            expected = _EXPECTED_TYPES.get(field.name, "string")
            raise ValueError(
                f"column {field.name} must be {expected}, got {field.dataType.simpleString()}")
    if "routing_key" not in names and default_routing_key is None:
        raise ValueError(
            "no routing key: set option routingKey or add a routing_key column "
            "(option routingKey is used for rows whose routing_key is null)")
