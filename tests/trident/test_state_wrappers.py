"""Pure tests of the map-state wrappers (stormpy.trident.state) and of MemoryMapState.

The wrappers are exercised over a recording dict-backed BackingMap so each test can check both
the logical values and exactly what was stored ([txid, value], [txid, prev, curr], bare value).
"""
from __future__ import annotations

import pickle
from typing import Any

import cloudpickle
import pytest

from stormpy.trident.memory_state import MemoryMapState
from stormpy.trident.state import (BackingMap, CachedMap, MapStateFactory, NonTransactionalMap, OpaqueMap, State,
                                   StateFactory, TransactionalMap, map_state_factory)


class DictBacking(BackingMap):
    """A BackingMap over a dict that records every multi_put call."""

    def __init__(self) -> None:
        self.data: dict[tuple, Any] = {}
        self.puts: list[list[tuple]] = []

    def multi_get(self, keys: list[tuple]) -> list[Any]:
        return [self.data.get(k) for k in keys]

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        self.puts.append(list(keys))
        self.data.update(zip(keys, values))


def add(n: int):
    return lambda old: (old or 0) + n


def commit(state: State, txid: int, keys: list[tuple], amounts: list[int]) -> list[Any]:
    state.begin_commit(txid)
    result = state.multi_update(keys, [add(n) for n in amounts])
    state.commit(txid)
    return result


A, B, C = ("a",), ("b",), ("c",)


def test_transactional_skips_a_replayed_txid() -> None:
    backing = DictBacking()
    state = TransactionalMap(backing)
    assert commit(state, 1, [A, B], [1, 1]) == [1, 1]
    assert commit(state, 2, [A], [2]) == [3]
    assert backing.data == {A: [2, 3], B: [1, 1]}
    # txid 2 replayed (the commit failed after the write landed): A keeps 3 and is not written
    # again; C is new in this attempt (a first attempt that died half-way) and is applied.
    backing.puts.clear()
    assert commit(state, 2, [A, C], [2, 5]) == [3, 5]
    assert backing.puts == [[C]]
    assert backing.data == {A: [2, 3], B: [1, 1], C: [2, 5]}
    assert commit(state, 3, [A, B], [1, 1]) == [4, 2]
    assert state.multi_get([A, B, C, ("z",)]) == [4, 2, 5, None]


def test_transactional_replay_writes_nothing_when_every_key_was_applied() -> None:
    backing = DictBacking()
    state = TransactionalMap(backing)
    commit(state, 7, [A, B], [1, 1])
    backing.puts.clear()
    commit(state, 7, [A, B], [1, 1])
    assert backing.puts == []


def test_opaque_recomputes_a_replayed_txid_from_prev() -> None:
    backing = DictBacking()
    state = OpaqueMap(backing)
    assert commit(state, 1, [A], [1]) == [1]
    assert backing.data[A] == [1, None, 1]
    assert commit(state, 2, [A], [3]) == [4]
    assert backing.data[A] == [2, 1, 4]
    # The opaque spout replays txid 2 with other tuples: the first attempt's +3 is undone.
    assert commit(state, 2, [A, B], [10, 1]) == [11, 1]
    assert backing.data == {A: [2, 1, 11], B: [2, None, 1]}
    assert state.multi_get([A, B]) == [11, 1]
    assert commit(state, 3, [A], [1]) == [12]
    assert backing.data[A] == [3, 11, 12]


def test_opaque_multi_get_inside_a_replayed_commit_reads_prev() -> None:
    state = OpaqueMap(DictBacking())
    commit(state, 1, [A], [5])
    commit(state, 2, [A], [1])
    state.begin_commit(2)
    assert state.multi_get([A]) == [5]   # the attempt being redone never happened
    state.commit(2)
    state.begin_commit(3)
    assert state.multi_get([A]) == [6]
    state.commit(3)
    assert state.multi_get([A]) == [6]


def test_opaque_updater_that_mutates_its_argument_cannot_corrupt_prev() -> None:
    state = MemoryMapState.opaque().make_state({}, None, 0, 1)

    def append(x: str):
        def update(old: list | None) -> list:
            old = old if old is not None else []
            old.append(x)        # mutates the value it was given
            return old
        return update

    state.begin_commit(1)
    state.multi_update([A], [append("x")])
    state.commit(1)
    state.begin_commit(2)
    state.multi_update([A], [append("y")])
    state.commit(2)
    state.begin_commit(2)                      # replay with another tuple
    assert state.multi_update([A], [append("z")]) == [["x", "z"]]
    state.commit(2)


def test_non_transactional_applies_a_replay_again() -> None:
    backing = DictBacking()
    state = NonTransactionalMap(backing)
    assert commit(state, 1, [A], [1]) == [1]
    assert commit(state, 1, [A], [1]) == [2]
    assert backing.data == {A: 2}
    assert state.multi_get([A, B]) == [2, None]


def test_multi_update_returns_new_values_in_key_order_and_updaters_see_old_values() -> None:
    seen: list[Any] = []

    def record(new: Any):
        def update(old: Any) -> Any:
            seen.append(old)
            return new
        return update

    for wrapper in (TransactionalMap, OpaqueMap, NonTransactionalMap):
        seen.clear()
        state = wrapper(DictBacking())
        state.begin_commit(1)
        state.multi_put([A], [{"n": 1}])
        state.commit(1)
        state.begin_commit(2)
        assert state.multi_update([B, A, C], [record("b"), record("a"), record("c")]) == ["b", "a", "c"]
        state.commit(2)
        assert seen == [None, {"n": 1}, None], wrapper
        assert state.multi_get([A, B, C]) == ["a", "b", "c"], wrapper


def test_multi_put_stores_each_layout() -> None:
    layouts = {TransactionalMap: [4, "v"], OpaqueMap: [4, 1, "v"], NonTransactionalMap: "v"}
    for wrapper, stored in layouts.items():
        backing = DictBacking()
        state = wrapper(backing)
        state.begin_commit(3)
        state.multi_put([A], [1])
        state.commit(3)
        state.begin_commit(4)
        state.multi_put([A], ["v"])
        state.commit(4)
        assert backing.data[A] == stored, wrapper
        assert state.multi_get([A]) == ["v"]


def test_opaque_multi_put_replayed_keeps_prev() -> None:
    backing = DictBacking()
    state = OpaqueMap(backing)
    for txid, value in ((1, "one"), (2, "two"), (2, "two-again")):
        state.begin_commit(txid)
        state.multi_put([A], [value])
        state.commit(txid)
    assert backing.data[A] == [2, "one", "two-again"]


@pytest.mark.parametrize("wrapper", [TransactionalMap, OpaqueMap])
def test_writes_outside_a_commit_are_refused(wrapper: type) -> None:
    state = wrapper(DictBacking())
    with pytest.raises(RuntimeError, match="begin_commit"):
        state.multi_update([A], [add(1)])
    with pytest.raises(RuntimeError, match="begin_commit"):
        state.multi_put([A], [1])


def test_mismatched_lengths_are_refused() -> None:
    state = NonTransactionalMap(DictBacking())
    with pytest.raises(ValueError, match="2 keys but 1 updaters"):
        state.multi_update([A, B], [add(1)])
    with pytest.raises(ValueError, match="1 keys but 2 values"):
        state.multi_put([A], [1, 2])


def test_keys_may_be_lists_or_scalars_for_one_field() -> None:
    state = NonTransactionalMap(DictBacking())
    state.multi_put([["a"], "b", ("c", 1)], [1, 2, 3])
    assert state.multi_get([("a",), ["b"], ("c", 1)]) == [1, 2, 3]


def test_map_state_factory_kinds_and_bad_kind() -> None:
    backing = DictBacking()
    for kind, wrapper in (("transactional", TransactionalMap), ("opaque", OpaqueMap),
                          ("non_transactional", NonTransactionalMap)):
        factory = map_state_factory(lambda conf, ctx, i, n: backing, kind)
        assert isinstance(factory, StateFactory)
        state = factory.make_state({}, None, 0, 1)
        assert type(state) is wrapper and state.backing is backing
    with pytest.raises(ValueError, match="'transactional', 'opaque', 'non_transactional'"):
        map_state_factory(lambda conf, ctx, i, n: backing, "exactly_once")
    with pytest.raises(TypeError, match="callable"):
        map_state_factory("not a function", "opaque")  # type: ignore[arg-type]


def test_make_backing_gets_the_partition() -> None:
    calls: list[tuple] = []

    def make(conf: Any, context: Any, index: int, count: int) -> BackingMap:
        calls.append((conf, context, index, count))
        return DictBacking()

    factory = map_state_factory(make, "opaque")
    factory.make_state({"k": 1}, "ctx", 2, 3)
    factory.open_map()
    assert calls == [({"k": 1}, "ctx", 2, 3), ({}, None, 0, 1)]


def test_factories_survive_cloudpickle_with_a_user_lambda() -> None:
    name = "user-lambda-map"
    MemoryMapState.clear(name)
    factory = map_state_factory(lambda conf, ctx, i, n: MemoryMapState(f"{name}"), "transactional")
    copy = cloudpickle.loads(cloudpickle.dumps(factory))
    state = copy.make_state({}, None, 0, 1)
    commit(state, 1, [A], [41])
    assert factory.open_map().multi_get([A]) == [41]


@pytest.mark.parametrize("kind", ["transactional", "opaque", "non_transactional"])
def test_memory_factory_pickles_plainly_and_refers_to_one_map(kind: str) -> None:
    factory = getattr(MemoryMapState, kind)()
    assert isinstance(factory, MapStateFactory) and factory.kind == kind
    copy = pickle.loads(pickle.dumps(factory))   # built-ins hold no lambdas: plain pickle works
    commit(copy.make_state({}, None, 0, 2), 1, [A], [2])
    commit(copy.make_state({}, None, 1, 2), 1, [B], [3])
    assert factory.open_map().multi_get([A, B, C]) == [2, 3, None]
    assert getattr(MemoryMapState, kind)().open_map().multi_get([A]) == [None]   # a new name, a new map


def test_memory_named_map_is_shared_in_the_process_and_clearable() -> None:
    name = "test-memory-named"
    MemoryMapState.clear(name)
    commit(MemoryMapState.opaque(name).make_state({}, None, 0, 1), 1, [("the",)], [7])
    reader = MemoryMapState.opaque(name).open_map()
    assert reader.multi_get([("the",)]) == [7]
    assert dict(reader.items()) == {("the",): 7}
    assert name in MemoryMapState.names()
    MemoryMapState.clear(name)
    assert reader.multi_get([("the",)]) == [None]


def test_memory_refuses_values_that_are_not_json() -> None:
    state = MemoryMapState.non_transactional().make_state({}, None, 0, 1)
    with pytest.raises(TypeError, match="JSON-serializable"):
        state.multi_put([A, B], [1, object()])
    assert state.multi_get([A]) == [None]        # nothing of the failed put landed
    with pytest.raises(ValueError, match="non-empty"):
        MemoryMapState.transactional("")


class FlakyBacking(DictBacking):
    """Counts multi_get calls; its next multi_put raises when ``fail_next_put`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gets: list[list[tuple]] = []
        self.fail_next_put = False

    def multi_get(self, keys: list[tuple]) -> list[Any]:
        self.gets.append(list(keys))
        return super().multi_get(keys)

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        if self.fail_next_put:
            self.fail_next_put = False
            raise ConnectionError("store went away")
        super().multi_put(keys, values)


def test_cached_map_reads_through_once_and_writes_through() -> None:
    backing = FlakyBacking()
    state = TransactionalMap(CachedMap(backing, size=100))
    commit(state, 1, [A, B], [1, 1])
    assert backing.gets == [[A, B]]                 # absent keys are cached as absent too
    commit(state, 2, [A, B], [1, 1])
    commit(state, 2, [A, B], [1, 1])               # replay: skipped from the cache
    assert backing.gets == [[A, B]]
    assert backing.data == {A: [2, 2], B: [2, 2]}
    assert state.multi_get([A, C]) == [2, None]
    assert backing.gets == [[A, B], [C]]


def test_cached_map_drops_keys_of_a_failed_put_and_the_replay_is_exact() -> None:
    backing = FlakyBacking()
    state = OpaqueMap(CachedMap(backing, size=100))
    commit(state, 1, [A], [1])
    backing.fail_next_put = True
    with pytest.raises(ConnectionError):
        commit(state, 2, [A], [5])
    assert commit(state, 2, [A], [7]) == [8]        # replayed with other input: read from the store
    assert backing.gets[-1] == [A]
    assert backing.data[A] == [2, 1, 8]


def test_cached_map_evicts_least_recently_used_and_hands_out_copies() -> None:
    backing = FlakyBacking()
    cached = CachedMap(backing, size=2)
    cached.multi_put([A, B], [[1], [2]])
    cached.multi_get([A])                           # A is now the most recent
    cached.multi_put([C], [[3]])                    # evicts B
    backing.gets.clear()
    got = cached.multi_get([A, B, C])
    assert got == [[1], [2], [3]] and backing.gets == [[B]]
    got[0].append("mutated")
    assert cached.multi_get([A]) == [[1]]
    with pytest.raises(ValueError):
        CachedMap(backing, size=0)


def test_open_map_of_a_cached_factory_reads_the_store_now(tmp_path: Any) -> None:
    from stormpy.trident.sqlite_state import SqliteMapState
    factory = SqliteMapState.transactional(tmp_path / "c.db", cache_size=10)
    state = factory.make_state({}, None, 0, 1)
    assert isinstance(state.backing, CachedMap)
    commit(state, 1, [A], [1])
    reader = factory.open_map()
    assert not isinstance(reader.backing, CachedMap)
    assert reader.multi_get([A]) == [1]
    commit(state, 2, [A], [1])
    assert reader.multi_get([A]) == [2]


def test_opaque_replay_with_fewer_keys_reverts_what_only_the_earlier_attempt_wrote() -> None:
    # The commit of txid 2 landed in this partition (A and B), failed elsewhere, and the opaque
    # spout's replay of txid 2 carries only A: B's tuple comes again in txid 3. Without the
    # commit log B would count it twice (once from attempt 1 of txid 2, once in txid 3).
    backing = LoggedBacking()
    factory = map_state_factory(lambda conf, context, index, count: backing, "opaque")
    first = factory.make_state({}, None, 0, 2)
    commit(first, 1, [A], [1])
    commit(first, 2, [A, B], [10, 5])
    restarted = factory.make_state({}, None, 0, 2)      # the worker died; a new task replays txid 2
    commit(restarted, 2, [A], [10])
    commit(restarted, 3, [B], [5])
    assert backing.data[A] == [2, 1, 11] and backing.data[B] == [3, None, 5]
    assert backing.data[("$stormpy.opaque.log", 0, 2)] == {"txid": 3, "keys": [["b"]]}
    # a replay in the same task (no restart), and an empty replay, revert as well
    commit(restarted, 4, [A, C], [1, 1])
    commit(restarted, 4, [], [])
    assert backing.data[A][2] == 11 and backing.data[C][2] is None


class LoggedBacking(DictBacking):
    commit_log = True


def test_a_users_backing_map_holds_only_the_users_keys() -> None:
    # A user's BackingMap does not opt in to the commit log: it sees exactly the keys the topology
    # groups by (a user checking their own store must not find a stormpy key in it).
    backing = DictBacking()
    state = map_state_factory(lambda conf, context, index, count: backing, "opaque").make_state({}, None, 0, 2)
    commit(state, 1, [A, B], [1, 2])
    commit(state, 1, [A, B], [3, 4])    # a replay with other values: redone from prev, as Storm's OpaqueMap
    assert set(backing.data) == {A, B}
    assert backing.data[A] == [1, None, 3] and backing.data[B] == [1, None, 4]


def test_opaque_log_is_hidden_from_items_and_keeps_partitions_apart() -> None:
    store = MemoryMapState.opaque(name="opaque-log-test")
    try:
        p0, p1 = store.make_state({}, None, 0, 2), store.make_state({}, None, 1, 2)
        commit(p0, 1, [A], [1])
        commit(p1, 1, [B], [2])
        commit(p0, 1, [], [])   # p0's replay of txid 1 without A: A is back to absent (None)
        assert dict(store.open_map().items()) == {B: 2}   # A is back to absent
        assert store.open_map().multi_get([A, B]) == [None, 2]
    finally:
        MemoryMapState.clear("opaque-log-test")
