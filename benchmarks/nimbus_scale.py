"""Nimbus at scale, by simulation (issue 11): how one Nimbus copes as supervisors are added.

    python benchmarks/nimbus_scale.py [--sizes 10,100,500] [--duration 30]

For each size N: a real ZooKeeper (``stormpy.testing.ZooKeeperServer``, one for the whole run,
a fresh chroot per size), ONE real ``stormpy nimbus`` process (``-v``, so its monitor logs each
round's duration) and N fake supervisors: ``benchmarks/fake_supervisors.py`` processes of up to
``--per-process`` supervisors each, every supervisor its own ZooKeeper session writing its
``SupervisorInfo`` and, for each slot Nimbus gives it, a worker's ``ClusterWorkerHeartbeat``
through stormpy's ``ClusterState`` (same paths, same Thrift serialization; no worker runs).
``max(2, N // 20)`` topologies (``bench_topology.py``, ``--workers`` each, default 4) are submitted through
Thrift (``stormpy.client.submit``), so Nimbus schedules them onto the fake supervisors.

After the topologies are placed, a window of ``--duration`` seconds measures:

- monitor round: the time of one ``nimbus.monitor.freq.secs`` round (every topology's
  ``mk_assignment``: read supervisors, assignments and heartbeats, schedule), from Nimbus's log;
- heartbeat reads: the part of that round spent reading and judging worker heartbeats;
- submit: mean time of ``submitTopology`` + the first scheduling (client side);
- ZooKeeper writes/s: transactions committed (``srvr``'s zxid) per second, and the fake
  supervisors' own count of writes as a cross-check;
- CPU of Nimbus and ZooKeeper over the window (on a shared 2-core box this says who limits);
- executors Nimbus sees heartbeating (``getTopologyInfo`` stats) out of those assigned.

Prints one table. Every process it starts is stopped at the end, also on failure or Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stormpy import config as cfg  # noqa: E402
from stormpy.client.nimbus_client import connect  # noqa: E402
from stormpy.client.submit import submit_topology_file  # noqa: E402
from stormpy.testing import DaemonProcess, ZooKeeperServer, free_port, wait_until  # noqa: E402
from stormpy.testing.processes import stop_process  # noqa: E402
from stormpy.testing.zookeeper import four_letter_word  # noqa: E402

TOPOLOGY = Path(__file__).resolve().parent / "bench_topology.py"
FAKES = Path(__file__).resolve().parent / "fake_supervisors.py"
ROUND = re.compile(r"monitor round (\d+) took ([\d.]+) ms \(heartbeat reads ([\d.]+) ms\)")


def zxid(zk: ZooKeeperServer) -> int:
    """The last committed transaction's counter (low 32 bits of the zxid), from ``srvr``."""
    found = re.search(r"Zxid: 0x([0-9a-f]+)", four_letter_word(zk.host, zk.port, "srvr"))
    if not found:
        raise RuntimeError(f"ZooKeeper {zk.hosts} did not answer srvr")
    return int(found.group(1), 16) & 0xFFFFFFFF


class FakeGroup:
    """One ``fake_supervisors.py`` process and the last status line it printed."""

    def __init__(self, conf_file: Path, first: int, count: int, log_dir: Path) -> None:
        self.count = count
        self.out_path = log_dir / f"fakes-{first}.out"
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, str(FAKES), "--config", str(conf_file), "--first", str(first),
                                          "--count", str(count)], stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def status(self) -> dict[str, Any]:
        last: dict[str, Any] = {}
        for line in self.out_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                last = json.loads(line)
        if self.proc.poll() is not None:
            raise RuntimeError(f"fake supervisors exited ({self.proc.returncode}):\n{self.out_path.read_text()[-2000:]}")
        return last

    def stop(self) -> None:
        stop_process(self.proc, "fake supervisors", "benchmark finished", grace_secs=20)


class SizeRun:
    """One cluster size: Nimbus, fake supervisors, topologies, one measured window."""

    def __init__(self, zk: ZooKeeperServer, base: Path, size: int, per_process: int, workers: int) -> None:
        self.zk, self.size, self.workers = zk, size, workers
        self.base = base / f"size-{size}"
        self.logs = self.base / "logs"
        self.logs.mkdir(parents=True)
        self.conf: dict[str, Any] = {
            **zk.client_conf(f"/scale-{size}"), "nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": free_port(),
            "storm.local.hostname": "127.0.0.1", "storm.local.dir": str(self.base / "nimbus"),
            "storm.log.dir": str(self.logs), "nimbus.monitor.freq.secs": 2, "supervisor.sync.freq.secs": 2}
        self.conf_file = self.base / "cluster.json"
        self.conf_file.write_text(json.dumps(self.conf))
        self.per_process = per_process
        self.nimbus: DaemonProcess | None = None
        self.fakes: list[FakeGroup] = []

    def start(self) -> None:
        self.nimbus = DaemonProcess(["-v", "nimbus"], self.conf, self.logs, name="nimbus").start()
        self.nimbus.wait_for_port(self.conf["nimbus.thrift.port"], timeout=60)
        for first in range(0, self.size, self.per_process):
            self.fakes.append(FakeGroup(self.conf_file, first, min(self.per_process, self.size - first), self.logs))
        wait_until(lambda: self.supervisor_count() >= self.size, 60 + self.size / 2,
                   f"{self.size} fake supervisors registered")

    def supervisor_count(self) -> int:
        for group in self.fakes:
            group.status()   # fail fast when a group died
        with connect(self.conf) as client:
            return len(client.getClusterInfo().supervisors)

    def submit(self, count: int) -> float:
        """Submit ``count`` topologies through Thrift; returns the mean seconds per submit."""
        took = []
        conf = cfg.Config(self.conf)
        for i in range(count):
            started = time.perf_counter()
            submit_topology_file(str(TOPOLOGY), name=f"scale-{i}", workers=self.workers, conf=conf,
                                 user_overrides={"bench.out.dir": str(self.base / "out"), "bench.rate": 0})
            took.append(time.perf_counter() - started)
        return statistics.mean(took)

    def slots_beating(self) -> int:
        return sum(group.status().get("slots", 0) for group in self.fakes)

    def fake_writes(self) -> int:
        return sum(group.status().get("writes", 0) for group in self.fakes)

    def executors_heartbeating(self) -> tuple[int, int]:
        seen = total = 0
        with connect(self.conf) as client:
            for summary in client.getClusterInfo().topologies:
                for executor in client.getTopologyInfo(summary.id).executors:
                    total += 1
                    seen += executor.stats is not None
        return seen, total

    def rounds(self, log_from: int) -> list[tuple[float, float]]:
        assert self.nimbus is not None
        text = self.nimbus.output_path.read_bytes()[log_from:].decode(errors="replace")
        return [(float(m.group(2)), float(m.group(3))) for m in ROUND.finditer(text)]

    def measure(self, topologies: int, duration: float) -> dict[str, Any]:
        assert self.nimbus is not None and self.nimbus.pid is not None
        submit_secs = self.submit(topologies)
        workers = topologies * self.workers
        wait_until(lambda: self.slots_beating() >= workers, 60, f"{workers} fake workers beating")
        time.sleep(5)   # let every worker beat once and the first monitor rounds read them
        nimbus_ps, zk_ps = psutil.Process(self.nimbus.pid), psutil.Process(self.zk.proc.pid)
        cpu0 = (sum(nimbus_ps.cpu_times()[:2]), sum(zk_ps.cpu_times()[:2]))
        log_from = self.nimbus.output_path.stat().st_size
        z0, w0, t0 = zxid(self.zk), self.fake_writes(), time.monotonic()
        time.sleep(duration)
        z1, w1, t1 = zxid(self.zk), self.fake_writes(), time.monotonic()
        cpu1 = (sum(nimbus_ps.cpu_times()[:2]), sum(zk_ps.cpu_times()[:2]))
        elapsed = t1 - t0
        rounds = self.rounds(log_from)
        seen, total = self.executors_heartbeating()
        lateness = max(group.status().get("worst_lateness_secs", 0.0) for group in self.fakes)
        return {"supervisors": self.size, "topologies": topologies, "workers": workers,
                "executors": f"{seen}/{total}", "submit_ms": submit_secs * 1000, "rounds": len(rounds),
                "round_ms": statistics.mean(r for r, _h in rounds) if rounds else math.nan,
                "round_max_ms": max((r for r, _h in rounds), default=math.nan),
                "heartbeat_ms": statistics.mean(h for _r, h in rounds) if rounds else math.nan,
                "zk_writes": (z1 - z0) / elapsed, "fake_writes": (w1 - w0) / elapsed,
                "nimbus_cpu": (cpu1[0] - cpu0[0]) / elapsed * 100, "zk_cpu": (cpu1[1] - cpu0[1]) / elapsed * 100,
                "fake_lateness": lateness}

    def stop(self) -> None:
        for group in self.fakes:
            group.stop()
        if self.nimbus is not None:
            self.nimbus.stop(reason="benchmark finished", grace_secs=20)


COLUMNS = [("supervisors", "sups", "{:d}"), ("topologies", "topos", "{:d}"), ("workers", "workers", "{:d}"),
           ("executors", "execs seen", "{}"), ("submit_ms", "submit ms", "{:.0f}"), ("rounds", "rounds", "{:d}"),
           ("round_ms", "round ms", "{:.0f}"), ("round_max_ms", "max ms", "{:.0f}"),
           ("heartbeat_ms", "hb ms", "{:.1f}"), ("zk_writes", "zk writes/s", "{:.0f}"),
           ("fake_writes", "sim writes/s", "{:.0f}"), ("nimbus_cpu", "nimbus cpu%", "{:.0f}"),
           ("zk_cpu", "zk cpu%", "{:.0f}"), ("fake_lateness", "sim late s", "{:.2f}")]


def print_table(results: list[dict[str, Any]]) -> None:
    rows = [[fmt.format(r[key]) for key, _h, fmt in COLUMNS] for r in results]
    headers = [h for _k, h, _f in COLUMNS]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths)))
    for row in rows:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100,500", help="comma-separated supervisor counts")
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds per size")
    parser.add_argument("--per-process", type=int, default=100, help="fake supervisors per process")
    parser.add_argument("--workers", type=int, default=4, help="workers per topology")
    parser.add_argument("--topologies", type=int, default=0, help="topologies per size (0: max(2, N // 20))")
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        print(f"--sizes: expected comma-separated integers, got {args.sizes!r}", file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 1:
        print("--sizes: give at least one positive supervisor count", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="stormpy-scale-"))
    zk = ZooKeeperServer(base / "zk", tick_time_ms=2000, heap_mb=512)
    results = []
    try:
        zk.start(timeout=90)
        for size in sizes:
            run = SizeRun(zk, base, size, args.per_process, args.workers)
            try:
                started = time.monotonic()
                run.start()
                result = run.measure(args.topologies or max(2, size // 20), args.duration)
                results.append(result)
                print(f"[{size} supervisors: {time.monotonic() - started:.0f} s] {json.dumps(result)}", flush=True)
            finally:
                run.stop()
    finally:
        zk.stop(reason="benchmark finished")
    print(f"\nNimbus scale (1 Nimbus, fake supervisors with 4 slots each, {args.workers} workers per "
          f"topology, nimbus.monitor.freq.secs=2, supervisor heartbeat 5 s, worker heartbeat 3 s, "
          f"{args.duration:.0f} s window):")
    print_table(results)
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
