"""Spark's Python planner workers import the amqp data source only to create it and read
its schema, and its commit workers unpickle the writer only to call commit; those
imports must not pull in pika or pyarrow (a few hundred milliseconds in each such
process at every query's or write's start). Readers and publishing tasks import them."""

import subprocess
import sys

CHECK = """
import sys
import spark.amqp
source = spark.amqp.AmqpDataSource({})
assert source.name() == "amqp" and source.schema().fieldNames()[0] == "body"
print(sorted(m for m in ("pika", "pyarrow") if m in sys.modules))
"""


def imported_after(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_creating_the_data_source_imports_neither_pika_nor_pyarrow():
    assert imported_after(CHECK) == "[]"


def test_the_writer_commits_without_its_libraries():
    code = """
import pickle, sys
from pyspark.sql.types import StructType, StructField, BinaryType
import spark.amqp
source = spark.amqp.AmqpDataSource({"routingKey": "q"})
writer = source.writer(StructType([StructField("body", BinaryType())]), overwrite=False)
data = pickle.dumps(writer)
for name in [m for m in sys.modules if m.split(".")[0] in ("pika", "pyarrow", "spark")]:
    del sys.modules[name]
writer = pickle.loads(data)
writer.commit([])
print(sorted(m for m in ("pika", "pyarrow") if m in sys.modules))
"""
    assert imported_after(code) == "[]"
