"""Typed cluster state in ZooKeeper (DESIGN section 4): what daemons read and write.

``ClusterState`` connects with ``storm.zookeeper.root`` as the chroot and offers typed
reads and writes (Thrift structs in, Thrift structs out) of the paths in ``zk_layout``.
Daemons ask it for meaning (``state.assignment(topology_id)``), never for paths. It is put
together from the package's parts, each owning one responsibility:

- ``session.ZkSession``: the kazoo client, retries, CONNECTED / SUSPENDED / LOST, ephemeral
  nodes re-created after a session loss, the event thread;
- ``leadership.Leadership``: ``/leader-lock``; leader-only writes below call
  ``check_writer`` first, so a Nimbus that is not the connected leader gets NotLeaderError
  at the write;
- ``watches.Watches``: watches re-armed after every reconnection.

``listener(state)`` hears "CONNECTED", "SUSPENDED" and "LOST" on the event thread, after
leadership and watches have been restored on a reconnection; it may call back into this
object. Watch callbacks run on the same thread and must be quick.

Worker heartbeats go through ``HeartbeatSink`` (``ZkHeartbeatSink`` writes ``/workerbeats``),
so a later RPC path (worker -> supervisor -> Nimbus, as in Storm 2) can replace the writes.
"""
from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kazoo.client import KazooState

from stormpy import zk_layout
from stormpy.cluster_state.leadership import Leadership
from stormpy.cluster_state.session import StateListener, ZkSession, zookeeper_hosts
from stormpy.cluster_state.watches import Watch, Watches
from stormpy.config import STORM_ZOOKEEPER_ROOT, TOPOLOGY_ERROR_RETAIN, Config
from stormpy.thrift import deserialize, serialize, storm

log = logging.getLogger(__name__)

T = TypeVar("T")


class HeartbeatSink(ABC):
    """Where workers send their executor heartbeats; ZooKeeper today, an RPC tomorrow."""

    @abstractmethod
    def send(self, topology_id: str, node: str, port: int, heartbeat: storm.ClusterWorkerHeartbeat) -> None:
        """Publish the heartbeat of the worker at (node, port)."""

    @abstractmethod
    def remove(self, topology_id: str, node: str, port: int) -> None:
        """Withdraw the heartbeat of a worker that shut down cleanly."""


class ZkHeartbeatSink(HeartbeatSink):
    """Writes heartbeats to ``/workerbeats/<topology-id>/<node>-<port>`` through a ClusterState."""

    def __init__(self, state: "ClusterState") -> None:
        self.state = state

    def send(self, topology_id: str, node: str, port: int, heartbeat: storm.ClusterWorkerHeartbeat) -> None:
        self.state.set_worker_heartbeat(topology_id, node, port, heartbeat)

    def remove(self, topology_id: str, node: str, port: int) -> None:
        self.state.remove_worker_heartbeat(topology_id, node, port)


class ClusterState:
    """Typed access to the cluster's ZooKeeper state under ``storm.zookeeper.root``.

    Methods may be called from any thread; see the module docstring for callbacks.
    """

    def __init__(self, conf: Mapping[str, Any], *, listener: StateListener | None = None,
                 connect: bool = True) -> None:
        self.conf = conf if isinstance(conf, Config) else Config(conf)
        self.session = ZkSession(self.conf, zookeeper_hosts(self.conf), self.conf[STORM_ZOOKEEPER_ROOT])
        self.hosts = self.session.hosts
        self.root = self.session.root
        self.listener = listener
        # Order matters: on a reconnection leadership is re-taken before watches fire, and the
        # listener hears CONNECTED last, when everything is back.
        self.leadership = Leadership(self.session)
        self.watches = Watches(self.session)
        self.session.add_reconnected_hook(lambda _lost: self.watches.rearm_all())
        self.session.add_reconnected_hook(lambda _lost: self._notify(KazooState.CONNECTED))
        self.session.add_state_hook(self._notify)
        if connect:
            self.connect()

    # ------------------------------------------------------------ lifecycle
    def connect(self) -> "ClusterState":
        """Connect (creating the chroot and the cluster's root nodes); UserError when unreachable."""
        from stormpy.auth import holds_topology_identity_only

        self.session.connect()
        if holds_topology_identity_only(self.conf):
            return self    # a worker under ZooKeeper ACLs: the roots are Nimbus's (and not readable)
        for root in zk_layout.ALL_ROOTS:
            self.session.ensure_path(root)
        return self

    def close(self) -> None:
        """Stop watches, close the session (its ephemerals and leader lock go with it)."""
        self.watches.stop_all()
        self.session.close()

    def __enter__(self) -> "ClusterState":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def is_connected(self) -> bool:
        """False while SUSPENDED or LOST: a leader must not write until this is True again."""
        return self.session.is_connected()

    @property
    def session_id(self) -> int | None:
        """The current ZooKeeper session id (changes after a session loss); for tests and logs."""
        return self.session.session_id

    def expire_session(self, timeout: float = 30.0) -> None:
        """Fault hook for tests: ZooKeeper expires this client's session (see ZkSession)."""
        self.session.expire_session(timeout)

    def _notify(self, state: str) -> None:
        if self.listener is None:
            return
        try:
            self.listener(state)
        except Exception:  # a listener bug must not end the event thread
            log.exception("ZooKeeper state listener failed on %s", state)

    # ------------------------------------------------------------ raw nodes
    def get_data(self, path: str) -> bytes | None:
        """Data of ``path`` (relative to the root), or None when it does not exist."""
        return self.session.get(path)

    def set_data(self, path: str, data: bytes) -> None:
        """Create ``path`` (with parents) or overwrite its data."""
        self.session.set(path, data)

    def children(self, path: str) -> list[str]:
        """Sorted child names of ``path`` ([] when it does not exist)."""
        return self.session.children(path)

    def exists(self, path: str) -> bool:
        return self.session.exists(path)

    def delete(self, path: str, recursive: bool = False) -> None:
        """Delete ``path`` (and its subtree when ``recursive``); missing is fine."""
        self.session.delete(path, recursive)

    def _get_struct(self, path: str, cls: type[T]) -> T | None:
        return _decode(cls, self.get_data(path), path)

    def topology_acl(self, topology_id: str, *, writable: bool) -> list[Any] | None:
        """ACL of a node of ``topology_id``: the daemons all, that topology's own ZooKeeper
        identity read (``writable``: also write), nobody else; None when ACLs are off."""
        from stormpy.auth import topology_node_acl

        return topology_node_acl(self.conf, topology_id, writable=writable)

    def _leader_write(self, what: str, path: str, data: bytes | None, acl: list[Any] | None = None) -> None:
        """A leader-only write (``data`` None: delete), fenced by the leader lock node: it lands
        only while this client's leadership lasts, also when kazoo retries it after a
        reconnection (a deposed leader cannot overwrite its successor's state). Clients that
        never competed for leadership write plainly."""
        fence = self.leadership.fence(what)
        if fence is None:
            if data is None:
                self.delete(path)
            else:
                self.session.set(path, data, acl)
        elif not self.session.write_fenced(fence, path, data, acl):
            raise self.leadership.fence_lost(what, fence)

    # ------------------------------------------------------------ /storms
    def storm_base(self, topology_id: str) -> storm.StormBase | None:
        return self._get_struct(zk_layout.storm(topology_id), storm.StormBase)

    def set_storm_base(self, topology_id: str, base: storm.StormBase) -> None:
        self._leader_write(f"write the StormBase of {topology_id}", zk_layout.storm(topology_id), serialize(base),
                           self.topology_acl(topology_id, writable=False))

    def remove_storm_base(self, topology_id: str) -> None:
        self._leader_write(f"remove the StormBase of {topology_id}", zk_layout.storm(topology_id), None)

    def active_storms(self) -> list[str]:
        """Ids of all topologies with a StormBase (whatever their status)."""
        return self.children(zk_layout.STORMS_ROOT)

    def storm_bases(self) -> dict[str, storm.StormBase]:
        """Every topology id -> its StormBase."""
        bases = {}
        for topology_id in self.active_storms():
            base = self.storm_base(topology_id)
            if base is not None:
                bases[topology_id] = base
        return bases

    # ------------------------------------------------------------ /assignments
    def assignment(self, topology_id: str) -> storm.Assignment | None:
        """The topology's Assignment; ``NodeInfo.port`` comes back as a set, as it was written
        (thriftpy2 decodes Thrift sets as lists)."""
        return _normalize_assignment(self._get_struct(zk_layout.assignment(topology_id), storm.Assignment))

    def set_assignment(self, topology_id: str, assignment: storm.Assignment) -> None:
        self._leader_write(f"write the assignment of {topology_id}", zk_layout.assignment(topology_id),
                           serialize(assignment), self.topology_acl(topology_id, writable=False))

    def remove_assignment(self, topology_id: str) -> None:
        self._leader_write(f"remove the assignment of {topology_id}", zk_layout.assignment(topology_id), None)

    def assignment_ids(self) -> list[str]:
        return self.children(zk_layout.ASSIGNMENTS_ROOT)

    def assignments(self) -> dict[str, storm.Assignment]:
        """Every topology id -> its Assignment."""
        result = {}
        for topology_id in self.assignment_ids():
            found = self.assignment(topology_id)
            if found is not None:
                result[topology_id] = found
        return result

    # ------------------------------------------------------------ /supervisors
    def supervisors(self) -> dict[str, storm.SupervisorInfo]:
        """Every registered (live-session) supervisor id -> its SupervisorInfo."""
        ids = self.children(zk_layout.SUPERVISORS_ROOT)
        datas = self.session.get_many([zk_layout.supervisor(i) for i in ids])
        result = {}
        for supervisor_id in ids:
            path = zk_layout.supervisor(supervisor_id)
            info = _decode(storm.SupervisorInfo, datas.get(path), path)
            if info is not None:
                result[supervisor_id] = info
        return result

    def supervisor_info(self, supervisor_id: str) -> storm.SupervisorInfo | None:
        return self._get_struct(zk_layout.supervisor(supervisor_id), storm.SupervisorInfo)

    def set_supervisor_info(self, supervisor_id: str, info: storm.SupervisorInfo) -> None:
        """Write this supervisor's EPHEMERAL node; re-created automatically after session loss."""
        self.session.set_ephemeral(zk_layout.supervisor(supervisor_id), serialize(info))

    def remove_supervisor_info(self, supervisor_id: str) -> None:
        self.session.remove_ephemeral(zk_layout.supervisor(supervisor_id))

    # ------------------------------------------------------------ /workerbeats
    def setup_heartbeats(self, topology_id: str) -> None:
        """Create ``/workerbeats/<id>`` (Nimbus, at submit); with ZooKeeper ACLs on also
        ``/errors/<id>``, both writable by the topology's own identity (its workers write there)."""
        self.leadership.check_writer(f"create the heartbeat node of {topology_id}")
        acl = self.topology_acl(topology_id, writable=True)
        self.session.ensure_path(zk_layout.workerbeats(topology_id), acl)
        if acl is not None:
            self.session.ensure_path(zk_layout.errors(topology_id), acl)

    def teardown_heartbeats(self, topology_id: str) -> None:
        self.leadership.check_writer(f"remove the heartbeats of {topology_id}")
        self.delete(zk_layout.workerbeats(topology_id), recursive=True)

    def heartbeat_storms(self) -> list[str]:
        """Topology ids that have a ``/workerbeats`` node."""
        return self.children(zk_layout.WORKERBEATS_ROOT)

    def set_worker_heartbeat(self, topology_id: str, node: str, port: int,
                             heartbeat: storm.ClusterWorkerHeartbeat) -> None:
        self.session.set(zk_layout.worker_beat(topology_id, node, port), serialize(heartbeat),
                         self.topology_acl(topology_id, writable=True))

    def remove_worker_heartbeat(self, topology_id: str, node: str, port: int) -> None:
        self.delete(zk_layout.worker_beat(topology_id, node, port))

    def worker_heartbeat(self, topology_id: str, node: str, port: int) -> storm.ClusterWorkerHeartbeat | None:
        return self._get_struct(zk_layout.worker_beat(topology_id, node, port), storm.ClusterWorkerHeartbeat)

    def worker_heartbeats(self, topology_id: str) -> dict[tuple[str, int], storm.ClusterWorkerHeartbeat]:
        """(node, port) -> heartbeat of every worker of the topology that has written one."""
        slots = {}
        for child in self.children(zk_layout.workerbeats(topology_id)):
            node, sep, port = child.rpartition("-")
            if not sep or not port.isdigit():
                log.warning("ignoring malformed heartbeat node %s of %s", child, topology_id)
                continue
            slots[zk_layout.worker_beat(topology_id, node, int(port))] = (node, int(port))
        datas = self.session.get_many(list(slots))   # pipelined: one wait, not one per worker
        result = {}
        for path, slot in slots.items():
            beat = _decode(storm.ClusterWorkerHeartbeat, datas.get(path), path)
            if beat is not None:
                result[slot] = beat
        return result

    def heartbeat_sink(self) -> HeartbeatSink:
        """The sink workers use today: ZooKeeper ``/workerbeats``."""
        return ZkHeartbeatSink(self)

    # ------------------------------------------------------------ /errors
    def report_error(self, topology_id: str, component_id: str, error: storm.ErrorInfo) -> None:
        """Append an error and drop all but the newest ``topology.error.retain`` of the component."""
        self.session.create_sequential(zk_layout.error_prefix(topology_id, component_id), serialize(error),
                                       self.topology_acl(topology_id, writable=True))
        retain = max(1, int(self.conf[TOPOLOGY_ERROR_RETAIN]))
        names = _by_sequence(self.children(zk_layout.component_errors(topology_id, component_id)))
        for name in names[:-retain]:
            self.delete(f"{zk_layout.component_errors(topology_id, component_id)}/{name}")

    def clear_component_errors(self, topology_id: str, component_id: str) -> None:
        """Forget a component's errors (a supervisor whose requirements install now succeeded)."""
        self.delete(zk_layout.component_errors(topology_id, component_id), recursive=True)

    def component_errors(self, topology_id: str, component_id: str) -> list[storm.ErrorInfo]:
        """One component's retained errors, newest first."""
        base = zk_layout.component_errors(topology_id, component_id)
        found = []
        for name in reversed(_by_sequence(self.children(base))):
            info = self._get_struct(f"{base}/{name}", storm.ErrorInfo)
            if info is not None:
                found.append(info)
        return found

    def errors(self, topology_id: str) -> dict[str, list[storm.ErrorInfo]]:
        """Component id -> its retained errors, newest first."""
        result: dict[str, list[storm.ErrorInfo]] = {}
        for component_id in self.children(zk_layout.errors(topology_id)):
            base = zk_layout.component_errors(topology_id, component_id)
            found = []
            for name in reversed(_by_sequence(self.children(base))):
                info = self._get_struct(f"{base}/{name}", storm.ErrorInfo)
                if info is not None:
                    found.append(info)
            if found:
                result[component_id] = found
        return result

    def error_topologies(self) -> list[str]:
        """Topology ids that have an ``/errors`` node."""
        return self.children(zk_layout.ERRORS_ROOT)

    def teardown_errors(self, topology_id: str) -> None:
        self.leadership.check_writer(f"remove the errors of {topology_id}")
        self.delete(zk_layout.errors(topology_id), recursive=True)

    # ------------------------------------------------------------ /code, /code-requests, /code-failures
    def set_code_digests(self, topology_id: str, digests: Mapping[str, str]) -> None:
        """Record the SHA-256 of each code file (Nimbus, at submit); a copy must match them."""
        self._leader_write(f"record the code digests of {topology_id}", zk_layout.code(topology_id),
                           json.dumps({"sha256": dict(digests)}, sort_keys=True).encode())

    def code_digests(self, topology_id: str) -> dict[str, str]:
        """file name -> SHA-256 hex recorded at submit; {} for topologies submitted without one."""
        data = self.get_data(zk_layout.code(topology_id))
        try:
            found = json.loads(data or b"{}").get("sha256") or {}
        except (ValueError, AttributeError):
            log.warning("ignoring undecodable code digests of %s", topology_id)
            return {}
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

    def code_digest_ids(self) -> list[str]:
        return self.children(zk_layout.CODE_ROOT)

    def remove_code_digests(self, topology_id: str) -> None:
        self._leader_write(f"remove the code digests of {topology_id}", zk_layout.code(topology_id), None)

    def set_code_request(self, host_port: str, topology_ids: list[str]) -> None:
        """Ephemeral: the Nimbus at ``host_port`` lacks these topologies' code ([] withdraws it)."""
        path = zk_layout.code_request(host_port)
        if topology_ids:
            self.session.set_ephemeral(path, json.dumps(sorted(topology_ids)).encode())
        else:
            self.session.remove_ephemeral(path)

    def code_requests(self) -> dict[str, list[str]]:
        """Nimbus ``host:port`` -> the topology ids whose code it asks supervisors for."""
        result = {}
        for host_port in self.children(zk_layout.CODE_REQUESTS_ROOT):
            try:
                ids = json.loads(self.get_data(zk_layout.code_request(host_port)) or b"[]")
            except ValueError:
                continue
            if isinstance(ids, list):
                result[host_port] = [str(i) for i in ids]
        return result

    def set_code_failure(self, topology_id: str, supervisor_id: str, text: str | None) -> None:
        """Ephemeral: why this supervisor cannot use the topology's code (None clears it)."""
        path = zk_layout.code_failure(topology_id, supervisor_id)
        if text is None:
            self.session.remove_ephemeral(path)
        else:
            self.session.set_ephemeral(path, text.encode())

    def code_failures(self) -> dict[str, list[str]]:
        """topology id -> what supervisors report about its code archive (only topologies with reports)."""
        result: dict[str, list[str]] = {}
        for topology_id in self.children(zk_layout.CODE_FAILURES_ROOT):
            texts = [(self.get_data(zk_layout.code_failure(topology_id, sup)) or b"").decode(errors="replace")
                     for sup in self.children(zk_layout.code_failures(topology_id))]
            texts = [t for t in texts if t]
            if texts:
                result[topology_id] = texts
        return result

    def code_failure_reporters(self, topology_id: str) -> list[str]:
        """Supervisor ids that report a failed code archive of this topology now."""
        return self.children(zk_layout.code_failures(topology_id))

    def code_failure_ids(self) -> list[str]:
        return self.children(zk_layout.CODE_FAILURES_ROOT)

    def teardown_code_failures(self, topology_id: str) -> None:
        self.leadership.check_writer(f"remove the code failure reports of {topology_id}")
        self.delete(zk_layout.code_failures(topology_id), recursive=True)

    # ------------------------------------------------------------ whole topology
    def remove_topology(self, topology_id: str) -> None:
        """Remove everything ZooKeeper holds about a topology (assignment first: workers stop)."""
        self.remove_assignment(topology_id)
        self.remove_storm_base(topology_id)
        self.teardown_heartbeats(topology_id)
        self.teardown_errors(topology_id)
        self.remove_code_digests(topology_id)
        self.teardown_code_failures(topology_id)

    # ------------------------------------------------------------ Nimbus registration, leadership
    def register_nimbus(self, host_port: str, summary: storm.NimbusSummary) -> None:
        """Ephemeral ``/nimbuses/<host:port>`` with a NimbusSummary (re-created after session loss)."""
        self.session.set_ephemeral(zk_layout.nimbus(host_port), serialize(summary))

    def nimbuses(self) -> dict[str, storm.NimbusSummary]:
        result = {}
        for name in self.children(zk_layout.NIMBUSES_ROOT):
            info = self._get_struct(zk_layout.nimbus(name), storm.NimbusSummary)
            if info is not None:
                result[name] = info
        return result

    def acquire_leadership(self, identifier: str, timeout: float | None = None) -> bool:
        """Compete for ``/leader-lock`` (blocking up to ``timeout``; None waits forever); True when
        leader. From the first call on, leader-only writes of this object need leadership."""
        return self.leadership.acquire(identifier, timeout)

    def is_leader(self) -> bool:
        """True while this client holds ``/leader-lock`` on a live, connected session."""
        return self.leadership.is_leader()

    def leader(self) -> str | None:
        """``host:port`` of the Nimbus holding ``/leader-lock`` (any session), None when nobody does."""
        return self.leadership.current_leader()

    def take_over_stale_leadership(self, identifier: str, session_id: int) -> bool:
        """Drop the lock nodes of this Nimbus's own dead previous incarnation (Leadership.take_over_stale)."""
        return self.leadership.take_over_stale(identifier, session_id)

    def release_leadership(self) -> None:
        self.leadership.release()

    # ------------------------------------------------------------ watches
    def watch_data(self, path: str, callback: Callable[[bytes | None], None]) -> Watch:
        """Call ``callback(data or None)`` now and whenever ``path`` is created, changed or deleted."""
        return self.watches.add("data", path, callback)

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> Watch:
        """Call ``callback(sorted children)`` now and whenever the children of ``path`` change."""
        return self.watches.add("children", path, callback)

    def watch_storm_base(self, topology_id: str, callback: Callable[[storm.StormBase | None], None]) -> Watch:
        """Call ``callback(StormBase or None)`` now and whenever the topology's StormBase changes."""
        def decode(data: bytes | None) -> None:
            callback(_decode(storm.StormBase, data))
        return self.watch_data(zk_layout.storm(topology_id), decode)

    def watch_assignment(self, topology_id: str, callback: Callable[[storm.Assignment | None], None]) -> Watch:
        """Call ``callback(Assignment or None)`` now and whenever that topology's assignment changes."""
        def decode(data: bytes | None) -> None:
            callback(_normalize_assignment(_decode(storm.Assignment, data)))
        return self.watch_data(zk_layout.assignment(topology_id), decode)

    def watch_assignments(self, callback: Callable[[], None]) -> Watch:
        """Call ``callback()`` when any assignment is added, removed or changed (and once now).

        The callback carries no data: re-read ``assignments()``. It may fire more often than
        strictly needed (e.g. after a reconnect), never less.
        """
        def on_children(names: list[str]) -> None:
            current = set(names)
            for name in list(parent.children):
                if name not in current:
                    parent.children.pop(name).stop()
            for name in current - set(parent.children):
                parent.children[name] = self.watch_data(zk_layout.assignment(name), lambda _data: callback())
            callback()
        parent = Watch(self.watches, "children", zk_layout.ASSIGNMENTS_ROOT, on_children)
        return self.watches.add_watch(parent)

    def watch_supervisors(self, callback: Callable[[list[str]], None]) -> Watch:
        """Call ``callback(supervisor ids)`` now and whenever supervisors join or leave."""
        return self.watch_children(zk_layout.SUPERVISORS_ROOT, callback)


def _decode(cls: type[T], data: bytes | None, path: str = "") -> T | None:
    if data is None:
        return None
    try:
        return deserialize(cls, data)
    except Exception as exc:  # a corrupt node must not take a daemon down
        log.warning("ignoring undecodable %s%s: %s", cls.__name__, f" at {path}" if path else "", exc)
        return None


def _normalize_assignment(assignment: storm.Assignment | None) -> storm.Assignment | None:
    if assignment is not None:
        for node_info in (assignment.executor_node_port or {}).values():
            node_info.port = set(node_info.port or ())
    return assignment


def _by_sequence(names: list[str]) -> list[str]:
    """Sequential node names (``e0000000012``) oldest first."""
    def seq(name: str) -> int:
        digits = name.lstrip("e")
        return int(digits) if digits.isdigit() else -1
    return sorted(names, key=seq)
