"""The ``amqp`` Python data source: registration name, schema, and the reader/writer
factories Spark calls (in the driver and in Python workers; all options are checked
here, before any task starts)."""

from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import DataSource

from .batch_reader import AmqpBatchReader
from .messages import SCHEMA, check_read_schema, check_write_schema
from .options import (
    BatchReadOptions, StreamQueueReadOptions, StreamReadOptions, WriteOptions,
    is_stream_queue_read,
)
from .stream_queue_reader import AmqpStreamQueueReader
from .stream_reader import AmqpStreamReader
from .writer import AmqpStreamWriter, AmqpWriter


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise ValueError("the amqp sink only publishes (appends): use mode('append')")


class AmqpDataSource(DataSource):
    """AMQP 0-9-1 queues and exchanges (Warren, RabbitMQ) as a Spark data source.

    ``spark.dataSource.register(AmqpDataSource)``, then ``format("amqp")``; see
    docs/spark.md for options, schema and delivery guarantees.
    """

    @classmethod
    def name(cls) -> str:
        return "amqp"

    def schema(self):
        return SCHEMA

    def reader(self, schema):
        check_read_schema(schema)
        return AmqpBatchReader(BatchReadOptions.parse(self.options))

    def streamReader(self, schema):
        """Stream queues (option startingOffset): the exactly-once offset-range reader.
        Otherwise "not implemented", which makes PySpark use simpleStreamReader."""
        if not is_stream_queue_read(self.options):
            raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED",
                                             messageParameters={"feature": "streamReader"})
        check_read_schema(schema)
        return AmqpStreamQueueReader(StreamQueueReadOptions.parse(self.options))

    def simpleStreamReader(self, schema):
        """Plain queues: the at-least-once reader (stream_reader.py)."""
        check_read_schema(schema)
        return AmqpStreamReader(StreamReadOptions.parse(self.options))

    def writer(self, schema, overwrite: bool):
        _append_only(overwrite)
        options = WriteOptions.parse(self.options)
        check_write_schema(schema, options.routing_key)
        return AmqpWriter(options, schema)

    def streamWriter(self, schema, overwrite: bool):
        _append_only(overwrite)
        options = WriteOptions.parse(self.options)
        check_write_schema(schema, options.routing_key)
        return AmqpStreamWriter(options, schema)
