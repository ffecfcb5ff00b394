"""Cluster word-count benchmark (issue 4): a real cluster against a raw ZeroMQ pipe, same run.

    python benchmarks/cluster_wordcount.py [--duration 60] [--latency-duration 20]

1. Raw pipe: two processes, pyzmq PUSH/PULL, the same message tuples the workers send
   (``(stream, src_task, [word], {root: edge})``) as msgpack lists of 100 per frame.
2. Throughput: ZooKeeper + ``stormpy nimbus`` + one ``stormpy supervisor`` (2 ports) as real
   processes; ``bench_topology.py`` (sentence spout -> split -> count, acking on) on 2 workers,
   as fast as ``topology.max.spout.pending`` lets it. Counted words/s over ``--duration``
   after a warm-up, worker RSS sampled every 5 s.
3. Latency: the same topology offered half the measured rate; p50/p99 complete latency from
   the spouts' histograms over ``--latency-duration``.

Prints one block of figures and the ratio counted words/s : raw pipe tuples/s.

``--executor-threads one|per-executor`` submits with ``topology.executor.threads`` set (the
default, ``auto``, is what users get). ``--profile DIR`` samples every worker with ``py-spy``
(when installed; ``--gil``: only the thread holding the GIL, so time spent waiting for it is
not counted) over the measured window of the full-rate phase, writes its collapsed stacks per
worker there and prints each worker's heaviest functions by own time and the share of
samples per thread.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack
import psutil
import zmq

REPO = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("stormpy") is None:   # a checkout not installed; else the installed
    sys.path.insert(0, str(REPO))                  # build runs (STORMPY_COMPILE=1: the compiled one)

import stormpy  # noqa: E402
from stormpy.task import tuple_path_build  # noqa: E402
from stormpy.testing import DaemonProcess, ZooKeeperServer, free_port, wait_until  # noqa: E402

#: Where the stormpy this benchmark imports lives: the CLI and daemons import the same one.
STORMPY_ROOT = str(Path(stormpy.__file__).resolve().parents[1])

TOPOLOGY = Path(__file__).resolve().parent / "bench_topology.py"
MESSAGE = ("default", 7, ["zookeeper"], {1234567890123: 9876543210987})


# ---------------------------------------------------------------- raw pipe

def _raw_receiver(port: int, ready: Any, result: Any) -> None:
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"tcp://127.0.0.1:{port}")
    ready.set()
    count = 0
    first = None
    while True:
        frame = pull.recv()
        if frame == b"":
            break
        if first is None:
            first = time.perf_counter()
        for _stream, _src, _values, _anchors in msgpack.unpackb(frame, strict_map_key=False):
            count += 1
    result.put((count, time.perf_counter() - (first or time.perf_counter())))
    pull.close()
    ctx.term()


def raw_pipe(total: int = 2_000_000, per_frame: int = 100) -> float:
    """Tuples/s through a two-process PUSH/PULL pipe, ``per_frame`` tuples per msgpack frame."""
    port = free_port()
    ready, result = mp.Event(), mp.Queue()
    receiver = mp.Process(target=_raw_receiver, args=(port, ready, result), daemon=True)
    receiver.start()
    ready.wait(10)
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 1000)
    push.connect(f"tcp://127.0.0.1:{port}")
    packer = msgpack.Packer()
    batch = [MESSAGE] * per_frame
    for _ in range(total // per_frame):
        push.send(packer.pack(batch))
    push.send(b"")
    count, secs = result.get(timeout=120)
    receiver.join(10)
    push.close()
    ctx.term()
    return count / secs


# ---------------------------------------------------------------- cluster

class BenchCluster:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.zk = ZooKeeperServer(base / "zk", tick_time_ms=1000)
        self.procs: list[DaemonProcess] = []
        self.conf: dict[str, Any] = {}

    def start(self) -> None:
        self.zk.start(timeout=90)
        self.conf = {**self.zk.client_conf("/bench"), "nimbus.seeds": ["127.0.0.1"],
                     "nimbus.thrift.port": free_port(), "storm.local.hostname": "127.0.0.1",
                     "storm.local.dir": str(self.base / "nimbus"), "storm.log.dir": str(self.base / "logs"),
                     "nimbus.monitor.freq.secs": 2, "supervisor.monitor.frequency.secs": 1,
                     "supervisor.sync.freq.secs": 2, "task.refresh.poll.secs": 2}
        # the daemons (and the workers the supervisor forks) start in the cluster's directory: run
        # from a checkout, `python -m` would import the checkout's pure modules before the build
        # this benchmark imports (`STORMPY_COMPILE=1 pip install .` into a virtualenv)
        nimbus = DaemonProcess(["nimbus"], self.conf, self.base / "logs", name="nimbus", cwd=self.base)
        self.procs.append(nimbus.start())
        nimbus.wait_for_port(self.conf["nimbus.thrift.port"], timeout=60)
        sup_conf = {**self.conf, "storm.local.dir": str(self.base / "supervisor"),
                    "supervisor.slots.ports": [free_port(), free_port()], "logviewer.port": free_port()}
        self.procs.append(DaemonProcess(["supervisor"], sup_conf, self.base / "logs", name="supervisor",
                                        cwd=self.base).start())

    def cli(self, *args: str) -> None:
        conf_file = self.base / "client.yaml"
        conf_file.write_text(json.dumps(self.conf))
        env = {**os.environ, "PYTHONPATH": STORMPY_ROOT}
        subprocess.run([sys.executable, "-m", "stormpy.cli", *args, "--config", str(conf_file)], check=True,
                       env=env, capture_output=True, text=True, timeout=120, cwd=self.base)

    def workers(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info["cmdline"] or []
            if "stormpy.worker" in cmd and any(str(self.base) in part for part in cmd):
                found.append(proc)
        return found

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop(reason="benchmark finished")
        for proc in self.workers():
            proc.kill()
        self.zk.stop(reason="benchmark finished")


def read_outputs(out: Path) -> tuple[int, int, dict[int, int]]:
    counted = 0
    acked = 0
    hist: dict[int, int] = {}
    for path in out.glob("count-*.json"):
        try:
            counted += json.loads(path.read_text())["counted"]
        except (OSError, ValueError, KeyError):
            pass
    for path in out.glob("spout-*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        acked += data["acked"]
        for bucket, n in data["hist_half_ms"].items():
            hist[int(bucket)] = hist.get(int(bucket), 0) + n
    return counted, acked, hist


def percentile(hist: dict[int, int], q: float) -> float:
    total = sum(hist.values())
    if total <= 0:
        return float("nan")
    target, seen = q * total, 0
    for bucket in sorted(hist):
        seen += hist[bucket]
        if seen >= target:
            return (bucket + 1) / 2.0
    return max(hist) / 2.0


def start_profiles(workers: list[psutil.Process], duration: float, profile_dir: Path | None) -> list[Any]:
    """py-spy samplers, one per worker, over the measured window (none without ``--profile``)."""
    if profile_dir is None:
        return []
    spy = shutil.which("py-spy")
    if spy is None:
        print("--profile: py-spy is not installed; no profile", flush=True)
        return []
    profile_dir.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen([spy, "record", "--format", "raw", "--threads", "--nonblocking", "--gil", "--rate", "200",
                              "--duration", str(max(1, int(duration))), "--pid", str(p.pid),
                              "-o", str(profile_dir / f"worker-{i}.txt")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i, p in enumerate(workers)]


def summarize_profile(path: Path, top: int = 25) -> str:
    """Own-time shares of the heaviest functions and the sample share of each thread."""
    own: dict[str, int] = {}
    threads: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        thread = frames[0].split("\"")[1] if "\"" in frames[0] else frames[0]
        threads[thread] = threads.get(thread, 0) + n
        leaf = frames[-1]
        own[leaf] = own.get(leaf, 0) + n
    lines = [f"{path.name}: {total} samples; threads: " + ", ".join(
        f"{name} {n / total:.0%}" for name, n in sorted(threads.items(), key=lambda kv: -kv[1]))]
    for leaf, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {n / max(1, total):6.1%}  {leaf}")
    return "\n".join(lines)


def run_phase(cluster: BenchCluster, name: str, rate: float, warmup: float, duration: float,
              per_call: int = 50, conf: tuple[str, ...] = (), profile_dir: Path | None = None) -> dict[str, Any]:
    out = cluster.base / f"out-{name}"
    out.mkdir()
    extra = [arg for item in conf for arg in ("-c", item)]
    cluster.cli("submit", str(TOPOLOGY), "--name", name, "--workers", "2", "-c", f"bench.out.dir={out}",
                "-c", f"bench.rate={rate}", "-c", f"bench.per_call={per_call}", *extra)
    wait_until(lambda: read_outputs(out)[0] > 0, 180, f"{name}: first counted words")
    time.sleep(warmup)
    workers = cluster.workers()
    builds = workers_build(workers)
    profilers = start_profiles(workers, duration, profile_dir)
    cpu0 = {p.pid: sum(p.cpu_times()[:2]) for p in workers}
    c0, a0, h0 = read_outputs(out)
    t0 = time.time()
    rss: list[float] = []
    while time.time() - t0 < duration:
        time.sleep(min(5.0, max(0.1, duration - (time.time() - t0))))
        rss.append(sum(p.memory_info().rss for p in workers) / 2**20 / max(1, len(workers)))
    c1, a1, h1 = read_outputs(out)
    elapsed = time.time() - t0
    for profiler in profilers:
        profiler.wait(60)
    # CPU the workers actually got: on a shared 2-core box this explains low figures
    cpu = [(sum(p.cpu_times()[:2]) - cpu0[p.pid]) / elapsed * 100 for p in workers]
    window = {b: h1.get(b, 0) - h0.get(b, 0) for b in h1}
    cluster.cli("kill", name, "-w", "0")
    wait_until(lambda: not cluster.workers(), 120, f"{name}: workers gone after kill")
    return {"words_per_sec": (c1 - c0) / elapsed, "acked_per_sec": (a1 - a0) / elapsed,
            "p50_ms": percentile(window, 0.50), "p99_ms": percentile(window, 0.99),
            "rss_mb": rss, "workers": 2, "cpu_pct": cpu, "machine_cpu_pct": psutil.cpu_percent(None),
            "workers_build": builds}


def workers_build(workers: list[psutil.Process]) -> str:
    """Which build of the tuple path the workers run, read from the files they map (the
    benchmark's own import says nothing of theirs)."""
    builds = set()
    for proc in workers:
        try:
            paths = [m.path for m in proc.memory_maps()]
        except psutil.Error:
            continue
        compiled = any("/stormpy/task/tree." in path and path.endswith(".so") for path in paths)
        builds.add("compiled (Cython)" if compiled else "pure Python")
    return ", ".join(sorted(builds)) or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--latency-duration", type=float, default=20.0)
    parser.add_argument("--raw-tuples", type=int, default=2_000_000)
    parser.add_argument("--per-call", type=int, default=50,
                        help="sentences per next_tuple() call at full rate (1: as users write spouts)")
    parser.add_argument("--skip-raw", action="store_true", help="skip the raw pipe (when comparing runs)")
    parser.add_argument("--executor-threads", choices=("auto", "one", "per-executor"), default="auto",
                        help="topology.executor.threads of the benchmark topology")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="sample the workers with py-spy during the full-rate phase; stacks go to DIR")
    parser.add_argument("--latency-rate", type=float, default=0.0, metavar="SENTENCES_PER_SEC",
                        help="offered load of the latency phase (default: half the measured maximum); "
                             "a fixed rate makes the CPU per word of runs comparable")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's directory (logs) and print it")
    args = parser.parse_args()
    conf = (f"topology.executor.threads={args.executor_threads}",)
    print(f"tuple path: {tuple_path_build()} ({STORMPY_ROOT})", flush=True)

    psutil.cpu_percent(None)
    raw = 0.0 if args.skip_raw else raw_pipe(args.raw_tuples)
    if raw:
        print(f"raw pipe (2 processes, msgpack lists of 100 per frame): {raw:,.0f} tuples/s", flush=True)
    base = Path(tempfile.mkdtemp(prefix="stormpy-bench-"))
    cluster = BenchCluster(base)
    try:
        cluster.start()
        full = run_phase(cluster, "bench-max", 0, args.warmup, args.duration, args.per_call, conf, args.profile)
        sentences_per_sec = full["acked_per_sec"]
        half_rate_per_spout = (args.latency_rate or sentences_per_sec / 2) / 2        # 2 spout tasks
        half = (run_phase(cluster, "bench-half", half_rate_per_spout, args.warmup, args.latency_duration,
                          conf=conf)
                if args.latency_duration > 0 else None)
    finally:
        cluster.stop()
    rss = full["rss_mb"]
    print(f"cluster word count, acking on, 1 supervisor, 2 workers, {args.per_call} sentence(s) per "
          f"next_tuple(), {args.duration:.0f} s, topology.executor.threads={args.executor_threads}:")
    print(f"  counted words/s          {full['words_per_sec']:,.0f}")
    print(f"  acked sentences/s        {full['acked_per_sec']:,.0f}")
    print(f"  complete latency p50/p99 {full['p50_ms']:.1f} / {full['p99_ms']:.1f} ms (at max rate)")
    if half is not None:
        half_cpu = sum(half["cpu_pct"]) / 100
        print(f"  at half rate ({half['words_per_sec']:,.0f} words/s): p50/p99 {half['p50_ms']:.1f} / "
              f"{half['p99_ms']:.1f} ms; worker CPU {' '.join(f'{c:.0f}%' for c in half['cpu_pct'])}, "
              f"{half['words_per_sec'] / max(half_cpu, 1e-9):,.0f} words per worker CPU-second")
    print(f"  worker RSS (mean per worker, every 5 s) MB: {' '.join(f'{r:.0f}' for r in rss)}")
    print(f"  workers' tuple path: {full['workers_build']}")
    print(f"  worker CPU during the run: {' '.join(f'{c:.0f}%' for c in full['cpu_pct'])} of one core each "
          f"(machine busy {full['machine_cpu_pct']:.0f}%)")
    cpu_secs_per_sec = sum(full["cpu_pct"]) / 100
    if cpu_secs_per_sec > 0:
        # on a loaded machine the workers get what CPU they can: compare runs by this figure
        print(f"  counted words per worker CPU-second {full['words_per_sec'] / cpu_secs_per_sec:,.0f}")
    if raw:
        print(f"  ratio counted words/s : raw pipe tuples/s = {full['words_per_sec'] / raw:.1%}")
    if args.profile is not None:
        for path in sorted(args.profile.glob("worker-*.txt")):
            print(summarize_profile(path))
    if args.keep:
        print(f"  cluster directory (logs): {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
