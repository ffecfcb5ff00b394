"""Cluster state in ZooKeeper: the only module that calls kazoo (DESIGN section 4).

``ClusterState`` connects with ``storm.zookeeper.root`` as kazoo's chroot and offers typed
reads and writes (Thrift structs in, Thrift structs out) of the paths in ``zk_layout``.
Daemons ask it for meaning (``state.assignment(topology_id)``), never for paths.

Connection handling, explicitly:
- every operation runs under kazoo's command retry (``storm.zookeeper.retry.times`` tries,
  starting at ``storm.zookeeper.retry.interval`` ms and doubling), so a short SUSPENDED
  period is ridden out instead of surfacing as an error;
- SUSPENDED: ``is_connected()`` turns False (a leader must stop writing); kazoo drops its
  client-side watchers at this point, so every watch is re-armed on the next CONNECTED;
- LOST (session expired): ephemeral nodes are gone and leadership with them. On the next
  CONNECTED the ephemerals this object created (supervisor info, Nimbus registration) are
  re-created, watches re-armed, and every watch callback fires once, because changes made
  while we were away produced no events.

Threads: kazoo calls the listener on its connection thread, where no ZooKeeper call may be
made, so all re-arming, re-creating and watch callbacks run on one dispatcher thread owned by
this object ("zk-events"). Watch callbacks must therefore be quick: hand work to your own
thread. All other methods may be called from any thread.

Worker heartbeats go through ``HeartbeatSink`` (``ZkHeartbeatSink`` writes ``/workerbeats``),
so a later RPC path (worker -> supervisor -> Nimbus, as in Storm 2) can replace the writes.
"""
from __future__ import annotations

import logging
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from stormpy import zk_layout
from stormpy.config import (
    STORM_ZOOKEEPER_CONNECTION_TIMEOUT,
    STORM_ZOOKEEPER_PORT,
    STORM_ZOOKEEPER_RETRY_INTERVAL,
    STORM_ZOOKEEPER_RETRY_TIMES,
    STORM_ZOOKEEPER_ROOT,
    STORM_ZOOKEEPER_SERVERS,
    STORM_ZOOKEEPER_SESSION_TIMEOUT,
    TOPOLOGY_ERROR_RETAIN,
    Config,
)
from stormpy.errors import UserError
from stormpy.thrift import deserialize, serialize, storm

log = logging.getLogger(__name__)

T = TypeVar("T")
StateListener = Callable[[str], None]
_TRANSIENT = (ConnectionLoss, SessionExpiredError, KazooTimeoutError)


def zookeeper_hosts(conf: Mapping[str, Any]) -> str:
    """``host:port,host:port`` from ``storm.zookeeper.servers`` and ``storm.zookeeper.port``."""
    port = int(conf.get(STORM_ZOOKEEPER_PORT.name) or STORM_ZOOKEEPER_PORT.default)
    servers = conf.get(STORM_ZOOKEEPER_SERVERS.name) or STORM_ZOOKEEPER_SERVERS.default
    if isinstance(servers, str):
        servers = [servers]
    return ",".join(s if ":" in str(s) else f"{s}:{port}" for s in servers)


def normalize_root(root: str | None) -> str:
    """A chroot path: leading slash, no trailing slash, '' for the ZooKeeper root itself."""
    root = (root or "").strip().rstrip("/")
    if root and not root.startswith("/"):
        root = "/" + root
    return root


class Watch:
    """A registered watch; ``stop()`` ends it (callbacks already queued may still run once)."""

    def __init__(self, state: "ClusterState", kind: str, path: str, callback: Callable[[Any], None]) -> None:
        self.state = state
        self.kind = kind            # "data" or "children"
        self.path = path
        self.callback = callback
        self.stopped = False
        self.children: dict[str, Watch] = {}

    def on_event(self, event: object) -> None:
        """kazoo watcher: runs on kazoo's callback thread, so only enqueue a re-arm."""
        if not self.stopped:
            self.state._enqueue(lambda: self.state._arm(self))

    def stop(self) -> None:
        self.stopped = True
        for child in self.children.values():
            child.stop()
        self.state._forget_watch(self)

    def __repr__(self) -> str:
        return f"Watch({self.kind} {self.path}{' stopped' if self.stopped else ''})"


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

    ``listener(state)`` is told about connection changes with kazoo's state names
    ("CONNECTED", "SUSPENDED", "LOST"); it runs on the dispatcher thread and may call back
    into this object.
    """

    def __init__(self, conf: Mapping[str, Any], *, listener: StateListener | None = None,
                 connect: bool = True) -> None:
        self.conf = conf if isinstance(conf, Config) else Config(conf)
        self.hosts = zookeeper_hosts(self.conf)
        self.root = normalize_root(self.conf[STORM_ZOOKEEPER_ROOT])
        self.listener = listener
        self._session_timeout_s = self.conf[STORM_ZOOKEEPER_SESSION_TIMEOUT] / 1000.0
        self._connect_timeout_s = self.conf[STORM_ZOOKEEPER_CONNECTION_TIMEOUT] / 1000.0
        retry_times = max(0, int(self.conf[STORM_ZOOKEEPER_RETRY_TIMES]))
        retry_delay_s = max(0.01, self.conf[STORM_ZOOKEEPER_RETRY_INTERVAL] / 1000.0)
        self._command_retry = {"max_tries": retry_times, "delay": retry_delay_s, "backoff": 2,
                               "max_delay": max(retry_delay_s, 5.0), "ignore_expire": True}
        self._zk = KazooClient(
            hosts=self.hosts + self.root, timeout=self._session_timeout_s,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2.0},
            command_retry=self._command_retry)
        self._lock = threading.RLock()
        self._ephemerals: dict[str, bytes] = {}
        self._watches: list[Watch] = []
        self._events: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._connected = threading.Event()
        self._session_lost = False
        self._closed = False
        self._leader_lock: Any = None
        self._leader_identifier: str | None = None
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name="zk-events", daemon=True)
        if connect:
            self.connect()

    # ------------------------------------------------------------ lifecycle
    def connect(self) -> "ClusterState":
        """Connect (creating the chroot if missing); UserError when ZooKeeper cannot be reached."""
        self._ensure_chroot()
        try:
            self._zk.start(timeout=self._connect_timeout_s)
        except KazooTimeoutError:
            self._zk.stop()
            self._zk.close()
            raise UserError(f"cannot reach ZooKeeper at {self.hosts} within {self._connect_timeout_s:g}s "
                            f"(storm.zookeeper.servers / storm.zookeeper.port)") from None
        self._connected.set()
        self._zk.add_listener(self._on_state)
        self._dispatcher.start()
        for root in zk_layout.ALL_ROOTS:
            self._zk.retry(self._zk.ensure_path, root)
        log.info("connected to ZooKeeper %s (root %s)", self.hosts, self.root or "/")
        return self

    def _ensure_chroot(self) -> None:
        """kazoo cannot create its own chroot, so a short-lived client without one does it."""
        if not self.root:
            return
        boot = KazooClient(hosts=self.hosts, timeout=self._session_timeout_s, command_retry=self._command_retry)
        try:
            boot.start(timeout=self._connect_timeout_s)
        except KazooTimeoutError:
            boot.stop()
            boot.close()
            raise UserError(f"cannot reach ZooKeeper at {self.hosts} within {self._connect_timeout_s:g}s "
                            f"(storm.zookeeper.servers / storm.zookeeper.port)") from None
        try:
            boot.retry(boot.ensure_path, self.root)
        finally:
            boot.stop()
            boot.close()

    def close(self) -> None:
        """Stop watches, release leadership, close the session (its ephemerals go with it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for watch in list(self._watches):
                watch.stopped = True
            self._watches.clear()
        self._events.put(None)
        if self._dispatcher.is_alive() and threading.current_thread() is not self._dispatcher:
            self._dispatcher.join(timeout=5)
        try:
            self._zk.stop()
            self._zk.close()
        except KazooException as exc:
            log.debug("closing ZooKeeper client: %s", exc)

    def __enter__(self) -> "ClusterState":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def is_connected(self) -> bool:
        """False while SUSPENDED or LOST: a leader must not write until this is True again."""
        return self._connected.is_set() and not self._closed

    @property
    def session_id(self) -> int | None:
        """The current ZooKeeper session id (changes after a session loss); for tests and logs."""
        cid = self._zk.client_id
        return cid[0] if cid else None

    def expire_session(self, timeout: float = 30.0) -> None:
        """Fault hook for tests: make ZooKeeper expire this client's session, as a long network
        partition would. A second client joins the same session and closes it (the standard
        trick); this client then sees LOST and reconnects with a new session."""
        session_id, password = self._zk.client_id
        twin = KazooClient(hosts=self.hosts, client_id=(session_id, password), timeout=self._session_timeout_s)
        twin.start(timeout=timeout)
        twin.stop()
        twin.close()

    # ------------------------------------------------------------ connection events
    def _on_state(self, state: str) -> None:
        """kazoo listener (its connection thread): no ZooKeeper calls here, only bookkeeping."""
        if self._closed:
            return
        if state == KazooState.SUSPENDED:
            self._connected.clear()
            log.warning("ZooKeeper connection suspended (%s); pausing writes until it returns", self.hosts)
        elif state == KazooState.LOST:
            self._connected.clear()
            with self._lock:
                self._session_lost = True
            log.warning("ZooKeeper session lost (%s); ephemeral nodes and leadership are gone", self.hosts)
        elif state == KazooState.CONNECTED:
            self._connected.set()
            log.info("ZooKeeper connection (re)established (%s)", self.hosts)
            self._enqueue(self._on_reconnected)
        if state != KazooState.CONNECTED:
            self._enqueue(lambda: self._notify(state))

    def _on_reconnected(self) -> None:
        """Dispatcher thread: restore what a lost session took, re-arm every watch."""
        with self._lock:
            lost, self._session_lost = self._session_lost, False
            ephemerals = dict(self._ephemerals)
            watches = list(self._watches)
        if lost:
            self._leader_lock = None
            for path, data in ephemerals.items():
                self._recreate_ephemeral(path, data)
            if self._leader_identifier is not None:
                self._try_reacquire_leadership()
        for watch in watches:
            self._arm(watch)
        self._notify(KazooState.CONNECTED)

    def _recreate_ephemeral(self, path: str, data: bytes) -> None:
        try:
            stat = self._zk.exists(path)
            if stat is not None and stat.ephemeralOwner != self.session_id:
                self._zk.delete(path)       # left by our expired session; the server is catching up
            self._zk.create(path, data, ephemeral=True, makepath=True)
            log.info("re-created ephemeral node %s after session loss", path)
        except NodeExistsError:
            self._zk.set(path, data)
        except KazooException as exc:
            log.warning("could not re-create ephemeral node %s: %s", path, exc)

    def _notify(self, state: str) -> None:
        if self.listener is None:
            return
        try:
            self.listener(state)
        except Exception:  # a listener bug must not kill the dispatcher
            log.exception("ZooKeeper state listener failed on %s", state)

    def _enqueue(self, task: Callable[[], None]) -> None:
        if not self._closed:
            self._events.put(task)

    def _dispatch_loop(self) -> None:
        while True:
            task = self._events.get()
            if task is None or self._closed:
                return
            try:
                task()
            except Exception:
                log.exception("ZooKeeper event handler failed")

    # ------------------------------------------------------------ raw helpers
    def _call(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return self._zk.retry(func, *args, **kwargs)

    def get_data(self, path: str) -> bytes | None:
        """Data of ``path`` (relative to the root), or None when it does not exist."""
        try:
            data, _ = self._call(self._zk.get, path)
            return data
        except NoNodeError:
            return None

    def set_data(self, path: str, data: bytes) -> None:
        """Create ``path`` (with parents) or overwrite its data."""
        try:
            self._call(self._zk.set, path, data)
        except NoNodeError:
            try:
                self._call(self._zk.create, path, data, makepath=True)
            except NodeExistsError:
                self._call(self._zk.set, path, data)

    def children(self, path: str) -> list[str]:
        """Sorted child names of ``path`` ([] when it does not exist)."""
        try:
            return sorted(self._call(self._zk.get_children, path))
        except NoNodeError:
            return []

    def exists(self, path: str) -> bool:
        return self._call(self._zk.exists, path) is not None

    def delete(self, path: str, recursive: bool = False) -> None:
        """Delete ``path`` (and its subtree when ``recursive``); missing is fine."""
        try:
            self._call(self._zk.delete, path, recursive=recursive)
        except NoNodeError:
            pass
        except NotEmptyError:
            self._call(self._zk.delete, path, recursive=True)

    def _get_struct(self, path: str, cls: type[T]) -> T | None:
        data = self.get_data(path)
        if data is None:
            return None
        try:
            return deserialize(cls, data)
        except Exception as exc:  # a corrupt node must not take a daemon down
            log.warning("ignoring undecodable %s at %s: %s", cls.__name__, path, exc)
            return None

    def _set_ephemeral(self, path: str, data: bytes) -> None:
        """Write an ephemeral node this session owns.

        A daemon restarted right after SIGKILL finds its predecessor's node still there (that
        session has not expired yet); merely updating it would let it vanish at that expiry,
        so a node owned by another session is replaced by our own.
        """
        with self._lock:
            first = path not in self._ephemerals
            self._ephemerals[path] = data
        if first:
            stat = self._call(self._zk.exists, path)
            if stat is not None and stat.ephemeralOwner != self.session_id:
                log.info("replacing %s left by an older session", path)
                self.delete(path)
        try:
            self._call(self._zk.set, path, data)
        except NoNodeError:
            try:
                self._call(self._zk.create, path, data, ephemeral=True, makepath=True)
            except NodeExistsError:
                self._call(self._zk.set, path, data)

    def _remove_ephemeral(self, path: str) -> None:
        with self._lock:
            self._ephemerals.pop(path, None)
        self.delete(path)

    # ------------------------------------------------------------ /storms
    def storm_base(self, topology_id: str) -> storm.StormBase | None:
        return self._get_struct(zk_layout.storm(topology_id), storm.StormBase)

    def set_storm_base(self, topology_id: str, base: storm.StormBase) -> None:
        self.set_data(zk_layout.storm(topology_id), serialize(base))

    def remove_storm_base(self, topology_id: str) -> None:
        self.delete(zk_layout.storm(topology_id))

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
        self.set_data(zk_layout.assignment(topology_id), serialize(assignment))

    def remove_assignment(self, topology_id: str) -> None:
        self.delete(zk_layout.assignment(topology_id))

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
        result = {}
        for supervisor_id in self.children(zk_layout.SUPERVISORS_ROOT):
            info = self.supervisor_info(supervisor_id)
            if info is not None:
                result[supervisor_id] = info
        return result

    def supervisor_info(self, supervisor_id: str) -> storm.SupervisorInfo | None:
        return self._get_struct(zk_layout.supervisor(supervisor_id), storm.SupervisorInfo)

    def set_supervisor_info(self, supervisor_id: str, info: storm.SupervisorInfo) -> None:
        """Write this supervisor's EPHEMERAL node; re-created automatically after session loss."""
        self._set_ephemeral(zk_layout.supervisor(supervisor_id), serialize(info))

    def remove_supervisor_info(self, supervisor_id: str) -> None:
        self._remove_ephemeral(zk_layout.supervisor(supervisor_id))

    # ------------------------------------------------------------ /workerbeats
    def setup_heartbeats(self, topology_id: str) -> None:
        """Create ``/workerbeats/<id>`` (Nimbus, at submit)."""
        self._call(self._zk.ensure_path, zk_layout.workerbeats(topology_id))

    def teardown_heartbeats(self, topology_id: str) -> None:
        self.delete(zk_layout.workerbeats(topology_id), recursive=True)

    def heartbeat_storms(self) -> list[str]:
        """Topology ids that have a ``/workerbeats`` node."""
        return self.children(zk_layout.WORKERBEATS_ROOT)

    def set_worker_heartbeat(self, topology_id: str, node: str, port: int,
                             heartbeat: storm.ClusterWorkerHeartbeat) -> None:
        self.set_data(zk_layout.worker_beat(topology_id, node, port), serialize(heartbeat))

    def remove_worker_heartbeat(self, topology_id: str, node: str, port: int) -> None:
        self.delete(zk_layout.worker_beat(topology_id, node, port))

    def worker_heartbeat(self, topology_id: str, node: str, port: int) -> storm.ClusterWorkerHeartbeat | None:
        return self._get_struct(zk_layout.worker_beat(topology_id, node, port), storm.ClusterWorkerHeartbeat)

    def worker_heartbeats(self, topology_id: str) -> dict[tuple[str, int], storm.ClusterWorkerHeartbeat]:
        """(node, port) -> heartbeat of every worker of the topology that has written one."""
        result = {}
        for child in self.children(zk_layout.workerbeats(topology_id)):
            node, sep, port = child.rpartition("-")
            if not sep or not port.isdigit():
                log.warning("ignoring malformed heartbeat node %s of %s", child, topology_id)
                continue
            beat = self.worker_heartbeat(topology_id, node, int(port))
            if beat is not None:
                result[(node, int(port))] = beat
        return result

    def heartbeat_sink(self) -> HeartbeatSink:
        """The sink workers use today: ZooKeeper ``/workerbeats``."""
        return ZkHeartbeatSink(self)

    # ------------------------------------------------------------ /errors
    def report_error(self, topology_id: str, component_id: str, error: storm.ErrorInfo) -> None:
        """Append an error and drop all but the newest ``topology.error.retain`` of the component."""
        self._call(self._zk.create, zk_layout.error_prefix(topology_id, component_id), serialize(error),
                   sequence=True, makepath=True)
        retain = max(1, int(self.conf[TOPOLOGY_ERROR_RETAIN]))
        names = _by_sequence(self.children(zk_layout.component_errors(topology_id, component_id)))
        for name in names[:-retain]:
            self.delete(f"{zk_layout.component_errors(topology_id, component_id)}/{name}")

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
        self.delete(zk_layout.errors(topology_id), recursive=True)

    # ------------------------------------------------------------ whole topology
    def remove_topology(self, topology_id: str) -> None:
        """Remove everything ZooKeeper holds about a topology (assignment first: workers stop)."""
        self.remove_assignment(topology_id)
        self.remove_storm_base(topology_id)
        self.teardown_heartbeats(topology_id)
        self.teardown_errors(topology_id)

    # ------------------------------------------------------------ Nimbus registration, leadership
    def register_nimbus(self, host_port: str, summary: storm.NimbusSummary) -> None:
        """Ephemeral ``/nimbuses/<host:port>`` with a NimbusSummary (re-created after session loss)."""
        self._set_ephemeral(zk_layout.nimbus(host_port), serialize(summary))

    def nimbuses(self) -> dict[str, storm.NimbusSummary]:
        result = {}
        for name in self.children(zk_layout.NIMBUSES_ROOT):
            info = self._get_struct(zk_layout.nimbus(name), storm.NimbusSummary)
            if info is not None:
                result[name] = info
        return result

    def acquire_leadership(self, identifier: str, timeout: float | None = None) -> bool:
        """Take ``/leader-lock`` (blocking up to ``timeout``; None waits forever). True when leader.

        A Nimbus killed with SIGKILL holds the lock until its session expires, so a restarted
        Nimbus waits up to ``storm.zookeeper.session.timeout`` here.
        """
        self._leader_identifier = identifier
        lock = self._zk.Lock(zk_layout.LEADER_LOCK, identifier)
        try:
            acquired = lock.acquire(blocking=timeout != 0, timeout=timeout if timeout else None)
        except LockTimeout:
            acquired = False
        if acquired:
            self._leader_lock = lock
            log.info("acquired leadership as %s", identifier)
        else:
            lock.cancel()
        return bool(acquired)

    def _try_reacquire_leadership(self) -> None:
        try:
            self.acquire_leadership(self._leader_identifier or "", timeout=0)
        except KazooException as exc:
            log.warning("could not re-acquire leadership: %s", exc)

    def is_leader(self) -> bool:
        """True while this client holds ``/leader-lock`` on a live, connected session."""
        lock = self._leader_lock
        return lock is not None and lock.is_acquired and self.is_connected()

    def release_leadership(self) -> None:
        self._leader_identifier = None
        lock, self._leader_lock = self._leader_lock, None
        if lock is not None and not self._zk.connected:
            # kazoo would retry the release until ZooKeeper is back, hanging a shutdown; the lock
            # node is ephemeral and goes with this session anyway.
            log.info("not releasing leadership explicitly: ZooKeeper is not connected")
            return
        if lock is not None:
            try:
                lock.release()
            except KazooException as exc:
                log.debug("releasing leadership: %s", exc)

    # ------------------------------------------------------------ watches
    def watch_data(self, path: str, callback: Callable[[bytes | None], None]) -> Watch:
        """Call ``callback(data or None)`` now and whenever ``path`` is created, changed or deleted."""
        return self._add_watch(Watch(self, "data", path, callback))

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> Watch:
        """Call ``callback(sorted children)`` now and whenever the children of ``path`` change."""
        return self._add_watch(Watch(self, "children", path, callback))

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
        parent = Watch(self, "children", zk_layout.ASSIGNMENTS_ROOT, on_children)
        return self._add_watch(parent)

    def watch_supervisors(self, callback: Callable[[list[str]], None]) -> Watch:
        """Call ``callback(supervisor ids)`` now and whenever supervisors join or leave."""
        return self.watch_children(zk_layout.SUPERVISORS_ROOT, callback)

    def _add_watch(self, watch: Watch) -> Watch:
        with self._lock:
            self._watches.append(watch)
        if threading.current_thread() is self._dispatcher:
            self._arm(watch)
        else:
            self._enqueue(lambda: self._arm(watch))
        return watch

    def _forget_watch(self, watch: Watch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def _arm(self, watch: Watch) -> None:
        """Dispatcher thread: read the node with a watch set, then deliver the value."""
        if watch.stopped or self._closed:
            return
        try:
            value = self._read_watched(watch)
        except _TRANSIENT as exc:
            log.debug("watch on %s not armed (%s); re-armed on reconnect", watch.path, exc)
            return
        if watch.stopped:
            return
        try:
            watch.callback(value)
        except Exception:
            log.exception("watch callback for %s failed", watch.path)

    def _read_watched(self, watch: Watch) -> Any:
        for _ in range(5):  # the node may appear/vanish between our two calls; retry a few times
            try:
                if watch.kind == "children":
                    return sorted(self._zk.get_children(watch.path, watch=watch.on_event))
                data, _ = self._zk.get(watch.path, watch=watch.on_event)
                return data
            except NoNodeError:
                if self._zk.exists(watch.path, watch=watch.on_event) is None:
                    return [] if watch.kind == "children" else None
        return [] if watch.kind == "children" else None


def _decode(cls: type[T], data: bytes | None) -> T | None:
    if data is None:
        return None
    try:
        return deserialize(cls, data)
    except Exception as exc:
        log.warning("ignoring undecodable %s: %s", cls.__name__, exc)
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
