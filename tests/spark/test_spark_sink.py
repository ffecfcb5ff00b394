"""SparkSinkBolt end to end: real topologies in the local runtime (real acker, replaying spouts)
writing through a real local Spark. One SparkSession serves all Spark tests (tests/spark/conftest.py):
the fixture holds it, the sinks share it, and it is stopped after the last Spark test."""
from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from stormpy import Spout, Topology
from stormpy.local.runner import LocalTopology
from stormpy.spark.sink import SparkSinkBolt
from stormpy.testing import wait_until

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_wordcount.py"
WAIT_SECS = 90
Conf = dict[str, Any]


# ---------------------------------------------------------------- test topology parts

class RowSpout(Spout):
    """Emits ``test.rows`` rows ``[id, word, count]`` with ``tup_id=id``; replays failed ids
    except those listed in ``test.bad`` (their ``count`` is replaced by a bad value)."""

    outputs = ["id", "word", "count"]
    BAD_VALUES = ["many", {1: "x"}]

    def initialize(self, stormconf: dict[str, Any], context: Any) -> None:
        self.bad = set(stormconf.get("test.bad") or ())
        self.rows: dict[int, list[Any]] = {}
        for i in range(int(stormconf["test.rows"])):
            count: Any = i * 10
            if i in self.bad:
                count = self.BAD_VALUES[sorted(self.bad).index(i) % len(self.BAD_VALUES)]
            self.rows[i] = [i, f"w{i % 7}", count]
        self.todo = collections.deque(sorted(self.rows))
        self.acked: set[int] = set()
        self.failed: list[int] = []

    def next_tuple(self) -> None:
        if self.todo:
            i = self.todo.popleft()
            self.emit(self.rows[i], tup_id=i)

    def ack(self, tup_id: int) -> None:
        self.acked.add(tup_id)

    def fail(self, tup_id: int) -> None:
        self.failed.append(tup_id)
        if tup_id not in self.bad:
            self.todo.append(tup_id)


class FailFirstBatchSink(SparkSinkBolt):
    """Writes with the built-in writer, except that its first ``handle_batch`` call raises."""

    def initialize(self, stormconf: dict[str, Any], context: Any) -> None:
        super().initialize(stormconf, context)
        self.calls = 0

    def handle_batch(self, spark: Any, df: Any, batch_id: int) -> None:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError(f"injected failure in batch {batch_id}")
        super().handle_batch(spark, df, batch_id)


class EvenRowsSink(SparkSinkBolt):
    """Overrides ``process`` (so it gets a Tuple per row): odd ids are acked and dropped."""

    def process(self, tup: Any) -> None:
        if tup.values[0] % 2:
            self.ack(tup)
            return
        super().process(tup)


class RowsToEvenSink(Topology):
    rows = RowSpout.spec()
    sink = EvenRowsSink.spec(inputs=[rows])


class RowsToParquet(Topology):
    rows = RowSpout.spec()
    sink = SparkSinkBolt.spec(inputs=[rows])


class TwoTaskRowsToParquet(Topology):
    """One spout executor with two tasks: its batches to the sink interleave two source tasks."""
    rows = RowSpout.spec(config={"topology.tasks": 2})
    sink = SparkSinkBolt.spec(inputs=[rows])


class RowsToFailingSink(Topology):
    rows = RowSpout.spec()
    sink = FailFirstBatchSink.spec(inputs=[rows])


def components(local: LocalTopology, component_id: str) -> list[Any]:
    """The live component instances of one component (executor threads own them)."""
    return [task.component for ex in local.runtime.executors.values() if ex.component_id == component_id
            for task in ex.tasks.values() if task.component is not None]


def sink_restarts(local: LocalTopology) -> int:
    return sum(task.restarts for ex in local.runtime.executors.values() if ex.component_id == "sink"
               for task in ex.tasks.values())


def run_conf(tmp_path: Path, spark_conf: Conf, **extra: Any) -> Conf:
    return {**spark_conf, "spark.sink.path": str(tmp_path / "out"), "topology.message.timeout.secs": 30,
            **extra}


@pytest.fixture
def running() -> Iterator[Callable[..., LocalTopology]]:
    """Start LocalTopology instances for a test and always stop them (drain 0 on failure)."""
    started: list[LocalTopology] = []

    def start(topology: type, name: str, conf: dict[str, Any]) -> LocalTopology:
        local = LocalTopology(topology, name, conf)
        started.append(local)
        return local.start()

    yield start
    for local in started:
        if local.runtime.started:
            local.stop(drain_secs=0)


def read_rows(spark: Any, path: Path) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.read.parquet(str(path)).select("id", "word", "count").collect())


# ---------------------------------------------------------------- tests

def test_rows_in_parquet_equal_the_tuples_emitted(spark: Any, spark_conf: Conf, tmp_path: Path,
        running: Any) -> None:
    n = 2500
    local = running(RowsToParquet, "sink-rows", run_conf(tmp_path, spark_conf, **{
        "test.rows": n, "spark.sink.batch.size": 1000, "spark.sink.batch.secs": 1}))
    spout = components(local, "rows")[0]
    wait_until(lambda: len(spout.acked) == n, WAIT_SECS, f"all {n} rows acked by the sink")
    sink = components(local, "sink")[0]
    stats = next(s for s in local.runtime.stats().values() if s["component"] == "sink")
    local.stop()
    assert read_rows(spark, tmp_path / "out") == [(i, f"w{i % 7}", i * 10) for i in range(n)]
    assert spout.failed == []
    assert stats["metrics"]["rows"] == n and stats["metrics"]["last_batch_id"] >= 3  # in the executor's stats
    # The sink takes raw messages (no Tuple per row): each row still counts as executed and acked.
    assert type(sink)._raw is False and sink._raw, "the plain sink takes the raw-message path"
    assert stats["executed"] == {"rows:default": n} and stats["acked"] == {"rows:default": n}
    assert sink.metrics["rows"] == n and sink.metrics["failed_batches"] == 0
    assert sink.metrics["batches"] >= 3 and sink.metrics["last_batch_id"] == sink.metrics["batches"]
    assert sink.metrics["spark_secs_per_batch"] > 0


def test_batches_mixing_source_tasks_are_split_by_task_and_every_row_is_written_once(spark: Any, spark_conf: Conf,
        tmp_path: Path, running: Any) -> None:
    n = 1500
    local = running(TwoTaskRowsToParquet, "sink-two-tasks", run_conf(tmp_path, spark_conf, **{
        "test.rows": n, "spark.sink.batch.size": 700, "spark.sink.batch.secs": 1}))
    spouts = components(local, "rows")
    assert len(spouts) == 2
    wait_until(lambda: all(len(s.acked) == n for s in spouts), WAIT_SECS, f"all {n} rows of both tasks acked")
    stats = next(s for s in local.runtime.stats().values() if s["component"] == "sink")
    local.stop()
    assert read_rows(spark, tmp_path / "out") == sorted([(i, f"w{i % 7}", i * 10) for i in range(n)] * 2)
    assert all(s.failed == [] for s in spouts)
    assert stats["executed"] == {"rows:default": 2 * n} and stats["acked"] == {"rows:default": 2 * n}


def test_a_sink_that_overrides_process_gets_tuples_and_writes_what_it_keeps(spark: Any, spark_conf: Conf,
        tmp_path: Path, running: Any) -> None:
    n = 300
    local = running(RowsToEvenSink, "sink-even", run_conf(tmp_path, spark_conf, **{
        "test.rows": n, "spark.sink.batch.size": 50, "spark.sink.batch.secs": 1}))
    spout = components(local, "rows")[0]
    wait_until(lambda: len(spout.acked) == n, WAIT_SECS, f"all {n} rows acked (odd ones dropped by process)")
    sink = components(local, "sink")[0]
    local.stop()
    assert not sink._raw
    assert read_rows(spark, tmp_path / "out") == [(i, f"w{i % 7}", i * 10) for i in range(0, n, 2)]
    assert spout.failed == [] and sink.metrics["rows"] == n // 2


def test_failed_handle_batch_fails_its_tuples_which_replay_and_are_written(spark: Any, spark_conf: Conf, tmp_path: Path,
        running: Any) -> None:
    n = 300
    local = running(RowsToFailingSink, "sink-replay",
                    run_conf(tmp_path, spark_conf, **{"test.rows": n, "spark.sink.batch.size": 100,
                                                      "spark.sink.batch.secs": 1}))
    spout = components(local, "rows")[0]
    wait_until(lambda: len(spout.acked) == n, WAIT_SECS, f"all {n} rows acked after the injected failure")
    sink = components(local, "sink")[0]
    local.stop()
    assert spout.failed, "the first batch's tuples were not failed"
    assert read_rows(spark, tmp_path / "out") == [(i, f"w{i % 7}", i * 10) for i in range(n)]  # none lost, none twice
    errors = local.reporter.errors.get("sink", [])
    assert any("injected failure in batch 1" in text for _, _, text in errors)
    assert sink.metrics["failed_batches"] == 1 and sink.metrics["rows"] == n
    assert sink_restarts(local) == 0


def test_parquet_handover_groups_whole_batches_while_the_writer_is_busy_and_leaves_no_staging_files(
        spark: Any, spark_conf: Conf, tmp_path: Path, running: Any) -> None:
    """``spark.state.handover: parquet`` (the default through Spark Connect or a cluster master,
    forced here on the embedded Spark with a Spark job per batch): each write is a Spark job
    reading a staged Parquet file; while one runs, the next batch grows to up to
    ``spark.state.max.batches.per.write`` batches, so fewer jobs than batches write every row once."""
    n, size = 3000, 100
    local = running(RowsToParquet, "sink-handover", run_conf(tmp_path, spark_conf, **{
        "test.rows": n, "spark.sink.batch.size": size, "spark.sink.batch.secs": 30, "spark.sink.writer": "spark",
        "spark.state.handover": "parquet", "spark.sink.max.inflight.batches": 1,
        "spark.state.max.batches.per.write": 4}))
    spout = components(local, "rows")[0]
    wait_until(lambda: len(spout.acked) == n, WAIT_SECS, f"all {n} rows acked")
    sink = components(local, "sink")[0]
    local.stop()
    out = tmp_path / "out"
    assert sink._arrow is False and list(sink._parquet_targets.values()) == [str(out)]
    assert read_rows(spark, out) == [(i, f"w{i % 7}", i * 10) for i in range(n)]
    assert spout.failed == [] and sink.metrics["rows"] == n
    # 30 batches of 100 rows; the first Spark job alone takes longer than the spout's 3000 rows
    assert sink.metrics["batches"] < n // size, sink.metrics
    assert not (out / "_stormpy_staging").exists() or list((out / "_stormpy_staging").iterdir()) == []


def test_partial_batch_is_flushed_after_batch_secs_without_more_input(spark: Any, spark_conf: Conf, tmp_path: Path,
        running: Any) -> None:
    local = running(RowsToParquet, "sink-timer",
                    run_conf(tmp_path, spark_conf, **{"test.rows": 10, "spark.sink.batch.size": 1000,
                                                      "spark.sink.batch.secs": 1}))
    spout = components(local, "rows")[0]
    wait_until(lambda: len(spout.acked) == 10, WAIT_SECS, "the 10 rows of a partial batch to be written and acked")
    # The topology still runs: only the batch timer can have written them.
    assert local.runtime.started
    assert read_rows(spark, tmp_path / "out") == [(i, f"w{i % 7}", i * 10) for i in range(10)]
    assert components(local, "sink")[0].metrics["batches"] == 1


def test_shutdown_flushes_the_pending_batch(spark: Any, spark_conf: Conf, tmp_path: Path,
        running: Any) -> None:
    local = running(RowsToParquet, "sink-shutdown",
                    run_conf(tmp_path, spark_conf, **{"test.rows": 10, "spark.sink.batch.size": 1000,
                                                      "spark.sink.batch.secs": 25}))
    sink = components(local, "sink")[0]
    wait_until(lambda: local.runtime.totals()["executed"] >= 10, WAIT_SECS, "the sink to receive 10 rows")
    assert sink.metrics["batches"] == 0, "the batch was written before shutdown; batch.secs did not hold it"
    local.stop(drain_secs=0)  # no drain: only the executor's shutdown flush can write them
    assert read_rows(spark, tmp_path / "out") == [(i, f"w{i % 7}", i * 10) for i in range(10)]
    assert sink.metrics["batches"] == 1


def test_bad_values_fail_their_batch_with_a_clear_error_and_the_sink_lives_on(
        spark: Any, spark_conf: Conf, tmp_path: Path,
        running: Any) -> None:
    n, bad = 300, [150, 250]  # 150 holds "many", 250 holds {1: "x"}, in a column inferred as bigint
    local = running(RowsToParquet, "sink-bad",
                    run_conf(tmp_path, spark_conf, **{"test.rows": n, "test.bad": bad,
                                                      "spark.sink.batch.size": 50, "spark.sink.batch.secs": 1}))
    spout = components(local, "rows")[0]
    good = set(range(n)) - set(bad)
    wait_until(lambda: spout.acked >= good and set(bad) <= set(spout.failed), WAIT_SECS,
               "every good row acked and both bad rows failed")
    sink = components(local, "sink")[0]
    local.stop()
    assert read_rows(spark, tmp_path / "out") == [(i, f"w{i % 7}", i * 10) for i in sorted(good)]
    texts = [text for _, _, text in local.reporter.errors.get("sink", [])]
    assert any("column 'count': value 'many' (str)" in t and "does not fit int64" in t for t in texts), texts
    assert any("column 'count': value {1: 'x'} (dict)" in t for t in texts), texts
    assert sink.metrics["failed_batches"] >= 2
    assert sink_restarts(local) == 0, "a bad batch must not crash the sink task"


def test_spark_wordcount_example_writes_the_expected_counts(spark: Any, spark_conf: Conf, tmp_path: Path,
        running: Any) -> None:
    from stormpy.api.loader import load_topology_file

    topology = load_topology_file(str(EXAMPLE))
    module = __import__(topology.__module__)
    out = tmp_path / "wc"
    local = running(topology, "spark-wordcount",
                    {**spark_conf, "wordcount.output": str(out), "wordcount.passes": 1,
                     "spark.sink.batch.secs": 1})
    spout = components(local, "sentences")[0]
    wait_until(lambda: spout.acked == spout.total, WAIT_SECS, "every sentence of the text counted in Parquet")
    local.stop()
    spark.read.parquet(str(out)).createOrReplaceTempView("word_windows")
    got = {r["word"]: r["total"] for r in spark.sql(
        "SELECT word, SUM(count) AS total FROM word_windows GROUP BY word").collect()}
    assert got == dict(module.expected_counts(1))


def test_sink_without_a_target_reports_a_clear_config_error(tmp_path: Path, running: Any) -> None:
    local = running(RowsToParquet, "sink-nowhere", {"test.rows": 1, "topology.task.restart.backoff.secs": 30})
    wait_until(lambda: bool(local.reporter.errors.get("sink")), WAIT_SECS, "the sink's initialize error to be reported")
    text = local.reporter.errors["sink"][0][2]
    assert "SparkSinkBolt has nowhere to write: set spark.sink.path" in text


def test_batch_secs_over_message_timeout_is_refused_before_the_topology_runs(tmp_path: Path) -> None:
    from stormpy.errors import UserError

    with pytest.raises(UserError, match="spark.sink.batch.secs .*larger than topology.message.timeout.secs"):
        LocalTopology(RowsToParquet, "sink-slow", user_overrides={  # as `stormpy local -c ...` passes them
            "test.rows": 1, "spark.sink.path": str(tmp_path), "spark.sink.batch.secs": 60,
            "topology.message.timeout.secs": 30})


def test_batch_secs_over_message_timeout_from_a_config_file_fails_the_sink_at_initialize(
        tmp_path: Path, running: Any) -> None:
    # A storm.yaml value is not part of the validated topology config; the sink checks again.
    local = running(RowsToParquet, "sink-slow-yaml", {"test.rows": 1, "spark.sink.path": str(tmp_path),
                                                      "spark.sink.batch.secs": 60,
                                                      "topology.message.timeout.secs": 30,
                                                      "topology.task.restart.backoff.secs": 30})
    wait_until(lambda: bool(local.reporter.errors.get("sink")), WAIT_SECS, "the sink's initialize error to be reported")
    assert "spark.sink.batch.secs (60) is larger than topology.message.timeout.secs (30)" in \
        local.reporter.errors["sink"][0][2]


class AckRecorder:
    """What an executor attaches to a bolt, reduced to recording acks, fails and errors."""

    def __init__(self) -> None:
        self.acked: list[Any] = []
        self.failed: list[Any] = []
        self.errors: list[str] = []
        self.woken: list[Any] = []

    def ack(self, tup: Any) -> None:
        tup._done = True
        self.acked.append(tup)

    def ack_many(self, tups: Any) -> None:
        for tup in tups:
            if not tup._done:
                self.ack(tup)

    def fail(self, tup: Any) -> None:
        tup._done = True
        self.failed.append(tup)

    def call_soon(self, fn: Any) -> None:
        """The writer thread's wake-up; this test settles from the executor side (flush_batches)."""
        self.woken.append(fn)

    def report_error(self, text: str) -> None:
        self.errors.append(text)

    def emit(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("the sink emits nothing")

    @contextmanager
    def anchored(self, tups: Any) -> Iterator[None]:
        """``Bolt.anchored`` (batching bolts anchor emits to the batch): nothing to anchor here."""
        yield


def test_time_closes_a_batch_by_its_age_not_at_every_timer_tick(spark: Any, spark_conf: Conf,
                                                                 tmp_path: Path) -> None:
    """streamparse flushes everything on each tick; the sink waits until the first tuple is
    spark.sink.batch.secs old, so a batch opened just before a tick is not cut short."""
    from stormpy.api.tuple import Tuple, values_class

    task = AckRecorder()
    bolt = SparkSinkBolt()
    bolt._attach(task, "sink", 1)
    bolt.initialize({**spark_conf, "spark.sink.path": str(tmp_path / "out"), "spark.sink.batch.secs": 20}, None)
    assert bolt.timer_interval_secs == 0.5
    values = values_class("rows", "default", ("id", "word", "count"))
    tup = Tuple(None, "rows", "default", 1, values(1, "w1", 10), None, 0.0, ("rows", "default"))
    bolt.process(tup)
    bolt.on_timer()                                  # the batch is young: it stays open
    assert task.acked == [] and bolt.pending_tuples() == [tup]
    bolt._opened[("rows", "default")] -= 21          # as if 21 s had passed since its first tuple
    bolt.on_timer()                                  # handed to the writer thread
    assert bolt._batches == {} and bolt.last_batch_id == 1
    bolt.flush_batches()                             # waits for the write in flight
    assert task.acked == [tup] and task.errors == []
    bolt.close()
    assert read_rows(spark, tmp_path / "out") == [(1, "w1", 10)]
