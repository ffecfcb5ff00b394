"""Bytewax reference for the word-count benchmarks (issue 24): the same workload, another engine.

    python benchmarks/bytewax_wordcount.py [--sentences 250000] [--batch 100]

Bytewax (Rust core, no per-record acking) is what a Python user comparing engines would try
next, so the per-tuple figures of ``cluster_wordcount.py`` and ``local_wordcount.py`` are read
beside it. It is never a dependency of stormpy: on first use this script makes its own
virtualenv (``$STORMPY_BENCH_VENV`` or ``~/.cache/stormpy-bench/bytewax-0.21.1``), installs
``bytewax==0.21.1`` there and runs itself inside it.

The workload is the one of ``bench_topology.py``: sentences of 8 words drawn from the same 17
words, split into words, counted per word (``count_final`` keyed on the word, so the count is
a keyed stateful step as the stormpy count bolt is behind its fields grouping). Three
configurations: one process with one worker, one process with two workers, two processes with
one worker each (Bytewax's cluster mode over TCP). Each prints counted words/s over the wall
time of the dataflow and words per CPU-second of its processes; the total is checked.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

BYTEWAX = "bytewax==0.21.1"
WORDS = ("storm stream tuple bolt spout nimbus worker acker zookeeper supervisor executor task "
         "python zeromq thrift batch latency").split()
SENTENCE_WORDS = 8


# ---------------------------------------------------------------- outside the virtualenv

def venv_python() -> Path:
    """The virtualenv's interpreter, made and filled with Bytewax on first use."""
    root = Path(os.environ.get("STORMPY_BENCH_VENV") or Path.home() / ".cache" / "stormpy-bench" / "bytewax-0.21.1")
    python = root / "bin" / "python"
    if not python.exists():
        print(f"making {root} with {BYTEWAX} (once) ...", flush=True)
        venv.create(root, with_pip=True)
    probe = subprocess.run([str(python), "-c", "import bytewax"], capture_output=True)
    if probe.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", BYTEWAX], check=True)
    return python


def free_ports(n: int) -> list[int]:
    import socket
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def run_config(python: Path, out: Path, label: str, procs: int, workers: int, sentences: int,
               batch: int) -> dict[str, float]:
    """One configuration: ``procs`` processes of ``workers`` workers; figures from their reports."""
    addresses = [f"127.0.0.1:{p}" for p in free_ports(procs)] if procs > 1 else []
    reports = [out / f"{label}-{i}.json" for i in range(procs)]
    children = []
    for i in range(procs):
        cmd = [str(python), __file__, "--inner", "--sentences", str(sentences), "--inner-batch", str(batch),
               "--workers", str(workers), "--proc-id", str(i), "--report", str(reports[i])]
        if addresses:
            cmd += ["--addresses", ",".join(addresses)]
        children.append(subprocess.Popen(cmd))
    for child in children:
        if child.wait(timeout=1800) != 0:
            raise SystemExit(f"bytewax_wordcount: {label} process exited with {child.returncode}")
    rows = [json.loads(r.read_text()) for r in reports]
    counted = sum(r["counted"] for r in rows)
    expected = sentences * SENTENCE_WORDS
    if counted != expected:
        raise SystemExit(f"bytewax_wordcount: {label} counted {counted} words, expected {expected}")
    wall = max(r["end"] for r in rows) - min(r["start"] for r in rows)
    cpu = sum(r["cpu"] for r in rows)
    return {"words_per_sec": counted / wall, "words_per_cpu_sec": counted / cpu, "wall": wall}


def measure(sentences: int, batch: int) -> dict[str, dict[str, float]]:
    """All three configurations; also imported by the stormpy benchmarks to print beside theirs."""
    python = venv_python()
    with tempfile.TemporaryDirectory(prefix="stormpy-bytewax-") as tmp:
        out = Path(tmp)
        return {
            "1 process, 1 worker": run_config(python, out, "p1w1", 1, 1, sentences, batch),
            "1 process, 2 workers": run_config(python, out, "p1w2", 1, 2, sentences, batch),
            "2 processes, 1 worker each": run_config(python, out, "p2w1", 2, 1, sentences, batch),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=250_000, help="sentences in all (8 words each)")
    parser.add_argument("--batch", default="1,100",
                        help="sentences per source batch, comma-separated for several runs (1 is how a "
                             "stormpy spout emits: one sentence per next_tuple(); 100 is Bytewax's own batching)")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--inner-batch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--proc-id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--addresses", default="", help=argparse.SUPPRESS)
    parser.add_argument("--report", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        return inner(args)
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        parser.error(f"--batch: comma-separated integers, got {args.batch!r}")
    for batch in batches:
        results = measure(args.sentences, batch)
        print(f"Bytewax 0.21.1 word count, {args.sentences:,} sentences of {SENTENCE_WORDS} words, "
              f"{batch} per source batch:")
        for label, r in results.items():
            print(f"  {label:28s} {r['words_per_sec']:>10,.0f} words/s   "
                  f"{r['words_per_cpu_sec']:>10,.0f} words/CPU-s   ({r['wall']:.1f} s)")
        best = max(results.items(), key=lambda kv: kv[1]["words_per_sec"])
        print(f"  best: {best[0]}, {best[1]['words_per_sec']:,.0f} words/s", flush=True)
    return 0


# ---------------------------------------------------------------- inside the virtualenv

def inner(args: argparse.Namespace) -> int:
    """Build and run the dataflow in this process (Bytewax imported only here)."""
    import random
    import resource

    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import DynamicSource, StatelessSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.testing import cluster_main

    total_workers = args.workers * max(1, len(args.addresses.split(",")) if args.addresses else 1)
    per_worker = args.sentences // total_workers
    extra = args.sentences - per_worker * total_workers
    counted = [0]

    class Sentences(StatelessSourcePartition):
        def __init__(self, index: int) -> None:
            rnd = random.Random(index)
            self.sentences = [" ".join(rnd.choice(WORDS) for _ in range(SENTENCE_WORDS)) for _ in range(1000)]
            self.left = per_worker + (extra if index == 0 else 0)
            self.i = 0

        def next_batch(self) -> list[str]:
            if self.left <= 0:
                raise StopIteration
            n = min(args.inner_batch, self.left)
            self.left -= n
            i, self.i = self.i, self.i + n
            return [self.sentences[(i + k) % 1000] for k in range(n)]

    class Source(DynamicSource):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> Sentences:
            return Sentences(worker_index)

    class Totals(StatelessSinkPartition):
        def write_batch(self, items: list) -> None:
            counted[0] += sum(count for _word, count in items)

    class Sink(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> Totals:
            return Totals()

    flow = Dataflow("wordcount")
    sentences = op.input("sentences", flow, Source())
    words = op.flat_map("split", sentences, str.split)
    counts = op.count_final("count", words, lambda word: word)
    op.output("out", counts, Sink())

    addresses = args.addresses.split(",") if args.addresses else None
    start = time.time()
    cluster_main(flow, addresses or [], args.proc_id, worker_count_per_proc=args.workers)
    end = time.time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    Path(args.report).write_text(json.dumps({"start": start, "end": end, "counted": counted[0],
                                             "cpu": usage.ru_utime + usage.ru_stime}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
