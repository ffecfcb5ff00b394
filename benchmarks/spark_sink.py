"""Benchmark: rows/s through SparkSinkBolt into Parquet vs writing the same rows directly (issue 5).

    python benchmarks/spark_sink.py                       # batch sizes 10k and 50k, local[2]
    python benchmarks/spark_sink.py --rows 500000 --rounds 3 --batch-sizes 10000,50000
    python benchmarks/spark_sink.py --topology-only --pending 2 --connect start   # the issue-23 figures

``--topology-only`` runs just ``topology`` (the embedded default: pyarrow writer) and
``engine-only``, alternating in each round, and prints beside the wall-clock ratio the ratio of
rows per CPU-second of this process (both topologies run in it), the steadier figure on a
shared machine; ``--pending`` is ``topology.max.spout.pending`` in batches.

One SparkSession serves every method, so all of them run warm and in the same conditions;
methods alternate within each round and the median round is reported, because this machine's
two cores are shared. For each batch size, the same pre-built rows go to Parquet as:

- ``direct-arrow``: what a careful PySpark user writes by hand: rows -> pyarrow Table ->
  ``spark.createDataFrame`` -> ``df.write.parquet`` (append), one DataFrame per batch;
- ``direct-rows``: the plain way, ``spark.createDataFrame(list_of_rows, schema)``;
- ``sink``: the rows as Tuples (namedtuple values, as executors deliver them) through
  ``SparkSinkBolt.process`` -> batching -> Arrow -> ``handle_batch`` -> Parquet, with every
  tuple acked after its batch's write returned. This is the sink's whole cost; tuple transport
  and the acker are the engine's and are measured by its own benchmarks;
- ``topology-sync`` (with ``--sync-too``): the same topology with
  ``spark.sink.max.inflight.batches=0``, i.e. every write on the sink's executor thread (the
  behaviour before the overlap);
- ``topology`` (unless ``--no-topology``): a spout emitting the rows through ``stormpy local``'s
  runtime (executors, transfer, XOR acker) into the sink, acked end to end: the rate a user
  sees, engine included; ``engine-only`` is the same spout into a bolt that drops the tuples,
  the engine's ceiling on this machine at that moment. ``sink`` and ``topology`` use the
  default writer here (pyarrow: ``spark.sink.writer: auto``); ``sink-spark`` and
  ``topology-spark`` write each batch with a Spark job (``spark.sink.writer: spark``);
  ``--connect`` adds ``topology-connect`` through a Spark Connect server (in a child process),
  beside the same topology into a discarding bolt with the same settings: by default the ones
  the docs recommend through Spark Connect (``--connect-pending`` 16 batches of
  ``topology.max.spout.pending``, ``spark.sink.max.inflight.batches`` 1,
  ``spark.state.max.batches.per.write`` 8; ``--connect-conf``).

The ratios printed are sink / best direct method and topology / best direct method. Issue 5's
target: sink ratio >= 0.8 and >= 100,000 rows/s at 50k-row batches.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stormpy import Bolt, Spout, Topology  # noqa: E402
from stormpy.spark.session import acquire_session, release_session  # noqa: E402
from stormpy.spark.sink import SparkSinkBolt  # noqa: E402
from stormpy.api.tuple import Tuple, values_class  # noqa: E402

log = logging.getLogger("benchmarks.spark_sink")

FIELDS = ("word", "count", "ts")
SCHEMA_DDL = "word STRING, count BIGINT, ts DOUBLE"


def make_rows(n: int) -> list[list[Any]]:
    """Word-count-like rows: a string, an int and a float per row."""
    return [[f"word{i % 5000}", i % 97, 1.7e9 + i * 0.001] for i in range(n)]


def chunks(rows: list[Any], size: int) -> list[list[Any]]:
    return [rows[i:i + size] for i in range(0, len(rows), size)]


# ---------------------------------------------------------------- direct methods

def direct_arrow(spark: Any, rows: list[list[Any]], batch: int, out: Path) -> list[float]:
    """Rows -> pyarrow Table -> DataFrame -> Parquet, per batch; returns seconds per batch."""
    times = []
    for chunk in chunks(rows, batch):
        started = time.perf_counter()
        columns = list(zip(*chunk))
        table = pa.Table.from_arrays([pa.array(c) for c in columns], names=list(FIELDS))
        spark.createDataFrame(table).write.mode("append").parquet(str(out))
        times.append(time.perf_counter() - started)
    return times


def direct_rows(spark: Any, rows: list[list[Any]], batch: int, out: Path) -> list[float]:
    """``createDataFrame(list_of_rows, schema)`` -> Parquet, per batch."""
    times = []
    for chunk in chunks(rows, batch):
        started = time.perf_counter()
        spark.createDataFrame(chunk, SCHEMA_DDL).write.mode("append").parquet(str(out))
        times.append(time.perf_counter() - started)
    return times


# ---------------------------------------------------------------- through the sink bolt

class BenchTask:
    """What an executor attaches to a bolt: the calls the sink makes back (ack/fail/errors)."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.errors: list[str] = []

    def ack(self, tup: Tuple) -> None:
        tup._done = True
        self.acked += 1

    def ack_many(self, tups: list[Tuple]) -> None:
        for tup in tups:
            if not tup._done:
                self.ack(tup)

    def fail(self, tup: Tuple) -> None:
        tup._done = True
        self.failed += 1

    def call_soon(self, fn: Callable[[], None]) -> None:
        """The writer thread's wake-up: nothing to do here, the loop below settles as it waits."""

    def report_error(self, text: str) -> None:
        self.errors.append(text)

    def emit(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the sink emits nothing")

    @contextmanager
    def anchored(self, tups: Any) -> Iterator[None]:
        """``Bolt.anchored``: the sink emits nothing, so there is nothing to anchor."""
        yield


class BenchContext:
    """The parts of a TopologyContext the sink reads."""

    task_id = 1
    component_id = "sink"

    def get_sources(self) -> dict[tuple[str, str], Any]:
        return {("rows", "default"): None}

    def get_output_fields(self, stream: str = "default", component_id: str | None = None) -> tuple[str, ...]:
        return FIELDS


def make_tuples(rows: list[list[Any]]) -> list[Tuple]:
    cls = values_class("rows", "default", FIELDS)
    return [Tuple(None, "rows", "default", 1, cls(*row), None, 0.0, ("rows", "default")) for row in rows]


def through_sink(conf: dict[str, Any], tuples: list[Tuple], batch: int, out: Path) -> list[float]:
    """Every tuple through ``SparkSinkBolt.process``; returns seconds per batch (wall / batches)."""
    for tup in tuples:
        tup._done = False
    task = BenchTask()
    bolt = SparkSinkBolt()
    bolt._attach(task, "sink", 1)
    bolt.initialize({**conf, "spark.sink.batch.size": batch, "spark.sink.path": str(out),
                     "spark.sink.batch.secs": 30}, BenchContext())
    started = time.perf_counter()
    process = bolt.process
    for tup in tuples:
        process(tup)
    bolt.flush_batches()
    elapsed = time.perf_counter() - started
    bolt.close()
    if task.acked != len(tuples) or task.failed or task.errors:
        raise RuntimeError(f"sink acked {task.acked} of {len(tuples)}, failed {task.failed}: {task.errors[:1]}")
    batches = max(1, bolt.metrics.get("batches", 1))
    return [elapsed / batches] * int(batches)


# ---------------------------------------------------------------- through a topology

class BenchRowSpout(Spout):
    """Emits ``bench.rows`` rows once, each tracked by the acker (tup_id = row number)."""

    outputs = list(FIELDS)

    def initialize(self, stormconf: dict[str, Any], context: Any) -> None:
        self.rows = make_rows(int(stormconf["bench.rows"]))
        self.next = 0
        self.acked = 0
        self.failed = 0

    def next_tuple(self) -> None:
        if self.next < len(self.rows):
            self.emit(self.rows[self.next], tup_id=self.next)
            self.next += 1

    def ack(self, tup_id: int) -> None:
        self.acked += 1

    def fail(self, tup_id: int) -> None:
        self.failed += 1


class BenchSinkTopology(Topology):
    rows = BenchRowSpout.spec()
    sink = SparkSinkBolt.spec(inputs=[rows])


class DiscardBolt(Bolt):
    """Acks and drops every tuple: the engine's own ceiling for the same spout."""

    def process(self, tup: Tuple) -> None:
        pass


class BenchEngineTopology(Topology):
    rows = BenchRowSpout.spec()
    sink = DiscardBolt.spec(inputs=[rows])


#: ``topology.max.spout.pending`` of the topology runs, in batches (``--pending``).
PENDING_BATCHES = 2
#: The sink through Spark Connect as the docs recommend it (docs/concepts/trident-state.md): enough
#: batches pending that the spout never waits for a whole batch's acks, one Spark job at a time,
#: and up to 8 batches' rows in one job while the writer is busy.
CONNECT_PENDING = 16
CONNECT_CONF = {"spark.sink.max.inflight.batches": 1, "spark.state.max.batches.per.write": 8}
#: This process's CPU seconds (every thread) in the last ``through_topology`` run, start to last ack.
LAST_RUN_CPU = [0.0]


def through_topology(conf: dict[str, Any], n: int, batch: int, out: Path,
                     topology: type = BenchSinkTopology) -> list[float]:
    """spout -> SparkSinkBolt in the local runtime, acked end to end; seconds per batch."""
    from stormpy.local.runner import LocalTopology

    local = LocalTopology(topology, "bench-spark-sink", {
        **conf, "bench.rows": n, "spark.sink.batch.size": batch, "spark.sink.path": str(out),
        "spark.sink.batch.secs": 5, "topology.max.spout.pending": int(PENDING_BATCHES * batch)})
    spout: Any = None
    local.start(active=False)
    try:
        spout = next(t.component for ex in local.runtime.executors.values() if ex.component_id == "rows"
                     for t in ex.tasks.values())
        started, cpu = time.perf_counter(), time.process_time()
        local.runtime.set_active(True)
        deadline = time.monotonic() + 600
        while spout.acked + spout.failed < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"topology run: only {spout.acked} of {n} rows acked after 600 s")
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        LAST_RUN_CPU[0] = time.process_time() - cpu
    finally:
        local.stop(drain_secs=5)
    if spout.failed:
        raise RuntimeError(f"topology run: {spout.failed} rows failed")
    batches = max(1, -(-n // batch))
    return [elapsed / batches] * batches


# ---------------------------------------------------------------- reporting

def rate(rows: int, times: list[float]) -> float:
    return rows / sum(times) if times else 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def measure(name: str, fn: Callable[[Path], list[float]], rows: int, workdir: Path, results: dict[str, list[Any]],
            spark: Any) -> None:
    out = workdir / name
    shutil.rmtree(out, ignore_errors=True)
    times = fn(out)
    written = spark.read.parquet(str(out)).count()
    if written != rows:
        raise RuntimeError(f"{name} wrote {written} rows, expected {rows}")
    shutil.rmtree(out, ignore_errors=True)
    results.setdefault(name, []).append((rate(rows, times), times))


def engine_only(fn: Callable[[], list[float]], rows: int, results: dict[str, list[Any]]) -> None:
    """Like ``measure`` for the run that writes nothing (the engine's ceiling)."""
    times = fn()
    results.setdefault("engine-only", []).append((rate(rows, times), times))


def main(argv: list[str] | None = None) -> int:
    global PENDING_BATCHES
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=300_000, help="rows per measurement")
    parser.add_argument("--batch-sizes", default="10000,50000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-topology", action="store_true", help="skip the spout -> sink topology runs")
    parser.add_argument("--sync-too", action="store_true",
                        help="also run the topology with spark.sink.max.inflight.batches=0 (no overlap)")
    parser.add_argument("--connect", default=None, metavar="sc://HOST:PORT",
                        help="also the topology through this Spark Connect server ('start': one started from the "
                             "pyspark wheel, its driver on --master)")
    parser.add_argument("--pending", type=float, default=2, metavar="BATCHES",
                        help="topology.max.spout.pending of the topology runs, in batches (default %(default)s)")
    parser.add_argument("--connect-pending", type=float, default=CONNECT_PENDING, metavar="BATCHES",
                        help="topology.max.spout.pending of both topologies in the Spark Connect part, in batches "
                             "(default %(default)s)")
    parser.add_argument("--connect-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a config key of both topologies in the Spark Connect part (repeatable; over "
                             + ", ".join(f"{k}={v}" for k, v in CONNECT_CONF.items()) + ")")
    parser.add_argument("--warm-jobs", type=int, default=60,
                        help="Spark jobs of an unmeasured sink topology run (10,000-row batches, one job each) that "
                             "warm the Spark Connect server's JIT before the measured runs (default %(default)s)")
    parser.add_argument("--connect-only", action="store_true",
                        help="with --topology-only and --connect: only the Spark Connect part")
    parser.add_argument("--topology-only", action="store_true",
                        help="only the topology into the sink (Arrow writer) and engine-only, alternating; "
                             "no SparkSession in this process")
    parser.add_argument("--connect-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    PENDING_BATCHES = args.pending
    if args.connect_child:
        connect_child(args)
        return 0
    if args.topology_only:
        if not (args.connect_only and args.connect):
            topology_only(args)
        if args.connect:
            connect_part(args)
        return 0

    conf = {"spark.master": args.master, "spark.ui.enabled": False, "spark.sql.shuffle.partitions": 2,
            "topology.message.timeout.secs": 60}
    workdir = Path(tempfile.mkdtemp(prefix="stormpy-bench-spark-"))
    spark = acquire_session(conf)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rows = make_rows(args.rows)
        tuples = make_tuples(rows)
        print(f"warming up ({args.master}) ...", flush=True)
        warm = min(100_000, len(rows))
        for _ in range(2):
            measure("warmup-arrow", lambda out: direct_arrow(spark, rows[:warm], 10_000, out), warm,
                    workdir, {}, spark)
            measure("warmup-sink", lambda out: through_sink(conf, tuples[:warm], 10_000, out), warm,
                    workdir, {}, spark)
        report: list[tuple[int, dict[str, list[Any]]]] = []
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            results: dict[str, list[Any]] = {}
            for round_no in range(args.rounds):
                measure("direct-arrow", lambda out: direct_arrow(spark, rows, batch, out), len(rows), workdir,
                        results, spark)
                measure("sink", lambda out: through_sink(conf, tuples, batch, out), len(rows), workdir, results, spark)
                measure("direct-rows", lambda out: direct_rows(spark, rows, batch, out), len(rows), workdir,
                        results, spark)
                spark_job = {**conf, "spark.sink.writer": "spark"}
                measure("sink-spark", lambda out: through_sink(spark_job, tuples, batch, out), len(rows), workdir,
                        results, spark)
                if not args.no_topology:
                    measure("topology", lambda out: through_topology(conf, len(rows), batch, out), len(rows),
                            workdir, results, spark)
                    measure("topology-spark", lambda out: through_topology(spark_job, len(rows), batch, out),
                            len(rows), workdir, results, spark)
                    if args.sync_too:
                        sync = {**spark_job, "spark.sink.max.inflight.batches": 0}
                        measure("topology-sync", lambda out: through_topology(sync, len(rows), batch, out),
                                len(rows), workdir, results, spark)
                    engine_only(lambda: through_topology(conf, len(rows), batch, workdir / "none",
                                                         BenchEngineTopology), len(rows), results)
                print(f"  batch {batch}: round {round_no + 1}/{args.rounds} done", flush=True)
            report.append((batch, results))
        print_report(report, len(rows), args)
    finally:
        release_session("benchmark finished")
        shutil.rmtree(workdir, ignore_errors=True)
    if args.connect:
        connect_part(args)
    return 0


def timed_run(fn: Callable[[], list[float]], rows: int) -> tuple[float, float]:
    """(rows per wall second, rows per CPU second of this process) of one run."""
    times = fn()
    cpu = LAST_RUN_CPU[0]
    return rate(rows, times), rows / cpu if cpu > 0 else 0.0


def topology_only(args: argparse.Namespace) -> None:
    """The topology into the sink with the embedded default (pyarrow writer) and the same
    topology into a discarding bolt, alternating, each round; no SparkSession is started here
    (the Arrow writer needs none), the rows written are counted with pyarrow."""
    import pyarrow.dataset as ds

    conf = {"spark.master": args.master, "topology.message.timeout.secs": 60}
    workdir = Path(tempfile.mkdtemp(prefix="stormpy-bench-spark-"))
    print(f"Spark sink topology vs engine-only: {args.rows} rows per run, {args.rounds} rounds (median), "
          f"max.spout.pending {args.pending} batches, master {args.master}")
    print(f"{'batch':>7} {'round':>5} {'topology':>10} {'engine-only':>12} {'ratio':>6} {'cpu ratio':>9}")
    try:
        for topology in (BenchSinkTopology, BenchEngineTopology):   # imports, first writes: not measured
            through_topology(conf, 20_000, 10_000, workdir / "warmup", topology)
        shutil.rmtree(workdir / "warmup", ignore_errors=True)
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            ratios, cpu_ratios = [], []
            for round_no in range(args.rounds):
                out = workdir / f"t-{batch}-{round_no}"
                sink, sink_cpu = timed_run(lambda: through_topology(conf, args.rows, batch, out), args.rows)
                written = ds.dataset(str(out), format="parquet").count_rows()
                if written != args.rows:
                    raise RuntimeError(f"topology wrote {written} rows, expected {args.rows}")
                shutil.rmtree(out, ignore_errors=True)
                engine, engine_cpu = timed_run(lambda: through_topology(conf, args.rows, batch, workdir / "none",
                                                                        BenchEngineTopology), args.rows)
                ratios.append(sink / engine)
                cpu_ratios.append(sink_cpu / engine_cpu)
                print(f"{batch:>7} {round_no + 1:>5} {sink:>10,.0f} {engine:>12,.0f} {sink / engine:>5.2f}x "
                      f"{sink_cpu / engine_cpu:>8.2f}x", flush=True)
            print(f"{batch:>7} topology / engine-only = {statistics.median(ratios):.2f}x (median of {args.rounds}; "
                  f"rows per CPU-second {statistics.median(cpu_ratios):.2f}x)", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def connect_part(args: argparse.Namespace) -> None:
    """The spout -> sink topology through Spark Connect beside the engine-only one, in a child
    process (a process has one SparkSession, and main's is a classic one)."""
    from stormpy.testing.spark_cluster import run_connect_child

    extra = [arg for item in args.connect_conf for arg in ("--connect-conf", item)]
    print(run_connect_child(args.connect, args.master, [sys.executable, __file__, "--rows", str(args.rows),
                             "--batch-sizes", args.batch_sizes, "--rounds", str(args.rounds),
                             "--pending", str(args.connect_pending), "--warm-jobs", str(args.warm_jobs),
                             *extra]), flush=True)


def connect_conf(items: list[str]) -> dict[str, Any]:
    """``CONNECT_CONF`` with the ``--connect-conf KEY=VALUE`` overrides (values read as YAML)."""
    import yaml

    conf: dict[str, Any] = dict(CONNECT_CONF)
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--connect-conf wants KEY=VALUE, got {item!r}")
        conf[key] = yaml.safe_load(value)
    return conf


def connect_child(args: argparse.Namespace) -> None:
    import pyarrow.dataset as ds

    conf = {"spark.remote": args.connect_child, "topology.message.timeout.secs": 60, **connect_conf(args.connect_conf)}
    print(f"Spark Connect part: topology.max.spout.pending {args.pending} batches, "
          + ", ".join(f"{k}={v}" for k, v in conf.items() if k.startswith(("spark.sink", "spark.state"))) + ", for both topologies",
          flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="stormpy-bench-spark-connect-"))
    # Held for the whole child, as main() holds its session: the sinks of every run share it
    # (started once, not per run). A Connect server runs for long: its first Spark jobs run
    # several times slower than warm ones (JIT; measured 8 s, then 0.6 s falling to ~0.2 s over
    # ~20 jobs of 80k rows, and still falling after 20 small ones: 10k-row batches measured
    # 0.53-0.64x of engine-only after 20 warm-up jobs, 0.63-0.68x after 60), so a warm-up run of
    # 10k-row batches, a job each, goes first.
    acquire_session(conf)
    try:
        warm = 10_000
        through_topology({**conf, "spark.state.max.batches.per.write": 1}, max(2, args.warm_jobs) * warm, warm,
                         workdir / "warmup")
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            got: dict[str, list[float]] = {"connect": [], "engine": [], "cpu": []}
            for round_no in range(args.rounds):
                out = workdir / f"c-{batch}-{round_no}"
                connect, connect_cpu = timed_run(lambda: through_topology(conf, args.rows, batch, out), args.rows)
                written = ds.dataset(str(out), format="parquet").count_rows()
                if written != args.rows:
                    raise RuntimeError(f"Spark Connect run wrote {written} rows, expected {args.rows}")
                engine, engine_cpu = timed_run(lambda: through_topology(conf, args.rows, batch, workdir / "none",
                                                                        BenchEngineTopology), args.rows)
                got["connect"].append(connect)
                got["engine"].append(engine)
                got["cpu"].append(connect_cpu / engine_cpu if engine_cpu else 0.0)
            connect, engine = statistics.median(got["connect"]), statistics.median(got["engine"])
            print(f"{batch:>7} topology-connect ({args.connect_child}) {connect:>10,.0f} rows/s / engine-only "
                  f"{engine:,.0f} = {connect / engine:.2f}x (rows per CPU-second of the worker "
                  f"{statistics.median(got['cpu']):.2f}x)", flush=True)
    finally:
        release_session("benchmark finished")
        shutil.rmtree(workdir, ignore_errors=True)


def print_report(report: list[tuple[int, dict[str, list[Any]]]], rows: int, args: argparse.Namespace) -> None:
    print()
    print(f"Spark sink benchmark: {rows} rows per run, {args.rounds} rounds (median), master {args.master}")
    print(f"{'batch':>7} {'method':<13} {'rows/s':>10} {'s/batch p50':>12} {'p95':>7}")
    for batch, results in report:
        medians: dict[str, float] = {}
        for name, runs in results.items():
            rates = [r for r, _ in runs]
            medians[name] = statistics.median(rates)
            all_times = [t for _, times in runs for t in times]
            print(f"{batch:>7} {name:<13} {medians[name]:>10,.0f} {percentile(all_times, 0.5):>12.3f} "
                  f"{percentile(all_times, 0.95):>7.3f}")
        best = max(medians.get("direct-arrow", 0.0), medians.get("direct-rows", 0.0))
        for name in ("sink", "sink-spark", "topology", "topology-spark", "topology-sync"):
            if name in medians and best:
                print(f"{batch:>7} {name} / best direct = {medians[name] / best:.2f}x")
        for name in ("topology", "topology-spark", "topology-sync"):
            if medians.get("engine-only") and name in medians:
                print(f"{batch:>7} {name} / engine-only = {medians[name] / medians['engine-only']:.2f}x")
    print()


if __name__ == "__main__":
    sys.exit(main())
