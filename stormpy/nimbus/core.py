"""Nimbus's logic: submit, status transitions, assignments, startup recovery and cleanup.

``Nimbus`` ties the pure parts together — ``transitions`` decides, ``scheduling`` places,
``heartbeats`` judges freshness — and performs their effects against ZooKeeper
(``ClusterState``) and disk (``NimbusFiles``). The Thrift handler, the monitor loop and the
delayed-event timer all call in from their own threads; one re-entrant lock serialises every
state change so a kill cannot race a reassignment of the same topology.
"""
from __future__ import annotations

import getpass
import itertools
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from stormpy import config as cfg
from stormpy.cluster_state import ClusterState
from stormpy.nimbus import transitions as tr
from stormpy.nimbus.files import NimbusFiles
from stormpy.nimbus.heartbeats import HeartbeatCache
from stormpy.nimbus.scheduling import Slot, schedule
from stormpy.thrift import storm
from stormpy.topology import pipeline
from stormpy.topology.plan import ACKER_COMPONENT, ExecutorRange, TopologyPlan, acker_count

log = logging.getLogger(__name__)

Scheduler = Callable[[float, Callable[[], None], str], None]


def not_alive(name: str) -> Exception:
    return storm.NotAliveException(msg=f"topology {name!r} is not alive (see `stormpy list`)")


class Nimbus:
    """The master's state machine driver. ``schedule_later(delay, fn, what)`` runs delayed events."""

    def __init__(self, conf: cfg.Config, state: ClusterState, files: NimbusFiles, schedule_later: Scheduler,
                 *, clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time) -> None:
        self.conf = conf
        self.state = state
        self.files = files
        self.schedule_later = schedule_later
        self.clock = clock
        self.wall_clock = wall_clock
        self.lock = threading.RLock()
        self.heartbeats = HeartbeatCache()
        # Seconds spent reading worker heartbeats (ZooKeeper reads + cache), summed over calls;
        # the monitor reports it per round (benchmarks/nimbus_scale.py reads the log line).
        self.heartbeat_secs = 0.0
        self.started_secs = int(wall_clock())
        self._counter = itertools.count(1)
        self._code: dict[str, tuple[storm.StormTopology, dict[str, Any]]] = {}
        # True while this Nimbus leads and has recovered (startup done); leader-only RPCs check it.
        self.leader_ready = False
        # ha.CodeRecovery (set by the daemon): accepts supervisors' copies of missing code.
        self.recovery: Any = None
        # During a monitor round: the supervisors and assignments read once at its start, so the
        # round costs O(supervisors + topologies) reads, not O(topologies x supervisors) (Storm's
        # mk-assignments reads them once per round too). None outside a round.
        self._round: _RoundView | None = None

    # ------------------------------------------------------------ lookups
    def now_secs(self) -> int:
        return int(self.wall_clock())

    def find_id(self, name: str) -> str | None:
        """The id of the topology named ``name`` (ids are accepted too, for convenience)."""
        bases = self.state.storm_bases()
        if name in bases:
            return name
        for topology_id, base in bases.items():
            if base.name == name:
                return topology_id
        return None

    def topology_code(self, topology_id: str) -> tuple[storm.StormTopology, dict[str, Any]]:
        """(StormTopology, topology conf) from stormdist, cached; NotAliveException if missing."""
        cached = self._code.get(topology_id)
        if cached is not None:
            return cached
        topology = self.files.read_topology(topology_id)
        conf_json = self.files.read_conf_json(topology_id)
        if topology is None or conf_json is None:
            raise storm.NotAliveException(
                msg=f"topology {topology_id!r} has no code on this Nimbus (CODE MISSING: it is kept and its "
                    "code is being recovered from the supervisors; see `stormpy list`)")
        cached = (topology, json.loads(conf_json))
        self._code[topology_id] = cached
        return cached

    def plan(self, topology_id: str, base: storm.StormBase) -> TopologyPlan:
        topology, conf = self.topology_code(topology_id)
        return pipeline.plan(topology, conf, topology_id, base.name, base.component_executors or None)

    # ------------------------------------------------------------ submit
    def submit(self, name: str, uploaded_location: str, json_conf: str, topology: storm.StormTopology,
               initial_status: int = storm.TopologyInitialStatus.ACTIVE) -> str:
        """Validate, store code, assign, write StormBase; returns the new topology id."""
        topology_conf = pipeline.admit(name, topology, json_conf, self.conf, self._normalize_conf,
                                       self.state.supervisors)
        with self.lock:
            if self.find_id(name) is not None:
                raise storm.AlreadyAliveException(
                    msg=f"topology {name!r} is already alive; kill it first or submit with another --name")
            upload = self.files.uploaded_file(uploaded_location)
            topology_id = self._new_id(name)
            self.files.setup_stormdist(topology_id, upload, topology, topology_conf)
            try:
                self._code[topology_id] = (topology, topology_conf)
                # Before anything that makes the topology live: a copy offered back by a
                # supervisor after a loss of this stormdist must match these (CodeRecovery).
                self.state.set_code_digests(topology_id, self.files.code_digests(topology_id))
                self._grant_transactional_state(topology_id, name)
                self.state.setup_heartbeats(topology_id)
                plan = pipeline.plan(topology, topology_conf, topology_id, name)
                status = (tr.Status.INACTIVE if initial_status == storm.TopologyInitialStatus.INACTIVE
                          else tr.Status.ACTIVE)
                base = storm.StormBase(
                    name=name, status=int(status), num_workers=int(topology_conf[cfg.TOPOLOGY_WORKERS.name]),
                    component_executors={cid: comp.parallelism for cid, comp in plan.components.items()},
                    launch_time_secs=self.now_secs(), owner=str(topology_conf.get(cfg.TOPOLOGY_SUBMITTER_USER.name) or ""))
                self.mk_assignment(topology_id, base=base)
                self.state.set_storm_base(topology_id, base)
            except BaseException:
                self._undo_submit(topology_id)
                raise
        log.info("submitted topology %s as %s (%s, %d workers)", name, topology_id, status.name, base.num_workers)
        return topology_id

    def _undo_submit(self, topology_id: str) -> None:
        """A submit failed after its code was stored: leave nothing behind (disk or ZooKeeper)."""
        log.warning("submit of %s failed; removing its code and cluster state", topology_id)
        self._code.pop(topology_id, None)
        self.files.remove_stormdist(topology_id)
        try:
            self.state.remove_topology(topology_id)
        except Exception:  # noqa: BLE001 - the original error is what the client must see
            log.exception("removing the cluster state of the failed submit %s failed (the orphan "
                          "cleanup at start-up will retry)", topology_id)

    def _grant_transactional_state(self, topology_id: str, name: str) -> None:
        """With ZooKeeper ACLs on, the topology's Trident state subtree (keyed by its name) becomes
        its workers' (they hold only this topology's ZooKeeper identity); no-op otherwise."""
        acl = self.state.topology_acl(topology_id, writable=True)
        if acl is None:
            return
        from stormpy.cluster_state.transactional import grant_transactional_state

        grant_transactional_state(self.conf, name, acl)

    def _normalize_conf(self, name: str, user_conf: Mapping[str, Any]) -> dict[str, Any]:
        """The conf stored with the topology: the user's keys plus the resolved values workers
        must agree on (name, worker count, acker count fixed at submit so task ids never shift)."""
        conf = dict(user_conf)
        conf[cfg.TOPOLOGY_NAME.name] = name
        workers = cfg.read(conf, cfg.TOPOLOGY_WORKERS)
        conf[cfg.TOPOLOGY_WORKERS.name] = max(1, int(workers))
        conf[cfg.TOPOLOGY_ACKER_EXECUTORS.name] = acker_count(conf)
        # Storm's Nimbus falls back to the user it runs as when the client names no submitter
        # (streamparse's `sparse submit` never does); `sparse list` shows it as the owner.
        if not conf.get(cfg.TOPOLOGY_SUBMITTER_USER.name):
            conf[cfg.TOPOLOGY_SUBMITTER_USER.name] = _system_user()
        # Workers accept control frames (backpressure) only with this token: a process outside
        # the topology cannot stop its spouts (issue 26, item 4). Fresh per submit, never the user's.
        conf[cfg.TOPOLOGY_WORKER_CONTROL_TOKEN.name] = secrets.token_hex(16)
        return conf

    def _new_id(self, name: str) -> str:
        existing = set(self.state.active_storms()) | set(self.files.stormdist_ids())
        while True:
            topology_id = f"{name}-{next(self._counter)}-{self.now_secs()}"
            if topology_id not in existing:
                return topology_id

    # ------------------------------------------------------------ transitions
    def transition(self, topology_id: str, event: tr.Event, arg: Any = None) -> None:
        """Apply ``event`` to the topology and perform the outcome's effects."""
        with self.lock:
            base = self.state.storm_base(topology_id)
            if base is None:
                if event in tr.USER_EVENTS:
                    raise not_alive(topology_id)
                return
            try:
                outcome = tr.apply(base, event, arg)
            except tr.InvalidTransition as exc:
                raise storm.NotAliveException(msg=str(exc)) from None
            new_base = outcome.base or base
            # The assignment is written before the StormBase: whoever sees the new status (a
            # rebalance back to ACTIVE) also finds the assignment that goes with it.
            for effect in outcome.effects:
                if isinstance(effect, tr.Reassign):
                    self._perform(topology_id, new_base, effect)
            if outcome.base is not None:
                self.state.set_storm_base(topology_id, outcome.base)
            if event in tr.USER_EVENTS or outcome.base is not None:
                log.info("topology %s: %s -> %s", topology_id, event.value, tr.Status(new_base.status).name)
            for effect in outcome.effects:
                if not isinstance(effect, tr.Reassign):
                    self._perform(topology_id, new_base, effect)

    def _perform(self, topology_id: str, base: storm.StormBase, effect: tr.Effect) -> None:
        if isinstance(effect, tr.Schedule):
            event = effect.event
            self.schedule_later(effect.delay_secs, lambda: self._delayed(topology_id, event),
                                f"{event.value} {topology_id}")
        elif isinstance(effect, tr.Reassign):
            self.mk_assignment(topology_id, scratch=effect.scratch, base=base)
        elif isinstance(effect, tr.Remove):
            self.remove_topology(topology_id)

    def _delayed(self, topology_id: str, event: tr.Event) -> None:
        try:
            self.transition(topology_id, event)
        except Exception:
            log.exception("delayed %s of %s failed", event.value, topology_id)

    def user_action(self, name: str, event: tr.Event, arg: Any = None) -> str:
        """activate/deactivate/kill/rebalance by topology name; returns the id."""
        with self.lock:
            topology_id = self.find_id(name)
            if topology_id is None:
                raise not_alive(name)
            self.transition(topology_id, event, arg)
            return topology_id

    def kill(self, name: str, wait_secs: int | None) -> str:
        with self.lock:
            topology_id = self.find_id(name)
            if topology_id is None:
                raise not_alive(name)
            wait = self._default_wait(topology_id) if wait_secs is None else max(0, int(wait_secs))
            return self.user_action(topology_id, tr.Event.KILL, tr.KillArgs(wait))

    def rebalance(self, name: str, options: storm.RebalanceOptions) -> str:
        with self.lock:
            topology_id = self.find_id(name)
            if topology_id is None:
                raise not_alive(name)
            base = self.state.storm_base(topology_id)
            self._check_rebalance(topology_id, base, options)
            wait = self._default_wait(topology_id) if options.wait_secs is None else max(0, int(options.wait_secs))
            args = tr.RebalanceArgs(wait, options.num_workers, dict(options.num_executors or {}))
            return self.user_action(topology_id, tr.Event.REBALANCE, args)

    def _check_rebalance(self, topology_id: str, base: storm.StormBase, options: storm.RebalanceOptions) -> None:
        if options.num_workers is not None and options.num_workers < 1:
            raise storm.InvalidTopologyException(msg="rebalance: the number of workers must be at least 1")
        max_slots = int(cfg.read(self.conf, cfg.NIMBUS_SLOTS_PER_TOPOLOGY))
        if options.num_workers is not None and options.num_workers > max_slots:
            raise storm.InvalidTopologyException(
                msg=f"rebalance: {options.num_workers} workers is above nimbus.slots.perTopology ({max_slots})")
        plan = self.plan(topology_id, base)
        for component, count in (options.num_executors or {}).items():
            comp = plan.components.get(component)
            if comp is None:
                known = ", ".join(sorted(c for c in plan.components if c != ACKER_COMPONENT))
                raise storm.InvalidTopologyException(
                    msg=f"rebalance: no component {component!r} in topology {base.name!r} (components: {known})")
            if not 1 <= count <= len(comp.tasks):
                raise storm.InvalidTopologyException(
                    msg=f"rebalance: component {component!r} can have 1 to {len(comp.tasks)} executors "
                        f"(its task count), not {count}")
        max_executors = int(cfg.read(self.conf, cfg.NIMBUS_EXECUTORS_PER_TOPOLOGY))
        overrides = dict(options.num_executors or {})
        total = sum(overrides.get(cid, comp.parallelism) for cid, comp in plan.components.items())
        if total > max_executors:
            raise storm.InvalidTopologyException(
                msg=f"rebalance: {total} executors is above nimbus.executors.perTopology ({max_executors})")

    def _default_wait(self, topology_id: str) -> int:
        try:
            _topology, conf = self.topology_code(topology_id)
        except storm.NotAliveException:
            conf = {}
        return int(conf.get(cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS.name) or self.conf[cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS])

    # ------------------------------------------------------------ assignments
    def available_slots(self, topology_id: str, supervisors: Mapping[str, storm.SupervisorInfo],
                        assignments: Mapping[str, storm.Assignment]) -> dict[str, list[int]]:
        """Ports of live supervisors that no OTHER topology uses."""
        used: set[Slot] = set()
        for other_id, other in assignments.items():
            if other_id == topology_id:
                continue
            for node_info in (other.executor_node_port or {}).values():
                used.update((node_info.node, int(port)) for port in node_info.port)
        return {sid: [int(p) for p in (info.meta or []) if (sid, int(p)) not in used]
                for sid, info in supervisors.items()}

    def mk_assignment(self, topology_id: str, scratch: bool = False, base: storm.StormBase | None = None) -> bool:
        """Compute and (if changed) write the topology's assignment; True when it was written."""
        with self.lock:
            base = base or self.state.storm_base(topology_id)
            if base is None:
                return False
            executors = self.plan(topology_id, base).executors()
            view = self._round
            if view is not None:
                existing, supervisors, assignments = view.assignments.get(topology_id), view.supervisors, view.assignments
            else:
                existing = self.state.assignment(topology_id)
                supervisors, assignments = self.state.supervisors(), self.state.assignments()
            available = self.available_slots(topology_id, supervisors, assignments)
            current = _executor_slots(existing)
            alive = self.update_heartbeats(topology_id, existing)
            placed = schedule(executors, available, base.num_workers, current, alive, scratch=scratch)
            assignment = self._assignment(topology_id, placed, existing, alive, supervisors)
            if assignment == existing:
                return False
            moved = sum(1 for e, slot in placed.items() if current.get(e) != slot)
            self.state.set_assignment(topology_id, assignment)
            if view is not None:   # only the leader writes assignments, under this lock: the view stays true
                view.assignments[topology_id] = assignment
            log.info("assigned topology %s: %d executors on %d slots (%d moved%s)", topology_id, len(placed),
                     len(set(placed.values())), moved, ", from scratch" if scratch else "")
            return True

    def _assignment(self, topology_id: str, placed: Mapping[ExecutorRange, Slot], existing: storm.Assignment | None,
                    alive: set[ExecutorRange], supervisors: Mapping[str, storm.SupervisorInfo]) -> storm.Assignment:
        now = self.now_secs()
        current = _executor_slots(existing)
        old_starts = {(i.task_start, i.task_end): t for i, t in ((existing and existing.executor_start_time_secs) or {}).items()}
        node_port, starts = {}, {}
        for executor, (node, port) in sorted(placed.items()):
            info = storm.ExecutorInfo(task_start=executor[0], task_end=executor[1])
            node_port[info] = storm.NodeInfo(node=node, port={port})
            keep = current.get(executor) == (node, port) and executor in alive and executor in old_starts
            starts[info] = old_starts[executor] if keep else now
        node_host = {node: supervisors[node].hostname for node, _port in placed.values() if node in supervisors}
        return storm.Assignment(master_code_dir=str(self.files.stormdist(topology_id)), node_host=node_host,
                                executor_node_port=node_port, executor_start_time_secs=starts)

    def update_heartbeats(self, topology_id: str, assignment: storm.Assignment | None) -> set[ExecutorRange]:
        """Read the topology's worker heartbeats into the cache; returns the alive executors."""
        if assignment is None:
            return set()
        started = time.perf_counter()
        slots = _executor_slots(assignment)
        beats = self.state.worker_heartbeats(topology_id)
        now = self.clock()
        self.heartbeats.update(topology_id, slots, beats, now)
        alive = self.heartbeats.alive_executors(
            topology_id, assignment, now, self.now_secs(), self.conf[cfg.NIMBUS_TASK_TIMEOUT_SECS],
            self.conf[cfg.NIMBUS_TASK_LAUNCH_SECS])
        self.heartbeat_secs += time.perf_counter() - started
        return alive

    # ------------------------------------------------------------ removal, startup, monitor
    def remove_topology(self, topology_id: str) -> None:
        with self.lock:
            self.state.remove_topology(topology_id)
            self.files.remove_stormdist(topology_id)
            self.heartbeats.forget(topology_id)
            self._code.pop(topology_id, None)
            if self._round is not None:
                self._round.assignments.pop(topology_id, None)
        log.info("removed topology %s", topology_id)

    def startup(self) -> None:
        """Remove code without a StormBase, then send ``startup`` to every topology (reschedules
        delays). A topology whose code is missing here is never removed for that: it is kept,
        its assignment (and so its workers) untouched, and ``ha.CodeRecovery`` gets the code
        back from a supervisor; until then it cannot be rescheduled or rebalanced."""
        with self.lock:
            self.files.cleanup_temporaries()
            bases = set(self.state.active_storms())
            code = set(self.files.stormdist_ids())
            for topology_id in sorted(code - bases):
                log.info("removing orphaned code of %s (no StormBase in ZooKeeper)", topology_id)
                self.remove_topology(topology_id)
            for topology_id in sorted(bases - code):
                log.error("CODE MISSING: topology %s has a StormBase but no code in %s; keeping it (its "
                          "workers keep running) and asking the supervisors for the code",
                          topology_id, self.files.stormdist_root)
            for topology_id in sorted(bases):
                base = self.state.storm_base(topology_id)
                if topology_id in code or (base is not None and base.status == tr.Status.KILLED):
                    self.transition(topology_id, tr.Event.STARTUP)   # a kill's removal needs no code

    def code_recovered(self, topology_id: str) -> None:
        """The code of a kept topology is back (CodeRecovery): resume a rebalance it was waiting for."""
        with self.lock:
            self._code.pop(topology_id, None)
            if not self.leader_ready:
                return
            base = self.state.storm_base(topology_id)
            if base is not None and base.status == tr.Status.REBALANCING:
                self.transition(topology_id, tr.Event.STARTUP)

    def missing_code(self, topology_ids: list[str]) -> list[str]:
        """Those of ``topology_ids`` whose code this Nimbus does not hold."""
        return [t for t in topology_ids if not self.files.has_code(t)]

    def monitor(self) -> None:
        """One monitor round: reassign timed-out executors, clean state of vanished topologies."""
        with self.lock:
            ids = self.state.active_storms()
            self._round = _RoundView(self.state.supervisors(), self.state.assignments())
            try:
                for topology_id in ids:
                    try:
                        self.transition(topology_id, tr.Event.MONITOR)
                    except storm.NotAliveException:
                        continue
            finally:
                self._round = None
            self.cleanup_orphan_state(set(ids))

    def cleanup_orphan_state(self, live: set[str]) -> None:
        """Heartbeats, errors and assignments of topologies that no longer exist."""
        for topology_id in set(self.state.heartbeat_storms()) - live:
            log.info("cleaning heartbeats of vanished topology %s", topology_id)
            self.state.teardown_heartbeats(topology_id)
        for topology_id in set(self.state.error_topologies()) - live:
            log.info("cleaning errors of vanished topology %s", topology_id)
            self.state.teardown_errors(topology_id)
        for topology_id in set(self.state.assignment_ids()) - live:
            log.info("cleaning assignment of vanished topology %s", topology_id)
            self.state.remove_assignment(topology_id)
        for topology_id in set(self.state.code_digest_ids()) - live:
            self.state.remove_code_digests(topology_id)
        for topology_id in set(self.state.code_failure_ids()) - live:
            self.state.teardown_code_failures(topology_id)
        for topology_id in set(self.heartbeats.topologies()) - live:
            self.heartbeats.forget(topology_id)


class _RoundView:
    """What one monitor round read once: live supervisors and every assignment (kept current)."""

    __slots__ = ("supervisors", "assignments")

    def __init__(self, supervisors: dict[str, storm.SupervisorInfo], assignments: dict[str, storm.Assignment]) -> None:
        self.supervisors = supervisors
        self.assignments = assignments


def _executor_slots(assignment: storm.Assignment | None) -> dict[ExecutorRange, Slot]:
    """executor -> (node, port) of an assignment."""
    if assignment is None:
        return {}
    result = {}
    for info, node_info in (assignment.executor_node_port or {}).items():
        ports = sorted(int(p) for p in node_info.port)
        if ports:
            result[(info.task_start, info.task_end)] = (node_info.node, ports[0])
    return result


def _system_user() -> str:
    """The user this Nimbus runs as (Java's ``user.name``), or "" when the system has no name for it."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""
