"""The sink's core over Spark Connect (``spark.remote`` / ``sc://``): opt-in, because it needs the
Spark Connect client (``pip install 'pyspark[connect]'``) and a cold local Connect server takes
15-25 s here. Run with ``STORMPY_TEST_SPARK_CONNECT=1 pytest tests/spark/test_spark_connect.py``."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from stormpy.spark import session as spark_session
from stormpy.spark.convert import RowConverter, parse_schema
from stormpy.spark.settings import sink_settings
from stormpy.spark.writer import write_batch

pytestmark = [
    pytest.mark.skipif(os.environ.get("STORMPY_TEST_SPARK_CONNECT") != "1",
                       reason="Spark Connect test is opt-in: set STORMPY_TEST_SPARK_CONNECT=1"),
]


def test_batches_reach_parquet_through_spark_connect(tmp_path: Path) -> None:
    pytest.importorskip("grpc", reason="the Spark Connect client needs pip install 'pyspark[connect]'")
    # "local[2]" as a remote makes PySpark start a local Spark Connect server for the session.
    spark = spark_session.acquire_session({"spark.remote": "local[2]", "spark.sql.shuffle.partitions": 2})
    try:
        assert type(spark).__module__.startswith("pyspark.sql.connect")
        converter = RowConverter(["word", "n"], parse_schema(spark, "word STRING, n BIGINT"))
        settings = sink_settings({"spark.sink.path": str(tmp_path / "out")})
        write_batch(spark, converter.to_dataframe(spark, [("a", 1), ("b", 2)]), settings, "t1-b1")
        write_batch(spark, converter.to_dataframe(spark, [("c", 3)]), settings, "t1-b2")
        back = sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / "out")).collect())
        assert back == [("a", 1), ("b", 2), ("c", 3)]
    finally:
        spark_session.release_session("test finished")
    assert not spark_session.is_session_active()
