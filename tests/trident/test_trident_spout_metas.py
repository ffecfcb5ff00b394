"""A transactional spout's metas when a batch fails before its meta is stored (regression test).

A Function fused after the spout raising inside ``emit_new_batch`` leaves txid t without a
stored meta; if txid t+1 was emitted meanwhile (several batches in flight), it started from
t-1's meta and took t's data. The replay of t must then emit nothing (Storm's
RotatingTransactionalState rule), or that data would be counted twice.
"""
from __future__ import annotations

import threading
import time

import pytest

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


class RemoteStore:
    """A TransactionalState that is not in-process (so metas are written off the executor
    thread, as against ZooKeeper), over a MemoryTransactionalState; ``broken`` makes writes raise."""

    def __init__(self) -> None:
        self.inner = MemoryTransactionalState()
        self.broken = False
        self.writers: set[str] = set()

    def set(self, path, value):
        self.writers.add(threading.current_thread().name)
        if self.broken:
            raise ConnectionError("store unreachable")
        self.inner.set(path, value)

    def set_new(self, path, value):
        self.set(path, value)

    def get(self, path, default=None):
        return self.inner.get(path, default)

    def delete(self, path):
        self.inner.delete(path)

    def children(self, path):
        return self.inner.children(path)


class TwoPartitions(Numbers):
    def partitions(self):
        return [0, 1]


def _stored(store):
    return {p: sorted(int(c) for c in store.children(f"spouts/numbers/{p}")) for p in (0, 1)}


def test_metas_stored_behind_the_emit_before_emit_returns_and_pruned_after_success():
    store = RemoteStore()
    source = make_source(TwoPartitions(), "partitioned", "numbers")
    source.prepare({}, None, store, 0, 1)
    try:
        for txid in (1, 2, 3):
            source.emit(txid, 0, Collector())
            assert _stored(store) == {0: list(range(1, txid + 1)), 1: list(range(1, txid + 1))}
        # the first partition's meta is written behind the second one's emit, the last one's
        # right away (the task waits for it anyway)
        assert store.writers == {"trident-metas-numbers-0", threading.current_thread().name}
        source.success(3)
        deadline = time.monotonic() + 10
        while _stored(store) != {0: [3], 1: [3]} and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _stored(store) == {0: [3], 1: [3]}, "metas below the committed txid are pruned"
        restarted = make_source(TwoPartitions(), "partitioned", "numbers")
        restarted.prepare({}, None, store, 0, 1)
        restarted.emit(4, 0, after := Collector())
        assert after.values == [9, 10, 11] * 2, "a restarted task goes on from the stored metas"
    finally:
        source.close()


def test_a_failed_meta_store_fails_the_emit_and_the_replay_stores_it():
    store = RemoteStore()
    source = make_source(TwoPartitions(), "partitioned", "numbers")
    source.prepare({}, None, store, 0, 1)
    try:
        source.emit(1, 0, Collector())
        store.broken = True
        with pytest.raises(ConnectionError):
            source.emit(2, 0, Collector())
        store.broken = False
        source.emit(2, 1, replay := Collector())
        assert replay.values == [3, 4, 5] * 2
        assert _stored(store) == {0: [1, 2], 1: [1, 2]}
    finally:
        source.close()


class SharedMeta(PartitionedSpout):
    """Returns one dict for every partition, changed for the next one (a meta the writer thread
    must not read late)."""

    outputs = ["n"]

    def __init__(self) -> None:
        self.meta: dict = {}

    def partitions(self):
        return [0, 1]

    def emit_new_batch(self, txid, collector, partition, last_meta):
        self.meta["partition"] = partition
        collector.emit([partition])
        return self.meta

    def emit_batch(self, txid, collector, partition, meta):
        collector.emit([partition])


class SlowStore(RemoteStore):
    def set(self, path, value):
        time.sleep(0.05)   # a ZooKeeper round trip, exaggerated: the next partition emits meanwhile
        super().set(path, value)


def test_each_partition_stores_its_meta_as_it_was_returned():
    store = SlowStore()
    source = make_source(SharedMeta(), "partitioned", "numbers")
    source.prepare({}, None, store, 0, 1)
    try:
        source.emit(1, 0, Collector())
        assert [store.get(f"spouts/numbers/{p}/1")["meta"]["partition"] for p in (0, 1)] == [0, 1]
    finally:
        source.close()
