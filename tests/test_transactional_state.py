"""TransactionalState: one contract, run against the in-memory store and a real ZooKeeper."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from stormpy.cluster_state import (
    MemoryTransactionalState,
    TransactionalState,
    ZkTransactionalState,
    transactional_state_for,
)
from stormpy.testing import wait_until


@pytest.fixture(params=["memory", "zookeeper"])
def tstate(request: pytest.FixtureRequest) -> Iterator[TransactionalState]:
    if request.param == "memory":
        state: TransactionalState = MemoryTransactionalState()
    else:
        state = transactional_state_for(request.getfixturevalue("zk_conf"), "wc")
    try:
        yield state
    finally:
        state.close()


def test_missing_paths_read_as_default_and_empty(tstate: TransactionalState) -> None:
    assert isinstance(tstate, TransactionalState)
    assert tstate.get("coordinator/currtx") is None
    assert tstate.get("coordinator/currtx", 7) == 7
    assert tstate.children("coordinator") == []
    tstate.delete("coordinator/nothing-here")   # missing is fine


def test_set_creates_parents_overwrites_and_round_trips_json(tstate: TransactionalState) -> None:
    tstate.set("coordinator/currtx", 1)
    tstate.set("coordinator/currtx", 2)
    tstate.set("coordinator/meta/3", {"offset": 10, "ids": [1, 2], "name": "p0", "done": False})
    assert tstate.get("coordinator/currtx") == 2
    assert tstate.get("/coordinator//meta/3/") == {"offset": 10, "ids": [1, 2], "name": "p0", "done": False}
    assert tstate.children("coordinator") == ["currtx", "meta"]
    assert tstate.children("coordinator/meta") == ["3"]
    assert tstate.get("coordinator") is None   # a parent created on the way has no value


def test_delete_is_recursive(tstate: TransactionalState) -> None:
    for txid in (1, 2, 3):
        tstate.set(f"spout/meta/{txid}", {"txid": txid})
    tstate.set("spout/other", "kept")
    tstate.delete("spout/meta")
    assert tstate.children("spout") == ["other"]
    assert tstate.get("spout/meta/2") is None
    assert tstate.get("spout/other") == "kept"


def test_values_must_be_json(tstate: TransactionalState) -> None:
    with pytest.raises(TypeError, match="not JSON-able"):
        tstate.set("bad", {1, 2})
    assert tstate.get("bad") is None


def test_memory_state_is_thread_safe() -> None:
    state = MemoryTransactionalState()

    def writer(n: int) -> None:
        for i in range(200):
            state.set(f"w{n}/{i}", i)
            state.children(f"w{n}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert [len(state.children(f"w{n}")) for n in range(4)] == [200] * 4


def test_zookeeper_layout_is_root_then_topology_name(zk_conf: dict[str, Any], zookeeper: Any) -> None:
    """``<transactional.zookeeper.root>/<topology-name>/<path>``, readable by another client."""
    state = ZkTransactionalState(zk_conf, "wordcount")
    assert not state.has_session             # nothing connects before the first use
    state.set("coordinator/currtx", 5)
    other = transactional_state_for(zk_conf, "wordcount")
    other_topology = transactional_state_for(zk_conf, "other")
    raw = KazooClient(hosts=state.hosts)
    raw.start(timeout=10)
    try:
        data, _ = raw.get(f"{zk_conf['transactional.zookeeper.root']}/wordcount/coordinator/currtx")
        assert data == b"5"
        assert other.get("coordinator/currtx") == 5
        assert other_topology.get("coordinator/currtx") is None
    finally:
        raw.stop()
        raw.close()
        for s in (state, other, other_topology):
            s.close()
    with pytest.raises(RuntimeError, match="closed"):
        state.get("coordinator/currtx")


def test_zookeeper_state_survives_session_loss(zk_conf: dict[str, Any]) -> None:
    state = ZkTransactionalState(zk_conf, "wc")
    try:
        state.set("coordinator/currtx", 1)
        old = state.session_id
        state.expire_session()
        state.set("coordinator/currtx", 2)   # retried across the reconnection
        wait_until(lambda: state.session_id not in (None, old), 30, "a new ZooKeeper session")
        assert state.get("coordinator/currtx") == 2
    finally:
        state.close()
