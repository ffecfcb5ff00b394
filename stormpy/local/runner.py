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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stormpy.cluster_state.transactional import MemoryTransactionalState
from stormpy.config import Config, warn_unknown_keys
from stormpy.errors import UserError
from stormpy.local.transfer import LocalTransfer
from stormpy.signals import StopOnSignals
from stormpy.task.runtime import LoggingReporter, WorkerRuntime

log = logging.getLogger(__name__)

PROGRESS_SECS = 5.0


class LocalReporter(LoggingReporter):
    """Keeps each component's newest errors (``errors``) and logs them."""


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
                 user_overrides: Mapping[str, Any] | None = None) -> None:
        from stormpy.thrift import storm
        from stormpy.topology.compile import compile_topology, topology_config
        from stormpy.topology.plan import build_plan
        from stormpy.topology.validate import validate_topology, validate_topology_name

        try:
            validate_topology_name(name)
            topology_conf = topology_config(topology_cls)
            warn_unknown_keys(topology_conf, log)
            self.conf = merged_conf(conf, topology_conf, user_overrides)
            self.conf["topology.name"] = name
            topology = compile_topology(topology_cls, self.conf)
            # Validated with the conf the user wrote (topology config and overrides), as a
            # submit would send it; defaults are filled in by build_plan.
            validate_topology(topology, {**topology_conf, **dict(user_overrides or {})})
        except storm.InvalidTopologyException as exc:
            raise _invalid(exc) from None
        self.name = name
        self.topology_id = f"{name}-1-{int(time.time())}"
        self.plan = build_plan(topology, self.conf, self.topology_id, name)
        self.reporter = LocalReporter(int(self.conf.get("topology.error.retain") or 10))
        self.transfer = LocalTransfer()
        # Trident coordinators keep their transaction state here; it lives as long as this
        # LocalTopology (Storm's LocalCluster uses an in-process ZooKeeper for the same).
        self.transactional_state = MemoryTransactionalState()
        self.runtime = WorkerRuntime(self.plan, self.plan.executors(), self.transfer, self.reporter,
                                     host="localhost", port=0, pin_cpu=True,  # one process: one core
                                     transactional_state=self.transactional_state)
        self.transfer.bind(self.runtime)

    def start(self, active: bool = True) -> "LocalTopology":
        self.runtime.start()
        if active:
            self.runtime.set_active(True)
        return self

    def stop(self, drain_secs: float | None = None) -> None:
        if drain_secs is None:
            drain_secs = float(self.conf.get("topology.message.timeout.secs") or 30)
        self.runtime.stop(drain_secs)

    def totals(self) -> dict[str, int]:
        return self.runtime.totals()

    def __enter__(self) -> "LocalTopology":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop(drain_secs=0 if exc[0] is not None else None)


def progress_line(totals: Mapping[str, int], elapsed: float, errors: int) -> str:
    rate = totals["acked"] / elapsed if elapsed > 0 else 0.0
    return (f"[{elapsed:6.1f}s] spout emitted={totals['emitted']} acked={totals['acked']} "
            f"failed={totals['failed']} bolt executed={totals['executed']} "
            f"({rate:,.0f} acked/s) errors={errors}")


def _announce(message: str) -> None:
    print(f"{message} (draining in-flight tuples)", file=sys.stderr, flush=True)


def run_local(topology_file: str, name: str | None = None, duration: float = 0, conf: Config | None = None,
              user_overrides: Mapping[str, Any] | None = None, stop_event: threading.Event | None = None) -> int:
    """Run a topology file in this process until ``duration`` passes or a stop signal; exit code."""
    from stormpy.topology.loader import load_topology_file

    topology_cls = load_topology_file(topology_file)
    name = name or Path(topology_file).stem
    local = LocalTopology(topology_cls, name, conf, user_overrides)
    stop = stop_event or threading.Event()
    errors = local.reporter.errors
    with StopOnSignals(stop, who="stormpy local", announce=_announce, second_signal_kills=True):
        print(f"stormpy local: running {name} ({local.topology_id}) with "
              f"{len(local.plan.executors())} executors, {len(local.plan.task_component)} tasks; "
              + (f"stopping after {duration:g}s" if duration else "Ctrl-C to stop"), file=sys.stderr, flush=True)
        started = time.monotonic()
        local.start()
        deadline = started + duration if duration and duration > 0 else None
        next_progress = started + PROGRESS_SECS
        while not stop.is_set():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            if now >= next_progress:
                next_progress = now + PROGRESS_SECS
                print(progress_line(local.totals(), now - started, sum(map(len, errors.values()))),
                      file=sys.stderr, flush=True)
            wake = min(next_progress, deadline) if deadline is not None else next_progress
            stop.wait(max(0.01, min(wake - now, 0.5)))
        print("stormpy local: stopping: spouts deactivated, draining in-flight tuples", file=sys.stderr, flush=True)
        local.stop()
    elapsed = time.monotonic() - started
    print(progress_line(local.totals(), elapsed, sum(map(len, errors.values()))), file=sys.stderr, flush=True)
    for component, kept in sorted(errors.items()):
        print(f"stormpy local: component {component}: {len(kept)} error(s), last: "
              f"{kept[-1][2].strip().splitlines()[-1] if kept[-1][2].strip() else ''}", file=sys.stderr, flush=True)
    return 0
