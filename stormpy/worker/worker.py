"""A worker process: one (topology, port) slot's executors (DESIGN section 5, "Worker").

Start-up order follows Storm's ``Worker.java``: read the assignment (which executors are
ours), write the first local heartbeat at once so the supervisor sees a live worker before the
slow part, then load the plan from the downloaded ``stormtopology.ser``/``stormconf.json``, put
the topology's unzipped code on ``sys.path``, bind the ZeroMQ port, start the runtime.

Threads owned here:
- ``local-heartbeat`` (:class:`~stormpy.worker.heartbeat.Heart`): the supervisor's liveness file;
- ``cluster-heartbeat``: executor stats through the ``HeartbeatSink`` for Nimbus;
- ``refresh``: re-reads the assignment and StormBase every ``task.refresh.poll.secs`` and when a
  ZooKeeper watch fires (watch callbacks run on cluster_state's dispatcher thread, so they only
  set an event), then installs new routes in the transport and sets spouts (in)active;
- the transport's send/receive threads and the runtime's executor threads.

Every one of them runs under the worker's :class:`~stormpy.daemon_guard.ThreadGuard`: an
exception is logged, reported as an error of the ``__system`` component (``stormpy errors``, the
UI) and the thread's loop restarted; when failures pile up the guard ends the worker
(``fatal_reason`` set, ``__main__`` exits with :data:`~stormpy.daemon_guard.FATAL_EXIT_CODE`)
and the supervisor starts a fresh one.

``stop()`` (SIGTERM) deactivates spouts, drains the executors for a bounded time, flushes the
transport and leaves ZooKeeper; the supervisor SIGKILLs a worker that takes longer.
"""
from __future__ import annotations

import hashlib
import importlib
import logging
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stormpy import config as C
from stormpy.daemon_guard import ThreadGuard, warn_if_open
from stormpy.serialization import from_conf
from stormpy import disk_layout
from stormpy.streams import SYSTEM_COMPONENT
from stormpy.thrift import storm
from stormpy.topology.plan import ExecutorRange
from stormpy.worker.heartbeat import ErrorReporter, Heart, cluster_heartbeat, local_heartbeat
from stormpy.worker.transfer import ZmqTransfer

log = logging.getLogger(__name__)


class WorkerStartError(Exception):
    """The worker cannot run (no assignment for its port, code missing); it exits non-zero."""


def my_executors(assignment: Any, supervisor_id: str, port: int) -> list[ExecutorRange]:
    """The executors an assignment places on (this supervisor, this port)."""
    found = []
    for executor, node_port in (assignment.executor_node_port or {}).items():
        if node_port.node == supervisor_id and port in {int(p) for p in node_port.port}:
            found.append((executor.task_start, executor.task_end))
    return sorted(found)


def task_routes(assignment: Any) -> dict[int, tuple[str, int]]:
    """task id -> (host, port) of the worker that runs it, from an assignment."""
    routes: dict[int, tuple[str, int]] = {}
    hosts = assignment.node_host or {}
    for executor, node_port in (assignment.executor_node_port or {}).items():
        host = hosts.get(node_port.node, node_port.node)
        port = min(int(p) for p in node_port.port)
        for task in range(executor.task_start, executor.task_end + 1):
            routes[task] = (host, port)
    return routes


class Worker:
    """One worker process's parts; built by ``__main__``, stopped on SIGTERM."""

    def __init__(self, conf: Mapping[str, Any], topology_id: str, supervisor_id: str, port: int,
                 worker_id: str) -> None:
        self.conf = conf if isinstance(conf, C.Config) else C.Config(conf)
        self.topology_id = topology_id
        self.supervisor_id = supervisor_id
        self.port = port
        self.worker_id = worker_id
        self.local_dir = self.conf[C.STORM_LOCAL_DIR]
        # tasks' configs are the topology's alone: the host's directories are the worker's to say
        disk_layout.set_host_local_dir(self.local_dir, bool(self.conf[C.SUPERVISOR_RUN_WORKER_AS_USER]))
        self.started_at = time.time()
        self.executors: list[ExecutorRange] = []
        self.host = self.conf[C.STORM_LOCAL_HOSTNAME] or socket.gethostname()
        self.state: Any = None
        self.transactional_state: Any = None
        self.plan: Any = None
        self.runtime: Any = None
        self.transfer: ZmqTransfer | None = None
        self.reporter: ErrorReporter | None = None
        self._hearts: list[Heart] = []
        self._watches: list[Any] = []
        self._refresh_wanted = threading.Event()
        self._stop = threading.Event()
        self._refresh_thread: threading.Thread | None = None
        self._active: bool | None = None
        self._routes: dict[int, tuple[str, int]] = {}
        #: Set (once) when the guard gave up on this worker's threads; ``__main__`` then exits 3.
        self.fatal_reason: str | None = None
        self.fatal = threading.Event()
        self.guard = ThreadGuard(f"worker {topology_id}:{port}", report=self._thread_error,
                                 on_fatal=self._on_fatal)

    # ------------------------------------------------------------ start-up

    def start(self) -> "Worker":
        from stormpy.cluster_state import ClusterState, transactional_state_for

        self.state = ClusterState(self.conf)
        assignment = self.state.assignment(self.topology_id)
        if assignment is None:
            raise WorkerStartError(f"topology {self.topology_id} has no assignment")
        self.executors = my_executors(assignment, self.supervisor_id, self.port)
        if not self.executors:
            raise WorkerStartError(f"no executors of {self.topology_id} are assigned to "
                                   f"{self.supervisor_id}:{self.port}")
        self.host = (assignment.node_host or {}).get(self.supervisor_id, self.host)
        self._start_local_heartbeat()
        self.plan = self._load_plan()
        self.reporter = ErrorReporter(self._write_error, self.host, self.port, guard=self.guard).start()
        self.transfer = ZmqTransfer(self.host, self.port, bind_host=C.local_bind_host(self.conf, "*"),
                                    report_error=self._transfer_error,
                                    max_message_bytes=int(C.read(self.plan.conf, C.STORM_MESSAGING_MAX_MESSAGE_BYTES)),
                                    curve=self._curve_keys(), guard=self.guard,
                                    acker_tasks=list(self.plan.acker_tasks),
                                    control_token=self._control_token(),
                                    serialization=from_conf(self.plan.conf)
                                    if self.plan.conf.get(C.TOPOLOGY_SERIALIZERS.name) else None)
        self.transfer.bind()
        warn_if_open("worker", C.local_bind_host(self.conf, "*"), self.port, secured=self.transfer.encrypted)
        self._routes = task_routes(assignment)
        self.transfer.update_routes(self._routes)
        from stormpy.task.runtime import WorkerRuntime, slot_cpu

        # Connects on first use: only workers running Trident coordinators open this session.
        self.transactional_state = transactional_state_for(self.conf, self.plan.name)
        self.runtime = WorkerRuntime(self.plan, executors=self.executors, transfer=self.transfer,
                                     reporter=self.reporter, host=self.host, port=self.port,
                                     transactional_state=self.transactional_state,
                                     # topology.executor.threads "auto": one scheduler thread per
                                     # worker (see config.py: fewer GIL hand-offs per batch)
                                     one_thread_by_default=True, pacers_apart=True,
                                     cpu=slot_cpu(self.port, self.conf[C.SUPERVISOR_SLOTS_PORTS]))
        if self.runtime.cpu is not None:
            log.info("worker on port %d: executor and transport threads pinned to CPU %d (by its slot among "
                     "supervisor.slots.ports and the host's other pinned workers; STORMPY_PIN_CPU=0 turns "
                     "this off)",
                     self.port, self.runtime.cpu)
        self.runtime.thread_guard = self.guard
        self.transfer.start(self.runtime)
        self.runtime.start()
        self._start_cluster_heartbeat()
        self._watches.append(self.state.watch_assignment(self.topology_id, lambda _a: self._refresh_wanted.set()))
        self._watches.append(self.state.watch_storm_base(self.topology_id, lambda _b: self._refresh_wanted.set()))
        self._refresh_thread = self.guard.start_thread("refresh", self._refresh_loop)
        log.info("worker %s of %s on %s:%d runs executors %s", self.worker_id, self.topology_id, self.host,
                 self.port, self.executors)
        return self

    def _start_local_heartbeat(self) -> None:
        def beat() -> None:
            disk_layout.write_worker_heartbeat(self.local_dir, self.worker_id,
                                              local_heartbeat(self.topology_id, self.executors, self.port))

        heart = Heart("local-heartbeat", self.conf[C.WORKER_HEARTBEAT_FREQUENCY_SECS], beat, guard=self.guard)
        heart.beat_now()
        self._hearts.append(heart.start())

    def _start_cluster_heartbeat(self) -> None:
        sink = self.state.heartbeat_sink()

        def beat() -> None:
            stats = self.runtime.thrift_stats()
            sink.send(self.topology_id, self.supervisor_id, self.port,
                      cluster_heartbeat(self.topology_id, stats, self.started_at))

        heart = Heart("cluster-heartbeat", self.conf[C.TASK_HEARTBEAT_FREQUENCY_SECS], beat, guard=self.guard)
        heart.beat_now()
        self._hearts.append(heart.start())

    def _load_plan(self) -> Any:
        from stormpy.topology.pipeline import load_plan

        dist = disk_layout.stormdist_dir(self.local_dir, self.topology_id)
        try:
            topology_bytes = (dist / "stormtopology.ser").read_bytes()
            conf_json = (dist / "stormconf.json").read_text()
        except OSError as exc:
            raise WorkerStartError(f"code of {self.topology_id} is missing in {dist}: {exc}") from None
        for path in reversed(code_paths(self.local_dir, self.topology_id)):
            if str(path) not in sys.path:
                sys.path.insert(0, str(path))
        importlib.invalidate_caches()
        base = self.state.storm_base(self.topology_id)
        overrides = dict(base.component_executors or {}) if base is not None else None
        return load_plan(topology_bytes, conf_json, self.topology_id, overrides or None)

    # ------------------------------------------------------------ errors

    def _curve_keys(self) -> tuple[bytes, bytes] | None:
        """The topology's CURVE key pair when ``storm.messaging.curve.enable`` is on (DESIGN 13):
        the one its supervisor wrote into this worker's config, never the shared secret."""
        if not C.STORM_MESSAGING_CURVE_ENABLE.coerce(self.conf.get(C.STORM_MESSAGING_CURVE_ENABLE.name) or False):
            return None
        from stormpy.auth import curve_topology_keys

        keys = curve_topology_keys(self.conf, self.topology_id)
        if keys is None:
            raise WorkerStartError("storm.messaging.curve.enable needs storm.thrift.auth.secret.file on the "
                                   "supervisor (it derives each topology's CURVE keys from the shared secret)")
        return keys

    def _control_token(self) -> str:
        """The token of this topology's control frames: Nimbus's ``topology.worker.control.token``;
        for a topology submitted before Nimbus added one, a digest of its code files, which every
        worker of the topology holds and a process outside it does not."""
        token = self.plan.conf.get(C.TOPOLOGY_WORKER_CONTROL_TOKEN.name)
        if token:
            return str(token)
        dist = disk_layout.stormdist_dir(self.local_dir, self.topology_id)
        digest = hashlib.sha256()
        for name in ("stormconf.json", "stormtopology.ser"):
            digest.update((dist / name).read_bytes())
        return digest.hexdigest()[:32]

    def _write_error(self, component_id: str, info: Any) -> None:
        self.state.report_error(self.topology_id, component_id, info)

    def _thread_error(self, thread_name: str, text: str) -> None:
        """ThreadGuard's report: a framework thread failed; an error of ``__system``."""
        if self.reporter is not None:
            self.reporter.report_error(SYSTEM_COMPONENT, -1, text)

    def _on_fatal(self, reason: str) -> None:
        self.fatal_reason = reason
        self.fatal.set()

    def _transfer_error(self, task_id: int, text: str) -> None:
        component = self.plan.task_component.get(task_id, "?") if self.plan else "?"
        if self.reporter is not None:
            self.reporter.report_error(component, task_id, text)

    # ------------------------------------------------------------ refresh thread

    def _refresh_loop(self) -> None:
        """Refresh until stop. A failure is retried on the next poll (ZooKeeper away); the first
        of a streak is reported through the guard, later ones only logged sparsely."""
        interval = max(0.1, float(self.conf[C.TASK_REFRESH_POLL_SECS]))
        failures = 0
        while not self._stop.is_set():
            self._refresh_wanted.clear()
            try:
                self.refresh()
                if failures:
                    log.info("refresh works again after %d failure(s)", failures)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: next poll retries
                failures += 1
                if failures == 1:
                    self.guard.failed("refresh", exc, handled="retried on the next poll", count=False)
                elif failures % 30 == 0:
                    log.warning("refresh of assignment/status failed (%d in a row): %s", failures, exc)
            self._refresh_wanted.wait(interval)

    def refresh(self) -> None:
        """Re-read assignment (routes) and StormBase (spouts active only while ACTIVE)."""
        assignment = self.state.assignment(self.topology_id)
        if assignment is not None:
            routes = task_routes(assignment)
            if routes != self._routes:
                moved = sum(1 for t, a in routes.items() if self._routes.get(t) != a)
                log.info("assignment changed: %d task(s) have a new worker; reconnecting", moved)
                self._routes = routes
                self.transfer.update_routes(routes)  # type: ignore[union-attr]
            mine = my_executors(assignment, self.supervisor_id, self.port)
            if mine != self.executors:
                log.info("executors of this port changed to %s; the supervisor will restart this worker", mine)
        base = self.state.storm_base(self.topology_id)
        active = base is not None and base.status == storm.TopologyStatus.ACTIVE
        if active != self._active:
            log.info("topology %s is %s: spouts %s", self.topology_id,
                     "ACTIVE" if active else (storm.TopologyStatus._VALUES_TO_NAMES.get(base.status, "?")
                                              if base is not None else "gone"),
                     "run" if active else "paused")
            self.runtime.set_active(active)
            self._active = active   # only once applied: a failed attempt is retried next poll

    # ------------------------------------------------------------ shutdown

    def stop(self, reason: str, drain_secs: float = 1.0) -> None:
        """Deactivate spouts, drain, stop the transport and heartbeats, leave ZooKeeper."""
        log.info("worker %s stopping (drain %.1fs): %s", self.worker_id, drain_secs, reason)
        self.guard.stop()
        self._stop.set()
        self._refresh_wanted.set()
        for watch in self._watches:
            watch.stop()
        if self.runtime is not None:
            try:
                self.runtime.stop(drain_secs, reason=f"worker stopping: {reason}")
            except Exception:  # noqa: BLE001 - keep shutting the rest down
                log.exception("runtime did not stop cleanly")
        if self.transfer is not None:
            self.transfer.stop(f"worker stopping: {reason}", timeout_secs=2.0)
        for heart in self._hearts:
            heart.stop()
        if self.reporter is not None:
            self.reporter.stop(timeout_secs=2.0)
        if self._refresh_thread is not None:
            self._refresh_thread.join(5)
        if self.transactional_state is not None:
            self.transactional_state.close()
        if self.state is not None:
            self.state.close()
        log.info("worker %s stopped: %s", self.worker_id, reason)


def code_paths(local_dir: str, topology_id: str) -> list[Path]:
    """Directories a worker puts on ``sys.path`` for a topology.

    ``stormpy submit`` archives the topology file's directory with paths relative to it, so the
    unzipped ``code/`` is what was on ``sys.path`` at submit time and ``module:Class`` names
    resolve the same way. An archive made by other tools may wrap everything in one top-level
    directory; then that directory is used. A JAR (``META-INF/`` and ``resources/``, what
    streamparse uploads) has its Python code in ``resources/``.
    """
    code = disk_layout.code_dir(local_dir, topology_id)
    if not code.is_dir():
        return []
    if (code / "resources").is_dir() and (code / "META-INF").is_dir():
        # A JAR as streamparse's `sparse submit` builds it: the Python code is in resources/.
        return [code / "resources", code]
    entries = [p for p in code.iterdir() if p.name != "__pycache__"]
    if len(entries) == 1 and entries[0].is_dir() and not any(code.glob("*.py")):
        return [entries[0]]
    return [code]
