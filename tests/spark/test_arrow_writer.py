"""The Arrow writer makes the files Spark's own writer would: read back through real Spark, the two
outputs hold the same rows and columns (partition directories included); and it needs no Spark job."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stormpy.config import ConfigError
from stormpy.spark.arrow_writer import use_arrow_writer
from stormpy.trident import SparkState
from stormpy.trident.operations import TridentTuple

FIELDS = ("word", "n", "score", "ok")
INDEX = {name: i for i, name in enumerate(FIELDS)}
ROWS = [("a", 1, 0.5, True), ("b/c=d", 2, None, False), (None, 3, 1.5, None), ("", 4, 2.0, True),
        ("ü %x", 5, float("nan"), True)]


def commit(state: Any, txid: int, rows: list[tuple]) -> None:
    batch = [TridentTuple(list(r), INDEX) for r in rows]
    updater = SparkState.updater()
    updater.batch_complete(state, txid, batch)
    state.begin_commit(txid)
    updater.update_state(state, batch, None)
    state.commit(txid)


def written_by(spark_conf: dict, writer: str, factory: SparkState) -> Any:
    state = factory.make_state({**spark_conf, "topology.name": "t", "spark.state.writer": writer}, None, 0, 1)
    try:
        commit(state, 1, ROWS[:3])
        commit(state, 2, ROWS[3:])
        commit(state, 2, ROWS[3:])          # a replay of txid 2 replaces, in both writers
        assert state._arrow is (writer == "arrow")
    finally:
        state.close()


def read(spark: Any, factory: SparkState) -> tuple[list[str], list[tuple]]:
    df = factory.read(spark)
    columns = sorted(df.columns)
    rows = sorted((tuple(repr(v) for v in row) for row in df.select(*columns).collect()))
    return columns, rows


@pytest.mark.parametrize("fmt,partition_by", [("parquet", None), ("json", None), ("parquet", "word"),
                                              ("json", ["ok", "word"])])
def test_arrow_and_spark_outputs_read_back_the_same(spark, spark_conf, tmp_path, fmt, partition_by):
    outputs = {}
    for writer in ("arrow", "spark"):
        factory = SparkState(path=str(tmp_path / writer), format=fmt, partition_by=partition_by)
        written_by(spark_conf, writer, factory)
        outputs[writer] = read(spark, factory)
    assert outputs["arrow"] == outputs["spark"]
    columns, rows = outputs["arrow"]
    assert len(rows) == len(ROWS) and set(columns) == set(FIELDS)
    if partition_by:
        names = sorted(p.name for p in (tmp_path / "arrow").iterdir() if not p.name.startswith("_"))
        assert names == sorted(p.name for p in (tmp_path / "spark").iterdir() if not p.name.startswith("_"))


def test_an_arrow_write_starts_no_spark(tmp_path):
    code = (
        "import sys\n"
        "from stormpy.trident import SparkState\n"
        "from stormpy.trident.operations import TridentTuple\n"
        "from stormpy.spark import session\n"
        f"f = SparkState(path={str(tmp_path / 'out')!r})\n"
        "s = f.make_state({'topology.name': 't'}, None, 0, 1)\n"
        "t = [TridentTuple(['a', 1], {'w': 0, 'n': 1})]\n"
        "u = SparkState.updater(); u.batch_complete(s, 1, t); s.begin_commit(1); u.update_state(s, t, None)\n"
        "s.commit(1); s.close()\n"
        "assert not session.is_session_active() and 'py4j.java_gateway' not in sys.modules\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "ok", out.stderr
    assert [p.name for p in (tmp_path / "out").glob("part-*")] == ["part-t-p00000-t000000000001-00000.snappy.parquet"]


def test_timestamps_go_through_spark_under_auto(spark, spark_conf, tmp_path):
    import datetime

    factory = SparkState(path=str(tmp_path / "out"))
    state = factory.make_state({**spark_conf, "topology.name": "t"}, None, 0, 1)
    try:
        fields = {"at": 0}
        batch = [TridentTuple([datetime.datetime(2026, 1, 2, 3, 4, 5)], fields)]
        state.begin_commit(1)
        SparkState.updater().update_state(state, batch, None)
        state.commit(1)
        assert state._arrow is False
    finally:
        state.close()
    assert factory.read(spark).count() == 1


def test_choice_of_writer():
    local = {"spark.master": "local[2]"}
    assert use_arrow_writer(local, "spark.state.writer", fmt="parquet", path="/x", options={})
    assert not use_arrow_writer({**local, "spark.state.writer": "spark"}, "spark.state.writer", fmt="parquet",
                                path="/x", options={})
    assert not use_arrow_writer(local, "spark.state.writer", fmt="orc", path="/x", options={})
    assert not use_arrow_writer({"spark.master": "spark://h:7077"}, "spark.state.writer", fmt="parquet",
                                path="/x", options={})
    assert not use_arrow_writer(local, "spark.state.writer", fmt="parquet", path="hdfs://nn/x", options={})
    with pytest.raises(ConfigError, match="arrow cannot be used: .*Spark Connect"):
        use_arrow_writer({"spark.remote": "sc://h:15002", "spark.state.writer": "arrow"}, "spark.state.writer",
                         fmt="parquet", path="/x", options={})
    with pytest.raises(ConfigError, match="must be one of auto, arrow, spark"):
        use_arrow_writer({"spark.state.writer": "fast"}, "spark.state.writer", fmt="parquet", path="/x", options={})


def test_choice_of_handover():
    from stormpy.spark.arrow_writer import handover_compatible, use_parquet_handover

    key = "spark.state.handover"
    connect = {"spark.remote": "sc://h:15002"}
    assert use_parquet_handover(connect, key, shared_path=True, table=None)
    assert use_parquet_handover({"spark.master": "spark://h:7077"}, key, shared_path=True, table=None)
    assert not use_parquet_handover({"spark.master": "local[2]"}, key, shared_path=True, table=None)
    assert use_parquet_handover({"spark.master": "local[2]", key: "parquet"}, key, shared_path=True, table=None)
    assert not use_parquet_handover({**connect, key: "arrow"}, key, shared_path=True, table=None)
    assert not use_parquet_handover(connect, key, shared_path=False, table=None)
    assert not use_parquet_handover(connect, key, shared_path=False, table="db.t")
    with pytest.raises(ConfigError, match="parquet needs a SparkState path"):
        use_parquet_handover({**connect, key: "parquet"}, key, shared_path=False, table="db.t")
    with pytest.raises(ConfigError, match="must be one of auto, parquet, arrow"):
        use_parquet_handover({key: "csv"}, key, shared_path=True, table=None)
    import pyarrow as pa
    assert handover_compatible(pa.schema([("w", pa.string()), ("n", pa.int64()), ("l", pa.list_(pa.float64()))])) is None
    assert "timestamp" in handover_compatible(pa.schema([("t", pa.timestamp("us"))]))
    assert "uint64" in handover_compatible(pa.schema([("u", pa.uint64())]))
