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
