"""Exactly-once counts in local mode while a Function raises on ~2% of its calls."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from stormpy.trident import Count, Function, TridentTopology

from ._harness import memory_map
from ._harness import FixedOpaqueSpout, FixedSpout, run_until

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away",
             "four score and seven years ago", "snow white and the seven dwarfs"]
ROWS = [[[SENTENCES[(i + p) % 4]] for i in range(60)] for p in range(3)]
EXPECTED = Counter(w for part in ROWS for (s,) in part for w in s.split())


class FlakySplit(Function):
    def prepare(self, conf, context):
        self.rng = random.Random(context.task_id)

    def execute(self, tup, collector):
        if self.rng.random() < 0.02:
            raise RuntimeError("flaky split: injected failure")
        for word in tup["sentence"].split():
            collector.emit([word])


def word_count(spout, state):
    class WordCount(TridentTopology):
        config = {"topology.trident.batch.emit.interval.millis": 10, "topology.message.timeout.secs": 3,
                  "topology.max.spout.pending": 3}

        def build(self, conf):
            (self.new_stream("lines", spout, par=2)
                 .each(["sentence"], FlakySplit(), ["word"]).parallelism_hint(2)
                 .group_by(["word"])
                 .persistent_aggregate(state, Count(), ["count"]).parallelism_hint(2))
    return WordCount


@pytest.mark.parametrize("kind", ["transactional", "opaque"])
def test_exact_counts_with_failing_function(kind):
    spout = (FixedSpout if kind == "transactional" else FixedOpaqueSpout)(["sentence"], ROWS, per_batch=5)
    state = memory_map(f"exactly-once-{kind}", kind)

    def counts_exact():
        return {w: v for (w,), v in state.open_map().items()} == dict(EXPECTED)

    local = run_until(word_count(spout, state), counts_exact, timeout=90, name=f"exactly-once-{kind}")
    errors = local.reporter.errors
    # the injected failures were reported as the component's errors, and the worker lived on
    assert set(errors) == {"lines"} and errors["lines"]
    assert all("injected failure" in text for _t, _task, text in errors.get("lines", []))
    assert {w: v for (w,), v in state.open_map().items()} == dict(EXPECTED)


def test_trident_components_publish_txid_batches_and_latency_metrics():
    spout = FixedSpout(["sentence"], ROWS, per_batch=5)
    state = memory_map("exactly-once-metrics")

    def some_commits():
        return sum(v for _k, v in state.open_map().items()) > 0

    local = run_until(word_count(spout, state), some_commits, timeout=60, name="exactly-once-metrics")
    by_component = {}
    for executor in local.runtime.executors.values():
        by_component.setdefault(executor.component_id, []).append(executor.stats.metrics())
    [coordinator] = by_component["$mastercoord-bg0"]
    assert coordinator["trident.txid"] >= 1 and coordinator["trident.batches.committed"] >= 1
    assert coordinator["trident.commit.latency.p50.ms"] > 0 and coordinator["trident.batch.latency.p99.ms"] > 0
    counting = [m for comp, ms in by_component.items() if comp.startswith("b-") for m in ms]
    assert any(m.get("trident.batches.committed", 0) >= 1 and m.get("trident.batch.latency.p50.ms", -1) >= 0 and m["trident.txid"] >= 1
               for m in counting), counting
    totals = local.totals()
    assert totals["trident_batches"] >= 1 and totals["trident_txid"] >= 1
