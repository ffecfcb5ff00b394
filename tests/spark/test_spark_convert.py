"""The Spark sink's core without the engine: settings, session settings, rows -> Arrow -> DataFrame
-> writer, against a real local Spark (the session of tests/spark/conftest.py)."""
from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from stormpy.config import ConfigError
from stormpy.spark.convert import BatchConversionError, RowConverter, parse_schema
from stormpy.spark.session import session_settings
from stormpy.spark.settings import sink_settings
from stormpy.spark.writer import STAGING_DIR, write_batch


# ---------------------------------------------------------------- pure settings

def test_session_settings_pass_spark_keys_but_not_sink_keys() -> None:
    settings = session_settings({"spark.master": "spark://h:7077", "spark.executor.memory": "1g",
                                 "spark.sink.batch.size": 5, "spark.ui.enabled": False,
                                 "topology.name": "wc", "wordcount.output": "/x"})
    assert settings.master == "spark://h:7077" and settings.remote is None
    assert settings.options["spark.executor.memory"] == "1g"
    assert settings.options["spark.ui.enabled"] == "false"
    assert settings.options["spark.app.name"] == "stormpy-wc"
    assert settings.options["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert not any(k.startswith("spark.sink.") for k in settings.options)
    assert "wordcount.output" not in settings.options


def test_session_settings_default_master_and_spark_connect() -> None:
    assert session_settings({}).master == "local[*]"
    connect = session_settings({"spark.master": "sc://spark-host:15002"})
    assert connect.remote == "sc://spark-host:15002" and connect.master is None


def test_sink_settings_precedence_config_over_class_attribute() -> None:
    attrs = {"path": "/from/class", "format": "json", "batch_size": 500}
    settings = sink_settings({"spark.sink.batch.size": 10000, "spark.sink.format": "csv"}, attrs)
    assert settings.path == "/from/class"
    assert settings.format == "csv"           # set in config: config wins
    assert settings.batch_size == 500         # config only holds the default: the class wins
    assert sink_settings({"spark.sink.batch.size": 20}, attrs).batch_size == 20
    assert sink_settings({"spark.sink.partition.by": "a, b", "spark.sink.path": "/p"}).partition_by == ("a", "b")
    with_options = sink_settings({"spark.sink.options": {"header": True}, "spark.sink.path": "/p"})
    assert with_options.options == {"header": "true"}


def test_sink_settings_refuse_batch_secs_over_message_timeout() -> None:
    with pytest.raises(ConfigError, match="spark.sink.batch.secs .* larger than topology.message.timeout.secs"):
        sink_settings({"spark.sink.batch.secs": 40, "topology.message.timeout.secs": 30})
    sink_settings({"spark.sink.batch.secs": 40, "topology.message.timeout.secs": 30,
                   "topology.enable.message.timeouts": False})


def test_sink_settings_refuse_bad_writer_config() -> None:
    with pytest.raises(ConfigError, match="both spark.sink.path"):
        sink_settings({"spark.sink.path": "/p", "spark.sink.table": "t"})
    with pytest.raises(ConfigError, match="spark.sink.mode"):
        sink_settings({"spark.sink.path": "/p", "spark.sink.mode": "upsert"})
    with pytest.raises(ConfigError, match="spark.sink.batch.size"):
        sink_settings({"spark.sink.batch.size": 0})


# ---------------------------------------------------------------- conversion (real Spark)

def test_rows_become_typed_columns(spark: Any) -> None:
    converter = RowConverter(["word", "count", "ratio", "tags", "seen"])
    now = datetime.datetime(2026, 1, 2, 3, 4, 5)
    rows = [("a", 1, 0.5, ["x"], now), ("b", 2, 1.5, [], now)]
    df = converter.to_dataframe(spark, rows)
    assert [f.name for f in df.schema.fields] == ["word", "count", "ratio", "tags", "seen"]
    assert df.schema["count"].dataType.simpleString() == "bigint"
    assert df.schema["tags"].dataType.simpleString() == "array<string>"
    got = sorted((r["word"], r["count"], r["ratio"], list(r["tags"])) for r in df.collect())
    assert got == [("a", 1, 0.5, ["x"]), ("b", 2, 1.5, [])]


def test_inferred_types_are_kept_and_a_misfit_names_column_row_and_value(spark: Any) -> None:
    converter = RowConverter(["word", "count"])
    converter.to_table([("a", 1)])
    with pytest.raises(BatchConversionError, match=r"column 'count': value 'many' \(str\) in row 1 does not fit int64"):
        converter.to_table([("b", 2), ("c", "many")])
    with pytest.raises(BatchConversionError, match=r"value 2.5 \(float\) in row 0 does not fit int64"):
        converter.to_table([("d", 2.5)])


def test_unconvertible_object_and_wrong_width_are_clear_errors(spark: Any) -> None:
    class Opaque:
        pass

    converter = RowConverter(["word", "thing"])
    with pytest.raises(BatchConversionError, match=r"column 'thing'.*Opaque"):
        converter.to_table([("a", Opaque())])
    with pytest.raises(BatchConversionError, match="row 1 has 1 values but the sink expects 2"):
        converter.to_table([("a", 1), ("b",)])


def test_explicit_ddl_schema_matches_fields_by_name_and_checks_values(spark: Any) -> None:
    schema = parse_schema(spark, "n INT NOT NULL, word STRING")
    converter = RowConverter(["word", "n"], schema)
    df = converter.to_dataframe(spark, [("a", 1), ("b", 2)])
    assert [f.name for f in df.schema.fields] == ["n", "word"]
    assert df.schema["n"].dataType.simpleString() == "int"
    assert sorted(tuple(r) for r in df.collect()) == [(1, "a"), (2, "b")]
    with pytest.raises(BatchConversionError, match="NOT NULL in the schema but row 0 holds None"):
        converter.to_table([("a", None)])
    with pytest.raises(BatchConversionError, match="not in range"):
        converter.to_table([("a", 2**40)])
    with pytest.raises(BatchConversionError, match="not a valid DDL schema"):
        parse_schema(spark, "n INT word")
    assert parse_schema(spark, schema) is schema  # a StructType (class attribute) is used as it is


def test_all_null_column_is_written_and_typed_by_a_later_batch(spark: Any) -> None:
    converter = RowConverter(["word", "note"])
    assert str(converter.to_table([("a", None)]).schema.field("note").type) == "string"
    assert converter.arrow_types()[1] is None
    converter.to_table([("b", 3)])
    assert str(converter.arrow_types()[1]) == "int64"


# ---------------------------------------------------------------- built-in writers (real Spark)

@pytest.mark.parametrize("fmt", ["parquet", "json", "orc", "csv"])
def test_builtin_writer_appends_batches_in_each_format(spark: Any, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / fmt
    settings = sink_settings({"spark.sink.path": str(out), "spark.sink.format": fmt,
                              "spark.sink.options": {"header": True} if fmt == "csv" else None})
    converter = RowConverter(["word", "count"], parse_schema(spark, "word STRING, count BIGINT"))
    write_batch(spark, converter.to_dataframe(spark, [("a", 1), ("b", 2)]), settings, "t1-b1")
    write_batch(spark, converter.to_dataframe(spark, [("c", 3)]), settings, "t1-b2")
    reader = spark.read.schema("word STRING, count BIGINT")
    if fmt == "csv":
        reader = reader.option("header", True)
    back = sorted(tuple(r) for r in reader.format(fmt).load(str(out)).collect())
    assert back == [("a", 1), ("b", 2), ("c", 3)]


def test_builtin_writer_partitions_and_saves_tables(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "parts"
    converter = RowConverter(["day", "word", "count"])
    df = converter.to_dataframe(spark, [("mon", "a", 1), ("tue", "b", 2), ("mon", "c", 3)])
    write_batch(spark, df, sink_settings({"spark.sink.path": str(out), "spark.sink.partition.by": ["day"]}), "t1-b1")
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [STAGING_DIR, "day=mon", "day=tue"]
    assert not any((out / STAGING_DIR).iterdir()), "the batch's staging directory was left behind"
    back = spark.read.parquet(str(out))
    assert sorted((r["day"], r["word"]) for r in back.collect()) == [("mon", "a"), ("mon", "c"), ("tue", "b")]
    table = sink_settings({"spark.sink.table": "sink_test_counts"})
    write_batch(spark, df, table, "t1-b2")
    write_batch(spark, df, table, "t1-b3")
    total = spark.sql("SELECT SUM(count) AS total FROM sink_test_counts").collect()[0].total
    assert total == 12
    spark.sql("DROP TABLE sink_test_counts")


def test_concurrent_appends_to_one_path_do_not_break_each_other(spark: Any, tmp_path: Path) -> None:
    """Two sinks appending at once: Spark's shared _temporary dir would lose files without staging."""
    import threading

    out = tmp_path / "shared"
    settings = sink_settings({"spark.sink.path": str(out)})
    schema = parse_schema(spark, "task INT, batch INT, n BIGINT")
    errors: list[BaseException] = []

    def sink(task: int) -> None:
        converter = RowConverter(["task", "batch", "n"], schema)
        try:
            for batch in range(4):
                rows = [(task, batch, n) for n in range(50)]
                write_batch(spark, converter.to_dataframe(spark, rows), settings, f"task{task}-batch{batch}")
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=sink, args=(task,), name=f"sink-{task}") for task in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a writer thread did not finish within 120 s"
    assert errors == []
    back = spark.read.parquet(str(out))
    assert back.count() == 2 * 4 * 50
    assert sorted(tuple(r) for r in back.groupBy("task", "batch").count().collect()) == [
        (task, batch, 50) for task in (1, 2) for batch in range(4)]


def test_staging_through_the_hadoop_filesystem_api(spark: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The path for HDFS/S3-style targets, run here against local disk through Hadoop's API."""
    from stormpy.spark import writer

    monkeypatch.setattr(writer, "_local_directory", lambda path, spark, hconf: None)
    out = tmp_path / "hadoop"
    settings = sink_settings({"spark.sink.path": str(out), "spark.sink.partition.by": "day"})
    df = RowConverter(["day", "n"]).to_dataframe(spark, [("mon", 1), ("tue", 2), ("mon", 3)])
    write_batch(spark, df, settings, "t1-b1")
    write_batch(spark, df, settings, "t1-b2")
    back = spark.read.parquet(str(out))
    assert sorted((r["day"], r["n"]) for r in back.collect()) == sorted([("mon", 1), ("tue", 2), ("mon", 3)] * 2)
    assert not any((out / writer.STAGING_DIR).iterdir()), "staging directories were left behind"
