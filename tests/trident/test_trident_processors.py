"""A fused group's processors, driven the way a spout executor task drives them: the results of
every aggregation kind, on the fast paths the runtime picks (a Function's collector counting or
summing on the spot, bare single-field keys, stormpy's Count/Sum without a TridentTuple) and
off them (a Count subclass, several group fields, reducers, general aggregators, an empty batch),
against the same arithmetic done here in plain Python."""
from __future__ import annotations

from collections import Counter

import cloudpickle
import pytest

from stormpy.trident import Count, Function, Sum, TridentTopology
from stormpy.trident.batch import TrackedBatch, _SpoutCollector
from stormpy.trident.bolts import TridentBolt
from stormpy.trident.operations import Aggregator, ReducerAggregator
from stormpy.trident.planner.compile import compile_trident
from stormpy.trident.processors import GroupRuntime

from ._harness import FixedSpout

LINES = [["the cat sat"], ["the dog"], [""], ["a cat a dog the end"]]
WORDS = [w for (line,) in LINES for w in line.split()]


class Split(Function):
    def execute(self, tup, collector):
        for word in tup["line"].split():
            collector.emit([word])


class SplitLen(Function):
    def execute(self, tup, collector):
        for word in tup[0].split():
            collector.emit((word, len(word)))      # a tuple, not a list: any sequence goes


class Twice(Count):
    """A Count subclass: its own init must be honoured (no fast path for it)."""

    def init(self, tup):
        return 2


class Collect(ReducerAggregator):
    def init(self):
        return []

    def reduce(self, curr, tup):
        return curr + [tup[0]]


class MinMax(Aggregator):
    def init(self, batch_id, collector):
        return {}

    def aggregate(self, state, tup, collector):
        n = tup["n"]
        state["lo"] = min(state.get("lo", n), n)
        state["hi"] = max(state.get("hi", n), n)

    def complete(self, state, collector):
        collector.emit([state["lo"], state["hi"]])


def _keep(tup):
    return True


def _spout_group(topology):
    for bolt in topology.bolts.values():
        component = cloudpickle.loads(bolt.bolt_object.python_object.serialized)
        if isinstance(component, TridentBolt) and component.spec.spout is not None:
            return component.spec
    raise AssertionError("no spout group")


def _run(build, rows_per_partition):
    """Compile ``build``'s topology, run a batch and then an empty one through the spout's group
    (as its executor task does), return what left the group for each."""
    fields = ["line"] if len(rows_per_partition[0][0]) == 1 else ["word", "n"]

    class Topo(TridentTopology):
        def build(self, conf):
            build(self, FixedSpout(fields, rows_per_partition, per_batch=100))

    spec = _spout_group(compile_trident(Topo, {}))
    out: list[list] = []
    runtime = GroupRuntime(spec, lambda stream, batch, values: out.append(list(values)))
    runtime.prepare({}, None, 0, 1)
    spec.spout.initialize({}, None)
    for txid in (1, 2):            # two batches: per-batch state must not leak from one to the next
        out.clear()
        batch = TrackedBatch(txid, 0)
        collector = _SpoutCollector(runtime, batch)
        if txid == 1:
            for p in range(len(rows_per_partition)):
                spec.spout.emit_batch(txid, collector, p, {"start": 0, "end": 100})
        runtime.finish(batch, "batch" if spec.defer_finish else None)
        if txid == 1:
            first = list(out)
    return first, list(out)


def _then(stream):
    return stream.shuffle().each(stream.fields, _keep)


def test_count_on_a_functions_output_counts_every_word():
    got, empty = _run(lambda t, spout: _then(t.new_stream("s", spout).each(["line"], Split(), ["word"])
                                             .group_by(["word"]).partition_aggregate(Count(), ["count"])),
                      [LINES[:2], LINES[2:]])
    assert sorted(map(tuple, got)) == sorted(Counter(WORDS).items())
    assert empty == []


def test_sum_on_a_functions_output_and_a_count_subclass():
    got, _ = _run(lambda t, spout: _then(t.new_stream("s", spout).each(["line"], SplitLen(), ["word", "n"])
                                         .group_by(["word"]).partition_aggregate(["n"], Sum(), ["total"])),
                  [LINES])
    assert sorted(map(tuple, got)) == sorted((w, c * len(w)) for w, c in Counter(WORDS).items())
    got, _ = _run(lambda t, spout: _then(t.new_stream("s", spout).each(["line"], Split(), ["word"])
                                         .group_by(["word"]).partition_aggregate(Twice(), ["count"])),
                  [LINES])
    assert sorted(map(tuple, got)) == sorted((w, 2 * c) for w, c in Counter(WORDS).items())


ROWS = [[["a", 1], ["b", 2], ["a", 3]], [["b", 5], ["a", 1], ["c", 7]]]
PAIRS = [tuple(r) for part in ROWS for r in part]


@pytest.mark.parametrize("agg, out, expect", [
    (Sum(), ["total"], lambda: {(w,): sum(n for x, n in PAIRS if x == w) for w, _ in PAIRS}),
    (Collect(), ["ns"], lambda: {(w,): [n for x, n in PAIRS if x == w] for w, _ in PAIRS}),
    (MinMax(), ["lo", "hi"], lambda: {(w,): (min(n for x, n in PAIRS if x == w), max(n for x, n in PAIRS if x == w))
                                      for w, _ in PAIRS}),
])
def test_grouped_aggregations_of_spout_fields(agg, out, expect):
    got, empty = _run(lambda t, spout: _then(t.new_stream("s", spout).group_by(["word"])
                                             .partition_aggregate(["n"], agg, out)), ROWS)
    result = {(row[0],): (tuple(row[1:]) if len(row) > 2 else row[1]) for row in got}
    assert result == expect()
    assert empty == []


def test_two_group_fields_and_an_ungrouped_count_of_an_empty_batch():
    got, _ = _run(lambda t, spout: _then(t.new_stream("s", spout).group_by(["word", "n"])
                                         .partition_aggregate(Count(), ["count"])), ROWS)
    assert sorted(map(tuple, got)) == sorted((w, n, c) for (w, n), c in Counter(PAIRS).items())
    got, empty = _run(lambda t, spout: _then(t.new_stream("s", spout).partition_aggregate(Count(), ["count"])),
                      ROWS)
    assert got == [[len(PAIRS)]]
    assert empty == [[0]], "an ungrouped aggregate emits its zero for a batch without tuples"


class Upper(Function):
    def execute(self, tup, collector):
        collector.emit([tup[0].upper()])


def test_count_on_the_output_of_a_function_reading_some_fields():
    got, _ = _run(lambda t, spout: _then(t.new_stream("s", spout).each(["word"], Upper(), ["up"])
                                         .group_by(["up"]).partition_aggregate(Count(), ["count"])), ROWS)
    assert sorted(map(tuple, got)) == sorted(Counter(w.upper() for w, _ in PAIRS).items())
