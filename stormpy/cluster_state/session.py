"""One ZooKeeper session: the kazoo client, its connection states and its event thread.

``ZkSession`` is the only class in stormpy that constructs a ``KazooClient``. It connects
under a chroot (creating it first: kazoo cannot), runs every command under kazoo's retry
(``storm.zookeeper.retry.times`` tries, starting at ``storm.zookeeper.retry.interval`` ms
and doubling, session expiry included), so a short SUSPENDED period is ridden out rather than
surfacing as an error, and keeps the ephemeral nodes it created so that it can re-create them
after a session loss.

Connection states, handled where the listener is registered (``connect``), one handler each:
- CONNECTED: writes may resume; the reconnect hooks run on the event thread (ephemerals
  re-created first when the session was lost, then the hooks: leadership, watches, listener);
- SUSPENDED: ``is_connected()`` turns False, so a leader stops writing; kazoo drops its
  client-side watchers, so every watch is re-armed on the next CONNECTED;
- LOST (session expired): ephemerals and leadership are gone; the lost hooks run at once on
  kazoo's thread (bookkeeping only: no ZooKeeper call may be made there).

Threads: kazoo calls the listener on its connection thread; everything that needs ZooKeeper
after an event runs on this session's one event thread ("zk-events"), in order. All other
methods may be called from any thread.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoAuthError, NodeExistsError, NoNodeError, NotEmptyError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError

from stormpy.config import (
    read,
    STORM_ZOOKEEPER_CONNECTION_TIMEOUT,
    STORM_ZOOKEEPER_PORT,
    STORM_ZOOKEEPER_RETRY_INTERVAL,
    STORM_ZOOKEEPER_RETRY_TIMES,
    STORM_ZOOKEEPER_SERVERS,
    STORM_ZOOKEEPER_SESSION_TIMEOUT,
    Config,
)
from stormpy.errors import UserError

log = logging.getLogger(__name__)

T = TypeVar("T")
StateListener = Callable[[str], None]


def zookeeper_hosts(conf: Mapping[str, Any], servers: Any = None, port: Any = None) -> str:
    """``host:port,host:port`` from ``storm.zookeeper.servers`` and ``storm.zookeeper.port``
    (or the given ``servers``/``port``, e.g. Trident's ``transactional.zookeeper.*``)."""
    port = int(port or read(conf, STORM_ZOOKEEPER_PORT))
    servers = servers or read(conf, STORM_ZOOKEEPER_SERVERS)
    if isinstance(servers, str):
        servers = [servers]
    return ",".join(s if ":" in str(s) else f"{s}:{port}" for s in servers)


def normalize_root(root: str | None) -> str:
    """A chroot path: leading slash, no trailing slash, '' for the ZooKeeper root itself."""
    root = (root or "").strip().rstrip("/")
    if root and not root.startswith("/"):
        root = "/" + root
    return root


class _QuietReconnects(logging.Filter):
    """kazoo logs "Connection dropped: ..." for every reconnect attempt (seven lines before our
    error when ZooKeeper is down). Let the first one of an outage through, drop the repeats and
    kazoo's "Failed connecting ... retry policy" (our own one-line error follows), until a
    session connects again (``reset``). Installed once on kazoo's logger, shared by all sessions."""

    _REPEATS = ("Connection dropped", "Connection time-out", "Failed connecting to Zookeeper")

    def __init__(self) -> None:
        super().__init__()
        self._told = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self._REPEATS):
            return True
        if self._told or str(record.msg).startswith("Failed connecting"):
            return False
        self._told = True
        return True

    def reset(self) -> None:
        self._told = False


_QUIET = _QuietReconnects()
logging.getLogger("kazoo.client").addFilter(_QUIET)


def _unreachable(hosts: str, timeout_s: float) -> UserError:
    return UserError(f"cannot reach ZooKeeper at {hosts} within {timeout_s:g}s "
                     f"(storm.zookeeper.servers / storm.zookeeper.port)")


class ZkSession:
    """A kazoo client under ``root`` with explicit state handling and an event thread."""

    def __init__(self, conf: Config, hosts: str, root: str, *, name: str = "zk-events") -> None:
        self.hosts = hosts
        self.root = normalize_root(root)
        self._session_timeout_s = conf[STORM_ZOOKEEPER_SESSION_TIMEOUT] / 1000.0
        self._connect_timeout_s = conf[STORM_ZOOKEEPER_CONNECTION_TIMEOUT] / 1000.0
        retry_times = max(0, int(conf[STORM_ZOOKEEPER_RETRY_TIMES]))
        retry_delay_s = max(0.01, conf[STORM_ZOOKEEPER_RETRY_INTERVAL] / 1000.0)
        self._command_retry = {"max_tries": retry_times, "delay": retry_delay_s, "backoff": 2,
                               "max_delay": max(retry_delay_s, 5.0), "ignore_expire": True}
        # storm.zookeeper.auth.*: every node this session creates gets a digest ACL (DESIGN 13).
        from stormpy.auth import holds_topology_identity_only, zookeeper_acl

        self._auth_data, self._default_acl = zookeeper_acl(conf)
        self._topology_only = holds_topology_identity_only(conf)
        from stormpy.tls import zookeeper_client_kwargs

        self._tls = zookeeper_client_kwargs(conf)     # storm.zookeeper.ssl.enable: kazoo over TLS
        self.zk = KazooClient(
            hosts=self.hosts + self.root, timeout=self._session_timeout_s,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2.0},
            command_retry=self._command_retry, auth_data=self._auth_data, default_acl=self._default_acl, **self._tls)
        self._lock = threading.Lock()
        self._ephemerals: dict[str, bytes] = {}
        self._events: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._connected = threading.Event()
        self._session_lost = False
        self._closed = False
        self._on_lost: list[Callable[[], None]] = []
        self._on_reconnected: list[Callable[[bool], None]] = []
        self._on_state_change: list[StateListener] = []
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name=name, daemon=True)
        self._handlers = {KazooState.CONNECTED: self._on_connected, KazooState.SUSPENDED: self._on_suspended,
                          KazooState.LOST: self._on_lost_state}

    # ------------------------------------------------------------ hooks
    def add_lost_hook(self, hook: Callable[[], None]) -> None:
        """``hook()`` runs on kazoo's connection thread when the session is LOST: bookkeeping only."""
        self._on_lost.append(hook)

    def add_reconnected_hook(self, hook: Callable[[bool], None]) -> None:
        """``hook(session_was_lost)`` runs on the event thread after every (re)connection."""
        self._on_reconnected.append(hook)

    def add_state_hook(self, hook: StateListener) -> None:
        """``hook("SUSPENDED"|"LOST")`` runs on the event thread (CONNECTED goes to reconnect hooks)."""
        self._on_state_change.append(hook)

    # ------------------------------------------------------------ lifecycle
    def connect(self) -> "ZkSession":
        """Connect (creating the chroot if missing); UserError when ZooKeeper cannot be reached."""
        self._ensure_chroot()
        try:
            self.zk.start(timeout=self._connect_timeout_s)
        except KazooTimeoutError:
            self.zk.stop()
            self.zk.close()
            raise _unreachable(self.hosts, self._connect_timeout_s) from None
        except NoAuthError:
            # kazoo probes the chroot node after connecting; a worker under ZooKeeper ACLs may
            # not read it (only its topology's nodes), and the session is up all the same.
            if not self._topology_only:
                raise
        self._connected.set()
        _QUIET.reset()
        # Registered after start(): the first CONNECTED is the one we just waited for.
        self.zk.add_listener(self._on_kazoo_state)
        self._dispatcher.start()
        log.info("connected to ZooKeeper %s (root %s)", self.hosts, self.root or "/")
        return self

    def _ensure_chroot(self) -> None:
        """kazoo cannot create its own chroot, so a short-lived client without one does it
        (not a worker under ZooKeeper ACLs: it may not even look at the root; Nimbus made it)."""
        if not self.root or self._topology_only:
            return
        boot = KazooClient(hosts=self.hosts, timeout=self._session_timeout_s, command_retry=self._command_retry,
                           auth_data=self._auth_data, default_acl=self._default_acl, **self._tls)
        try:
            boot.start(timeout=self._connect_timeout_s)
        except KazooTimeoutError:
            boot.stop()
            boot.close()
            raise _unreachable(self.hosts, self._connect_timeout_s) from None
        try:
            boot.retry(boot.ensure_path, self.root)
        finally:
            boot.stop()
            boot.close()

    def close(self) -> None:
        """Stop the event thread and close the session (its ephemerals go with it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._events.put(None)
        if self._dispatcher.is_alive() and not self.on_event_thread():
            self._dispatcher.join(timeout=5)
        try:
            self.zk.stop()
            self.zk.close()
        except KazooException as exc:
            log.debug("closing ZooKeeper client: %s", exc)

    @property
    def closed(self) -> bool:
        return self._closed

    def is_connected(self) -> bool:
        """False while SUSPENDED or LOST, and after close()."""
        return self._connected.is_set() and not self._closed

    @property
    def session_id(self) -> int | None:
        """The current ZooKeeper session id (changes after a session loss); for tests and logs."""
        cid = self.zk.client_id
        return cid[0] if cid else None

    def expire_session(self, timeout: float = 30.0) -> None:
        """Fault hook for tests: make ZooKeeper expire this client's session, as a long network
        partition would. A second client joins the same session and closes it (the standard
        trick); this client then sees LOST and reconnects with a new session."""
        session_id, password = self.zk.client_id
        twin = KazooClient(hosts=self.hosts, client_id=(session_id, password), timeout=self._session_timeout_s,
                           auth_data=self._auth_data, **self._tls)
        twin.start(timeout=timeout)
        twin.stop()
        twin.close()

    # ------------------------------------------------------------ connection states (kazoo's thread)
    def _on_kazoo_state(self, state: str) -> None:
        """kazoo listener: no ZooKeeper calls here, only bookkeeping and queueing."""
        if not self._closed:
            self._handlers[state]()

    def _on_connected(self) -> None:
        self._connected.set()
        _QUIET.reset()
        log.info("ZooKeeper connection (re)established (%s)", self.hosts)
        self.enqueue(self._after_reconnect)

    def _on_suspended(self) -> None:
        self._connected.clear()
        log.warning("ZooKeeper connection suspended (%s); pausing writes until it returns", self.hosts)
        self.enqueue(lambda: self._tell_state(KazooState.SUSPENDED))

    def _on_lost_state(self) -> None:
        self._connected.clear()
        with self._lock:
            self._session_lost = True
        log.warning("ZooKeeper session lost (%s); ephemeral nodes and leadership are gone", self.hosts)
        for hook in self._on_lost:
            hook()
        self.enqueue(lambda: self._tell_state(KazooState.LOST))

    # ------------------------------------------------------------ event thread
    def _after_reconnect(self) -> None:
        """Event thread: restore what a lost session took, then run the reconnect hooks."""
        with self._lock:
            lost, self._session_lost = self._session_lost, False
            ephemerals = dict(self._ephemerals)
        if lost:
            for path, data in ephemerals.items():
                self._recreate_ephemeral(path, data)
        for hook in self._on_reconnected:
            hook(lost)

    def _tell_state(self, state: str) -> None:
        for hook in self._on_state_change:
            hook(state)

    def enqueue(self, task: Callable[[], None]) -> None:
        """Run ``task`` on the event thread (dropped after close)."""
        if not self._closed:
            self._events.put(task)

    def on_event_thread(self) -> bool:
        return threading.current_thread() is self._dispatcher

    def _dispatch_loop(self) -> None:
        while True:
            task = self._events.get()
            if task is None or self._closed:
                return
            try:
                task()
            except Exception:  # one failed handler must not end the event thread
                log.exception("ZooKeeper event handler failed")

    # ------------------------------------------------------------ commands
    def call(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``func(*args)`` (a kazoo client method) under the command retry."""
        return self.zk.retry(func, *args, **kwargs)

    def get(self, path: str) -> bytes | None:
        """Data of ``path``, or None when it does not exist."""
        try:
            data, _ = self.call(self.zk.get, path)
            return data
        except NoNodeError:
            return None

    def get_many(self, paths: list[str]) -> dict[str, bytes | None]:
        """Data of every path (None when missing), the requests pipelined on the connection.

        Nimbus reads hundreds of heartbeats and supervisor infos per monitor round; one
        synchronous ``get`` each waits a round trip each (benchmarks/nimbus_scale.py: most of a
        round at 1,000 workers). Sent together they wait about one round trip. A read that fails
        (connection lost mid-batch) is retried alone with ``get``'s command retry.
        """
        pending = []
        for path in paths:
            try:
                pending.append((path, self.zk.get_async(path)))
            except KazooException:   # not connected right now: the retried read below waits for it
                pending.append((path, None))
        result: dict[str, bytes | None] = {}
        for path, answer in pending:
            try:
                if answer is None:
                    raise KazooException("not sent")
                result[path] = answer.get(timeout=self._session_timeout_s)[0]
            except NoNodeError:
                result[path] = None
            except (KazooException, KazooTimeoutError):
                result[path] = self.get(path)
        return result

    def set(self, path: str, data: bytes, acl: list[Any] | None = None) -> None:
        """Create ``path`` (with parents; ``acl``, default the session's) or overwrite its data."""
        try:
            self.call(self.zk.set, path, data)
        except NoNodeError:
            try:
                self.call(self.zk.create, path, data, acl=acl, makepath=True)
            except NodeExistsError:
                self.call(self.zk.set, path, data)

    def create_or_set(self, path: str, data: bytes, acl: list[Any] | None = None) -> None:
        """:meth:`set` for a path that most likely does not exist yet: the create is tried first."""
        try:
            self.call(self.zk.create, path, data, acl=acl, makepath=True)
        except NodeExistsError:
            self.set(path, data, acl)

    def set_all_if(self, path: str, data: bytes, version: int, others: list[tuple[str, bytes]]) -> int:
        """Set ``path`` at ``version`` and every (path, data) of ``others`` in one transaction:
        one round trip, all or none. Returns ``path``'s new version; BadVersionError (nothing
        written) when ``path`` moved on. A path of ``others`` not there yet is created alone
        first, and the transaction tried again."""
        def attempt() -> int:
            for _ in range(10):
                tx = self.zk.transaction()
                tx.set_data(path, data, version=version)
                for other, other_data in others:
                    tx.set_data(other, other_data)
                results = tx.commit()
                missing = [other for (other, _), result in zip(others, results[1:])
                           if isinstance(result, NoNodeError)]
                if isinstance(results[0], NoNodeError) or not missing:
                    for result in results:   # the failed op's error, not RolledBackError
                        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                            raise result
                    return results[0].version
                for other in missing:
                    try:
                        self.zk.create(other, b"", makepath=True)
                    except NodeExistsError:
                        pass
            raise KazooException(f"{path}: the nodes written with it keep vanishing")
        return self.call(attempt)

    def write_fenced(self, fence: str, path: str, data: bytes | None, acl: list[Any] | None = None) -> bool:
        """Set (create) ``path`` to ``data``, or delete it when ``data`` is None, in one
        transaction that first checks that the node ``fence`` exists. False (nothing written)
        when it does not. Each attempt of the command retry builds the transaction anew, so a
        write retried after a reconnection checks the fence again (Leadership.fence)."""
        def attempt() -> bool:
            for _ in range(10):   # the node appeared or vanished between exists() and commit
                exists = self.zk.exists(path) is not None
                if data is None and not exists:
                    return self.zk.exists(fence) is not None
                tx = self.zk.transaction()
                tx.check(fence, -1)
                if data is None:
                    tx.delete(path)
                elif exists:
                    tx.set_data(path, data)
                else:
                    tx.create(path, data, acl=acl or self._default_acl)
                fenced, written = tx.commit()
                if isinstance(fenced, NoNodeError):
                    return False
                if isinstance(written, (NoNodeError, NodeExistsError)):
                    continue
                for result in (written, fenced):   # the failed op's error, not RolledBackError
                    if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                        raise result
                return True
            raise KazooException(f"{path} keeps changing under a fenced write")
        return self.call(attempt)

    def children(self, path: str) -> list[str]:
        """Sorted child names of ``path`` ([] when it does not exist)."""
        try:
            return sorted(self.call(self.zk.get_children, path))
        except NoNodeError:
            return []

    def exists(self, path: str) -> bool:
        return self.call(self.zk.exists, path) is not None

    def ensure_path(self, path: str, acl: list[Any] | None = None) -> None:
        self.call(self.zk.ensure_path, path, acl)

    def create_sequential(self, prefix: str, data: bytes, acl: list[Any] | None = None) -> str:
        """A new node ``<prefix><sequence number>`` (parents created, with ``acl``); returns its path."""
        return self.call(self.zk.create, prefix, data, acl=acl, sequence=True, makepath=True)

    def delete(self, path: str, recursive: bool = False) -> None:
        """Delete ``path`` (and its subtree when ``recursive``); missing is fine."""
        try:
            self.call(self.zk.delete, path, recursive=recursive)
        except NoNodeError:
            pass
        except NotEmptyError:
            self.call(self.zk.delete, path, recursive=True)

    # ------------------------------------------------------------ ephemerals
    def set_ephemeral(self, path: str, data: bytes) -> None:
        """Write an ephemeral node this session owns; re-created after a session loss.

        A daemon restarted right after SIGKILL finds its predecessor's node still there (that
        session has not expired yet); merely updating it would let it vanish at that expiry,
        so a node owned by another session is replaced by our own.
        """
        with self._lock:
            first = path not in self._ephemerals
            self._ephemerals[path] = data
        if first:
            stat = self.call(self.zk.exists, path)
            if stat is not None and stat.ephemeralOwner != self.session_id:
                log.info("replacing %s left by an older session", path)
                self.delete(path)
        try:
            self.call(self.zk.set, path, data)
        except NoNodeError:
            try:
                self.call(self.zk.create, path, data, ephemeral=True, makepath=True)
            except NodeExistsError:
                self.call(self.zk.set, path, data)

    def remove_ephemeral(self, path: str) -> None:
        with self._lock:
            self._ephemerals.pop(path, None)
        self.delete(path)

    def _recreate_ephemeral(self, path: str, data: bytes) -> None:
        try:
            stat = self.zk.exists(path)
            if stat is not None and stat.ephemeralOwner != self.session_id:
                self.zk.delete(path)       # left by our expired session; the server is catching up
            self.zk.create(path, data, ephemeral=True, makepath=True)
            log.info("re-created ephemeral node %s after session loss", path)
        except NodeExistsError:
            self.zk.set(path, data)
        except KazooException as exc:
            log.warning("could not re-create ephemeral node %s: %s", path, exc)
