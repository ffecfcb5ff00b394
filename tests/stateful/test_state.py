"""KeyValueState over its three stores: memory, SQLite and a real Redis server.

The two-phase protocol is what the checkpoint relies on: prepared changes are durable but not
committed, commit applies them atomically (also from a re-created task), rollback drops them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from stormpy.stateful.checkpoint import (COMMIT, COMMITTED, COMMITTING, INITSTATE, NEXT_ACTION, PREPARE, PREPARING,
                                         ROLLBACK, next_state)
from stormpy.stateful.state import KeyValueState, open_state


@pytest.fixture(params=["memory", "sqlite", "redis"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], KeyValueState]:
    """open(namespace) -> a fresh KeyValueState view, as a (re-created) task would get it."""
    provider = request.param
    if provider == "redis":
        server = request.getfixturevalue("redis_server")
        prefix = request.getfixturevalue("redis_prefix")
        config: dict[str, Any] = {"url": server.url, "prefix": prefix}
    elif provider == "sqlite":
        config = {"path": str(tmp_path / "state.db")}
    else:
        config = {}
    opened: list[KeyValueState] = []
    unique = f"{request.node.name}-{id(opened)}"

    def open_(namespace: str) -> KeyValueState:
        state = open_state({"topology.state.provider": provider, "topology.state.provider.config": config},
                           f"{unique}/{namespace}")
        opened.append(state)
        return state

    yield open_
    for state in opened:
        state.close()


def test_put_get_delete_and_iteration(opener: Callable[[str], KeyValueState]) -> None:
    state = opener("a")
    assert state.get("missing") is None and state.get("missing", 7) == 7
    state.put("x", 1)
    state.put(("user", 3), {"clicks": [1, 2]})
    state.put(5, "five")
    state.delete("x")
    assert state.get("x", "gone") == "gone"
    assert sorted(map(str, state)) == sorted(map(str, [("user", 3), 5]))
    assert state.get(("user", 3)) == {"clicks": [1, 2]}
    assert dict(state.items())[5] == "five"
    with pytest.raises(TypeError, match="not JSON-able"):
        state.put("bad", object())


def test_only_committed_changes_survive_a_new_view(opener: Callable[[str], KeyValueState]) -> None:
    state = opener("b")
    state.put("a", 1)
    state.prepare_commit(1)
    state.commit(1)
    state.put("a", 2)            # prepared, never committed
    state.put("b", 9)
    state.prepare_commit(2)
    state.put("c", 3)            # not even prepared
    fresh = opener("b")
    assert fresh.get("a") == 1 and fresh.get("b") is None and fresh.get("c") is None
    state.rollback()             # in place: the bolt's reference now shows the committed state
    assert state.get("a") == 1 and "b" not in state and "c" not in state


def test_a_re_created_task_commits_its_predecessors_prepared_set(opener: Callable[[str], KeyValueState]) -> None:
    old = opener("c")
    old.put("k", 1)
    old.prepare_commit(1)
    old.commit(1)
    old.put("k", 2)
    old.delete("gone")
    old.prepare_commit(2)        # then the task dies before COMMIT 2
    new = opener("c")
    assert new.get("k") == 1     # not visible before the commit
    new.commit(2)                # the checkpoint spout re-sends COMMIT 2 while recovering
    assert new.get("k") == 2
    new.commit(2)                # a repeated commit is harmless
    assert opener("c").get("k") == 2


def test_a_failed_prepare_is_folded_into_the_next_one(opener: Callable[[str], KeyValueState]) -> None:
    state = opener("d")
    state.put("a", 1)
    state.prepare_commit(1)      # checkpoint 1 fails elsewhere, no rollback reached this task yet
    state.put("b", 2)
    state.prepare_commit(2)
    state.commit(2)
    fresh = opener("d")
    assert fresh.get("a") == 1 and fresh.get("b") == 2


def test_bad_provider_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="memory, sqlite or redis"):
        open_state({"topology.state.provider": "hbase"}, "x")
    with pytest.raises(ValueError, match="needs topology.state.provider.config"):
        open_state({"topology.state.provider": "redis"}, "x")


def test_checkpoint_state_table_is_storms() -> None:
    # Storm's CheckPointState.nextAction / nextState
    assert NEXT_ACTION[(COMMITTED, False)] == PREPARE
    assert NEXT_ACTION[(COMMITTED, True)] == INITSTATE
    assert NEXT_ACTION[(PREPARING, False)] == COMMIT
    assert NEXT_ACTION[(PREPARING, True)] == ROLLBACK
    assert NEXT_ACTION[(COMMITTING, True)] == COMMIT
    assert next_state(4, COMMITTED, False) == (5, PREPARING)
    assert next_state(5, PREPARING, False) == (5, COMMITTING)
    assert next_state(5, PREPARING, True) == (4, COMMITTED)
    assert next_state(5, COMMITTING, True) == (5, COMMITTED)


def test_a_worker_run_as_its_submitter_keeps_sqlite_state_in_its_state_directory(tmp_path: Path) -> None:
    """Its working directory goes with it: the default file and a relative ``path`` are in the
    directory its supervisor made the user's (tests/cluster/test_cluster_hostile.py runs it as a
    real second user); an absolute ``path`` stays where it says, and other workers keep theirs."""
    import os

    from stormpy import config as cfg
    from stormpy import disk_layout

    conf = dict(cfg.Config({"topology.name": "t", "topology.state.provider": "sqlite"}))   # as a task gets it
    own = disk_layout.user_state_dir(tmp_path / "host", os.geteuid())
    own.mkdir(parents=True)
    disk_layout.set_host_local_dir(tmp_path / "host", run_as_user=True)
    open_state(conf, "t/count/1").close()
    open_state({**conf, "topology.state.provider.config": {"path": "mine.db"}}, "t/count/1").close()
    elsewhere = tmp_path / "abs" / "state.db"
    open_state({**conf, "topology.state.provider.config": {"path": str(elsewhere)}}, "t/count/1").close()
    assert sorted(p.name for p in own.glob("*.db")) == ["kv_state.db", "mine.db"] and elsewhere.exists()
    disk_layout.set_host_local_dir(tmp_path / "host", run_as_user=False)
    assert disk_layout.worker_state_dir() is None
