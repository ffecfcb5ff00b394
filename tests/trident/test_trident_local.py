"""Every stream operation run in local mode (a real LocalTopology) over small fixed inputs.

Each branch ends in a recording state (partition_persist), so what the test reads is what was
committed, batch by batch; replays overwrite, never add.
"""
from __future__ import annotations

from collections import Counter

from stormpy.trident import (Aggregator, Count, Filter, Function, MapGet, ReducerAggregator, Sum,
                             TridentTopology)

from ._harness import memory_map
from ._harness import FAST, FixedSpout, RecordFactory, record, run_until

WORDS = ["apple", "pear", "fig", "plum"]
ROWS = [[[n, WORDS[n % 4]] for n in range(0, 12)], [[n, WORDS[n % 3]] for n in range(12, 24)]]
ALL = [r for part in ROWS for r in part]
LAST_DATA_TXID = 3


class Double(Function):
    def prepare(self, conf, context):
        self.factor = 2

    def execute(self, tup, collector):
        collector.emit([tup["n"] * self.factor])


class Even(Filter):
    def is_keep(self, tup):
        return tup[0] % 2 == 0


class Collect(ReducerAggregator):
    def init(self):
        return []

    def reduce(self, curr, tup):
        return sorted(curr + [tup[0]])


class FirstAndCount(Aggregator):
    """The general aggregator: emits at complete, per group."""

    def init(self, batch_id, collector):
        return {"n": 0, "min": None}

    def aggregate(self, state, tup, collector):
        state["n"] += 1
        state["min"] = tup[0] if state["min"] is None else min(state["min"], tup[0])

    def complete(self, state, collector):
        collector.emit([state["min"], state["n"]])


R: dict[str, RecordFactory] = {}
TOTALS = memory_map("local-totals")
LOOKUP = memory_map("local-lookup")


class Ops(TridentTopology):
    config = FAST

    def build(self, conf):
        s = self.new_stream("nums", FixedSpout(["n", "word"], ROWS), par=2)
        R["each"] = record(s.each(["n"], Double(), ["d"]).each(["n"], Even()).project(["n", "d"]), "each", ["n", "d"])
        up = s.each(["word"], lambda t, c: c.emit([t[0].upper()]), ["up"]).each(["n"], lambda t: t[0] < 5)
        R["callables"] = record(up, "callables", ["n", "up"])
        R["shuffle"] = record(s.shuffle().project(["n"]).parallelism_hint(2), "shuffle", ["n"])
        R["partition_by"] = record(s.partition_by(["word"]).parallelism_hint(3), "partition_by", ["word"])
        R["broadcast"] = record(s.broadcast().parallelism_hint(2), "broadcast", ["n"])
        R["global"] = record(s.global_().parallelism_hint(3), "global", ["n"])
        R["batch_global"] = record(s.batch_global().parallelism_hint(3), "batch_global", ["n"])
        grouped = s.group_by(["word"]).aggregate(["n"], Collect(), ["ns"]).parallelism_hint(2)
        R["group_aggregate"] = record(grouped, "group_aggregate", ["word", "ns"])
        R["aggregate"] = record(s.aggregate(Count(), ["c"]), "aggregate", ["c"])
        R["sum"] = record(s.aggregate(["n"], Sum(), ["total"]), "sum", ["total"])
        R["general"] = record(s.group_by(["word"]).aggregate(["n"], FirstAndCount(), ["first", "count"]),
                              "general", ["word", "first", "count"])
        R["partition_aggregate"] = record(s.partition_aggregate(Count(), ["c"]), "partition_aggregate", ["c"])
        totals = s.group_by(["word"]).persistent_aggregate(TOTALS, ["n"], Sum(), ["total"]).parallelism_hint(2)
        R["new_values"] = record(totals.new_values_stream(), "new_values", ["word", "total"])
        looked = self.new_stream("lookups", FixedSpout(["key"], [[["apple"], ["kiwi"]]])).state_query(
            self._lookup_state(), ["key"], MapGet(), ["value"])
        R["state_query"] = record(looked, "state_query", ["key", "value"])
        merged = self.merge(s.project(["n"]), self.new_stream("more", FixedSpout(["m"], [[[100], [101]]])))
        R["merge"] = record(merged, "merge", ["n"])
        names = self.new_stream("names", FixedSpout(["w", "len"], [[[w, len(w)] for w in WORDS]]))
        joined = self.join(s, ["word"], names, ["w"], ["word", "n", "len"]).name("joined")
        R["join"] = record(joined, "join", ["word", "n", "len"])

    def _lookup_state(self):
        # A state only queried here: its values were written outside the topology.
        self.new_stream("lookup-writer", FixedSpout(["k"], [[]])).partition_persist(LOOKUP, ["k"], NoUpdate())
        from stormpy.trident.topology import TridentState
        state = TridentState(self, self._graph.nodes[-1], LOOKUP)
        return state


class NoUpdate:
    def update_state(self, state, tuples, collector):
        pass


def _all_committed() -> bool:
    return bool(R) and all(f.max_txid() >= LAST_DATA_TXID + 2 for f in R.values())


def test_every_operation_in_local_mode():
    lookup = LOOKUP.open_map()
    lookup.begin_commit(0)        # written outside a topology: a commit of its own, txid 0
    lookup.multi_put([("apple",)], [42])
    lookup.commit(0)
    local = run_until(Ops, _all_committed, name="trident-ops")
    assert not local.reporter.errors

    assert sorted(R["each"].rows()) == sorted([n, 2 * n] for n, _w in ALL if n % 2 == 0)
    assert sorted(R["callables"].rows()) == sorted([n, w.upper()] for n, w in ALL if n < 5)
    assert sorted(R["shuffle"].rows()) == sorted([n] for n, _w in ALL)
    parts = R["partition_by"].by_partition()
    owners = Counter(w for rows in parts.values() for w in {r[0] for r in rows})
    assert all(v == 1 for v in owners.values()) and set(owners) == set(WORDS)
    assert sum(len(r) for r in parts.values()) == len(ALL)
    bparts = R["broadcast"].by_partition()
    assert sorted(bparts) == [0, 1] and all(sorted(r) == sorted([n] for n, _ in ALL) for r in bparts.values())
    gparts = {p: r for p, r in R["global"].by_partition().items() if r}
    assert len(gparts) == 1 and sorted(next(iter(gparts.values()))) == sorted([n] for n, _ in ALL)
    by_tx = R["batch_global"].rows()
    assert sorted(by_tx) == sorted([n] for n, _ in ALL)

    collected: dict[str, list] = {}
    for word, ns in R["group_aggregate"].rows():
        collected.setdefault(word, []).extend(ns)
    assert {w: sorted(v) for w, v in collected.items()} == {
        w: sorted(n for n, x in ALL if x == w) for w in WORDS}
    counts = R["aggregate"].by_txid()
    assert sum(c for rows in counts.values() for (c,) in rows) == len(ALL)
    assert all(len(rows) == 1 for rows in counts.values())      # one global value per batch
    assert sum(t for (t,) in R["sum"].rows()) == sum(n for n, _ in ALL)
    general = R["general"].rows()
    assert sum(c for _w, _f, c in general) == len(ALL)
    assert sum(c for (c,) in R["partition_aggregate"].rows()) == len(ALL)

    totals = {w: v for (w,), v in TOTALS.open_map().items()}
    assert totals == {w: sum(n for n, x in ALL if x == w) for w in WORDS}
    last = {}
    for word, total in R["new_values"].rows():
        last[word] = max(last.get(word, 0), total)
    assert last == totals
    assert sorted(R["state_query"].rows(), key=str) == sorted([["apple", 42], ["kiwi", None]], key=str)
    assert sorted(R["merge"].rows()) == sorted([[n] for n, _ in ALL] + [[100], [101]])
    # a join pairs tuples of the same batch: the names all come in txid 1, with 4 rows per partition
    first_batch = ROWS[0][:4] + ROWS[1][:4]
    assert sorted(R["join"].rows()) == sorted([w, n, len(w)] for n, w in first_batch)
