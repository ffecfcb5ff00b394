"""Trident's coordinator state (DESIGN 7.2): ``TransactionalState`` and its two stores.

Trident's coordinators keep small JSON values (current txid, attempts, per-partition
metadata) under paths such as ``coordinator/currtx`` so that a restarted or moved coordinator
resumes where it was. The interface is deliberately tiny, the subset of Storm's
``TransactionalState`` Trident uses; values are JSON-able and paths are relative,
'/'-separated; parents are created by ``set`` and a missing path reads as ``default``/``[]``.

- ``ZkTransactionalState`` (a cluster; ``transactional_state_for(conf, topology_name)``):
  ``<transactional.zookeeper.root>/<topology-name>/<path>`` on the servers of
  ``transactional.zookeeper.servers``/``port`` (default: the ``storm.zookeeper`` ones). The
  topology NAME, not its id, keys the subtree, so a resubmitted topology resumes. It connects
  on first use (a worker that runs no Trident component never opens a second session) and
  rides out session loss with the session's command retry: no ephemerals, no watches.
- ``MemoryTransactionalState`` (``stormpy local`` and tests): the same behaviour in a dict,
  thread-safe, gone with the process. Values are copied through JSON on the way in, so
  both stores accept and refuse the same values.

Any thread may call either; both are safe for concurrent use.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from stormpy import zk_layout
from stormpy.cluster_state.session import ZkSession, zookeeper_hosts
from stormpy.config import (
    TRANSACTIONAL_ZOOKEEPER_PORT,
    TRANSACTIONAL_ZOOKEEPER_ROOT,
    TRANSACTIONAL_ZOOKEEPER_SERVERS,
    Config,
)

log = logging.getLogger(__name__)


@runtime_checkable
class TransactionalState(Protocol):
    """Small JSON values by relative, '/'-separated path, for one topology."""

    def get(self, path: str, default: Any = None) -> Any:
        """The value at ``path``, or ``default`` when there is none."""

    def set(self, path: str, value: Any) -> None:
        """Store ``value`` at ``path`` (parents created, old value overwritten)."""

    def set_new(self, path: str, value: Any) -> None:
        """:meth:`set` for a path that most likely does not exist yet (a new txid's meta): in
        ZooKeeper one round trip (a create) where ``set`` takes two (the failed update first)."""

    def delete(self, path: str) -> None:
        """Remove ``path`` and everything below it; a missing path is fine."""

    def children(self, path: str) -> list[str]:
        """Sorted names directly below ``path`` ([] when it is missing)."""

    def close(self) -> None:
        """Release the connection (if any); the object is not used afterwards."""


class StaleVersionError(RuntimeError):
    """A compare-and-set found another version than expected: someone else wrote the path."""


def _encode(path: str, value: Any) -> bytes:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise TypeError(f"transactional state value at {path!r} is not JSON-able: {exc}") from None


def snapshot(path: str, value: Any) -> Any:
    """``value`` as the state will store and read it back (JSON), taken now: for a write done
    later on another thread, while the caller may change the object it passed (a spout that
    reuses its meta dict for the next partition)."""
    return json.loads(_encode(path, value))


def _split(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split("/") if part)


class MemoryTransactionalState:
    """``TransactionalState`` in this process's memory (``stormpy local``, tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, ...], bytes] = {}
        self._versions: dict[tuple[str, ...], int] = {}

    def get_versioned(self, path: str) -> tuple[Any, int | None]:
        """(value, version) of ``path``; (None, None) when it does not exist."""
        key = _split(path)
        with self._lock:
            data = self._values.get(key)
            return (None, None) if data is None else (json.loads(data), self._versions.get(key, 0))

    def set_versioned(self, path: str, value: Any, version: int | None,
                      also: Mapping[str, Any] | None = None) -> int:
        """Write ``path`` only if it is still at ``version`` (None: must not exist), and with it
        every path of ``also``; the new version. StaleVersionError otherwise (another writer got
        there first; nothing written)."""
        data = _encode(path, value)
        others = [(_split(other), _encode(other, v)) for other, v in (also or {}).items()]
        key = _split(path)
        with self._lock:
            current = self._versions.get(key, 0) if key in self._values else None
            if current != version:
                raise StaleVersionError(f"{path} is at version {current}, not {version}: another writer changed it")
            for other, other_data in others:
                self._versions[other] = self._versions.get(other, -1) + 1 if other in self._values else 0
                self._values[other] = other_data
            self._values[key] = data
            self._versions[key] = 0 if version is None else version + 1
            return self._versions[key]

    def get(self, path: str, default: Any = None) -> Any:
        with self._lock:
            data = self._values.get(_split(path))
        return default if data is None else json.loads(data)

    def set(self, path: str, value: Any) -> None:
        data = _encode(path, value)
        key = _split(path)
        with self._lock:
            self._versions[key] = self._versions.get(key, -1) + 1 if key in self._values else 0
            self._values[key] = data

    def set_new(self, path: str, value: Any) -> None:
        self.set(path, value)

    def delete(self, path: str) -> None:
        key = _split(path)
        with self._lock:
            for stored in [k for k in self._values if k[:len(key)] == key]:
                del self._values[stored]
                self._versions.pop(stored, None)

    def children(self, path: str) -> list[str]:
        key = _split(path)
        with self._lock:
            return sorted({k[len(key)] for k in self._values if len(k) > len(key) and k[:len(key)] == key})

    def close(self) -> None:
        """Nothing to release; the values stay readable (one object lives as long as its topology)."""


class ZkTransactionalState:
    """``TransactionalState`` in ZooKeeper under ``<transactional.zookeeper.root>/<topology-name>``."""

    def __init__(self, conf: Mapping[str, Any], topology_name: str) -> None:
        if not topology_name or "/" in topology_name:
            raise ValueError(f"transactional state needs a topology name without '/', got {topology_name!r}")
        self.conf = conf if isinstance(conf, Config) else Config(conf)
        self.topology_name = topology_name
        self.hosts = zookeeper_hosts(self.conf, self.conf[TRANSACTIONAL_ZOOKEEPER_SERVERS],
                                     self.conf[TRANSACTIONAL_ZOOKEEPER_PORT])
        self.root = self.conf[TRANSACTIONAL_ZOOKEEPER_ROOT]
        self._lock = threading.Lock()
        self._session: ZkSession | None = None
        self._closed = False

    def _connected(self) -> ZkSession:
        """The session, connected on first use (UserError when ZooKeeper cannot be reached)."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"transactional state of {self.topology_name} is closed")
            if self._session is None:
                session = ZkSession(self.conf, self.hosts, self.root, name="zk-events-transactional")
                session.connect()
                self._session = session
            return self._session

    def _node(self, path: str) -> str:
        return zk_layout.transactional_node(self.topology_name, path)

    def get(self, path: str, default: Any = None) -> Any:
        data = self._connected().get(self._node(path))
        return default if not data else json.loads(data)

    def set(self, path: str, value: Any) -> None:
        data = _encode(path, value)
        self._connected().set(self._node(path), data)

    def set_new(self, path: str, value: Any) -> None:
        data = _encode(path, value)
        self._connected().create_or_set(self._node(path), data)

    def get_versioned(self, path: str) -> tuple[Any, int | None]:
        """(value, ZooKeeper data version) of ``path``; (None, None) when it does not exist."""
        session = self._connected()
        try:
            data, stat = session.call(session.zk.get, self._node(path))
        except NoNodeError:
            return None, None
        return (json.loads(data) if data else None), stat.version

    def set_versioned(self, path: str, value: Any, version: int | None,
                      also: Mapping[str, Any] | None = None) -> int:
        """Compare-and-set: write ``path`` only while its ZooKeeper version is ``version`` (None: the
        node must not exist yet); returns the new version, or raises StaleVersionError.

        ``also``: more paths written in the same ZooKeeper transaction (one round trip; all or
        none, so a stale writer writes none of them). A path of ``also`` that does not exist yet
        is created first, on its own (the Trident coordinator's attempts, once per topology).
        With ``version`` None they are written after ``path`` is created (once per topology).

        A command retried after a lost reply may find its own first write: the node then holds our
        data at exactly the next version (and every path of ``also`` ours), which counts as
        success."""
        data = _encode(path, value)
        node = self._node(path)
        session = self._connected()
        expected = 0 if version is None else version + 1
        others = [(self._node(other), _encode(other, v)) for other, v in (also or {}).items()]
        try:
            if version is None:
                session.call(session.zk.create, node, data, makepath=True)
            elif not others:
                return session.call(session.zk.set, node, data, version=version).version
            else:
                return session.set_all_if(node, data, version, others)
        except (BadVersionError, NodeExistsError, NoNodeError):
            if not self._found_own_write(session, node, data, expected, others if version is not None else []):
                found = self._version_of(session, node)
                raise StaleVersionError(f"{self.topology_name}/{path} is at version {found}, not {version}: "
                                        "another writer changed it") from None
            if version is not None:
                return expected
        for other, other_data in others:   # version None: path created (by this call, or its lost first try)
            session.set(other, other_data)
        return 0

    @staticmethod
    def _found_own_write(session: ZkSession, node: str, data: bytes, expected: int,
                         others: list[tuple[str, bytes]]) -> bool:
        """Whether ``node`` holds ``data`` at ``expected`` and every (path, data) of ``others``
        holds its data: what a write whose reply was lost left (a second writer of the same
        value at the same version, whose transaction lost, finds the other one's ``others``)."""
        try:
            current, stat = session.call(session.zk.get, node)
        except NoNodeError:
            return False
        if current != data or stat.version != expected:
            return False
        return all(session.get(other) == other_data for other, other_data in others)

    @staticmethod
    def _version_of(session: ZkSession, node: str) -> int | None:
        try:
            return session.call(session.zk.get, node)[1].version
        except NoNodeError:
            return None

    def delete(self, path: str) -> None:
        # A leaf (a txid's meta, every prune) is one round trip; a node with children is
        # deleted recursively when ZooKeeper says it is not empty.
        self._connected().delete(self._node(path))

    def children(self, path: str) -> list[str]:
        return self._connected().children(self._node(path))

    @property
    def has_session(self) -> bool:
        """Whether the first use has opened the ZooKeeper session yet."""
        return self._session is not None

    @property
    def session_id(self) -> int | None:
        return self._session.session_id if self._session is not None else None

    def expire_session(self, timeout: float = 30.0) -> None:
        """Fault hook for tests: ZooKeeper expires this store's session (see ZkSession)."""
        self._connected().expire_session(timeout)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            session, self._session = self._session, None
        if session is not None:
            session.close()

    def __repr__(self) -> str:
        return f"ZkTransactionalState({self.hosts}{self.root}/{self.topology_name})"


def grant_transactional_state(conf: Mapping[str, Any], topology_name: str, acl: list[Any]) -> None:
    """Make ``<transactional.zookeeper.root>/<topology-name>`` and everything under it carry
    ``acl`` (Nimbus, at submit, with ZooKeeper ACLs on): the subtree is keyed by the topology's
    name, so a resubmitted topology (a new id, a new ZooKeeper identity) takes over its
    predecessor's state, and its workers, which may not touch the root, find their node made."""
    config = conf if isinstance(conf, Config) else Config(conf)
    hosts = zookeeper_hosts(config, config[TRANSACTIONAL_ZOOKEEPER_SERVERS], config[TRANSACTIONAL_ZOOKEEPER_PORT])
    session = ZkSession(config, hosts, config[TRANSACTIONAL_ZOOKEEPER_ROOT], name="zk-events-transactional-grant")
    session.connect()
    try:
        top = zk_layout.transactional_topology(topology_name)
        session.ensure_path(top, acl)
        pending = [top]
        while pending:
            path = pending.pop()
            session.call(session.zk.set_acls, path, acl)
            pending.extend(f"{path}/{child}" for child in session.children(path))
    finally:
        session.close()


def transactional_state_for(conf: Mapping[str, Any], topology_name: str) -> TransactionalState:
    """The ZooKeeper ``TransactionalState`` of a topology (connects on first use)."""
    return ZkTransactionalState(conf, topology_name)
