"""SqliteMapState against real SQLite files: layouts, partitions sharing a file, two processes."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import cloudpickle
import pytest

from stormpy.trident.sqlite_state import DEFAULT_TABLE, SqliteMapState
from stormpy.trident.state import MapStateFactory


def add(n: int):
    return lambda old: (old or 0) + n


def test_three_kinds_store_json_rows_readable_with_plain_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "wc.db"
    for kind, stored in (("transactional", [2, 3]), ("opaque", [2, 1, 3]), ("non_transactional", 3)):
        factory = getattr(SqliteMapState, kind)(db, table=f"t_{kind}")
        state = factory.make_state({}, None, 0, 1)
        for txid, n in ((1, 1), (2, 2)):
            state.begin_commit(txid)
            state.multi_update([("the",), ("café", 1)], [add(n), add(n)])
            state.commit(txid)
        state.close()
        with sqlite3.connect(db) as conn:
            rows = dict(conn.execute(f"SELECT k, v FROM t_{kind}"))
        assert json.loads(rows['["the"]']) == stored
        assert json.loads(rows['["café",1]']) == stored
        assert factory.open_map().multi_get([("the",), ("café", 1), ("nope",)]) == [3, 3, None]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_replayed_txid_is_skipped_after_reopening_the_file(tmp_path: Path) -> None:
    factory = SqliteMapState.transactional(tmp_path / "wc.db")
    state = factory.make_state({}, None, 0, 1)
    state.begin_commit(5)
    state.multi_update([("a",)], [add(1)])
    state.commit(5)
    state.close()
    again = factory.make_state({}, None, 0, 1)    # the partition restarted in a new worker
    again.begin_commit(5)
    assert again.multi_update([("a",)], [add(1)]) == [1]
    again.commit(5)
    assert factory.open_map().multi_get(["a"]) == [1]


def test_batches_larger_than_one_in_list(tmp_path: Path) -> None:
    state = SqliteMapState.opaque(tmp_path / "big.db").make_state({}, None, 0, 1)
    keys = [(f"w{i}",) for i in range(1234)]
    state.begin_commit(1)
    assert state.multi_update(keys, [add(i) for i in range(1234)]) == list(range(1234))
    state.commit(1)
    assert state.multi_get(keys[::-1]) == list(range(1233, -1, -1))
    assert len(list(state.items())) == 1234


def test_two_partitions_share_one_file(tmp_path: Path) -> None:
    factory = SqliteMapState.transactional(tmp_path / "shared.db")
    parts = [factory.make_state({}, None, i, 2) for i in range(2)]
    for txid in range(1, 21):
        for index, state in enumerate(parts):       # interleaved commits, disjoint keys
            keys = [(f"p{index}-k{j}",) for j in range(50)]
            state.begin_commit(txid)
            state.multi_update(keys, [add(1)] * 50)
            state.commit(txid)
    reader = factory.open_map()
    assert reader.multi_get([(f"p{i}-k{j}",) for i in range(2) for j in range(50)]) == [20] * 100
    assert len(dict(reader.items())) == 100


def test_one_state_used_from_two_threads(tmp_path: Path) -> None:
    backing = SqliteMapState(tmp_path / "threads.db")
    errors: list[BaseException] = []

    def work(tag: str) -> None:
        try:
            for i in range(30):
                backing.multi_put([(tag, i)], [i])
        except BaseException as exc:  # reported below: a thread must not die silently
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in ("x", "y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert len(backing._conns) == 2      # one connection per thread
    assert backing.multi_get([("x", 29), ("y", 0)]) == [29, 0]
    backing.close()


_WRITER = textwrap.dedent("""
    import sys
    import cloudpickle
    factory = cloudpickle.loads(bytes.fromhex(sys.argv[1]))
    index = int(sys.argv[2])
    state = factory.make_state({}, None, index, 2)
    keys = [(f"p{index}-k{j}",) for j in range(100)]
    for txid in range(1, 41):
        for attempt in range(2):          # every commit is replayed once: must be skipped
            state.begin_commit(txid)
            state.multi_update(keys, [lambda old: (old or 0) + 1] * len(keys))
            state.commit(txid)
    state.close()
""")


def test_two_processes_write_one_file(tmp_path: Path) -> None:
    factory = SqliteMapState.transactional(tmp_path / "procs.db", table="counts")
    blob = cloudpickle.dumps(factory).hex()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, blob, str(i)], env=env,
                              stderr=subprocess.PIPE) for i in range(2)]
    try:
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err.decode()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    values = dict(factory.open_map().items())
    assert len(values) == 200 and set(values.values()) == {40}


def test_busy_writer_waits_then_fails_cleanly(tmp_path: Path) -> None:
    db = tmp_path / "busy.db"
    backing = SqliteMapState(db, busy_timeout_secs=0.2)
    backing.multi_put([("a",)], [1])
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")           # another process holds the write lock
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            backing.multi_put([("a",), ("b",)], [2, 2])
        assert backing.multi_get([("a",), ("b",)]) == [1, None]   # WAL: readers still read
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    backing.multi_put([("a",), ("b",)], [2, 2])
    assert backing.multi_get([("a",), ("b",)]) == [2, 2]
    backing.close()


def test_factory_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    factory = SqliteMapState.transactional("rel.db")
    assert isinstance(factory, MapStateFactory)
    backing = factory.make_backing({}, None, 0, 1)
    assert backing.path == str(tmp_path / "rel.db") and backing.table == DEFAULT_TABLE
    with pytest.raises(ValueError, match="plain identifier"):
        SqliteMapState.opaque(tmp_path / "x.db", table="x; DROP TABLE y")
    copy = cloudpickle.loads(cloudpickle.dumps(factory.open_map().backing))
    assert (copy.path, copy.table) == (backing.path, backing.table)
