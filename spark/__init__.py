"""Spark integration for Warren: a PySpark data source named ``amqp``.

The data source itself lives in :mod:`spark.amqp` (it needs ``pyspark[sql]`` and
``pika``); this package only re-exports its entry points, lazily, so that importing
``spark`` does not start importing PySpark::

    from spark import AmqpDataSource
    spark_session.dataSource.register(AmqpDataSource)

See docs/spark.md.
"""

__all__ = ["AmqpDataSource", "register"]


def __getattr__(name):
    if name in __all__:
        from spark import amqp

        return getattr(amqp, name)
    raise AttributeError(f"module 'spark' has no attribute {name!r}")
