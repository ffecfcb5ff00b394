"""Helpers for local-mode Trident tests: fixed-input spouts, a recording state, a runner."""
from __future__ import annotations

import random
import threading
import time
from typing import Any

from stormpy.local.runner import LocalTopology
from stormpy.trident import MemoryMapState, OpaquePartitionedSpout, PartitionedSpout
from stormpy.trident.state import MapStateFactory

_RECORDS: dict[str, dict[tuple[int, int], list]] = {}   # name -> (partition, txid) -> committed tuples
_LOCK = threading.Lock()


class FixedSpout(PartitionedSpout):
    """Transactional: partition p emits ``rows[p]`` in slices of ``per_batch``; then empty batches."""

    def __init__(self, fields: list[str], rows: list[list[list]], per_batch: int = 4) -> None:
        self.outputs = fields
        self.rows = rows
        self.per_batch = per_batch

    def partitions(self) -> list:
        return list(range(len(self.rows)))

    def emit_new_batch(self, txid, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        meta = {"start": start, "end": min(start + self.per_batch, len(self.rows[partition]))}
        self.emit_batch(txid, collector, partition, meta)
        return meta

    def emit_batch(self, txid, collector, partition, meta):
        for row in self.rows[partition][meta["start"]:meta["end"]]:
            collector.emit(row)


class FixedOpaqueSpout(OpaquePartitionedSpout):
    """Opaque: each call takes 1..``per_batch`` rows at random, so a replayed txid carries other tuples."""

    def __init__(self, fields: list[str], rows: list[list[list]], per_batch: int = 4) -> None:
        self.outputs = fields
        self.rows = rows
        self.per_batch = per_batch

    def partitions(self) -> list:
        return list(range(len(self.rows)))

    def emit_batch(self, txid, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        end = min(start + random.randint(1, self.per_batch), len(self.rows[partition]))
        for row in self.rows[partition][start:end]:
            collector.emit(row)
        return {"start": start, "end": end}


class RecordState:
    """A State that keeps each committed batch's tuples per (partition, txid); a replay overwrites."""

    def __init__(self, name: str, partition: int) -> None:
        self.name = name
        self.partition = partition
        self.pending: list = []

    def begin_commit(self, txid: int) -> None:
        self.pending = []

    def commit(self, txid: int) -> None:
        with _LOCK:
            _RECORDS.setdefault(self.name, {})[(self.partition, txid)] = list(self.pending)


class RecordFactory:
    def __init__(self, name: str) -> None:
        self.name = name
        with _LOCK:
            _RECORDS.pop(name, None)

    def make_state(self, conf, context, partition_index, num_partitions):
        return RecordState(self.name, partition_index)

    def rows(self) -> list:
        with _LOCK:
            return [row for _k, rows in sorted(_RECORDS.get(self.name, {}).items()) for row in rows]

    def by_partition(self) -> dict[int, list]:
        result: dict[int, list] = {}
        with _LOCK:
            for (partition, _txid), rows in _RECORDS.get(self.name, {}).items():
                result.setdefault(partition, []).extend(rows)
        return result

    def by_txid(self) -> dict[int, list]:
        result: dict[int, list] = {}
        with _LOCK:
            for (_p, txid), rows in _RECORDS.get(self.name, {}).items():
                result.setdefault(txid, []).extend(rows)
        return result

    def max_txid(self) -> int:
        with _LOCK:
            return max((t for _p, t in _RECORDS.get(self.name, {})), default=0)


class Record:
    """StateUpdater: the input tuples' values become the batch's record."""

    def update_state(self, state, tuples, collector):
        state.pending.extend(list(t.values) for t in tuples)


def memory_map(name: str, kind: str = "transactional") -> MapStateFactory:
    """A MemoryMapState factory of ``kind`` over the named map, emptied (test names are reused)."""
    MemoryMapState.clear(name)
    return getattr(MemoryMapState, kind)(name)


def record(stream, name: str, fields):
    factory = RecordFactory(name)
    stream.partition_persist(factory, fields, Record())
    return factory


FAST = {"topology.trident.batch.emit.interval.millis": 10, "topology.message.timeout.secs": 3,
        "topology.max.spout.pending": 2}


def run_until(topology_cls: type, done, timeout: float = 40.0, name: str = "trident-test") -> LocalTopology:
    """Run ``topology_cls`` in-process until ``done()`` is true; fail naming what was awaited."""
    local = LocalTopology(topology_cls, name)
    local.start()
    try:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"trident topology {name}: condition {done.__name__} not met in {timeout}s; "
                                     f"errors: {dict(local.reporter.errors)}")
            time.sleep(0.1)
    finally:
        local.stop(drain_secs=0.5)
    return local
