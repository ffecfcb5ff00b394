"""StatefulBolt in local mode: real executor threads, a real acker, the checkpoint spout.

The counter stores one key per input (``n<id>``) and a count per word, so the tests can see
from outside (the SQLite file, the Redis hash) what was committed and when.
"""
from __future__ import annotations

import functools
import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stormpy import Grouping, Spout, StatefulBolt, Topology
from stormpy.local.runner import LocalTopology
from stormpy.streams import CHECKPOINT_COMPONENT
from stormpy.testing import wait_until

STATE: dict[str, Any] = {}
WORDS = ["apple", "pear", "plum", "fig", "kiwi"]

wait = functools.partial(wait_until, interval=0.02)


def reset(**values: Any) -> None:
    STATE.clear()
    STATE.update(acked=[], failed=[], early_acks=[], inits=[], crashes=0, lock=threading.Lock(), **values)


def committed_keys(db: Path) -> set[str]:
    """Keys of the committed state of every task, read from the SQLite file itself."""
    conn = sqlite3.connect(str(db), timeout=10)
    try:
        return {json.loads(k) for (k,) in conn.execute("SELECT k FROM kv_state")}
    finally:
        conn.close()


def committed_counts(db: Path) -> Counter:
    conn = sqlite3.connect(str(db), timeout=10)
    try:
        total: Counter = Counter()
        for k, v in conn.execute("SELECT k, v FROM kv_state"):
            key = json.loads(k)
            if key in WORDS:
                total[key] += json.loads(v)
        return total
    finally:
        conn.close()


@pytest.fixture
def local_topology() -> Iterator[Callable[..., LocalTopology]]:
    started: list[LocalTopology] = []

    def start(topology_cls: type, name: str = "stateful", **conf: Any) -> LocalTopology:
        local = LocalTopology(topology_cls, name, user_overrides={
            "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 10, **conf})
        started.append(local)
        return local.start()

    yield start
    for local in started:
        local.stop(drain_secs=0)


class WordSpout(Spout):
    """Ids start..start+count-1 with tup_id, word = WORDS[id % 5]; failures replay."""

    outputs = ["n", "word"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.next_id = STATE.get("start", 0)
        self.replays: list[int] = []

    def next_tuple(self) -> None:
        if self.replays:
            n = self.replays.pop(0)
        elif self.next_id < STATE.get("start", 0) + STATE["count"]:
            n = self.next_id
            self.next_id += 1
        else:
            return
        self.emit([n, WORDS[n % len(WORDS)]], tup_id=n)
        time.sleep(STATE.get("spout_sleep", 0.002))

    def ack(self, tup_id: Any) -> None:
        db = STATE.get("db")
        if db is not None and f"n{tup_id}" not in committed_keys(db):
            STATE["early_acks"].append(tup_id)   # acked before its update was committed
        with STATE["lock"]:
            STATE["acked"].append(tup_id)

    def fail(self, tup_id: Any) -> None:
        with STATE["lock"]:
            STATE["failed"].append(tup_id)
        self.replays.append(tup_id)


class Counter_(StatefulBolt):
    outputs = ["word", "count"]

    def init_state(self, state: Any) -> None:
        self.kv = state
        with STATE["lock"]:
            STATE["inits"].append(sum(state.get(w, 0) for w in WORDS))

    def process(self, tup: Any) -> None:
        n, word = tup.values
        count = self.kv.get(word, 0) + 1
        self.kv.put(word, count)
        self.kv.put(f"n{n}", 1)
        self.emit([word, count])

    def pre_commit(self, txid: int) -> None:
        if STATE.get("crash_at_commit") == txid and not STATE["crashes"]:
            STATE["crashes"] += 1
            raise RuntimeError(f"boom between prepare and commit of txid {txid}")


class Sink(StatefulBolt.__mro__[1]):  # a plain Bolt downstream: its acks complete the trees
    outputs: list[str] = []


class Topo(Topology):
    words = WordSpout.spec()
    counter = Counter_.spec(inputs={words: Grouping.fields("word")}, par=2)
    sink = Sink.spec(inputs=[counter])


def sqlite_conf(tmp_path: Path) -> dict[str, Any]:
    db = tmp_path / "state.db"
    STATE["db"] = db
    return {"topology.state.provider": "sqlite", "topology.state.provider.config": {"path": str(db)}}


def test_checkpoint_spout_is_wired_to_stateful_bolts_only() -> None:
    from stormpy.api.compile import compile_topology

    topology = compile_topology(Topo, {})
    assert CHECKPOINT_COMPONENT in topology.spouts
    assert any(g.componentId == CHECKPOINT_COMPONENT for g in topology.bolts["counter"].common.inputs)
    assert not any(g.componentId == CHECKPOINT_COMPONENT for g in topology.bolts["sink"].common.inputs)


def test_tuples_are_acked_only_after_the_checkpoint_with_their_update_committed(
        local_topology: Any, tmp_path: Path) -> None:
    reset(count=300)
    local_topology(Topo, **sqlite_conf(tmp_path))
    wait(lambda: len(set(STATE["acked"])) == 300, timeout=60, what="every tuple acked")
    assert STATE["early_acks"] == [], "tuples acked before the checkpoint holding them committed"
    assert STATE["inits"] == [0, 0]          # both tasks initialized once, from empty state
    assert not STATE["failed"]
    assert committed_counts(STATE["db"]) == Counter({w: 60 for w in WORDS})


def test_a_bolt_raising_between_prepare_and_commit_rolls_back_and_replays(
        local_topology: Any, tmp_path: Path) -> None:
    reset(count=400, crash_at_commit=3, spout_sleep=0.005)
    local = local_topology(Topo, **sqlite_conf(tmp_path))
    wait(lambda: len(set(STATE["acked"])) == 400, timeout=90, what="every tuple acked after the crash")
    assert STATE["crashes"] == 1 and STATE["failed"], "the crash failed the held tuples (they replayed)"
    assert local.reporter.counts["counter"] >= 1
    counts = committed_counts(STATE["db"])
    assert all(counts[w] >= 80 for w in WORDS), f"an update was lost: {counts}"
    # at-least-once: only tuples of the crashed checkpoint can count twice
    assert sum(counts.values()) - 400 <= len(STATE["failed"])
    assert len(STATE["inits"]) == 3 and STATE["inits"][2] > 0, "the re-created task restarted from its commit"
    assert STATE["early_acks"] == []


def test_state_survives_a_restart_of_the_topology(local_topology: Any, tmp_path: Path) -> None:
    reset(count=100)
    conf = sqlite_conf(tmp_path)
    first = local_topology(Topo, name="restarted", **conf)
    wait(lambda: len(set(STATE["acked"])) == 100, timeout=60, what="the first 100 acked")
    first.stop(drain_secs=0)
    reset(count=50, start=100, db=STATE["db"])
    local_topology(Topo, name="restarted", **conf)
    wait(lambda: len(set(STATE["acked"])) == 50, timeout=60, what="the next 50 acked")
    assert sorted(STATE["inits"]) and sum(STATE["inits"]) == 100, "init_state got the committed counts"
    assert committed_counts(STATE["db"]) == Counter({w: 30 for w in WORDS})


def test_redis_provider_commits_to_a_real_server(local_topology: Any, redis_server: Any, redis_prefix: str) -> None:
    reset(count=100)
    local_topology(Topo, name="redis-counter", **{"topology.state.provider": "redis",
                                                   "topology.state.provider.config": {"url": redis_server.url,
                                                                                      "prefix": redis_prefix}})
    wait(lambda: len(set(STATE["acked"])) == 100, timeout=60, what="every tuple acked")
    client = redis_server.client()
    total: Counter = Counter()
    for key in client.keys(f"{redis_prefix}:redis-counter/counter/*:committed"):
        for k, v in client.hgetall(key).items():
            if json.loads(k) in WORDS:
                total[json.loads(k)] += json.loads(v)
    assert total == Counter({w: 20 for w in WORDS})


def test_stateful_bolts_refuse_a_topology_without_ackers() -> None:
    from stormpy.errors import UserError

    with pytest.raises(UserError, match="topology.acker.executors must not be 0"):
        LocalTopology(Topo, "no-ackers", user_overrides={"topology.acker.executors": 0})
