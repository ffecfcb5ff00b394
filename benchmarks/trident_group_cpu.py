"""CPU per word of the Trident word count's spout group alone (issue 24), no executor around it.

    python benchmarks/trident_group_cpu.py [--reps 15]

Runs the fused group that ``trident_bench_topology.py``'s spout tasks run (the PartitionedSpout,
the split Function and the partial ``Count`` of ``persistent_aggregate``) over its own batches,
2 partitions x 1,000 lines per batch as one spout task of the benchmark sees them, and prints the
best thread CPU time per sentence and per word over ``--reps`` rounds of 5 batches, next to the
floor: the user's split alone with a collector that does nothing. The engine's per-tuple cost
is the difference; ``time.thread_time`` makes the figure hold on a loaded machine.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trident_bench_topology import BenchLines, Split, build_word_count  # noqa: E402

from stormpy.trident import MemoryMapState, TridentTopology  # noqa: E402
from stormpy.trident.batch import TrackedBatch, _SpoutCollector  # noqa: E402
from stormpy.trident.bolts import TridentBolt  # noqa: E402
from stormpy.trident.operations import TridentTuple  # noqa: E402
from stormpy.trident.planner.compile import compile_trident  # noqa: E402
from stormpy.trident.processors import GroupRuntime  # noqa: E402

PER_BATCH = 1000


class _Bench(TridentTopology):
    def build(self, conf: Any) -> None:
        build_word_count(self, MemoryMapState.transactional(), PER_BATCH)


def _spout_group() -> Any:
    for bolt in compile_trident(_Bench, {}).bolts.values():
        component = cloudpickle.loads(bolt.bolt_object.python_object.serialized)
        if isinstance(component, TridentBolt) and component.spec.spout is not None:
            return component.spec
    raise RuntimeError("the benchmark topology has no spout group")


def group_cpu(reps: int) -> tuple[float, int]:
    """Best CPU seconds per sentence of the spout group, and the tuples it sent on."""
    spec = _spout_group()
    sent = [0]
    runtime = GroupRuntime(spec, lambda stream, batch, values: sent.__setitem__(0, sent[0] + 1))
    runtime.prepare({}, None, 0, 2)
    spout = spec.spout
    spout.initialize({}, None)
    best = float("inf")
    for rep in range(reps):
        t0, lines = time.thread_time(), 0
        for txid in range(1, 6):
            batch = TrackedBatch(rep * 10 + txid, 0)
            collector = _SpoutCollector(runtime, batch)
            for partition in (0, 2):      # one spout task of two holds 2 of the 4 partitions
                spout.emit_batch(batch.txid, collector, partition, {"start": 0, "end": PER_BATCH})
            runtime.finish(batch, "batch")
            lines += collector.count
        best = min(best, (time.thread_time() - t0) / lines)
    return best, sent[0]


def floor_cpu(reps: int) -> float:
    """Best CPU seconds per sentence of the user's split alone (a collector that does nothing)."""
    spout = BenchLines(PER_BATCH)
    spout.initialize({}, None)
    split, index = Split(), {"sentence": 0}

    class Nothing:
        def emit(self, values: Any) -> None:
            pass

    nothing = Nothing()
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time()
        for sentence in spout.sentences * 10:
            split.execute(TridentTuple([sentence], index), nothing)
        best = min(best, (time.thread_time() - t0) / (len(spout.sentences) * 10))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15, help="rounds of 5 batches; the best one counts")
    args = parser.parse_args(argv)
    spout = BenchLines(PER_BATCH)
    spout.initialize({}, None)
    words = sum(len(s.split()) for s in spout.sentences) / len(spout.sentences)
    per_sentence, sent = group_cpu(args.reps)
    floor = floor_cpu(args.reps)
    print(f"trident spout group (spout + split + partial Count): {per_sentence * 1e6:.2f} us CPU per sentence, "
          f"{per_sentence / words * 1e6:.3f} us per word = {words / per_sentence:,.0f} words per CPU-second "
          f"({sent:,} partial counts sent on)")
    print(f"user split alone (a collector doing nothing): {floor * 1e6:.2f} us per sentence; "
          f"the engine's share: {(per_sentence - floor) * 1e6:.2f} us per sentence", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
