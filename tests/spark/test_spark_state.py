"""SparkState against a real local SparkSession: replays replace, failures fail one batch, overlap.

The state partitions are driven as a Trident committer drives them (``stage`` when the batch is
complete, ``begin_commit`` / ``update_state`` / ``commit`` at the commit); the output is read back
with Spark. The cluster fault test (a worker SIGKILLed between the write and the commit) is in
tests/trident/test_trident_spark_cluster.py.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stormpy.spark.idempotent import StaleOutputError
from stormpy.trident import SparkState
from stormpy.trident.operations import TridentTuple

FIELDS = ("word", "n")
INDEX = {name: i for i, name in enumerate(FIELDS)}


def tuples(rows: list[tuple]) -> list[TridentTuple]:
    return [TridentTuple(list(r), INDEX) for r in rows]


def commit(state: Any, txid: int, batch: list[TridentTuple], stage: bool = True) -> None:
    updater = SparkState.updater()
    if stage:
        updater.batch_complete(state, txid, batch)
    state.begin_commit(txid)
    updater.update_state(state, batch, None)
    state.commit(txid)


def read(spark: Any, factory: SparkState) -> list[tuple]:
    return sorted(tuple(r) for r in factory.read(spark).select(*FIELDS).collect())


@pytest.fixture
def make(spark, spark_conf):
    made = []

    def _make(factory: SparkState, partition: int = 0) -> Any:
        state = factory.make_state({**spark_conf, "topology.name": "t"}, None, partition, 2)
        made.append(state)
        return state
    yield _make
    for state in made:
        state.close()


def test_replayed_txid_replaces_what_an_earlier_attempt_published(spark, make, tmp_path):
    factory = SparkState(path=str(tmp_path / "out"))
    p0, p1 = make(factory, 0), make(factory, 1)
    commit(p0, 1, tuples([("a", 1), ("b", 2)]))
    commit(p1, 1, tuples([("c", 3)]))
    commit(p0, 2, tuples([("d", 4), ("e", 5)]))
    # the worker died after publishing txid 2 and before the commit: txid 2 comes again, with
    # other tuples (an opaque spout), in a new state object (the restarted worker)
    replay = make(factory, 0)
    commit(replay, 2, tuples([("d", 40)]), stage=False)
    assert read(spark, factory) == [("a", 1), ("b", 2), ("c", 3), ("d", 40)]
    commit(replay, 3, tuples([]))
    commit(replay, 4, tuples([("f", 6)]))
    assert read(spark, factory) == [("a", 1), ("b", 2), ("c", 3), ("d", 40), ("f", 6)]
    manifest = json.loads((tmp_path / "out" / "_stormpy_state" / "t-p00000.json").read_text())
    assert manifest["txid"] == 4 and len(manifest["files"]) == 1


def test_an_empty_replay_removes_the_earlier_attempts_rows(spark, make, tmp_path):
    factory = SparkState(path=str(tmp_path / "out"), format="json")
    commit(make(factory), 7, tuples([("a", 1)]))
    commit(make(factory), 7, tuples([]))
    assert not list((tmp_path / "out").glob("part-*"))


def test_a_spark_failure_fails_exactly_that_batch(spark, make, tmp_path):
    factory = SparkState(path=str(tmp_path / "out"), schema="word STRING, n BIGINT")
    state = make(factory)
    commit(state, 1, tuples([("a", 1)]))
    with pytest.raises(Exception, match="does not fit"):
        commit(state, 2, tuples([("b", "not a number")]))
    commit(state, 2, tuples([("b", 2)]))           # the replay of txid 2
    commit(state, 3, tuples([("c", 3)]))
    assert read(spark, factory) == [("a", 1), ("b", 2), ("c", 3)]
    assert not list((tmp_path / "out" / "_stormpy_staging").iterdir())


def test_writes_overlap_up_to_max_inflight_and_commit_in_order(spark, make, tmp_path):
    factory = SparkState(path=str(tmp_path / "out"), format="orc", partition_by="word", max_inflight=2)
    state = make(factory)
    updater = SparkState.updater()
    batches = {txid: tuples([(w, txid) for w in ("x", "y")]) for txid in range(1, 5)}
    for txid in (1, 2, 3):
        updater.batch_complete(state, txid, batches[txid])   # three complete before any commit
    assert len(state._staged) == 3
    assert not list((tmp_path / "out").glob("word=*/part-*")), "nothing is visible before a commit"
    for txid in (1, 2, 3):
        state.begin_commit(txid)
        updater.update_state(state, batches[txid], None)
        state.commit(txid)
    batches[4].append(TridentTuple(["z", 4], INDEX))         # tuples changed after staging: rewritten
    commit(state, 4, batches[4], stage=False)
    assert read(spark, factory) == sorted([(w, t) for t in range(1, 5) for w in ("x", "y")] + [("z", 4)])


def test_commit_groups_write_ready_batches_in_one_job_and_publish_each_txid_alone(spark, make, spark_conf,
                                                                                  tmp_path):
    factory = SparkState(path=str(tmp_path / "out"), partition_by="word", max_inflight=1)
    state = factory.make_state({**spark_conf, "topology.name": "t", "spark.state.writer": "spark",
                                "spark.state.max.batches.per.write": 3}, None, 0, 1)
    try:
        updater = SparkState.updater()
        batches = {txid: tuples([(w, txid) for w in ("x", "y")]) for txid in range(1, 8)}
        for txid in range(1, 8):   # ready long before one Spark job ends: they queue and group
            updater.batch_complete(state, txid, batches[txid])
        assert state.stats["largest_group"] <= 3
        for txid in (1, 2, 3, 4, 5):
            state.begin_commit(txid)
            updater.update_state(state, batches[txid], None)
            state.commit(txid)
        assert state.stats["writes"] < 5 and state.stats["largest_group"] >= 2, state.stats
        assert state.stats["max_inflight_seen"] == 1 and state.stats["grouped"] >= 5, state.stats
        assert read(spark, factory) == sorted((w, t) for t in range(1, 6) for w in ("x", "y"))
        published = [p for p in (tmp_path / "out").rglob("*") if "_stormpy_staging" not in p.parts]
        assert not [p for p in published if "stormpy_txid" in p.name], "the txid column never reaches the output"
        replay = tuples([("z", 6)])   # txid 6 replayed with other tuples: only its own files change
        commit(state, 6, replay, stage=False)
        commit(state, 7, batches[7], stage=False)
        assert read(spark, factory) == sorted([(w, t) for t in (1, 2, 3, 4, 5, 7) for w in ("x", "y")] + [("z", 6)])
        state.close()
        assert not list((tmp_path / "out" / "_stormpy_staging").iterdir()), "group staging dirs removed"
    finally:
        state.close()


def test_a_commit_group_with_an_explicit_schema(spark, spark_conf, tmp_path):
    factory = SparkState(path=str(tmp_path / "out"), schema="word STRING, n BIGINT", max_inflight=1)
    state = factory.make_state({**spark_conf, "topology.name": "t", "spark.state.writer": "spark"}, None, 0, 1)
    try:
        batches = {txid: tuples([(w, txid) for w in ("x", "y")]) for txid in range(1, 6)}
        for txid in range(1, 6):
            SparkState.updater().batch_complete(state, txid, batches[txid])
        for txid in range(1, 6):
            commit(state, txid, batches[txid], stage=False)
        assert state.stats["largest_group"] >= 2, state.stats
        assert read(spark, factory) == sorted((w, t) for t in range(1, 6) for w in ("x", "y"))
    finally:
        state.close()


def test_a_failed_group_write_fails_each_of_its_commits_and_their_replays_land(spark, make, spark_conf, tmp_path):
    factory = SparkState(path=str(tmp_path / "out"), schema="word STRING, n BIGINT", max_inflight=1)
    state = factory.make_state({**spark_conf, "topology.name": "t", "spark.state.writer": "spark"}, None, 0, 1)
    try:
        updater = SparkState.updater()
        good, bad = tuples([("a", 1)]), tuples([("b", "not a number")])
        updater.batch_complete(state, 1, good)
        updater.batch_complete(state, 2, bad)
        updater.batch_complete(state, 3, tuples([("c", 3)]))
        commit(state, 1, good, stage=False)
        with pytest.raises(Exception, match="does not fit"):
            commit(state, 2, bad, stage=False)
        commit(state, 2, tuples([("b", 2)]))   # the replays of 2 and 3 write again
        commit(state, 3, tuples([("c", 3)]))
        assert read(spark, factory) == [("a", 1), ("b", 2), ("c", 3)]
        state.close()
        assert not list((tmp_path / "out" / "_stormpy_staging").iterdir())
    finally:
        state.close()


def test_a_task_taking_a_partition_over_removes_its_orphaned_staging_dirs(spark, make, tmp_path):
    factory = SparkState(path=str(tmp_path / "out"))
    dead = make(factory, 0)
    SparkState.updater().batch_complete(dead, 1, tuples([("a", 1)]))   # staged, never committed
    dead._staged[1].future.result(timeout=120)
    other = make(factory, 1)
    commit(other, 1, tuples([("b", 2)]))
    staging = tmp_path / "out" / "_stormpy_staging"
    assert [p.name for p in staging.iterdir()][0].startswith("t-p00000-t000000000001-")
    successor = make(factory, 0)                    # the restarted worker's task of partition 0
    commit(successor, 1, tuples([("a", 1)]))
    assert not list(staging.iterdir()), "the dead task's staging directory is removed"
    assert read(spark, factory) == [("a", 1), ("b", 2)]


def test_older_staged_batches_are_dropped_at_a_later_commit(spark, make, tmp_path):
    factory = SparkState(path=str(tmp_path / "out"))
    state = make(factory)
    updater = SparkState.updater()
    updater.batch_complete(state, 1, tuples([("a", 1)]))   # its commit never comes to this task
    commit(state, 2, tuples([("b", 2)]))
    assert not state._staged
    state.close()
    assert not list((tmp_path / "out" / "_stormpy_staging").iterdir())
    assert read(spark, factory) == [("b", 2)]


def test_close_waits_for_a_dropped_batch_still_being_written(spark, make, tmp_path):
    """A later commit drops an older attempt whose write is still running: its directory goes
    when the write ends, and ``close`` waits for that (it once returned first, and the directory
    outlived the state)."""
    import threading
    factory = SparkState(path=str(tmp_path / "out"), max_inflight=2)
    state = make(factory)
    release = threading.Event()
    write = state._spark_write

    def slow_first(rows: Any, txid: int, prepared: Any) -> Any:
        staging = write(rows, txid, prepared)
        if txid == 1:   # written, not yet returned: its directory exists
            release.wait(30)
        return staging
    state._spark_write = slow_first
    SparkState.updater().batch_complete(state, 1, tuples([("a", 1)]))   # its write hangs at the end
    commit(state, 2, tuples([("b", 2)]))
    assert not state._staged
    threading.Timer(0.5, release.set).start()   # the write of txid 1 ends while close waits
    state.close()
    assert not list((tmp_path / "out" / "_stormpy_staging").iterdir())
    assert read(spark, factory) == [("b", 2)]


def test_a_zombie_whose_staging_was_removed_does_not_publish(tmp_path):
    from stormpy.spark.idempotent import BatchFiles, LocalFiles
    files = LocalFiles(str(tmp_path))
    batches = BatchFiles(files, "t", 0)
    staging = batches.new_staging(3)
    (tmp_path / staging).mkdir(parents=True)
    (tmp_path / staging / "part-0.json").write_text('{"w": 1}\n')
    assert batches.publish(3, staging) == ["part-t-p00000-t000000000003-00000.json"]
    zombie = batches.new_staging(3)
    (tmp_path / zombie).mkdir()
    assert BatchFiles(files, "t", 0).clean_staging() == 1
    with pytest.raises(RuntimeError, match="is gone"):
        batches.publish(3, zombie)
    assert (tmp_path / "part-t-p00000-t000000000003-00000.json").exists()


def test_restarted_txids_are_refused_with_a_clear_error(spark, make, tmp_path):
    factory = SparkState(path=str(tmp_path / "out"))
    commit(make(factory), 5, tuples([("a", 1)]))
    with pytest.raises(StaleOutputError, match="already holds txid 5"):
        commit(make(factory), 1, tuples([("b", 1)]))


def test_table_output(spark, make, tmp_path):
    factory = SparkState(table="tstate_words")
    state = make(factory)
    commit(state, 1, tuples([("a", 1)]))
    commit(state, 1, tuples([("a", 1), ("b", 2)]))
    commit(state, 2, tuples([("c", 3)]))
    assert read(spark, factory) == [("a", 1), ("b", 2), ("c", 3)]


def test_bad_arguments():
    with pytest.raises(ValueError, match="exactly one of path"):
        SparkState()
    with pytest.raises(ValueError, match="format must be one of"):
        SparkState(path="/x", format="avro")


def test_importing_trident_does_not_import_pyspark():
    code = "import sys, stormpy.trident as t; assert 'pyspark' not in sys.modules; t.SparkState; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "ok", out.stderr


def staged_leftovers(out: Path) -> list[str]:
    staging = out / "_stormpy_staging"
    return sorted(p.name for p in staging.iterdir()) if staging.exists() else []


@pytest.mark.parametrize("fmt, partition_by, schema", [("parquet", None, None), ("csv", "word", None),
                                                       ("parquet", None, "word STRING, n INT")])
def test_parquet_handover_groups_and_replays_leave_no_staging_files(spark, spark_conf, tmp_path, fmt, partition_by,
                                                                     schema):
    """``spark.state.handover: parquet``: each Spark job reads the rows from a Parquet file the
    state wrote beside the output; the file is gone after the job, replays still replace."""
    out = tmp_path / "out"
    options = {"header": True} if fmt == "csv" else None
    factory = SparkState(path=str(out), format=fmt, partition_by=partition_by, schema=schema, options=options,
                         max_inflight=1)
    state = factory.make_state({**spark_conf, "topology.name": "t", "spark.state.writer": "spark",
                                "spark.state.handover": "parquet", "spark.state.max.batches.per.write": 8},
                               None, 0, 1)
    try:
        updater = SparkState.updater()
        batches = {txid: tuples([(w, txid) for w in ("x", "y")]) for txid in range(1, 6)}
        for txid in range(1, 6):
            updater.batch_complete(state, txid, batches[txid])
        for txid in range(1, 5):
            commit(state, txid, batches[txid], stage=False)
        commit(state, 5, tuples([("z", 5)]))   # txid 5 replayed with other rows: replaces its group member
        assert state._parquet is True and state.stats["largest_group"] >= 2, state.stats
        reader = spark.read.format(fmt).options(**(options or {}))
        if schema:
            reader = reader.schema("word STRING, n INT")
        rows = reader.load(str(out)).select(*FIELDS).collect()
        assert sorted((r["word"], int(r["n"])) for r in rows) == sorted(
            [(w, t) for t in range(1, 5) for w in ("x", "y")] + [("z", 5)])
        if schema:
            assert dict(spark.read.parquet(str(out)).dtypes)["n"] == "int"
        state.close()
        assert staged_leftovers(out) == [], "hand-over files and staging directories are removed"
    finally:
        state.close()


def test_a_failed_job_removes_its_parquet_handover_files(spark, spark_conf, tmp_path):
    out = tmp_path / "out"
    factory = SparkState(path=str(out), options={"compression": "no-such-codec"}, max_inflight=1)
    state = factory.make_state({**spark_conf, "topology.name": "t", "spark.state.writer": "spark",
                                "spark.state.handover": "parquet"}, None, 0, 1)
    try:
        with pytest.raises(Exception, match="no-such-codec"):
            commit(state, 1, tuples([("a", 1)]))
        assert state._parquet is True
        assert staged_leftovers(out) == []
    finally:
        state.close()


def test_timestamp_columns_keep_the_arrow_handover(spark, spark_conf, tmp_path):
    import datetime

    out = tmp_path / "out"
    factory = SparkState(path=str(out))
    state = factory.make_state({**spark_conf, "topology.name": "t", "spark.state.writer": "spark",
                                "spark.state.handover": "auto", "spark.master": "spark://nowhere:7077"}, None, 0, 1)
    # the session is the shared local one (already running); the master key only makes ``auto`` choose
    try:
        when = datetime.datetime(2026, 11, 26, 3, 0, tzinfo=datetime.timezone.utc)
        commit(state, 1, tuples([("a", when)]))
        assert state._parquet is False
        assert spark.read.parquet(str(out)).count() == 1
        assert dict(spark.read.parquet(str(out)).dtypes)["n"] == "timestamp"
    finally:
        state.close()
