"""Spark's Python planner workers import the amqp data source only to create it and read
its schema; that import must not pull in pika or pyarrow (a few hundred milliseconds
in each such process at every query's start). The readers and writers import them."""

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


def test_a_writer_brings_its_libraries():
    code = CHECK + """
from pyspark.sql.types import StructType, StructField, BinaryType
source.options = {"routingKey": "q"}
source.writer(StructType([StructField("body", BinaryType())]), overwrite=False)
print(sorted(m for m in ("pika", "pyarrow") if m in sys.modules))
"""
    assert imported_after(code).splitlines() == ["[]", "['pika', 'pyarrow']"]
