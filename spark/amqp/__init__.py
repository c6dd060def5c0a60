"""The ``amqp`` PySpark data source (Python Data Source API, PySpark >= 4.3).

Modules: ``source`` (the DataSource), ``options``, ``offsets``, ``messages`` (schema and
row conversion), ``connection`` (pika consumer and connection), ``stream_reader``,
``batch_reader``, ``writer``. See docs/spark.md.
"""

from .source import AmqpDataSource


def register(spark) -> None:
    """Register the ``amqp`` format with the SparkSession `spark`."""
    spark.dataSource.register(AmqpDataSource)


__all__ = ["AmqpDataSource", "register"]
