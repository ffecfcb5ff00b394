"""Many simulated supervisors in one process, for ``benchmarks/nimbus_scale.py``.

    python benchmarks/fake_supervisors.py --config conf.json --first 0 --count 100

Each simulated supervisor is what Nimbus sees of a real one, through the same code and paths:
its own ZooKeeper session (a ``ClusterState``, so its own kazoo client and ephemeral node), a
``SupervisorInfo`` written to ``/supervisors/<id>`` every ``supervisor.heartbeat.frequency.secs``
(``ClusterState.set_supervisor_info``, as ``supervisor/daemon.py``), and, for every slot Nimbus
assigned to it, the worker's ``ClusterWorkerHeartbeat`` written every
``task.heartbeat.frequency.secs`` through ``ClusterState.heartbeat_sink()`` (as a worker does),
with one ``ExecutorStats`` per assigned executor built by ``stormpy.task.stats`` (a bolt with
one input stream and one output stream, so the bytes Nimbus reads are those of a real worker).
No worker process runs. Differences from a real cluster, on purpose, to fit hundreds of
supervisors on two cores: the worker heartbeat goes through its supervisor's session (a real
worker has its own), and one reader session per process polls ``/assignments`` every
``supervisor.sync.freq.secs`` for all its supervisors (each real supervisor reads them itself).

Prints one JSON line per ``--report-secs`` on stdout: sessions, writes so far, slots beating
and the worst lateness of a beat (when it grows, this process, not Nimbus, is the limit).
Exits cleanly (closing every session) on SIGTERM or SIGINT.
"""
from __future__ import annotations

import argparse
import heapq
import json
import logging
import random
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stormpy import config as cfg  # noqa: E402
from stormpy.cluster_state import ClusterState  # noqa: E402
from stormpy.task.stats import ExecutorStats  # noqa: E402
from stormpy.thrift import storm  # noqa: E402
from stormpy.version import DAEMON_VERSION  # noqa: E402

log = logging.getLogger("fake_supervisors")

PORTS = [6700, 6701, 6702, 6703]


def executor_stats(seed: int) -> Any:
    """The ``storm.ExecutorStats`` of a busy bolt: windows x (one input, one output stream)."""
    stats = ExecutorStats("bolt")
    counter = stats.stream_counter("default")
    counter[0] = counter[1] = 1000 + seed
    key = ("split", "default")
    stats.executed[key] = stats.acked[key] = 1000 + seed
    stats.process_ms[key] = [5.0 * (seed + 1), seed + 1]
    stats.execute_ms[key] = [4.0 * (seed + 1), seed + 1]
    return stats.to_thrift()


class FakeSupervisor:
    """One supervisor's ZooKeeper presence: its session, its info, its slots' worker beats."""

    def __init__(self, conf: cfg.Config, index: int) -> None:
        self.index = index
        self.supervisor_id = str(uuid.uuid4())
        self.hostname = f"fake-host-{index}"
        self.started = time.time()
        self.state = ClusterState(conf)
        # (topology id, port) -> executors Nimbus assigned there; replaced on every sync
        self.slots: dict[tuple[str, int], list[Any]] = {}

    def beat_supervisor(self) -> None:
        used = sorted({port for _tid, port in self.slots})
        now = time.time()
        info = storm.SupervisorInfo(time_secs=int(now), hostname=self.hostname, assignment_id=self.supervisor_id,
                                    used_ports=used, meta=list(PORTS), uptime_secs=int(now - self.started),
                                    version=DAEMON_VERSION, logviewer_port=0)
        self.state.set_supervisor_info(self.supervisor_id, info)

    def beat_worker(self, topology_id: str, port: int) -> bool:
        executors = self.slots.get((topology_id, port))
        if not executors:
            return False
        now = time.time()
        beat = storm.ClusterWorkerHeartbeat(storm_id=topology_id, time_secs=int(now),
                                            uptime_secs=int(now - self.started),
                                            executor_stats={e: executor_stats(e.task_start) for e in executors})
        self.state.heartbeat_sink().send(topology_id, self.supervisor_id, port, beat)
        return True

    def close(self) -> None:
        self.state.close()


class Simulator:
    """Drives every fake supervisor of this process from one loop of due times."""

    def __init__(self, conf: cfg.Config, first: int, count: int, stop: threading.Event) -> None:
        self.conf = conf
        self.sup_secs = float(conf[cfg.SUPERVISOR_HEARTBEAT_FREQUENCY_SECS])
        self.task_secs = float(conf[cfg.TASK_HEARTBEAT_FREQUENCY_SECS])
        self.sync_secs = float(conf[cfg.SUPERVISOR_SYNC_FREQ_SECS])
        self.stop = stop
        self.reader = ClusterState(conf)
        self.supervisors: dict[str, FakeSupervisor] = {}
        for index in range(first, first + count):
            if self.stop.is_set():
                break
            sup = FakeSupervisor(conf, index)
            sup.beat_supervisor()
            self.supervisors[sup.supervisor_id] = sup
        self.writes = len(self.supervisors)
        self.worst_lateness = 0.0
        self._due: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self._beating: set[tuple[str, str, int]] = set()

    def _push(self, due: float, kind: str, arg: Any) -> None:
        self._seq += 1
        heapq.heappush(self._due, (due, self._seq, kind, arg))

    def sync(self) -> None:
        """Read every assignment once and give each fake supervisor its slots (the supervisor's sync)."""
        mine: dict[str, dict[tuple[str, int], list[Any]]] = {sid: {} for sid in self.supervisors}
        for topology_id, assignment in self.reader.assignments().items():
            for info, node_info in (assignment.executor_node_port or {}).items():
                if node_info.node in mine:
                    for port in node_info.port:
                        mine[node_info.node].setdefault((topology_id, int(port)), []).append(info)
        now = time.monotonic()
        for sid, slots in mine.items():
            self.supervisors[sid].slots = slots
            for topology_id, port in slots:
                if (sid, topology_id, port) not in self._beating:   # a new worker: beat at once, then every task_secs
                    self._beating.add((sid, topology_id, port))
                    self._push(now, "worker", (sid, topology_id, port))

    def run(self, report_secs: float) -> None:
        now = time.monotonic()
        for sid in self.supervisors:   # spread the beats over the period, as independent daemons would be
            self._push(now + random.uniform(0, self.sup_secs), "supervisor", sid)
        self._push(now, "sync", None)
        self._push(now, "report", None)
        while not self.stop.is_set() and self._due:
            due, _seq, kind, arg = heapq.heappop(self._due)
            wait = due - time.monotonic()
            if wait > 0 and self.stop.wait(wait):
                break
            lateness = time.monotonic() - due
            try:
                self._run_one(kind, arg, lateness, report_secs)
            except Exception as exc:  # noqa: BLE001 - ZooKeeper busy: log, the next period retries
                log.warning("%s beat failed: %s", kind, exc)
                if kind != "worker":
                    self._push(time.monotonic() + 1.0, kind, arg)

    def _run_one(self, kind: str, arg: Any, lateness: float, report_secs: float) -> None:
        if kind == "supervisor":
            self.worst_lateness = max(self.worst_lateness, lateness)
            self.supervisors[arg].beat_supervisor()
            self.writes += 1
            self._push(time.monotonic() + self.sup_secs, kind, arg)
        elif kind == "worker":
            self.worst_lateness = max(self.worst_lateness, lateness)
            sid, topology_id, port = arg
            if self.supervisors[sid].beat_worker(topology_id, port):
                self.writes += 1
                self._push(time.monotonic() + self.task_secs, kind, arg)
            else:   # unassigned since: the worker is gone
                self._beating.discard(arg)
        elif kind == "sync":
            self.sync()
            self._push(time.monotonic() + self.sync_secs, kind, arg)
        elif kind == "report":
            print(json.dumps({"sessions": len(self.supervisors) + 1, "writes": self.writes,
                              "slots": len(self._beating), "worst_lateness_secs": round(self.worst_lateness, 3)}),
                  flush=True)
            self.worst_lateness = 0.0
            self._push(time.monotonic() + report_secs, kind, arg)

    def close(self) -> None:
        for sup in self.supervisors.values():
            sup.close()
        self.reader.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="JSON file with the cluster's config")
    parser.add_argument("--first", type=int, default=0, help="index of the first fake supervisor (host names)")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--report-secs", type=float, default=2.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    conf = cfg.Config(json.loads(Path(args.config).read_text()))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    sim = Simulator(conf, args.first, args.count, stop)
    try:
        sim.run(args.report_secs)
    finally:
        sim.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
