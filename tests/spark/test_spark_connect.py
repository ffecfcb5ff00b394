"""The sink's writer and SparkState through a real Spark Connect server (``spark.remote``), started
from the pyspark wheel once for the module (stormpy.testing.spark_cluster). The client needs
``pyspark[connect]`` (in the test extra).

Each check runs in a child process: a process has one stormpy-managed SparkSession, and the other
Spark test modules share a classic one (tests/spark/conftest.py) that must not be replaced.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from stormpy.testing.spark_cluster import SparkConnectServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkConnectServer]:
    server = SparkConnectServer(tmp_path_factory.mktemp("connect"), master="local[1]")
    try:
        yield server.start()
    finally:
        server.stop("Spark Connect tests finished")


def run_client(code: str, remote: str, out: Path) -> str:
    """Run ``code`` in a child Python with ``REMOTE`` and ``OUT`` defined; returns its stdout."""
    script = f"REMOTE = {remote!r}\nOUT = {str(out)!r}\n" + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, f"client failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


def test_batches_reach_parquet_through_spark_connect(connect: SparkConnectServer, tmp_path: Path) -> None:
    last = run_client("""
        from stormpy.spark import session
        from stormpy.spark.convert import RowConverter, parse_schema
        from stormpy.spark.settings import sink_settings
        from stormpy.spark.writer import write_batch
        spark = session.acquire_session({"spark.remote": REMOTE})
        assert type(spark).__module__.startswith("pyspark.sql.connect")
        converter = RowConverter(["word", "n"], parse_schema(spark, "word STRING, n BIGINT"))
        settings = sink_settings({"spark.sink.path": OUT})
        write_batch(spark, converter.to_dataframe(spark, [("a", 1), ("b", 2)]), settings, "t1-b1")
        write_batch(spark, converter.to_dataframe(spark, [("c", 3)]), settings, "t1-b2")
        print(sorted(tuple(r) for r in spark.read.parquet(OUT).collect()))
        session.release_session("done")
        """, connect.remote, tmp_path / "out")
    assert last == "[('a', 1), ('b', 2), ('c', 3)]"


def test_spark_state_through_connect_replaces_a_replayed_txid(connect: SparkConnectServer, tmp_path: Path) -> None:
    last = run_client("""
        from stormpy.spark import session
        from stormpy.trident import SparkState
        from stormpy.trident.operations import TridentTuple
        factory = SparkState(path=OUT, partition_by="word")
        state = factory.make_state({"spark.remote": REMOTE, "topology.name": "t"}, None, 0, 1)
        index = {"word": 0, "n": 1}
        for txid, rows in ((1, [("a", 1), ("b", 2)]), (2, [("c", 3)]), (2, [("c", 30), ("d", 4)])):
            batch = [TridentTuple(list(r), index) for r in rows]
            SparkState.updater().batch_complete(state, txid, batch)
            state.begin_commit(txid)
            SparkState.updater().update_state(state, batch, None)
            state.commit(txid)
        assert state._arrow is False, "through Connect the executors write the files, not pyarrow"
        spark = state._spark
        print(sorted((r["word"], r["n"]) for r in spark.read.parquet(OUT).collect()))
        state.close()
        """, connect.remote, tmp_path / "out")
    assert last == "[('a', 1), ('b', 2), ('c', 30), ('d', 4)]"


def test_spark_state_commit_group_through_connect_is_one_job_and_each_txid_stays_replaceable(
        connect: SparkConnectServer, tmp_path: Path) -> None:
    last = run_client("""
        from stormpy.trident import SparkState
        from stormpy.trident.operations import TridentTuple
        factory = SparkState(path=OUT)
        state = factory.make_state({"spark.remote": REMOTE, "topology.name": "t", "spark.sink.max.inflight.batches": 1,
                                    "spark.state.max.batches.per.write": 8}, None, 0, 1)
        index = {"word": 0, "n": 1}
        updater = SparkState.updater()
        batches = {t: [TridentTuple([w, t], index) for w in ("x", "y")] for t in range(1, 7)}
        for txid in range(1, 7):   # ready while the first job runs: 2..6 go to Spark as one table, one job
            updater.batch_complete(state, txid, batches[txid])
        for txid in range(1, 6):
            state.begin_commit(txid)
            updater.update_state(state, batches[txid], None)
            state.commit(txid)
        replay = [TridentTuple(["z", 6], index)]   # txid 6 replayed with other rows: only its files change
        state.begin_commit(6)
        updater.update_state(state, replay, None)
        state.commit(6)
        assert state.stats["largest_group"] >= 2 and state.stats["writes"] < 6, state.stats
        spark = state._spark
        print(sorted((r["word"], r["n"]) for r in spark.read.parquet(OUT).collect()))
        state.close()
        """, connect.remote, tmp_path / "out")
    assert last == str(sorted([(w, t) for t in range(1, 6) for w in ("x", "y")] + [("z", 6)]))


def test_spark_state_through_connect_hands_rows_over_as_parquet_and_leaves_no_staging_files(
        connect: SparkConnectServer, tmp_path: Path) -> None:
    """The default through Connect: each job reads its rows from a Parquet file staged beside the
    output; single batches, a commit group, a replay and a failed job all leave nothing behind."""
    last = run_client("""
        import os
        from stormpy.trident import SparkState
        from stormpy.trident.operations import TridentTuple

        def leftovers():
            staging = os.path.join(OUT, "_stormpy_staging")
            return sorted(os.listdir(staging)) if os.path.isdir(staging) else []

        factory = SparkState(path=OUT, partition_by="word")
        state = factory.make_state({"spark.remote": REMOTE, "topology.name": "t", "spark.sink.max.inflight.batches": 1,
                                    "spark.state.max.batches.per.write": 8}, None, 0, 1)
        index = {"word": 0, "n": 1}
        updater = SparkState.updater()

        def commit(txid, batch):
            state.begin_commit(txid)
            updater.update_state(state, batch, None)
            state.commit(txid)

        batches = {t: [TridentTuple([w, t], index) for w in ("x", "y")] for t in range(1, 6)}
        for txid in range(1, 6):
            updater.batch_complete(state, txid, batches[txid])
        for txid in range(1, 5):
            commit(txid, batches[txid])
        commit(5, [TridentTuple(["z", 5], index)])   # txid 5 replayed with other rows: replaces them
        commit(6, [TridentTuple(["x", 6], index)])   # a batch written at its commit
        commit(6, [TridentTuple(["w", 60], index)])  # and its replay
        assert state._parquet is True and state._arrow is False, (state._parquet, state._arrow)
        assert state.stats["largest_group"] >= 2 and state.stats["prepared"] >= 1, state.stats
        assert leftovers() == [], leftovers()
        spark = state._spark
        result = sorted((r["word"], r["n"]) for r in spark.read.parquet(OUT).collect())
        state.close()

        failing = SparkState(path=OUT + "-bad", options={"compression": "no-such-codec"}).make_state(
            {"spark.remote": REMOTE, "topology.name": "t"}, None, 0, 1)
        try:
            failing.begin_commit(1)
            updater.update_state(failing, [TridentTuple(["a", 1], index)], None)
        except Exception as exc:
            assert "no-such-codec" in str(exc), exc
        else:
            raise AssertionError("the write with an unknown codec did not fail")
        assert failing._parquet is True
        assert not os.path.isdir(OUT + "-bad/_stormpy_staging") or not os.listdir(OUT + "-bad/_stormpy_staging")
        failing.close()
        print(result)
        """, connect.remote, tmp_path / "out")
    assert last == str(sorted([(w, t) for t in range(1, 5) for w in ("x", "y")] + [("z", 5), ("w", 60)]))


SINK_TOPOLOGY = """
import os
from stormpy import Spout, Topology
from stormpy.local.runner import LocalTopology
from stormpy.spark import session
from stormpy.spark.sink import SparkSinkBolt
from stormpy.testing import wait_until

class Rows(Spout):
    outputs = ["id", "word"]

    def initialize(self, conf, context):
        self.todo = list(range(int(conf["test.rows"])))[::-1]
        self.acked, self.failed = set(), []

    def next_tuple(self):
        if self.todo:
            i = self.todo.pop()
            self.emit([i, f"w{i % 3}"], tup_id=i)

    def ack(self, i):
        self.acked.add(i)

    def fail(self, i):
        self.failed.append(i)
        self.todo.append(i)

class ToSink(Topology):
    rows = Rows.spec()
    sink = SparkSinkBolt.spec(inputs=[rows])

def start(name, out, n, **extra):
    conf = {"spark.remote": REMOTE, "spark.sink.path": out, "spark.sink.batch.size": 400, "spark.sink.batch.secs": 1,
            "spark.sink.max.inflight.batches": 1, "topology.message.timeout.secs": 60, "test.rows": n, **extra}
    local = LocalTopology(ToSink, name, conf).start()
    parts = {ex.component_id: task.component for ex in local.runtime.executors.values() for task in ex.tasks.values()}
    return local, parts["rows"], parts["sink"]

def leftovers(out):
    staging = os.path.join(out, "_stormpy_staging")
    return sorted(os.listdir(staging)) if os.path.isdir(staging) else []
"""


def test_sink_through_connect_hands_batches_over_as_parquet_writes_each_row_once_and_leaves_no_staging_files(
        connect: SparkConnectServer, tmp_path: Path) -> None:
    """SparkSinkBolt's built-in writer through Connect: each batch goes to Spark as a staged Parquet
    file, a failed write (before the job, and inside the Spark job) fails the batch's tuples, the
    replays are written once, and no hand-over or staging files stay behind."""
    last = run_client(SINK_TOPOLOGY + """
spark = session.acquire_session({"spark.remote": REMOTE})   # shared with the sinks, for reading
n = 1000
os.makedirs(OUT)
blocker = os.path.join(OUT, "_stormpy_staging")
with open(blocker, "w") as handle:   # a file where the staging directory goes: the first writes fail
    handle.write("x")
local, spout, sink = start("sink-connect", OUT, n)
try:
    wait_until(lambda: sink.metrics["failed_batches"] >= 1, 120, "a write failing on the blocked staging directory")
    assert not spout.acked, "a tuple was acked although its batch's write failed"
    os.remove(blocker)
    wait_until(lambda: len(spout.acked) == n, 120, f"all {n} rows acked after the replays")
    targets = dict(sink._parquet_targets)
finally:
    local.stop(drain_secs=5)
assert sink._arrow is False and list(targets.values()) == [OUT], (sink._arrow, targets)
assert spout.failed and sink.metrics["rows"] == n, (len(spout.failed), sink.metrics)
ids = sorted(r["id"] for r in spark.read.parquet(OUT).collect())
assert ids == list(range(n)), f"{len(ids)} rows read, {len(set(ids))} distinct"
assert leftovers(OUT) == [], leftovers(OUT)
written = sorted(name for name in os.listdir(OUT) if not name.startswith("_"))
assert all(name.startswith("part-") and name.endswith(".snappy.parquet") for name in written), written

bad = OUT + "-bad"   # every Spark job fails: after its hand-over file was written
local, spout, sink = start("sink-connect-bad", bad, 300, **{"spark.sink.options": {"compression": "no-such-codec"}})
try:
    wait_until(lambda: sink.metrics["failed_batches"] >= 2, 120, "two failed Spark jobs")
    errors = [text for _, _, text in local.reporter.errors.get("sink", [])]
finally:
    local.stop(drain_secs=0)
assert sink._parquet_targets and list(sink._parquet_targets.values()) == [bad]
assert not spout.acked and spout.failed
assert any("no-such-codec" in text for text in errors), errors[:1]
assert leftovers(bad) == [], leftovers(bad)
session.release_session("done")
print("ok", len(ids))
""", connect.remote, tmp_path / "out")
    assert last == "ok 1000"


TOPOLOGY_ON_S3 = """
from stormpy.trident import BatchSpout, SparkState, TridentTopology

class Lines(BatchSpout):
    outputs = ["line"]

    def emit_batch(self, batch_id, collector):
        collector.emit(["x"])

class OnS3(TridentTopology):
    def build(self, conf):
        self.new_stream("s", Lines()).partition_persist(SparkState(path="s3a://bucket/out"), ["line"],
                                                        SparkState.updater())
"""


def test_submit_refuses_a_spark_state_on_an_object_store_in_one_line(tmp_path: Path) -> None:
    topology = tmp_path / "on_s3.py"
    topology.write_text(TOPOLOGY_ON_S3)
    done = subprocess.run([sys.executable, "-m", "stormpy.cli", "submit", str(topology), "-c",
                           "nimbus.seeds=['127.0.0.1']"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    errors = [line for line in done.stderr.splitlines() if "stormpy: error:" in line or "Traceback" in line]
    assert done.returncode == 1 and len(errors) == 1, done.stderr
    assert "s3a:// is an object store, where a rename is a copy" in errors[0]
