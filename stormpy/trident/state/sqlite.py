"""SqliteMapState: the embedded default Trident map state, one SQLite file on one host.

Layout: one table per state (default ``trident_state``) with ``k TEXT PRIMARY KEY`` (the key tuple
as a compact JSON list, e.g. ``["the"]``) and ``v TEXT`` (the stored value as JSON: ``[txid,
value]`` transactional, ``[txid, prev, curr]`` opaque, the bare value non-transactional), so
``sqlite3 wc.db 'select * from trident_state'`` or any other language reads it.

Concurrency: the partitions of a state run in several tasks, threads and worker processes and all
write the same file. They never write the same keys (group_by partitions the keys), so the only
contention is SQLite's single writer lock: the file is in WAL mode (readers never block the
writer), each connection waits up to ``busy_timeout_secs`` for the lock, and a ``multi_put`` is one
``BEGIN IMMEDIATE`` transaction (all keys or none, one fsync). Each state instance opens one
connection per thread that uses it (sqlite3 connections must not be shared across threads
unsynchronized). ``synchronous=NORMAL``: a committed transaction survives a process crash or
SIGKILL (what Trident's exactly-once needs); only an OS crash or power cut may lose the last ones.
"""
from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stormpy.trident.state.backing import BackingMaker
from stormpy.trident.state.codec import decode_key, decode_value, encode_key, encode_value
from stormpy.trident.state.contract import NON_TRANSACTIONAL, OPAQUE, TRANSACTIONAL, BackingMap
from stormpy.trident.state.map_state import MapStateFactory

log = logging.getLogger(__name__)

DEFAULT_TABLE = "trident_state"
# Well under SQLite's bound-variable limit (32766 since 3.32, 999 before).
_CHUNK = 500
_TABLE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def _check_table(table: str) -> str:
    if not isinstance(table, str) or not _TABLE_RE.match(table):
        raise ValueError(f"SqliteMapState table must be a plain identifier (letters, digits, _), got {table!r}")
    return table


class SqliteMapState(BackingMap):
    """The BackingMap over one table of one SQLite file; build factories with the classmethods."""

    commit_log = True   # an opaque state keeps its commit log here (state.OPAQUE_LOG_KEY)
    fencing = True      # multi_put_if: owner and fence records (state.Fence)
    placement = "host"  # one host's disk (stormpy.trident.planner.placement)

    def __init__(self, path: str | Path, table: str | None = None, *, busy_timeout_secs: float = 30.0) -> None:
        if not str(path):
            raise ValueError("SqliteMapState needs a database file path")
        self.path = str(path)
        self.table = _check_table(table or DEFAULT_TABLE)
        self.busy_timeout_secs = float(busy_timeout_secs)
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._select = f'SELECT k, v FROM "{self.table}" WHERE k IN '
        self._upsert = f'INSERT OR REPLACE INTO "{self.table}" (k, v) VALUES (?, ?)'

    # ------------------------------------------------------------------ connections
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _connect(self) -> sqlite3.Connection:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: autocommit; multi_put opens its own explicit transaction.
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_secs, isolation_level=None,
                               check_same_thread=False)
        try:
            # Switching to WAL takes an exclusive lock once per file; two processes opening a new
            # file at the same moment can see SQLITE_BUSY here even with a busy timeout.
            _retry_busy(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone(), self.busy_timeout_secs)
            conn.execute("PRAGMA synchronous=NORMAL")
            _retry_busy(lambda: conn.execute(
                f'CREATE TABLE IF NOT EXISTS "{self.table}" (k TEXT PRIMARY KEY NOT NULL, v TEXT NOT NULL) '
                f'WITHOUT ROWID'), self.busy_timeout_secs)
        except BaseException:
            conn.close()
            raise
        log.debug("opened sqlite state %s table %s", self.path, self.table)
        return conn

    def close(self) -> None:
        """Close every connection this instance opened (in any thread)."""
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                log.warning("closing sqlite connection to %s failed", self.path, exc_info=True)
        self._local = threading.local()

    # ------------------------------------------------------------------ BackingMap
    def multi_get(self, keys: list[tuple]) -> list[Any]:
        if not keys:
            return []
        conn = self._conn()
        names = [encode_key(k) for k in keys]
        found: dict[str, str] = {}
        for start in range(0, len(names), _CHUNK):
            chunk = names[start:start + _CHUNK]
            sql = self._select + "(" + ",".join("?" * len(chunk)) + ")"
            found.update(conn.execute(sql, chunk).fetchall())
        out: list[Any] = []
        for name in names:
            text = found.get(name)
            out.append(None if text is None else decode_value(text))
        return out

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        if not keys:
            return
        rows = [(encode_key(k), encode_value(v)) for k, v in zip(keys, values)]
        conn = self._conn()
        # IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so the
        # transaction cannot fail half-way with a lock upgrade deadlock against another writer.
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(self._upsert, rows)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def multi_put_if(self, keys: list[tuple], values: list[Any], guard_key: tuple, guard_value: Any) -> bool:
        """One ``BEGIN IMMEDIATE`` transaction: read the guard, then write only if it is unchanged.
        The write lock is held from the read on, so no other writer can slip in between."""
        rows = [(encode_key(k), encode_value(v)) for k, v in zip(keys, values)]
        expected = None if guard_value is None else encode_value(guard_value)
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(f'SELECT v FROM "{self.table}" WHERE k = ?', (encode_key(guard_key),)).fetchone()
            if (None if row is None else row[0]) != expected:
                conn.execute("ROLLBACK")
                return False
            conn.executemany(self._upsert, rows)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return True

    def items(self) -> Iterator[tuple[tuple, Any]]:
        rows = self._conn().execute(f'SELECT k, v FROM "{self.table}" ORDER BY k').fetchall()
        for key, text in rows:
            yield decode_key(key), decode_value(text)

    def __reduce__(self) -> tuple[Any, ...]:
        # Connections never travel: a copy opens its own.
        return (_restore, (self.path, self.table, self.busy_timeout_secs))

    # ------------------------------------------------------------------ factories
    @classmethod
    def transactional(cls, path: str | Path, table: str | None = None, *, cache_size: int = 0) -> MapStateFactory:
        """Stores ``[txid, value]`` per key; a replayed txid is skipped."""
        return cls._factory(path, table, TRANSACTIONAL, cache_size)

    @classmethod
    def opaque(cls, path: str | Path, table: str | None = None, *, cache_size: int = 0) -> MapStateFactory:
        """Stores ``[txid, prev, curr]`` per key; a replayed txid is recomputed from prev."""
        return cls._factory(path, table, OPAQUE, cache_size)

    @classmethod
    def non_transactional(cls, path: str | Path, table: str | None = None, *,
                          cache_size: int = 0) -> MapStateFactory:
        """Stores the bare value; a replayed batch is applied again."""
        return cls._factory(path, table, NON_TRANSACTIONAL, cache_size)

    @classmethod
    def _factory(cls, path: str | Path, table: str | None, kind: str, cache_size: int) -> MapStateFactory:
        """``cache_size`` > 0 keeps that many keys per partition in a write-through LRU (CachedMap)."""
        cls(path, table)  # validate path and table at build time (opens nothing)
        # Absolute now, where the topology is built: a worker's working directory differs, and
        # open_map() run from the user's directory must find the same file.
        return MapStateFactory(BackingMaker(cls, os.path.abspath(path), table or DEFAULT_TABLE,
                                            cache_size=cache_size), kind)


def _restore(path: str, table: str, busy_timeout_secs: float) -> SqliteMapState:
    return SqliteMapState(path, table, busy_timeout_secs=busy_timeout_secs)


def _retry_busy(fn: Any, timeout_secs: float) -> Any:
    """Run ``fn`` again while SQLite says the database is locked, up to ``timeout_secs``."""
    deadline = time.monotonic() + timeout_secs
    delay = 0.01
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
