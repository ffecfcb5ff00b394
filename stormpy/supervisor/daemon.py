"""The supervisor daemon (DESIGN section 5): one per host, ``stormpy supervisor``.

Threads:
- *heartbeat*: writes the ephemeral SupervisorInfo every ``supervisor.heartbeat.frequency.secs``;
- *sync*: :class:`~stormpy.supervisor.sync.Syncer` every ``supervisor.sync.freq.secs`` and when
  the assignments watch fires (the watch callback only sets an event: it runs on cluster_state's
  dispatcher thread, which must stay quick);
- *processes*: every ``supervisor.monitor.frequency.secs`` (or at once after a sync changed
  something) steps each port's :mod:`~stormpy.supervisor.slot` state machine through a
  :class:`PortWorld`, the only door to processes and the clock.

Stopping the supervisor leaves its workers running (Storm's behaviour): their pids and ids are
in localstate, and a restarted supervisor adopts them instead of starting new ones. Ports are not
stepped until the first sync has succeeded, so an adopted worker is never killed just because the
supervisor does not yet know what should run.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stormpy import config as C
from stormpy.auth import http_login_required
from stormpy.daemon_guard import check_ports_free, local_dir_lock, warn_if_open
from stormpy.logs import add_file_log, daemon_log_path
from stormpy.signals import StopOnSignals
from stormpy.supervisor import localstate
from stormpy.supervisor.launcher import Launcher, LaunchRefused
from stormpy.supervisor.logviewer import LogAccess, LogCleaner, LogViewer
from stormpy.supervisor.slot import Heartbeat, Limits, LocalAssignment, Phase, SlotState, adopted, step
from stormpy.supervisor.sync import Syncer
from stormpy.thrift import storm
from stormpy.version import DAEMON_VERSION

log = logging.getLogger(__name__)


class PortWorld:
    """What one slot step sees: the clock, the desired assignment and the process operations."""

    def __init__(self, sup: "Supervisor", now: float, desired: LocalAssignment | None) -> None:
        self._sup = sup
        self.now = now
        self.desired = desired
        self.limits = sup.limits

    def code_ready(self, topology_id: str) -> bool:
        return self._sup.syncer.code_ready(topology_id)

    def heartbeat(self, worker_id: str) -> Heartbeat | None:
        hb = localstate.read_worker_heartbeat(self._sup.local_dir, worker_id)
        if hb is None:
            return None
        return Heartbeat(hb.time_secs, hb.topology_id,
                         frozenset((e.task_start, e.task_end) for e in hb.executors or []), hb.pid)

    def is_alive(self, pid: int, worker_id: str) -> bool:
        return self._sup.launcher.is_alive(pid, worker_id)

    def launch(self, port: int, assignment: LocalAssignment) -> tuple[str, int]:
        worker_id = uuid.uuid4().hex
        self._sup.approve(worker_id, port)     # before the fork: a crash right after still knows it
        try:
            pid = self._sup.launcher.launch(assignment.topology_id, port, worker_id,
                                            self._sup.syncer.topology_conf(assignment.topology_id),
                                            self._sup.syncer.worker_python(assignment.topology_id))
        except LaunchRefused as exc:
            # one line; the slot sees a worker that died at once and retries with its backoff
            log.error("%s", exc)
            return worker_id, 0
        return worker_id, pid

    def kill(self, pid: int, worker_id: str, reason: str, force: bool) -> None:
        self._sup.launcher.kill(pid, worker_id, reason, force)

    def cleanup(self, worker_id: str) -> None:
        self._sup.forget(worker_id)


class Supervisor:
    """One host's supervisor; ``start()`` connects and starts the threads, ``stop()`` ends them."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.conf = conf if isinstance(conf, C.Config) else C.Config(conf)
        self.local_dir = self.conf[C.STORM_LOCAL_DIR]
        self.ports = sorted(int(p) for p in self.conf[C.SUPERVISOR_SLOTS_PORTS])
        self.hostname = self.conf[C.STORM_LOCAL_HOSTNAME] or socket.gethostname()
        self.limits = Limits(worker_timeout_secs=self.conf[C.SUPERVISOR_WORKER_TIMEOUT_SECS],
                             start_timeout_secs=self.conf[C.SUPERVISOR_WORKER_START_TIMEOUT_SECS],
                             shutdown_sleep_secs=self.conf[C.SUPERVISOR_WORKER_SHUTDOWN_SLEEP_SECS],
                             restart_backoff_secs=1.0)
        self.lstate = localstate.LocalState(self.local_dir)
        self.supervisor_id = self.lstate.supervisor_id() or str(uuid.uuid4())
        self.lstate.set_supervisor_id(self.supervisor_id)
        self.started_at = time.time()
        self.launcher = Launcher(self.conf, self.supervisor_id)
        self.state: Any = None
        self.syncer: Syncer = None  # type: ignore[assignment]  # built in start(), needs state
        self.slots: dict[int, SlotState] = {port: SlotState(port) for port in self.ports}
        self._approved: dict[str, int] = {}
        self._desired: dict[int, LocalAssignment] = {}
        self._synced = threading.Event()
        self._sync_wanted = threading.Event()
        self._step_wanted = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watch: Any = None
        self.logviewer: LogViewer | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> "Supervisor":
        from stormpy.client.nimbus_client import connect, open_peer
        from stormpy.cluster_state import ClusterState

        self.state = ClusterState(self.conf)
        self.syncer = Syncer(self.conf, self.state, self.supervisor_id, self.ports, self.lstate,
                             lambda: connect(self.conf, leader_wait_secs=0), hostname=self.hostname,
                             open_nimbus=lambda host, port: open_peer(self.conf, host, port))
        self._adopt_workers()
        self._start_logviewer()
        self.heartbeat()
        self._watch = self.state.watch_assignments(self._sync_wanted.set)
        for name, target in (("supervisor-heartbeat", self._heartbeat_loop), ("supervisor-sync", self._sync_loop),
                             ("supervisor-processes", self._process_loop),
                             ("supervisor-logcleaner", self._log_cleaner_loop)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("supervisor %s started on %s with ports %s", self.supervisor_id, self.hostname, self.ports)
        return self

    def stop(self, reason: str = "stop requested") -> None:
        """Stop the threads and leave ZooKeeper; workers keep running (a restart adopts them)."""
        log.info("supervisor %s stopping: %s (workers keep running)", self.supervisor_id, reason)
        self._stop.set()
        self._sync_wanted.set()
        self._step_wanted.set()
        for thread in self._threads:
            thread.join(timeout=15)
        if self.logviewer is not None:
            self.logviewer.stop(reason)
        if self._watch is not None:
            self._watch.stop()
        if self.state is not None:
            self.state.close()

    def _start_logviewer(self) -> None:
        """Serve worker logs on logviewer.port (negative: off). ``run_supervisor`` checked the port;
        an embedded supervisor (tests) whose port is taken runs on without one, saying so."""
        port = self.conf[C.LOGVIEWER_PORT]
        if port is None or port < 0:
            return
        access = LogAccess.from_conf(self.conf, self._topology_acl)   # login on without a way in: refuse to start
        from stormpy.tls import https_context

        try:
            self.logviewer = LogViewer(self.conf[C.STORM_LOG_DIR], port, access=access,
                                       tls_context=https_context(self.conf, "logviewer")).start()
            warn_if_open("log viewer", "0.0.0.0", self.logviewer.port, secured=http_login_required(self.conf))
        except OSError as exc:
            log.warning("log viewer not started on port %d (logviewer.port): %s", port, exc.strerror or exc)

    def _topology_acl(self, topology_id: str) -> Any:
        """Owner (from ZooKeeper) and topology.users/groups (from the downloaded conf) of a
        topology, for the log viewer's per-user rule; None when it is not known here."""
        import json

        from stormpy.disk_layout import stormdist_dir
        from stormpy.nimbus.authz import TopologyAcl

        if not topology_id or "/" in topology_id or topology_id.startswith("."):
            return None
        try:
            base = self.state.storm_base(topology_id) if self.state is not None else None
        except Exception:  # noqa: BLE001 - ZooKeeper away: refuse, do not guess
            return None
        if base is None:
            return None
        try:
            conf = json.loads((stormdist_dir(self.conf[C.STORM_LOCAL_DIR], topology_id) / "stormconf.json").read_text())
        except (OSError, ValueError):
            conf = {}
        return TopologyAcl.from_conf(str(base.owner or ""), conf if isinstance(conf, dict) else {})

    def _log_cleaner_loop(self) -> None:
        cleaner = LogCleaner(self.conf[C.STORM_LOG_DIR], self.conf[C.LOGVIEWER_CLEANUP_AGE_MINS] * 60.0,
                             lambda: self.state.assignment_ids())
        cleaner.run(self._stop, max(1.0, float(self.conf[C.LOGVIEWER_CLEANUP_INTERVAL_SECS])))

    # ------------------------------------------------------------ approved workers (process thread)

    def approve(self, worker_id: str, port: int) -> None:
        self._approved[worker_id] = port
        self.lstate.set_approved_workers(self._approved)

    def forget(self, worker_id: str) -> None:
        self._approved.pop(worker_id, None)
        self.lstate.set_approved_workers(self._approved)
        localstate.remove_worker_dir(self.local_dir, worker_id)

    def _adopt_workers(self) -> None:
        """Take over workers a previous run of this supervisor started (pids from localstate)."""
        now = time.time()
        approved = self.lstate.approved_workers()
        local = self.lstate.local_assignments()
        for worker_id, port in approved.items():
            pid = localstate.read_pid(self.local_dir, worker_id)
            hb = localstate.read_worker_heartbeat(self.local_dir, worker_id)
            if hb is not None:
                assignment = LocalAssignment.of(hb.topology_id, [(e.task_start, e.task_end) for e in hb.executors])
            elif port in local:
                # Launched by the previous run, not heartbeating yet: what it runs is in localstate.
                assignment = LocalAssignment.of(*local[port])
            else:
                assignment = None
            if (port in self.slots and self.slots[port].phase is Phase.EMPTY and pid is not None
                    and assignment is not None and self.launcher.is_alive(pid, worker_id)):
                self.slots[port] = adopted(port, worker_id, pid, assignment, now, launching=hb is None)
                self._approved[worker_id] = port
                log.info("adopted worker %s (pid %d) of %s on port %d%s", worker_id, pid, assignment.topology_id,
                         port, "" if hb else " (not heartbeating yet)")
            else:
                if pid is not None and self.launcher.is_alive(pid, worker_id):
                    self.launcher.kill(pid, worker_id, "left over from a previous supervisor run", True)
                localstate.remove_worker_dir(self.local_dir, worker_id)
        root = localstate.workers_root(self.local_dir)
        if root.is_dir():
            for entry in root.iterdir():
                if entry.name not in self._approved:
                    pid = localstate.read_pid(self.local_dir, entry.name)
                    if pid is not None and self.launcher.is_alive(pid, entry.name):
                        self.launcher.kill(pid, entry.name, "not approved by this supervisor", True)
                    localstate.remove_worker_dir(self.local_dir, entry.name)
        self.lstate.set_approved_workers(self._approved)

    # ------------------------------------------------------------ heartbeat thread

    def heartbeat(self) -> None:
        used = [port for port, s in self.slots.items() if s.phase is not Phase.EMPTY]
        info = storm.SupervisorInfo(time_secs=int(time.time()), hostname=self.hostname,
                                    assignment_id=self.supervisor_id, used_ports=used, meta=list(self.ports),
                                    uptime_secs=int(time.time() - self.started_at), version=DAEMON_VERSION,
                                    logviewer_port=self.logviewer.port if self.logviewer else 0)
        self.state.set_supervisor_info(self.supervisor_id, info)

    def _heartbeat_loop(self) -> None:
        interval = max(0.2, float(self.conf[C.SUPERVISOR_HEARTBEAT_FREQUENCY_SECS]))
        while not self._stop.wait(interval):
            try:
                self.heartbeat()
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: the next beat retries
                log.warning("supervisor heartbeat not written: %s", exc)

    # ------------------------------------------------------------ sync thread

    def _sync_loop(self) -> None:
        interval = max(0.2, float(self.conf[C.SUPERVISOR_SYNC_FREQ_SECS]))
        while not self._stop.is_set():
            self._sync_wanted.clear()
            try:
                running = {s.assignment.topology_id for s in list(self.slots.values()) if s.assignment}
                desired = self.syncer.sync_once(running)
                if desired != self._desired or not self._synced.is_set():
                    log.info("local assignment: %s", {p: (a.topology_id, sorted(a.executors))
                                                      for p, a in sorted(desired.items())} or "nothing")
                    self._desired = desired
                    self._synced.set()
                    self._step_wanted.set()
                elif any(not self.syncer.code_ready(a.topology_id) for a in desired.values()):
                    # A download failed: retry when its backoff ends (1 s doubling to 60 s), not in 10 s.
                    retry_in = self.syncer.next_retry_in(a.topology_id for a in desired.values())
                    self._sync_wanted.wait(min(interval, max(0.5, retry_in)))
                    continue
            except Exception as exc:  # noqa: BLE001 - ZooKeeper or Nimbus away: retry
                log.warning("sync failed (will retry): %s", exc)
                self._stop.wait(1.0)
                continue
            self._sync_wanted.wait(interval)

    # ------------------------------------------------------------ process thread

    def _process_loop(self) -> None:
        interval = max(0.1, float(self.conf[C.SUPERVISOR_MONITOR_FREQUENCY_SECS]))
        while not self._stop.is_set():
            self._step_wanted.wait(interval)
            self._step_wanted.clear()
            if self._stop.is_set():
                break
            if not self._synced.is_set():
                continue
            try:
                self.step_all()
            except Exception:  # noqa: BLE001 - one bad step must not end the supervisor
                log.exception("supervisor process step failed")

    def step_all(self) -> None:
        """Step every port once (process thread)."""
        desired = self._desired
        for port in self.ports:
            world = PortWorld(self, time.time(), desired.get(port))
            self.slots[port] = step(self.slots[port], world)
        self.launcher.reap()


def run_supervisor(conf: Mapping[str, Any]) -> int:
    """``stormpy supervisor``: run until SIGTERM/SIGINT; returns the exit code."""
    conf = conf if isinstance(conf, C.Config) else C.Config(conf)
    # Before anything that reads or writes the local dir: a second supervisor there would take
    # over the first one's id (localstate) and its ZooKeeper node.
    lock = local_dir_lock(conf[C.STORM_LOCAL_DIR], "supervisor").acquire()
    try:
        check_ports_free("supervisor", supervisor_ports(conf))
        path = add_file_log(daemon_log_path(conf[C.STORM_LOG_DIR], "supervisor"))
        log.info("supervisor logging to %s", path)
        with StopOnSignals(who="supervisor") as signals:
            supervisor = Supervisor(conf).start()
            try:
                signals.wait()
            finally:
                supervisor.stop(reason=signals.reason("supervisor exiting"))
    finally:
        lock.release()
    return 0


def supervisor_ports(conf: C.Config) -> list[tuple[int, str]]:
    """Ports this supervisor needs free: its log viewer, and every slot port except those whose
    worker a previous run started (approved in localstate): that worker holds it and is adopted."""
    ports = []
    if conf[C.LOGVIEWER_PORT] and conf[C.LOGVIEWER_PORT] > 0:
        ports.append((int(conf[C.LOGVIEWER_PORT]), "logviewer.port"))
    has_state = (Path(conf[C.STORM_LOCAL_DIR]) / "supervisor" / "localstate").is_dir()
    adopted_ports = set(localstate.LocalState(conf[C.STORM_LOCAL_DIR]).approved_workers().values()) if has_state else set()
    ports.extend((int(p), "supervisor.slots.ports") for p in conf[C.SUPERVISOR_SLOTS_PORTS]
                 if int(p) not in adopted_ports)
    return ports
