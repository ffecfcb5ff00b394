"""Benchmark: the CPU cost of each step of the cluster tuple path, in one process, per word.

    python benchmarks/tuple_path.py [--rounds 10] [--sentences 2000] [--profile]

Drives the code a cluster worker runs for the word count (sentence spout -> split, shuffle ->
count, fields grouping, par 2 -> one acker; acking on) on one thread, without threads or
sockets, so each step is timed alone with the thread's CPU clock:

- ``spout emit``: ``emit([sentence], tup_id=n)`` (tree start, routing, ``__ack_init``);
- ``split``: the bolt executor's receive path for the spout's batches (driver, Tuple,
  ``process``) and the split's 8 emits per sentence (anchoring, fields grouping);
- ``count``: receive path and ``process`` of each word, acks settled, combined ``__ack_ack``;
- ``acker``: the acker bolt's batches (ledger) and its answers;
- ``spout acks``: the answers back in the spout executor (``ack`` calls);
- ``transfer send`` / ``transfer receive``: every batch above through the transport's frame
  encoding (``ZmqTransfer._pack``) and its decoding and checks at the door (``_deliver``), as
  if every hop crossed workers.

Printed: ns per counted word of each step, min over ``--rounds``. ``--profile`` prints a
cProfile of one round. Only engine classes present on main are used, so the same file runs
against an older checkout (``PYTHONPATH=<checkout>``).
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import sys
import time
from collections import defaultdict
from typing import Any

import msgpack

from stormpy import Bolt, Grouping, Spout, Topology
from stormpy.api.compile import compile_topology
from stormpy.task.runtime import WorkerRuntime, tune_gc
from stormpy.topology.plan import build_plan
from stormpy.worker.transfer import ZmqTransfer

WORDS = ("storm stream tuple bolt spout nimbus worker acker zookeeper supervisor executor task "
         "python zeromq thrift batch latency").split()


class Sentences(Spout):
    outputs = ["sentence"]

    def next_tuple(self) -> None:
        pass


class Split(Bolt):
    outputs = ["word"]

    def process(self, tup: Any) -> None:
        for word in tup.values[0].split():
            self.emit([word])


class Count(Bolt):
    outputs = ["word", "count"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.counts: dict[str, int] = {}
        self.total = 0

    def process(self, tup: Any) -> None:
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.total += 1


class WordCount(Topology):
    spout = Sentences.spec(par=1)
    split = Split.spec(inputs={spout: Grouping.SHUFFLE}, par=1)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=2)


class Recorder:
    """The transfer: keeps every batch handed over, in order."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[Any]]] = []

    def send(self, dest: int, messages: list[Any]) -> None:
        self.batches.append((dest, messages))


class Sink:
    local_tasks: set[int] = set()

    def receive(self, task_id: int, messages: Any) -> None:
        pass


class Path:
    """One runtime with every executor's tasks started by hand (no threads)."""

    def __init__(self) -> None:
        plan = build_plan(compile_topology(WordCount), {"topology.acker.executors": 1,
                                                        "topology.max.spout.pending": None}, "wc-1", "wc")
        self.recorder = Recorder()
        self.runtime = WorkerRuntime(plan, plan.executors(), self.recorder)
        self.by_component: dict[str, list[Any]] = defaultdict(list)
        for ex in self.runtime.executors.values():
            for task_id in ex.task_ids:
                task = ex.task_class(ex, task_id)
                ex.tasks[task_id] = task
                ex._start_task(task)
            self.by_component[ex.component_id].append(ex)
        rnd = random.Random(1)
        self.sentences = [" ".join(rnd.choice(WORDS) for _ in range(8)) for _ in range(1000)]
        self.next_id = 0
        self.transfer = ZmqTransfer("127.0.0.1", 0)
        self.transfer._runtime = Sink()  # type: ignore[assignment]
        self.packer = msgpack.Packer(use_bin_type=True)
        self.sent: list[tuple[int, list[Any]]] = []

    def take(self) -> list[tuple[int, list[Any]]]:
        batches = self.recorder.batches
        self.recorder.batches = []
        self.sent.extend(batches)
        return batches

    def deliver(self, batches: list[tuple[int, list[Any]]], components: tuple[str, ...]) -> None:
        for dest, messages in batches:
            ex = self.runtime._by_task[dest]
            if ex.component_id in components:
                ex._on_messages(ex.tasks[dest], messages)
        for name in components:
            for ex in self.by_component[name]:
                ex.flush()

    def round(self, sentences: int, clock: dict[str, int]) -> None:
        (spout,) = self.by_component["spout"]
        task = next(iter(spout.tasks.values()))
        now = time.thread_time_ns
        t0 = now()
        for _ in range(sentences):
            i = self.next_id
            self.next_id += 1
            task.emit([self.sentences[i % 1000]], tup_id=i)
        spout.flush()
        t1 = now()
        clock["spout emit"] += t1 - t0
        out = self.take()
        steps = (("split", ("split",)), ("count", ("count",)), ("acker", ("__acker",)),
                 ("spout acks", ("spout",)))
        pending = out
        for label, components in steps:
            t0 = now()
            self.deliver(pending, components)
            t1 = now()
            clock[label] += t1 - t0
            pending = self.take() + [b for b in pending if self.runtime._by_task[b[0]].component_id
                                     not in components]
        self.transfer_all(clock)

    def transfer_all(self, clock: dict[str, int]) -> None:
        """Every batch of the round as the send thread ships them: a frame per peer per round."""
        per_frame: list[list[tuple[int, list[Any]]]] = []
        group: dict[int, list[Any]] = defaultdict(list)
        for dest, messages in self.sent:
            group[dest].append((dest, messages))
        self.sent = []
        per_frame = list(group.values())
        now = time.thread_time_ns
        t0 = now()
        frames = [self.transfer._pack(envelopes, self.packer) for envelopes in per_frame]
        t1 = now()
        for frame in frames:
            self.transfer._deliver(frame, {})
        t2 = now()
        clock["transfer send"] += t1 - t0
        clock["transfer receive"] += t2 - t1
        clock["bytes"] += sum(map(len, frames))


STEPS = ("spout emit", "split", "count", "acker", "spout acks", "transfer send", "transfer receive")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    path = Path()
    tune_gc()   # as WorkerRuntime.start does in a worker
    best: dict[str, float] = {}
    words = args.sentences * 8
    path.round(args.sentences, defaultdict(int))   # warm-up: caches, first batches
    for _ in range(args.rounds):
        clock: dict[str, int] = defaultdict(int)
        path.round(args.sentences, clock)
        for step in (*STEPS, "bytes"):
            best[step] = min(best.get(step, float("inf")), clock[step] / words)
    counted = sum(t.component.total for ex in path.runtime.executors.values()
                  if ex.component_id == "count" for t in ex.tasks.values())
    spout_task = next(iter(path.by_component["spout"][0].tasks.values()))
    acked = path.by_component["spout"][0].stats.totals()["acked"]
    print(f"per counted word, min of {args.rounds} rounds of {args.sentences} sentences "
          f"({counted:,} words counted, {acked:,} sentences acked, {spout_task.pending_count()} pending):")
    for step in STEPS:
        print(f"  {step:18s} {best[step]:7,.0f} ns")
    print(f"  {'total':18s} {sum(best[s] for s in STEPS):7,.0f} ns")
    print(f"  wire bytes per word {best['bytes']:.1f}")
    if args.profile:
        prof = cProfile.Profile(time.thread_time_ns, 1e-9)   # CPU time: the machine may be loaded
        prof.enable()
        path.round(args.sentences, defaultdict(int))
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
