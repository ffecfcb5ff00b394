"""``stormpy local``: a whole topology in this process, the way Storm's LocalCluster runs it.

One WorkerRuntime holds every executor (threads), batches travel through the in-process
transfer, and the real acker tracks tuple trees. The config is merged as for a submit:
defaults (and ``--config`` file) <- the Topology class's ``config`` <- ``-c`` overrides, so
arbitrary user keys reach the components' ``stormconf``.

Stopping (after ``--duration`` seconds, Ctrl-C or SIGTERM) is clean: spouts are
deactivated, in-flight tuples drain for up to ``topology.message.timeout.secs``, batching
bolts flush, components are closed, and the exit code is 0.

Tests and benchmarks use :class:`LocalTopology` directly (a Topology class instead of a
file, no signal handling).
"""
from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stormpy import config as cfg
from stormpy.cluster_state.transactional import MemoryTransactionalState
from stormpy.config import Config, warn_unknown_keys
from stormpy.errors import UserError
from stormpy.local.transfer import LocalTransfer
from stormpy.signals import StopOnSignals
from stormpy.task.runtime import LoggingReporter, WorkerRuntime

log = logging.getLogger(__name__)

PROGRESS_SECS = 5.0


class LocalReporter(LoggingReporter):
    """Keeps each component's newest errors (``errors``), logs them, and counts every error per
    component and per place it was raised ("initialize", "process", ...) for the final summary.
    Called from executor threads; the counters are only read after the run."""

    def __init__(self, keep: int = 10) -> None:
        super().__init__(keep)
        self.counts: Counter[str] = Counter()
        self.where: dict[str, Counter[str]] = defaultdict(Counter)
        self.last_secs: dict[str, float] = {}

    def report_error(self, component_id: str, task_id: int, text: str,
                     then: Callable[[], object] | None = None) -> None:
        super().report_error(component_id, task_id, text, then)
        self.counts[component_id] += 1
        self.where[component_id][text.split(":", 1)[0].strip()] += 1
        self.last_secs[component_id] = time.time()


@dataclass
class ComponentHealth:
    """How one component fared over a ``stormpy local`` run (see :func:`component_health`)."""

    component: str
    errors: int
    restarts: int
    work: int                       # spout tuples emitted, or bolt tuples executed
    never_initialized: bool
    crash_looped: bool
    last_error: str


CRASH_LOOP_MIN_RESTARTS = 3
CRASH_LOOP_MAX_WORK_PER_CRASH = 10


def component_health(runtime: Any, reporter: LocalReporter, started_secs: float, ended_secs: float) -> list[ComponentHealth]:
    """Per user component: errors, restarts and work done. A component *never initialized* when
    all its tasks crashed and every error came from ``initialize``; it *crash-looped* when every
    task restarted at least 3 times, it did almost nothing between crashes (< 10 tuples per
    crash) and it was still crashing in the last quarter of the run."""
    by_component: dict[str, list[Any]] = defaultdict(list)
    for executor in runtime.executors.values():
        if not executor.component_id.startswith("__"):
            by_component[executor.component_id].append(executor)
    result = []
    recent = ended_secs - max(5.0, (ended_secs - started_secs) / 4)
    for comp, executors in sorted(by_component.items()):
        tasks = [t for ex in executors for t in ex.tasks.values()]
        totals = [ex.stats.totals() for ex in executors]
        work = sum(t["emitted"] if ex.kind == "spout" else t["executed"] for ex, t in zip(executors, totals))
        restarts = sum(t.restarts for t in tasks)
        kept = reporter.errors.get(comp) or []
        last = kept[-1][2].strip().splitlines()[-1] if kept and kept[-1][2].strip() else ""
        never = bool(tasks) and all(t.restarts > 0 for t in tasks) and set(reporter.where.get(comp, ())) == {"initialize"}
        looped = (bool(tasks) and all(t.restarts >= CRASH_LOOP_MIN_RESTARTS for t in tasks)
                  and work < CRASH_LOOP_MAX_WORK_PER_CRASH * max(1, restarts)
                  and reporter.last_secs.get(comp, 0.0) >= recent)
        result.append(ComponentHealth(comp, reporter.counts.get(comp, 0), restarts, work, never, looped and not never, last))
    return result


def summary_lines(health: list[ComponentHealth]) -> tuple[list[str], bool]:
    """The end-of-run summary and whether the run failed (a component never initialized or crash-looped)."""
    lines = []
    failed = False
    for h in health:
        if h.never_initialized:
            failed = True
            lines.append(f"stormpy local: error: component {h.component} never initialized: {h.errors} error(s) in "
                         f"initialize, {h.restarts} restart(s); last: {h.last_error}")
        elif h.crash_looped:
            failed = True
            lines.append(f"stormpy local: error: component {h.component} crash-looped the whole run: {h.restarts} "
                         f"restart(s), only {h.work} tuple(s) handled; last: {h.last_error}")
        elif h.errors:
            lines.append(f"stormpy local: component {h.component}: {h.errors} error(s), {h.restarts} restart(s), "
                         f"{h.work} tuple(s) handled; last: {h.last_error}")
    if not any(h.errors for h in health):
        lines.append("stormpy local: no component reported an error")
    return lines, failed


def merged_conf(conf: Mapping[str, Any] | None, topology_conf: Mapping[str, Any],
                user_overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """defaults/file <- topology config <- command-line overrides (the user wins)."""
    base = conf.to_dict() if isinstance(conf, Config) else dict(Config(conf or {}))
    merged = {**base, **dict(topology_conf), **dict(user_overrides or {})}
    return Config(merged).to_dict()


def _invalid(exc: Exception) -> UserError:
    return UserError(f"invalid topology: {getattr(exc, 'msg', None) or exc}")


class LocalTopology:
    """A compiled, planned topology running in one WorkerRuntime in this process."""

    def __init__(self, topology_cls: type, name: str, conf: Mapping[str, Any] | None = None,
                 user_overrides: Mapping[str, Any] | None = None, environment: str | None = None,
                 options: Mapping[str, Any] | None = None) -> None:
        """``environment`` picks streamparse ``par`` dict entries; ``options`` (a streamparse
        environment's) sit below the Topology's own config."""
        from stormpy.api.compile import build_topology, topology_config
        from stormpy.thrift import storm
        from stormpy.topology import pipeline

        try:
            pipeline.check_name(name)
            topology_conf = {**dict(options or {}), **topology_config(topology_cls)}
            warn_unknown_keys(topology_conf, log)
            self.conf = merged_conf(conf, topology_conf, user_overrides)
            self.conf[cfg.TOPOLOGY_NAME.name] = name
            # Compiled with the full conf; validated with the conf the user wrote (topology
            # config and overrides), as a submit would send it; the plan fills in defaults.
            topology = build_topology(topology_cls, name, self.conf, environment=environment,
                                      user_conf={**topology_conf, **dict(user_overrides or {})})
        except storm.InvalidTopologyException as exc:
            raise _invalid(exc) from None
        self.name = name
        self.topology_id = f"{name}-1-{int(time.time())}"
        self.plan = pipeline.plan(topology, self.conf, self.topology_id, name)
        self.reporter = LocalReporter(int(cfg.read(self.conf, cfg.TOPOLOGY_ERROR_RETAIN)))
        self.transfer = LocalTransfer()
        # Trident coordinators keep their transaction state here; it lives as long as this
        # LocalTopology (Storm's LocalCluster uses an in-process ZooKeeper for the same).
        self.transactional_state = MemoryTransactionalState()
        self.runtime = WorkerRuntime(self.plan, self.plan.executors(), self.transfer, self.reporter,
                                     host="localhost", port=0, pin_cpu=True,  # one process: one core
                                     transactional_state=self.transactional_state,
                                     one_thread_by_default=True)
        self.transfer.bind(self.runtime)

    def start(self, active: bool = True) -> "LocalTopology":
        self.runtime.start()
        if active:
            self.runtime.set_active(True)
        return self

    def stop(self, drain_secs: float | None = None, reason: str = "local topology stopping") -> None:
        if drain_secs is None:
            drain_secs = float(cfg.read(self.conf, cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS))
        self.runtime.stop(drain_secs, reason=reason)

    def totals(self) -> dict[str, int]:
        return self.runtime.totals()

    def __enter__(self) -> "LocalTopology":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop(drain_secs=0 if exc[0] is not None else None)


def progress_line(totals: Mapping[str, int], elapsed: float, errors: int, waiting: str = "") -> str:
    """A progress line naming its units: spout tuples (e.g. sentences) vs. the tuples bolts executed."""
    rate = totals["acked"] / elapsed if elapsed > 0 else 0.0
    line = (f"[{elapsed:6.1f}s] spout tuples emitted={totals['emitted']} acked={totals['acked']} "
            f"failed={totals['failed']} ({rate:,.0f} spout tuples acked/s); bolt tuples executed={totals['executed']}; "
            f"errors={errors}")
    if "trident_batches" in totals:
        line += f"; trident batches committed={totals['trident_batches']} (txid {totals['trident_txid']})"
    return f"{line}; waiting for {waiting}" if waiting else line


def waiting_for(local: "LocalTopology", totals: Mapping[str, int]) -> str:
    """What the run is visibly waiting for, when nothing has been acked yet."""
    if totals["acked"] or not totals["emitted"]:
        return "" if totals["emitted"] else "the spouts' first tuples"
    sink = sys.modules.get("stormpy.spark.sink")
    if sink is not None and any(isinstance(t.component, sink.SparkSinkBolt) for ex in local.runtime.executors.values()
                                for t in ex.tasks.values()):
        return ("the Spark sink's first batch (the SparkSession starts on it, 5-10 s; then every "
                "spark.sink.batch.secs): tuples are acked only after their batch is written")
    return "the first tuple trees to complete (acked once every bolt processed them)"


def _announce(message: str) -> None:
    print(f"{message} (draining in-flight tuples)", file=sys.stderr, flush=True)


def run_local(topology_file: str, name: str | None = None, duration: float = 0, conf: Config | None = None,
              user_overrides: Mapping[str, Any] | None = None, stop_event: threading.Event | None = None,
              environment: str | None = None) -> int:
    """Run a topology file in this process until ``duration`` passes or a stop signal; exit code.

    In a streamparse project (``config.json``/``topologies``/``src``) ``src/`` goes on the path
    and ``environment`` (or config.json's only one) picks ``par`` dicts and ``options``."""
    from stormpy.streamparse_compat.project import add_src_to_path, load_project
    from stormpy.api.loader import load_topology_file

    project = load_project(topology_file, environment)
    add_src_to_path(project)
    topology_cls = load_topology_file(topology_file)
    name = name or Path(topology_file).stem
    local = LocalTopology(topology_cls, name, conf, user_overrides,
                          environment=project.env_name if project else environment,
                          options=project.options() if project else None)
    stop = stop_event or threading.Event()
    with StopOnSignals(stop, who="stormpy local", announce=_announce, second_signal_kills=True):
        print(f"stormpy local: running {name} ({local.topology_id}) with "
              f"{len(local.plan.executors())} executors, {len(local.plan.task_component)} tasks; "
              + (f"stopping after {duration:g}s" if duration else "Ctrl-C to stop"), file=sys.stderr, flush=True)
        started = time.monotonic()
        started_secs = time.time()
        local.start()
        deadline = started + duration if duration and duration > 0 else None
        next_progress = started + PROGRESS_SECS
        while not stop.is_set():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            if now >= next_progress:
                next_progress = now + PROGRESS_SECS
                totals = local.totals()
                print(progress_line(totals, now - started, sum(local.reporter.counts.values()),
                                    waiting_for(local, totals)), file=sys.stderr, flush=True)
            wake = min(next_progress, deadline) if deadline is not None else next_progress
            stop.wait(max(0.01, min(wake - now, 0.5)))
        print("stormpy local: stopping: spouts deactivated, draining in-flight tuples", file=sys.stderr, flush=True)
        local.stop()
    elapsed = time.monotonic() - started
    print(progress_line(local.totals(), elapsed, sum(local.reporter.counts.values())), file=sys.stderr, flush=True)
    lines, failed = summary_lines(component_health(local.runtime, local.reporter, started_secs, time.time()))
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    return 1 if failed else 0
