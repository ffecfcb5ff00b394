"""Benchmark: Trident word count (exactly-once) against the core acked word count, same run.

    python benchmarks/trident_wordcount.py [--secs 10] [--warmup 3] [--per-batch 1000] [--cluster]

Topology, written as users write Trident: a transactional PartitionedSpout (4 partitions over
the bundled text, ``--per-batch`` lines per partition per batch, spout par 2), a split Function
(par 2), ``group_by("word")`` and ``persistent_aggregate(..., Count(), ["count"])`` (par 2) into
MemoryMapState and then into SqliteMapState. Printed per state: committed words/s (read back
from the state itself: what is counted exactly once), batches committed/s and the commit
latency p50/p99 (coordinator ``$commit`` emit -> ack, from its metrics); then, measured in the
same run, the core acked word count of benchmarks/local_wordcount.py (split/count par 2) with
the ratio, and the bare SimpleQueue handoff that every local figure is relative to.

``--cluster``: the same on a real process cluster (ZooKeeper, Nimbus, one supervisor, 2 workers;
SqliteMapState only, as MemoryMapState is per process), against the core figure of
benchmarks/cluster_wordcount.py's topology on the same cluster. Printed with it: the CPU the
workers got (% of one core each) and committed words per worker CPU-second, which a loaded
machine disturbs far less than words/s. ``--cluster-only`` skips the local part;
``--profile DIR`` samples the Trident workers with py-spy over the measured window (as
``cluster_wordcount.py --profile`` does) and prints their heaviest functions.
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_wordcount import run_handoff, run_topology  # noqa: E402

from stormpy.local.runner import LocalTopology  # noqa: E402
from stormpy.task import tuple_path_build  # noqa: E402
from stormpy.trident import MemoryMapState, SqliteMapState, TridentTopology  # noqa: E402
from trident_bench_topology import build_word_count  # noqa: E402



def trident_topology(state: Any, per_batch: int) -> type[TridentTopology]:
    class BenchTrident(TridentTopology):
        def build(self, conf: Any) -> None:
            build_word_count(self, state, per_batch)
    return BenchTrident


def committed_words(state: Any) -> int:
    return sum(value for _key, value in state.open_map().items())


def _coordinator(local: LocalTopology) -> Any:
    for executor in local.runtime.executors.values():
        if executor.component_id.startswith("$mastercoord"):
            return executor
    raise RuntimeError("no $mastercoord executor")


def _committed_batches(local: LocalTopology) -> int:
    return int(_coordinator(local).stats.metrics().get("trident.batches.committed", 0))


def _commit_latencies(local: LocalTopology) -> list[float]:
    samples: list[float] = []
    for task in _coordinator(local).tasks.values():
        samples.extend(task.component.commit_latencies_ms)
    return sorted(samples)


def run_trident(state: Any, label: str, secs: float, warmup: float, per_batch: int, pending: int) -> dict[str, float]:
    overrides = {"topology.max.spout.pending": pending, "topology.trident.batch.emit.interval.millis": 0,
                 "topology.message.timeout.secs": 60}
    local = LocalTopology(trident_topology(state, per_batch), f"bench-trident-{label}", user_overrides=overrides)
    local.start()
    try:
        time.sleep(warmup)
        w0, b0, t0 = committed_words(state), _committed_batches(local), time.perf_counter()
        time.sleep(secs)
        w1, b1, t1 = committed_words(state), _committed_batches(local), time.perf_counter()
        latencies = _commit_latencies(local)
    finally:
        local.stop(drain_secs=2)
    elapsed = t1 - t0
    result = {"words_per_s": (w1 - w0) / elapsed, "batches_per_s": (b1 - b0) / elapsed}
    if latencies:
        result["commit_p50_ms"] = statistics.median(latencies)
        result["commit_p99_ms"] = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return result


def run_cluster(secs: float, warmup: float, per_batch: int, profile_dir: Path | None = None) -> None:
    """Core acked word count, then the Trident one, on one real cluster (1 supervisor, 2 workers)."""
    import shutil

    from cluster_wordcount import BenchCluster, run_phase, start_profiles, summarize_profile, workers_build

    from stormpy.client.nimbus_client import connect
    from stormpy.testing import wait_until

    base = Path(tempfile.mkdtemp(prefix="stormpy-bench-trident-"))
    cluster = BenchCluster(base)
    try:
        cluster.start()
        core_run = run_phase(cluster, "bench-core", 0, warmup, secs, per_call=1)
        core = core_run["words_per_sec"]
        print(f"cluster core acked word count (2 workers, 1 sentence per next_tuple(), workers "
              f"{core_run['workers_build']}): {core:,.0f} counted words/s",
              flush=True)
        db = base / "counts.db"
        state = SqliteMapState.transactional(str(db))
        topology = Path(__file__).resolve().parent / "trident_bench_topology.py"
        cluster.cli("submit", str(topology), "--name", "bench-trident", "-c", f"bench.db={db}",
                    "-c", f"bench.per.batch={per_batch}",
                    "-c", f"bench.text={Path(__file__).resolve().parent.parent / 'examples' / 'data' / 'sentences.txt'}")

        def executor_metrics() -> list[tuple[str, dict[str, float]]]:
            with connect(cluster.conf) as client:
                topo = next(t for t in client.getClusterInfo().topologies if t.name == "bench-trident")
                info = client.getTopologyInfo(topo.id)
            return [(ex.component_id, dict(ex.stats.metrics or {})) for ex in info.executors if ex.stats is not None]

        def coordinator_metrics() -> dict[str, float]:
            return next((m for c, m in executor_metrics() if c.startswith("$mastercoord")), {})

        wait_until(lambda: db.exists() and committed_words(state) > 0, 180, "bench-trident: first commits")
        time.sleep(warmup)
        workers = cluster.workers()
        profilers = start_profiles(workers, secs, profile_dir)
        cpu0 = {p.pid: sum(p.cpu_times()[:2]) for p in workers}
        w0, t0 = committed_words(state), time.perf_counter()
        b0 = coordinator_metrics().get("trident.batches.committed", 0)
        time.sleep(secs)
        w1, t1 = committed_words(state), time.perf_counter()
        cpu = sum(sum(p.cpu_times()[:2]) - cpu0[p.pid] for p in workers)
        metrics = coordinator_metrics()
        elapsed = t1 - t0
        words = (w1 - w0) / elapsed
        for profiler in profilers:
            profiler.wait(60)
        print(f"cluster trident into SqliteMapState (2 workers): {words:,.0f} committed words/s, "
              f"{(metrics.get('trident.batches.committed', 0) - b0) / elapsed:,.1f} batches/s (heartbeat-granular), "
              f"commit latency p50 {metrics.get('trident.commit.latency.p50.ms', float('nan')):.1f} ms, "
              f"p99 {metrics.get('trident.commit.latency.p99.ms', float('nan')):.1f} ms; "
              f"{words / core:.2f}x the core acked word count", flush=True)
        print(f"  trident workers' tuple path: {workers_build(workers)}")
        print(f"  trident workers' CPU: {cpu / elapsed * 100:.0f}% of one core over {len(workers)} workers; "
              f"{(w1 - w0) / max(cpu, 1e-9):,.0f} committed words per worker CPU-second; batch latency "
              f"p50 {metrics.get('trident.batch.latency.p50.ms', float('nan')):.1f} ms", flush=True)
        tasks = [f"{c} {m['trident.batch.latency.p50.ms']:.1f} ms"
                 for c, m in sorted(executor_metrics(), key=lambda cm: cm[0])
                 if not c.startswith("$") and "trident.batch.latency.p50.ms" in m]
        print(f"  per task, first tuple -> batch complete p50: {', '.join(tasks)}", flush=True)
        if profile_dir is not None:
            for path in sorted(profile_dir.glob("worker-*.txt")):
                print(summarize_profile(path), flush=True)
        cluster.cli("kill", "bench-trident", "-w", "0")
        wait_until(lambda: not cluster.workers(), 120, "bench-trident: workers gone after kill")
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def describe(label: str, r: dict[str, float], core: float, handoff: float) -> str:
    line = (f"trident local into {label}: {r['words_per_s']:,.0f} committed words/s, "
            f"{r['batches_per_s']:,.1f} batches/s")
    if "commit_p50_ms" in r:
        line += f", commit latency p50 {r['commit_p50_ms']:.1f} ms, p99 {r['commit_p99_ms']:.1f} ms"
    line += f"; {r['words_per_s'] / core:.2f}x the core acked word count"
    if handoff:
        line += f", {r['words_per_s'] / handoff:.1%} of the bare handoff"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secs", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument("--per-batch", type=int, default=1000, help="lines per partition per batch (4 partitions)")
    parser.add_argument("--cluster", action="store_true", help="also run on a real 2-worker cluster")
    parser.add_argument("--pending", type=int, default=3, help="topology.max.spout.pending (batches in flight)")
    parser.add_argument("--cluster-only", action="store_true", help="skip the local part (implies --cluster)")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="py-spy profiles of the cluster's Trident workers into DIR (with --cluster)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print(f"tuple path: {tuple_path_build()}", flush=True)
    if args.cluster_only:
        run_cluster(max(args.secs, 15.0), max(args.warmup, 5.0), args.per_batch, args.profile)
        return 0

    handoff = run_handoff(args.secs / 2)
    print(f"raw SimpleQueue handoff only (2 threads, no work): {handoff:,.0f} tuples/s", flush=True)
    core = run_topology(True, args.secs, 2.0, par=2)["words_per_s"]
    print(f"core acked word count (stormpy local, split/count par 2): {core:,.0f} counted words/s "
          f"({core / handoff:.1%} of the bare handoff)", flush=True)
    with tempfile.TemporaryDirectory(prefix="stormpy-bench-trident-") as tmp:
        states = [("MemoryMapState", MemoryMapState.transactional()),
                  ("SqliteMapState", SqliteMapState.transactional(str(Path(tmp) / "counts.db")))]
        for label, state in states:
            r = run_trident(state, label, args.secs, args.warmup, args.per_batch, args.pending)
            print(describe(label, r, core, handoff), flush=True)
    if args.cluster:
        run_cluster(max(args.secs, 15.0), max(args.warmup, 5.0), args.per_batch, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
