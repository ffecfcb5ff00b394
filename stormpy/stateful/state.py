"""``KeyValueState`` and its stores: memory, SQLite, Redis (DESIGN section 12).

A stateful bolt task sees one :class:`KeyValueState` (Storm's ``KeyValueState``: ``put``,
``get(key, default=None)``, ``delete``, iteration over keys). Changes live in memory until
the checkpoint protocol moves them (Storm's two-phase ``prepareCommit``/``commit``):

- ``prepare_commit(txid)``: the changes since the last prepare are written to the store as
  the *prepared* set of ``txid`` (durable, but not yet the committed state);
- ``commit(txid)``: the store applies the prepared set of ``txid`` to the committed state in
  one transaction. A task re-created after a crash can commit a set its predecessor prepared;
- ``rollback()``: the prepared set and every uncommitted change are dropped, and the view
  is reloaded from the committed state (in place: the bolt keeps its reference).

Keys and values must be JSON-able (keys: str, int, float, bool, None or tuples of those;
a tuple key comes back as a tuple). A store is opened per task with a namespace
``<topology-name>/<component>/<task>``, so a re-created task, a restarted worker or a
resubmitted topology of the same name finds its state. Stores run on the executor thread.

- ``memory``: a dict per process (survives a task's re-creation, not its worker's death).
- ``sqlite`` (``{"path": ...}``, default ``<storm.local.dir>/state/kv_state.db``; the default
  provider): one file, WAL mode, tables ``kv_state``/``kv_prepared``. In a worker run as its
  submitter the default, and a relative ``path``, are in the state directory its supervisor made
  the user's (``sqlite_path``): its working directory goes with it.
- ``redis`` (``{"url": ..., "prefix": ...}``): hash ``<prefix>:<ns>:committed`` and string
  ``<prefix>:<ns>:prepared``; ``commit`` is a MULTI/EXEC transaction.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from stormpy import config as cfg
from stormpy import disk_layout
from stormpy.extras import import_module

log = logging.getLogger(__name__)

_DELETED = {"$deleted": True}   # a prepared change that removes its key (JSON-able marker)


def encode_key(key: Any) -> str:
    """A JSON text for a key; tuples become lists (decoded back to tuples)."""
    try:
        return json.dumps(list(key) if isinstance(key, tuple) else key, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"state key {key!r} is not JSON-able: {exc}") from None


def decode_key(text: str) -> Any:
    value = json.loads(text)
    return tuple(value) if isinstance(value, list) else value


def encode_value(key: Any, value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"state value for key {key!r} is not JSON-able: {exc}") from None


class StateStore:
    """Where a namespace's committed state and its prepared set live."""

    def load_committed(self) -> dict[str, str]:
        """encoded key -> encoded value of the committed state."""
        raise NotImplementedError

    def load_prepared(self) -> tuple[int, dict[str, str | None]] | None:
        """(txid, {encoded key: encoded value or None = delete}) prepared and not yet committed."""
        raise NotImplementedError

    def save_prepared(self, txid: int, changes: dict[str, str | None]) -> None:
        raise NotImplementedError

    def commit(self, txid: int) -> bool:
        """Apply the prepared set of ``txid`` atomically; False if there is none for ``txid``."""
        raise NotImplementedError

    def clear_prepared(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release connections."""


# ---------------------------------------------------------------- memory
_MEMORY: dict[str, dict[str, Any]] = {}
_MEMORY_LOCK = threading.Lock()


class MemoryStore(StateStore):
    """Per-process dict, keyed by namespace: survives the re-creation of a crashed task."""

    def __init__(self, namespace: str) -> None:
        with _MEMORY_LOCK:
            self._slot = _MEMORY.setdefault(namespace, {"committed": {}, "prepared": None})

    def load_committed(self) -> dict[str, str]:
        return dict(self._slot["committed"])

    def load_prepared(self) -> tuple[int, dict[str, str | None]] | None:
        prepared = self._slot["prepared"]
        return (prepared[0], dict(prepared[1])) if prepared else None

    def save_prepared(self, txid: int, changes: dict[str, str | None]) -> None:
        self._slot["prepared"] = (txid, dict(changes))

    def commit(self, txid: int) -> bool:
        prepared = self._slot["prepared"]
        if not prepared or prepared[0] != txid:
            return False
        committed = self._slot["committed"]
        for k, v in prepared[1].items():
            if v is None:
                committed.pop(k, None)
            else:
                committed[k] = v
        self._slot["prepared"] = None
        return True

    def clear_prepared(self) -> None:
        self._slot["prepared"] = None


# ---------------------------------------------------------------- sqlite
class SqliteStore(StateStore):
    """One SQLite file (WAL, like Trident's SqliteMapState); rows per (namespace, key)."""

    def __init__(self, path: str | Path, namespace: str, busy_timeout_secs: float = 30.0) -> None:
        self.namespace = namespace
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(path), timeout=busy_timeout_secs, isolation_level=None,
                                     check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL").fetchone()
        self._conn.execute("PRAGMA synchronous=NORMAL")
        with self._tx():
            self._conn.execute("CREATE TABLE IF NOT EXISTS kv_state (ns TEXT, k TEXT, v TEXT, PRIMARY KEY (ns, k))")
            self._conn.execute("CREATE TABLE IF NOT EXISTS kv_prepared (ns TEXT PRIMARY KEY, txid INTEGER, changes TEXT)")

    def _tx(self) -> Any:
        conn = self._conn

        class _Tx:
            def __enter__(self) -> None:
                conn.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type: Any, *_: Any) -> None:
                conn.execute("ROLLBACK" if exc_type else "COMMIT")
        return _Tx()

    def load_committed(self) -> dict[str, str]:
        return dict(self._conn.execute("SELECT k, v FROM kv_state WHERE ns = ?", (self.namespace,)).fetchall())

    def load_prepared(self) -> tuple[int, dict[str, str | None]] | None:
        row = self._conn.execute("SELECT txid, changes FROM kv_prepared WHERE ns = ?", (self.namespace,)).fetchone()
        return (int(row[0]), json.loads(row[1])) if row else None

    def save_prepared(self, txid: int, changes: dict[str, str | None]) -> None:
        with self._tx():
            self._conn.execute("INSERT OR REPLACE INTO kv_prepared (ns, txid, changes) VALUES (?, ?, ?)",
                               (self.namespace, txid, json.dumps(changes)))

    def commit(self, txid: int) -> bool:
        with self._tx():
            row = self._conn.execute("SELECT txid, changes FROM kv_prepared WHERE ns = ?", (self.namespace,)).fetchone()
            if not row or int(row[0]) != txid:
                return False
            changes = json.loads(row[1])
            self._conn.executemany("DELETE FROM kv_state WHERE ns = ? AND k = ?",
                                   [(self.namespace, k) for k, v in changes.items() if v is None])
            self._conn.executemany("INSERT OR REPLACE INTO kv_state (ns, k, v) VALUES (?, ?, ?)",
                                   [(self.namespace, k, v) for k, v in changes.items() if v is not None])
            self._conn.execute("DELETE FROM kv_prepared WHERE ns = ?", (self.namespace,))
        return True

    def clear_prepared(self) -> None:
        with self._tx():
            self._conn.execute("DELETE FROM kv_prepared WHERE ns = ?", (self.namespace,))

    def close(self) -> None:
        self._conn.close()


# ---------------------------------------------------------------- redis
class RedisStore(StateStore):
    """A Redis hash of the committed state and a string holding the prepared set."""

    def __init__(self, url: str, prefix: str, namespace: str, socket_timeout_secs: float = 5.0) -> None:
        redis = import_module("redis", "redis", "Redis state (topology.state.provider: redis)")

        self.client = redis.Redis.from_url(url, socket_timeout=socket_timeout_secs,
                                           socket_connect_timeout=socket_timeout_secs)
        base = f"{prefix}:{namespace}"
        self.committed_key = base + ":committed"
        self.prepared_key = base + ":prepared"

    def load_committed(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.client.hgetall(self.committed_key).items()}

    def load_prepared(self) -> tuple[int, dict[str, str | None]] | None:
        raw = self.client.get(self.prepared_key)
        if raw is None:
            return None
        value = json.loads(raw)
        return int(value["txid"]), value["changes"]

    def save_prepared(self, txid: int, changes: dict[str, str | None]) -> None:
        self.client.set(self.prepared_key, json.dumps({"txid": txid, "changes": changes}))

    def commit(self, txid: int) -> bool:
        import redis

        with self.client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(self.prepared_key)   # a concurrent prepare aborts the EXEC
                prepared = self.load_prepared_with(pipe)
                if prepared is None or prepared[0] != txid:
                    pipe.unwatch()
                    return False
                pipe.multi()
                deletes = [k for k, v in prepared[1].items() if v is None]
                puts = {k: v for k, v in prepared[1].items() if v is not None}
                if deletes:
                    pipe.hdel(self.committed_key, *deletes)
                if puts:
                    pipe.hset(self.committed_key, mapping=puts)
                pipe.delete(self.prepared_key)
                pipe.execute()
            except redis.WatchError:
                return False
        return True

    def load_prepared_with(self, pipe: Any) -> tuple[int, dict[str, str | None]] | None:
        raw = pipe.get(self.prepared_key)
        if raw is None:
            return None
        value = json.loads(raw)
        return int(value["txid"]), value["changes"]

    def clear_prepared(self) -> None:
        self.client.delete(self.prepared_key)

    def close(self) -> None:
        self.client.close()


# ---------------------------------------------------------------- the user's view
class KeyValueState:
    """What ``StatefulBolt.init_state`` receives. Methods run on the bolt's executor thread."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self._data: dict[str, str] = store.load_committed()
        self._changes: dict[str, str | None] = {}
        prepared = store.load_prepared()
        # A prepared set found at start belongs to a predecessor: not in _data until committed.
        self._prepared: tuple[int, dict[str, str | None], bool] | None = (
            (prepared[0], prepared[1], False) if prepared else None)

    # ------------------------------------------------------------ Storm's KeyValueState
    def put(self, key: Any, value: Any) -> None:
        k = encode_key(key)
        v = encode_value(key, value)
        self._data[k] = v
        self._changes[k] = v

    def get(self, key: Any, default: Any = None) -> Any:
        v = self._data.get(encode_key(key))
        return default if v is None else json.loads(v)

    def delete(self, key: Any) -> None:
        k = encode_key(key)
        self._data.pop(k, None)
        self._changes[k] = None

    def __iter__(self) -> Iterator[Any]:
        return (decode_key(k) for k in list(self._data))

    def keys(self) -> Iterator[Any]:
        return iter(self)

    def items(self) -> Iterator[tuple[Any, Any]]:
        return ((decode_key(k), json.loads(v)) for k, v in list(self._data.items()))

    def __contains__(self, key: Any) -> bool:
        return encode_key(key) in self._data

    def __len__(self) -> int:
        return len(self._data)

    # ------------------------------------------------------------ checkpoint protocol (the driver)
    def prepare_commit(self, txid: int) -> None:
        """Write the changes since the last prepare as the prepared set of ``txid``."""
        changes = dict(self._changes)
        if self._prepared is not None and self._prepared[0] != txid:
            # an older prepared set never committed (its checkpoint failed): fold it in
            older = dict(self._prepared[1])
            older.update(changes)
            changes = older
        self._store.save_prepared(txid, changes)
        self._prepared = (txid, changes, True)
        self._changes = {}

    def commit(self, txid: int) -> None:
        """Make the prepared set of ``txid`` the committed state."""
        prepared = self._prepared
        committed = self._store.commit(txid)
        if committed and prepared is not None and prepared[0] == txid and not prepared[2]:
            for k, v in prepared[1].items():   # a predecessor's prepared set: now visible
                if v is None:
                    self._data.pop(k, None)
                else:
                    self._data[k] = v
        if prepared is not None and prepared[0] == txid:
            self._prepared = None

    def rollback(self) -> None:
        """Drop the prepared set and uncommitted changes; reload the committed state in place."""
        self._store.clear_prepared()
        self._data = self._store.load_committed()
        self._changes = {}
        self._prepared = None

    def close(self) -> None:
        self._store.close()


def sqlite_path(conf: Mapping[str, Any], configured: str | None = None) -> Path:
    """The configured ``path``, else ``<storm.local.dir>/state/kv_state.db`` (the topology's
    ``storm.local.dir``, relative by default: the worker's working directory). A worker run as its
    submitter (``supervisor.run.worker.as.user``) starts in its own worker directory, which is
    removed with it, so its state would not outlive a restart: the default, and a relative
    ``path``, are in the directory its supervisor made the user's (``disk_layout.worker_state_dir``)."""
    own = disk_layout.worker_state_dir()
    if own is not None:
        return own / (configured or "kv_state.db")      # an absolute ``path`` stays what it says
    if configured:
        return Path(configured)
    return Path(str(cfg.read(conf, cfg.STORM_LOCAL_DIR))) / "state" / "kv_state.db"


def open_state(conf: Mapping[str, Any], namespace: str) -> KeyValueState:
    """The KeyValueState of ``namespace`` from ``topology.state.provider`` (+ ``.config``)."""
    provider = str(cfg.read(conf, cfg.TOPOLOGY_STATE_PROVIDER))
    settings = conf.get(cfg.TOPOLOGY_STATE_PROVIDER_CONFIG.name) or {}
    if not isinstance(settings, Mapping):
        raise ValueError(f"topology.state.provider.config must be a dict, got {settings!r}")
    if provider == "memory":
        return KeyValueState(MemoryStore(namespace))
    if provider == "sqlite":
        return KeyValueState(SqliteStore(sqlite_path(conf, settings.get("path")), namespace))
    if provider == "redis":
        url = settings.get("url")
        if not url:
            raise ValueError("topology.state.provider redis needs topology.state.provider.config {url: redis://...}")
        return KeyValueState(RedisStore(url, str(settings.get("prefix") or "stormpy"), namespace))
    raise ValueError(f"topology.state.provider must be memory, sqlite or redis, got {provider!r}")
