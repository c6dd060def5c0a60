"""Runnable examples of the amqp data source (see docs/spark.md)."""
