"""Fencing and ambiguous writes end to end, in local mode (a real LocalTopology, issue 26 items 5 and 6).

- A user BackingMap (``commit_log = True``) whose ``multi_put`` lands and then raises, under an
  opaque spout that replays a txid with FEWER tuples than the attempt that landed: the counts
  are exact (each failed write makes the state reload its commit log before the replay).
- The same topology run again under another name, or again under the same name with txids
  restarting at 1, onto the same SQLite state: refused with a clear error, the counts untouched.
"""
from __future__ import annotations

import json
import threading
import time
from collections import Counter

from stormpy.local.runner import LocalTopology
from stormpy.trident import Count, Function, OpaquePartitionedSpout, SqliteMapState, TridentTopology
from stormpy.trident.state import BackingMap, map_state_factory

from ._harness import FixedSpout, run_until

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away",
             "four score and seven years ago", "snow white and the seven dwarfs",
             "red fish blue fish", "one two three four"]
ROWS = [[[SENTENCES[(i * 5 + p) % 6]] for i in range(30)] for p in range(2)]
EXPECTED = Counter(w for part in ROWS for (s,) in part for w in s.split())

_STORE: dict[tuple, str] = {}
_PUTS = {"n": 0, "raised": 0}
_LOCK = threading.Lock()
FAIL_AT = {3, 8, 14, 21}     # these puts (counted over both partitions) land, then raise


class AmbiguousDict(BackingMap):
    """A user's BackingMap in this process: its put sometimes lands and then raises (a lost reply)."""

    commit_log = True

    def multi_get(self, keys):
        with _LOCK:
            return [None if k not in _STORE else json.loads(_STORE[k]) for k in keys]

    def multi_put(self, keys, values):
        with _LOCK:
            _STORE.update((k, json.dumps(v)) for k, v in zip(keys, values))
            _PUTS["n"] += 1
            fail = _PUTS["n"] in FAIL_AT
            if fail:
                _PUTS["raised"] += 1
        if fail:
            raise TimeoutError("injected: the write landed but its reply was lost")

    def items(self):
        with _LOCK:
            return [(k, json.loads(v)) for k, v in list(_STORE.items())]


class ShrinkingReplaySpout(OpaquePartitionedSpout):
    """Opaque: a first attempt of a txid takes 4 rows, a replay of it only 1 (fewer tuples, other keys)."""

    outputs = ["sentence"]

    def __init__(self, rows) -> None:
        self.rows = rows

    def initialize(self, stormconf, context):
        self.seen: set = set()

    def partitions(self):
        return list(range(len(self.rows)))

    def emit_batch(self, txid, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        replay = (partition, txid) in self.seen
        self.seen.add((partition, txid))
        end = min(start + (1 if replay else 4), len(self.rows[partition]))
        for row in self.rows[partition][start:end]:
            collector.emit(row)
        return {"start": start, "end": end}


class Split(Function):
    def execute(self, tup, collector):
        for word in tup["sentence"].split():
            collector.emit([word])


def counts(reader) -> dict:
    return {w: v for (w,), v in reader.items() if v is not None}


def test_opaque_counts_exact_when_writes_land_then_raise():
    _STORE.clear()
    _PUTS.update(n=0, raised=0)
    state = map_state_factory(lambda conf, context, index, count: AmbiguousDict(), "opaque")

    class AmbiguousWrites(TridentTopology):
        config = {"topology.trident.batch.emit.interval.millis": 10, "topology.message.timeout.secs": 3,
                  "topology.max.spout.pending": 1}

        def build(self, conf):
            (self.new_stream("lines", ShrinkingReplaySpout(ROWS), par=1)
                 .each(["sentence"], Split(), ["word"])
                 .group_by(["word"])
                 .persistent_aggregate(state, Count(), ["count"]).parallelism_hint(2))

    total = sum(EXPECTED.values())

    def all_counted():
        return sum(counts(state.open_map()).values()) >= total

    local = run_until(AmbiguousWrites, all_counted, timeout=90, name="ambiguous-writes")
    assert _PUTS["raised"] == len(FAIL_AT)
    assert any("reply was lost" in text for errs in local.reporter.errors.values() for _t, _k, text in errs)
    assert counts(state.open_map()) == dict(EXPECTED)


def word_count(state):
    class WordCount(TridentTopology):
        config = {"topology.trident.batch.emit.interval.millis": 10, "topology.message.timeout.secs": 3,
                  "topology.max.spout.pending": 2}

        def build(self, conf):
            (self.new_stream("lines", FixedSpout(["sentence"], ROWS, per_batch=5), par=2)
                 .each(["sentence"], Split(), ["word"])
                 .group_by(["word"])
                 .persistent_aggregate(state, Count(), ["count"]).parallelism_hint(2))
    return WordCount


def errors_of(topology_cls, name: str, wait_secs: float = 20.0) -> list[str]:
    """Run ``topology_cls`` as ``name`` until its state refuses it; the error texts reported."""
    local = LocalTopology(topology_cls, name)
    local.start()
    try:
        deadline = time.monotonic() + wait_secs
        while time.monotonic() < deadline:
            texts = [text for errs in local.reporter.errors.values() for _t, _k, text in errs]
            if any("StateFencedError" in t for t in texts):
                return texts
            time.sleep(0.1)
        return [text for errs in local.reporter.errors.values() for _t, _k, text in errs]
    finally:
        local.stop(drain_secs=0.5)


def test_renamed_or_restarted_topology_on_the_same_state_is_refused(tmp_path):
    state = SqliteMapState.transactional(tmp_path / "wc.db")
    run_until(word_count(state), lambda: counts(state.open_map()) == dict(EXPECTED), timeout=60, name="wc-a")
    assert counts(state.open_map()) == dict(EXPECTED)

    renamed = errors_of(word_count(state), "wc-b")
    assert any("belongs to topology 'wc-a'; topology 'wc-b' may not write it" in t for t in renamed), renamed
    # `stormpy local` keeps the coordinator in memory: the same name again starts at txid 1
    restarted = errors_of(word_count(state), "wc-a")
    assert any("txids restarted" in t for t in restarted), restarted
    assert counts(state.open_map()) == dict(EXPECTED)
