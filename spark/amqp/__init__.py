"""The ``amqp`` PySpark data source (Python Data Source API, PySpark >= 4.3).

Modules: ``source`` (the DataSource), ``schema`` (the schema and the writer's column checks),
``options``, ``offsets``, ``messages`` (Arrow batches of deliveries, the writer's encoding
and frames), ``connection`` (pika consumer and connection), ``stream_reader``
(plain queues, at-least-once), ``stream_queue_reader`` and ``stream_client`` (stream
queues, exactly-once offset ranges), ``batch_reader``, ``writer``. See docs/spark.md.
"""

from .source import AmqpDataSource


def register(spark) -> None:
    """Register the ``amqp`` format with the SparkSession `spark`."""
    spark.dataSource.register(AmqpDataSource)


__all__ = ["AmqpDataSource", "register"]
