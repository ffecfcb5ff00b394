"""Benchmark: word count under ``stormpy local`` against a raw SimpleQueue thread pipeline.

    python benchmarks/local_wordcount.py [--secs 10] [--warmup 2] [--par 1] [--per-call 1] [--only-topology]
    python benchmarks/local_wordcount.py --par 2 --sentences 12000    # a fixed amount of work
    python benchmarks/local_wordcount.py --par 2 --pairs 5 --secs 4     # par 2 against par 1
    python benchmarks/local_wordcount.py --par 2 --pairs 15 --sentences 300000   # the same, fixed work

Topology: sentence spout -> split (shuffle) -> count (fields grouping on word), run once
with acking (one acker) and once without (``topology.acker.executors: 0``). Printed: spout
sentences/s, counted words/s, p50/p99 complete latency (spout emit -> ack, from the spout's
own clock), and, measured in the same run, a raw pipeline of three threads handing the same
tuples over ``queue.SimpleQueue`` one tuple at a time doing the same split and count, the
bare three-thread handoff of the same tuples (sentence tuples to a split thread that puts each
sentence's word tuples, pre-split, to a count thread: only the handoffs, issue 24's reference
figure), and the bare two-thread handoff (put/get only, DESIGN section 8's "SimpleQueue per
tuple" figure), with the ratios; and the benchmark's own spout, split and count code run alone
on one thread with no engine (``run_user_code``), which gives the engine's cost per word beside
the user code's: ``1/topology - 1/user code``. Words per CPU-second (``time.process_time`` of the whole process
over the measured seconds) are printed for the topology and the raw pipeline: on a shared,
loaded machine they compare runs that wall-clock rates cannot.

``--pairs N`` compares parallelism 1 with ``--par``: N acked runs of each, alternating, the pairs
taking turns at which parallelism runs first (par 1 then ``--par``, ``--par`` then par 1, ...),
each run printed, then both medians and their ratio, and the pairs' own ratios: their median,
how many pairs ``--par`` won and a 90% bootstrap interval of that median. Two runs of one
topology a minute apart differ by up to 5-15% on a shared 2-core machine, more than par 2 and
par 1 differ by; alternating runs see the same drift, the median of each side drops the
outliers, and the interval says how far a repeat of the whole set could land.

``--pairs N --sentences M`` compares the same way with a fixed amount of work: each run is a new
process (``--sentences M``), and its figure is counted words per CPU-second from the first ack
to the last. A timed window of a few seconds on a
busy machine catches whatever else the machine did then; a fixed amount of work in CPU-seconds
does not depend on how long it took.

``--sentences N`` runs the acked topology alone until N sentences are acked, and prints the
process's CPU time (and its words per CPU-second from the first ack on): a fixed amount of work, for instruction counts. Instructions per word are
the difference of two runs under ``valgrind --tool=callgrind`` (say N = 12,000 and 2,000,
which takes out start-up and shutdown) divided by the difference of their counted words.
"""
from __future__ import annotations

import argparse
import itertools
import logging
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from queue import SimpleQueue
from typing import Any

from stormpy import Bolt, Grouping, Spout, Topology
from stormpy.local.runner import LocalTopology
from stormpy.task import tuple_path_build

log = logging.getLogger(__name__)

DATA = Path(__file__).resolve().parent.parent / "examples" / "data" / "sentences.txt"
SENTENCES = [line.strip().lower().rstrip(".") for line in DATA.read_text().splitlines() if line.strip()]
#: words in SENTENCES[:i]: the words N sentences bring, without splitting N sentences (a
#: ``--sentences`` run's instruction count per word would include that splitting)
WORDS_UPTO = list(itertools.accumulate((len(s.split()) for s in SENTENCES), initial=0))
LATENCY_SAMPLE = 16


class BenchSpout(Spout):
    outputs = ["sentence"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.sentences = itertools.cycle(SENTENCES)
        self.ids = itertools.count()
        self.started: dict[int, float] = {}
        self.latencies_ms: list[float] = []
        self.reliable = bool(stormconf.get("bench.reliable", True))
        self.per_call = int(stormconf.get("bench.per_call") or 1)
        LATENCIES.append(self.latencies_ms)

    def next_tuple(self) -> None:
        for _ in range(self.per_call):
            tup_id = next(self.ids)
            if tup_id % LATENCY_SAMPLE == 0:
                self.started[tup_id] = time.perf_counter()
            self.emit([next(self.sentences)], tup_id=tup_id if self.reliable else None)

    def ack(self, tup_id: Any) -> None:
        t0 = self.started.pop(tup_id, None)
        if t0 is not None:
            self.latencies_ms.append((time.perf_counter() - t0) * 1000.0)

    def fail(self, tup_id: Any) -> None:
        self.started.pop(tup_id, None)


class BoundedSpout(BenchSpout):
    """``BenchSpout`` that stops emitting after ``bench.sentences`` sentences (``--sentences``)."""

    def initialize(self, stormconf: Any, context: Any) -> None:
        super().initialize(stormconf, context)
        self.limit = int(stormconf["bench.sentences"])

    def next_tuple(self) -> None:
        tup_id = next(self.ids)
        if tup_id < self.limit:
            self.emit([next(self.sentences)], tup_id=tup_id)


class SplitBolt(Bolt):
    outputs = ["word"]

    def process(self, tup: Any) -> None:
        emit = self.emit
        for word in tup.values[0].split():
            emit([word])


class CountBolt(Bolt):
    outputs: list[str] = []

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.counts: Counter[str] = Counter()

    def process(self, tup: Any) -> None:
        self.counts[tup.values[0]] += 1


def bench_topology(par: int, spout: type[Spout] = BenchSpout) -> type[Topology]:
    """The word count with ``par`` executors for split and for count (one spout executor)."""

    class BenchTopology(Topology):
        sentences = spout.spec(par=1)
        split = SplitBolt.spec(inputs={sentences: Grouping.SHUFFLE}, par=par)
        count = CountBolt.spec(inputs={split: Grouping.fields("word")}, par=par)

    return BenchTopology


LATENCIES: list[list[float]] = []


def _count_executed(local: LocalTopology, component: str) -> int:
    total = 0
    for executor in local.runtime.executors.values():
        if executor.component_id == component:
            total += sum(dict(executor.stats.executed).values())
    return total


def _spout_acked(local: LocalTopology) -> int:
    return sum(sum(dict(e.stats.acked).values()) + 0 for e in local.runtime.executors.values()
               if e.kind == "spout")


def _spout_emitted(local: LocalTopology) -> int:
    return sum(sum(dict(e.stats.emitted).values()) for e in local.runtime.executors.values() if e.kind == "spout")


def run_topology(reliable: bool, secs: float, warmup: float, par: int = 1, per_call: int = 1) -> dict[str, float]:
    LATENCIES.clear()
    overrides = {"topology.acker.executors": 1 if reliable else 0, "bench.reliable": reliable,
                 "bench.per_call": per_call,
                 "topology.max.spout.pending": 2000 if reliable else None, "topology.message.timeout.secs": 60}
    local = LocalTopology(bench_topology(par), "bench", user_overrides=overrides)
    local.start()
    try:
        time.sleep(warmup)
        for lat in LATENCIES:
            lat.clear()
        done = _spout_acked if reliable else _spout_emitted
        words0, sent0, t0, cpu0 = _count_executed(local, "count"), done(local), time.perf_counter(), time.process_time()
        time.sleep(secs)
        words1, sent1, t1, cpu1 = _count_executed(local, "count"), done(local), time.perf_counter(), time.process_time()
    finally:
        local.stop(drain_secs=5)
    elapsed = t1 - t0
    samples = sorted(x for lat in LATENCIES for x in lat)
    result = {"sentences_per_s": (sent1 - sent0) / elapsed, "words_per_s": (words1 - words0) / elapsed,
              "words_per_cpu_s": (words1 - words0) / max(cpu1 - cpu0, 1e-9), "cpus": (cpu1 - cpu0) / elapsed}
    if reliable and samples:
        result["p50_ms"] = statistics.median(samples)
        result["p99_ms"] = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return result


def run_fixed(sentences: int, par: int) -> tuple[int, float, float]:
    """Run the acked word count until ``sentences`` sentences are acked: (words counted, CPU
    seconds of the process from start to the last ack, counted words per CPU-second from the
    first ack to the last: start-up left out, what ``--pairs`` with ``--sentences`` compares)."""
    full, rest = divmod(sentences, len(SENTENCES))
    words = full * WORDS_UPTO[-1] + WORDS_UPTO[rest]   # not split here: its cost would count per word
    overrides = {"topology.acker.executors": 1, "bench.reliable": True, "bench.sentences": sentences,
                 "topology.max.spout.pending": 2000, "topology.message.timeout.secs": 600}
    cpu0 = time.process_time()
    local = LocalTopology(bench_topology(par, BoundedSpout), "bench", user_overrides=overrides)
    local.start()
    first: tuple[float, int] | None = None
    try:
        while (acked := _spout_acked(local)) < sentences or _count_executed(local, "count") < words:
            if first is None and acked:
                first = (time.process_time(), _count_executed(local, "count"))
            time.sleep(0.02)
        cpu = time.process_time() - cpu0
    finally:
        local.stop(drain_secs=5)
    first_cpu, first_words = first or (cpu0, 0)   # every ack within one poll (a tiny run): from the start
    steady = (words - first_words) / max(cpu0 + cpu - first_cpu, 1e-9)
    return words, cpu, steady


FIXED_LINE = re.compile(r"counted in [\d.]+ CPU-seconds \(start to last ack\); ([\d,]+) counted words per CPU-second")


def run_fixed_pairs(pairs: int, par: int, sentences: int) -> tuple[list[float], list[float]]:
    """``--pairs`` with ``--sentences``: each run a fresh process doing the same fixed work (no
    heap or threads left by an earlier run), alternating as ``run_pairs``; counted words per
    CPU-second from the first ack to the last, so a machine that runs slower for a while
    slows both sides of a pair, and a timed window's luck is out of it."""
    ones: list[float] = []
    pars: list[float] = []
    for i in range(pairs):
        order = ((1, ones), (par, pars))
        for p, rates in (order if i % 2 == 0 else order[::-1]):
            run = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--par", str(p), "--sentences",
                                  str(sentences)], capture_output=True, text=True, timeout=600)
            found = FIXED_LINE.search(run.stdout)
            if run.returncode != 0 or found is None:
                raise SystemExit(f"local_wordcount.py: a fixed-work run at par {p} failed: {run.stderr[-500:]}")
            if f"tuple path: {tuple_path_build()}\n" not in run.stdout:   # the same build as this process's
                raise SystemExit(f"local_wordcount.py: a run imported another stormpy build: {run.stdout[:200]}")
            rates.append(float(found.group(1).replace(",", "")))
            print(f"  run {i + 1}/{pairs}, par {p}: {rates[-1]:,.0f} counted words per CPU-second "
                  f"({sentences:,} sentences, first ack to last)", flush=True)
    return ones, pars


def _timed(targets: list[Any], counter: list[int], stop: threading.Event, secs: float,
           warmup: float) -> tuple[float, float]:
    """Run ``targets`` as threads; after ``warmup`` seconds, what ``counter[0]`` counts over
    ``secs``: per second and per CPU-second of the process."""
    threads = [threading.Thread(target=f, daemon=True) for f in targets]
    for t in threads:
        t.start()
    time.sleep(warmup)
    c0, t0, cpu0 = counter[0], time.perf_counter(), time.process_time()
    time.sleep(secs)
    c1, t1, cpu1 = counter[0], time.perf_counter(), time.process_time()
    stop.set()
    for t in threads:
        t.join(timeout=30)
    return (c1 - c0) / (t1 - t0), (c1 - c0) / max(cpu1 - cpu0, 1e-9)


def _feed(q: SimpleQueue[Any], items: list[Any], stop: threading.Event, limit: int) -> None:
    """Put ``items`` round and round (pausing above ``limit`` queued), then the end marker."""
    put = q.put
    while not stop.is_set():
        for item in items:
            put(item)
        while q.qsize() > limit and not stop.is_set():
            time.sleep(0.0005)
    put(None)


def _drain(q: SimpleQueue[Any], counter: list[int]) -> None:
    """Get until the end marker, counting (published every 4,096 items)."""
    get = q.get
    n = 0
    while get() is not None:
        n += 1
        if not n & 4095:
            counter[0] = n


def run_raw(secs: float) -> tuple[float, float]:
    """Three threads, one SimpleQueue handoff per tuple: sentences -> split -> count.
    Words per second and words per CPU-second (the figure a loaded machine does not skew)."""
    q_sent: SimpleQueue[Any] = SimpleQueue()
    q_word: SimpleQueue[Any] = SimpleQueue()
    stop = threading.Event()
    counted = [0]

    def source() -> None:   # a new values list per sentence, as a spout's emit has
        sentences = itertools.cycle(SENTENCES)
        put = q_sent.put
        while not stop.is_set():
            for _ in range(1000):
                put([next(sentences)])
            while q_sent.qsize() > 20000 and not stop.is_set():
                time.sleep(0.0005)
        put(None)

    def split() -> None:
        get, put = q_sent.get, q_word.put
        while (item := get()) is not None:
            for word in item[0].split():
                put([word])
        put(None)

    def count() -> None:
        counts: Counter[str] = Counter()
        get = q_word.get
        n = 0
        while (item := get()) is not None:
            counts[item[0]] += 1
            n += 1
            if not n & 4095:
                counted[0] = n

    return _timed([source, split, count], counted, stop, secs, 0.5)


def run_handoff(secs: float) -> float:
    """Two threads, nothing but a SimpleQueue put/get per word tuple (DESIGN section 8's figure)."""
    words = [[w] for sentence in SENTENCES for w in sentence.split()]
    q: SimpleQueue[Any] = SimpleQueue()
    stop = threading.Event()
    got = [0]
    return _timed([lambda: _feed(q, words, stop, 50000), lambda: _drain(q, got)], got, stop, secs, 0.3)[0]


class _BareTuple:
    """What ``process`` reads of a tuple here (``values``), and nothing the engine keeps."""
    __slots__ = ("values",)


def run_user_code(secs: float) -> tuple[float, BenchSpout, CountBolt]:
    """The benchmark's own spout, split and count code on one thread with no engine: the
    spout's ``next_tuple`` and ``ack``, split's and count's ``process``, a bare tuple object per
    sentence and per word, each ``emit`` a list append. Words per second: what the user's code
    costs alone; ``1/topology - 1/this`` is what the engine (routing, tuple objects, acking,
    scheduling, stats) costs per word on top of it. Returns the rate, the spout and the count
    bolt (what they did, for the tests)."""
    spout, split, count = BenchSpout(), SplitBolt(), CountBolt()
    spout.initialize({}, None)
    LATENCIES.clear()
    count.initialize({}, None)
    emitted: list[tuple[list[Any], Any]] = []
    words: list[Any] = []
    spout.emit = lambda values, tup_id=None: emitted.append((values, tup_id))   # type: ignore[method-assign]
    split.emit = words.append   # type: ignore[method-assign]
    next_tuple, ack, split_process, count_process = spout.next_tuple, spout.ack, split.process, count.process
    n, t0 = 0, time.perf_counter()
    deadline = t0 + secs
    while True:
        for _ in range(64):
            next_tuple()
        for values, _tup_id in emitted:
            tup = _BareTuple()
            tup.values = values
            split_process(tup)
        for values in words:
            tup = _BareTuple()
            tup.values = values
            count_process(tup)
        for _values, tup_id in emitted:
            ack(tup_id)
        n += len(words)
        words.clear()
        emitted.clear()
        if (now := time.perf_counter()) >= deadline:
            return n / (now - t0), spout, count


def run_handoff3(secs: float) -> float:
    """Three threads handing the word count's own tuples over SimpleQueue and doing nothing
    else: sentence tuples to a split thread, which puts each sentence's word tuples (split
    beforehand) to a count thread. Words per second: what the threads and queues alone allow."""
    items = [([s], [[w] for w in s.split()]) for s in SENTENCES]
    q_sent: SimpleQueue[Any] = SimpleQueue()
    q_word: SimpleQueue[Any] = SimpleQueue()
    stop = threading.Event()
    got = [0]

    def split() -> None:
        get, put = q_sent.get, q_word.put
        while (item := get()) is not None:
            for word in item[1]:
                put(word)
        put(None)

    return _timed([lambda: _feed(q_sent, items, stop, 20000), split, lambda: _drain(q_word, got)],
                  got, stop, secs, 0.3)[0]


def run_pairs(pairs: int, par: int, secs: float, warmup: float, per_call: int = 1) -> tuple[list[float], list[float]]:
    """``pairs`` acked runs at parallelism 1 and at ``par``, alternating, every other pair in the
    other order (a drift within a pair, or a slow first run, falls on both sides alike); counted
    words/s of each, printed as they finish."""
    ones: list[float] = []
    pars: list[float] = []
    for i in range(pairs):
        order = ((1, ones), (par, pars))
        for p, rates in (order if i % 2 == 0 else order[::-1]):
            r = run_topology(True, secs, warmup, p, per_call)
            rates.append(r["words_per_s"])
            print(f"  run {i + 1}/{pairs}, par {p}: {r['words_per_s']:,.0f} counted words/s "
                  f"({r['words_per_cpu_s']:,.0f} per CPU-second)", flush=True)
    return ones, pars


def pair_by_pair(ones: list[float], pars: list[float], par: int, resamples: int = 2000) -> str:
    """The pairs' own ratios: their median, how many pairs ``par`` won, and a 90% bootstrap
    interval of that median. Why: on a shared machine whole runs move by more than par 2 and
    par 1 differ by, and a drift slows both runs of a pair alike, so the ratio within each pair
    is the steadier figure; the interval says how far a repeat of the whole set could land
    (seeded, so the same runs print the same interval)."""
    paired = sorted(b / a for a, b in zip(ones, pars) if a)
    if not paired:
        return "pair by pair: no pair"
    draw = random.Random(0)
    medians = sorted(statistics.median(draw.choices(paired, k=len(paired))) for _ in range(resamples))
    low, high = medians[int(resamples * 0.05)], medians[int(resamples * 0.95) - 1]
    ahead = sum(r > 1.0 for r in paired)
    return (f"pair by pair: median {statistics.median(paired):.3f}x ({paired[0]:.3f}x to {paired[-1]:.3f}x), "
            f"par {par} ahead in {ahead} of {len(paired)}; 90% interval of that median {low:.3f}x to {high:.3f}x "
            f"(bootstrap, {resamples:,} resamples)")


def print_pairs(args: argparse.Namespace) -> int:
    """``--pairs``: par 1 against ``--par``, timed runs in this process, or fixed-work runs
    (``--sentences``) each in a process of its own; the medians and their ratio."""
    if args.sentences:
        print(f"stormpy local, acking on, par 1 against par {args.par} (split and count): {args.pairs} fixed-work "
              f"runs of each ({args.sentences:,} sentences), alternating, each in a new process:", flush=True)
        ones, pars = run_fixed_pairs(args.pairs, args.par, args.sentences)
        unit = "counted words per CPU-second"
    else:
        print(f"stormpy local, acking on, par 1 against par {args.par} (split and count), {args.per_call}/call: "
              f"{args.pairs} runs of each, alternating, {args.secs:g} s each:", flush=True)
        ones, pars = run_pairs(args.pairs, args.par, args.secs, args.warmup, args.per_call)
        unit = "counted words/s"
    one, many = statistics.median(ones), statistics.median(pars)
    if not one:
        print("par 1 counted no words: no ratio", file=sys.stderr)
        return 1
    line = (f"medians: par {args.par} {many:,.0f} {unit}, par 1 {one:,.0f}: par {args.par} / par 1 = "
            f"{many / one:.3f}x (runs: {min(pars) / one:.3f}x to {max(pars) / one:.3f}x of par 1's median)")
    print(f"{line}; {pair_by_pair(ones, pars, args.par)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secs", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before measuring")
    parser.add_argument("--par", type=int, default=1, help="executors of split and of count")
    parser.add_argument("--per-call", type=int, default=1,
                        help="sentences per next_tuple() call (1: as users write spouts; cluster bench: 50)")
    parser.add_argument("--only-topology", action="store_true",
                        help="skip the raw pipelines (when comparing runs back to back)")
    parser.add_argument("--sentences", type=int, default=0,
                        help="run the acked topology until this many sentences are acked, print its CPU time")
    parser.add_argument("--pairs", type=int, default=0,
                        help="compare par 1 with --par: this many acked runs of each, alternating; print the medians")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.sentences < 0:
        parser.error("--sentences must be 0 or more")
    if args.pairs < 0:
        parser.error("--pairs must be 0 or more")
    if args.pairs and args.par < 2:
        parser.error("--pairs compares par 1 with --par: give --par 2 or more")
    if args.pairs and args.only_topology:
        parser.error("--pairs runs only the topology: it takes no --only-topology")
    print(f"tuple path: {tuple_path_build()}", flush=True)
    if args.pairs:
        return print_pairs(args)
    if args.sentences:
        words, cpu, steady = run_fixed(args.sentences, args.par)
        print(f"stormpy local (split/count par {args.par}, acking on): {args.sentences:,} sentences, "
              f"{words:,} words counted in {cpu:.2f} CPU-seconds (start to last ack); "
              f"{steady:,.0f} counted words per CPU-second from the first ack to the last")
        return 0
    handoff = handoff3 = raw = raw_cpu = user = 0.0
    if not args.only_topology:
        handoff = run_handoff(args.secs / 2)
        print(f"raw SimpleQueue handoff only (2 threads, no work): {handoff:,.0f} tuples/s")
        handoff3 = run_handoff3(args.secs / 2)
        print(f"raw SimpleQueue handoff of the same tuples (3 threads: sentences -> split -> count, "
              f"no work): {handoff3:,.0f} words/s")
        raw, raw_cpu = run_raw(args.secs)
        print(f"raw SimpleQueue pipeline (spout -> split -> count threads, per-tuple handoff): {raw:,.0f} words/s; "
              f"{raw_cpu:,.0f} words per CPU-second")
        user = run_user_code(args.secs / 2)[0]
        print(f"user code alone (this benchmark's spout, split and count code on one thread, a bare tuple "
              f"object per tuple, no engine): {user:,.0f} words/s")
    for reliable in (True, False):
        r = run_topology(reliable, args.secs, args.warmup, args.par, args.per_call)
        label = "acking on " if reliable else "acking off"
        line = (f"stormpy local (split/count par {args.par}, {args.per_call}/call), {label}: {r['sentences_per_s']:,.0f} sentences/s, "
                f"{r['words_per_s']:,.0f} counted words/s")
        if raw:
            line += (f" ({r['words_per_s'] / raw:.0%} of the raw pipeline, "
                     f"{r['words_per_s'] / handoff3:.1%} of the three-thread handoff, "
                     f"{r['words_per_s'] / handoff:.1%} of the bare two-thread handoff)")
        if user and r["words_per_s"]:
            engine_ns, user_ns = 1e9 / r["words_per_s"] - 1e9 / user, 1e9 / user
            line += f"; the engine's cost per word {engine_ns:,.0f} ns beside the user code's {user_ns:,.0f} ns"
        if "p50_ms" in r:
            line += f", complete latency p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
        line += f"; {r['words_per_cpu_s']:,.0f} words per CPU-second ({r['cpus']:.2f} CPUs busy)"
        if raw_cpu:
            line += f", {r['words_per_cpu_s'] / raw_cpu:.0%} of the raw pipeline's"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
