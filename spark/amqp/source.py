"""The ``amqp`` Python data source: registration name, schema, and the reader/writer
factories Spark calls (in the driver and in Python workers; all options are checked
here, before any task starts).

Each factory imports its reader's or writer's module (and with it pika and pyarrow)
when it is called: Spark's Python planner workers import this module only to create
the data source and get its schema, and each import of those libraries costs a few
hundred milliseconds of a query's start.
"""

from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import DataSource

from .schema import SCHEMA, check_read_schema, check_write_schema


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
        from .batch_reader import AmqpBatchReader
        from .options import BatchReadOptions

        check_read_schema(schema)
        return AmqpBatchReader(BatchReadOptions.parse(self.options))

    def streamReader(self, schema):
        """Stream queues (option startingOffset): the exactly-once offset-range reader.
        Otherwise "not implemented", which makes PySpark use simpleStreamReader."""
        from .options import StreamQueueReadOptions, is_stream_queue_read
        from .stream_queue_reader import AmqpStreamQueueReader

        if not is_stream_queue_read(self.options):
            raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED",
                                             messageParameters={"feature": "streamReader"})
        check_read_schema(schema)
        return AmqpStreamQueueReader(StreamQueueReadOptions.parse(self.options))

    def simpleStreamReader(self, schema):
        """Plain queues: the at-least-once reader (stream_reader.py)."""
        from .options import StreamReadOptions
        from .stream_reader import AmqpStreamReader

        check_read_schema(schema)
        return AmqpStreamReader(StreamReadOptions.parse(self.options))

    def writer(self, schema, overwrite: bool):
        from .options import WriteOptions
        from .writer import AmqpWriter

        _append_only(overwrite)
        options = WriteOptions.parse(self.options)
        check_write_schema(schema, options.routing_key)
        return AmqpWriter(options, schema)

    def streamWriter(self, schema, overwrite: bool):
        from .options import WriteOptions
        from .writer import AmqpStreamWriter

        _append_only(overwrite)
        options = WriteOptions.parse(self.options)
        check_write_schema(schema, options.routing_key)
        return AmqpStreamWriter(options, schema)
