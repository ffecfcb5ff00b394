"""A transactional spout's metas when a batch fails before its meta is stored (regression test).

A Function fused after the spout raising inside ``emit_new_batch`` leaves txid t without a
stored meta; if txid t+1 was emitted meanwhile (several batches in flight), it started from
t-1's meta and took t's data. The replay of t must then emit nothing (Storm's
RotatingTransactionalState rule), or that data would be counted twice.
"""
from __future__ import annotations

from stormpy.cluster_state import MemoryTransactionalState
from stormpy.trident import PartitionedSpout
from stormpy.trident.spouts import make_source


class Numbers(PartitionedSpout):
    outputs = ["n"]

    def partitions(self):
        return [0]

    def emit_new_batch(self, txid, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        meta = {"start": start, "end": start + 3}
        self.emit_batch(txid, collector, partition, meta)
        return meta

    def emit_batch(self, txid, collector, partition, meta):
        for n in range(meta["start"], meta["end"]):
            collector.emit([n])


class Collector:
    def __init__(self, fail: bool = False) -> None:
        self.values: list = []
        self.fail = fail

    def emit(self, values):
        if self.fail:
            raise RuntimeError("fused function raised")
        self.values.append(values[0])


def test_replay_of_a_txid_overtaken_by_a_later_one_emits_nothing():
    source = make_source(Numbers(), "partitioned", "numbers")
    source.prepare({}, None, MemoryTransactionalState(), 0, 1)
    first = Collector()
    source.emit(1, 0, first)
    try:
        source.emit(2, 0, Collector(fail=True))    # raises before txid 2's meta is stored
    except RuntimeError:
        pass
    third = Collector()
    source.emit(3, 0, third)                       # in flight already: starts after txid 1
    replay2, replay3 = Collector(), Collector()
    source.emit(2, 1, replay2)
    source.emit(3, 1, replay3)
    emitted = first.values + replay2.values + replay3.values
    assert sorted(emitted) == list(range(6)), "every number once: txid 2 stays empty, 3 keeps its data"
    assert replay3.values == third.values
    source.emit(4, 0, last := Collector())
    assert last.values == [6, 7, 8], "the chain goes on after the empty txid"
