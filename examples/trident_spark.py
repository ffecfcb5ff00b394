"""Exactly-once word counts per batch into Parquet with Trident and SparkState.

    stormpy local examples/trident_spark.py --duration 30            # prints the output dir
    python examples/trident_spark.py check /tmp/stormpy-trident-spark-...   # Spark SQL reads it back: OK

A transactional PartitionedSpout reads the bundled text (examples/data/sentences.txt) as four
partitions; the meta of a batch is its range of steps, and every tuple carries that range as
``batch`` (``"<partition>:<start>-<end>"``), so a replayed txid re-emits the same lines with
the same ``batch``. A Function splits lines into words and raises on a small share of its calls
(``tspark.fail.rate``), which fails and replays the batch. ``group_by(["batch", "word"])
.aggregate(Count())`` counts the words of each batch, and ``partition_persist(SparkState(...))``
writes the counts of each (txid, partition) as one DataFrame into Parquet at
``tspark.output``, exactly once: a replay replaces, never adds.

``check <dir>`` reads the Parquet with Spark SQL and compares it with the input: for every
batch range in the output the counts must equal the words of exactly those lines of the
text, each (batch, word) row must appear once, and each partition's ranges must follow each
other from step 0 without gap or overlap. It prints OK and exits 0, or the differences and 1.

Config (``-c key=value``): ``tspark.output`` (default: a new directory under the temp dir per
run: ``stormpy local`` starts txids at 1 on every run, so a run needs its own directory;
SparkState refuses to write txid 1 over an output that already holds a later txid),
``tspark.lines.per.batch`` (per partition, default 50), ``tspark.fail.rate`` (default 0.002).
"""
from __future__ import annotations

import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from stormpy.trident import Count, Function, PartitionedSpout, SparkState, TridentTopology

DATA = Path(__file__).resolve().parent / "data" / "sentences.txt"
PARTITIONS = 4
_WORD = re.compile(r"[a-z']+")
_DEFAULT_OUTPUT = os.path.join(tempfile.gettempdir(), f"stormpy-trident-spark-{os.getpid()}-{int(time.time())}")


def read_lines(path: Path = DATA) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def line_at(lines: list[str], partition: int, step: int) -> str:
    """Partition p's step s is line (s * PARTITIONS + p) of the text, cycling."""
    return lines[(step * PARTITIONS + partition) % len(lines)]


def words_of(line: str) -> list[str]:
    return _WORD.findall(line.lower())


class Lines(PartitionedSpout):
    outputs = ["sentence", "batch"]

    def __init__(self, per_batch: int, output: str) -> None:
        self.per_batch = per_batch
        self.output = output

    def initialize(self, stormconf, context):
        self.lines = read_lines()
        self.first_task = context.task_index == 0

    def partitions(self):
        return list(range(PARTITIONS))

    def emit_new_batch(self, txid, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        meta = {"start": start, "end": start + self.per_batch}
        self.emit_batch(txid, collector, partition, meta)
        return meta

    def emit_batch(self, txid, collector, partition, meta):
        batch = f"{partition}:{meta['start']}-{meta['end']}"
        for step in range(meta["start"], meta["end"]):
            collector.emit([line_at(self.lines, partition, step), batch])

    def close(self):
        if self.first_task:
            print(where(self.output), flush=True)


def where(output: str) -> str:
    """The output directory and the command that checks it (printed at the start and the end)."""
    try:
        script = os.path.relpath(__file__)
    except ValueError:   # another drive (Windows)
        script = __file__
    return f"trident_spark: word counts per batch in {output}\n  check them: python {script} check {output}"


class Split(Function):
    """Lower-case words of a line; raises on ``fail_rate`` of its calls (the batch is replayed)."""

    def __init__(self, fail_rate: float) -> None:
        self.fail_rate = fail_rate

    def execute(self, tup, collector):
        if random.random() < self.fail_rate:
            raise RuntimeError("injected failure: this batch is replayed, Spark gets it once")
        for word in words_of(tup["sentence"]):
            collector.emit([word])


class TridentSpark(TridentTopology):
    config = {"topology.workers": 2, "topology.max.spout.pending": 3,
              "topology.trident.batch.emit.interval.millis": 50,
              "spark.master": "local[2]", "spark.ui.enabled": False, "spark.sql.shuffle.partitions": 2}

    def build(self, conf):
        output = conf.get("tspark.output") or _DEFAULT_OUTPUT
        print(where(output), flush=True)
        spout = Lines(int(conf.get("tspark.lines.per.batch", 50)), output)
        (self.new_stream("lines", spout, par=2)
             .each(["sentence"], Split(float(conf.get("tspark.fail.rate", 0.002))), ["word"])
             .group_by(["batch", "word"])
             .aggregate(Count(), ["count"])
             .partition_persist(SparkState(path=output, format="parquet"), ["batch", "word", "count"],
                                SparkState.updater())
             .parallelism_hint(2))


def check(output: str) -> int:
    """Read ``output`` with Spark SQL and compare it with the input text; 0 when exact."""
    if not Path(output).is_dir():
        print(f"error: {output} is not a directory", file=sys.stderr)
        return 2
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.read.parquet(output).createOrReplaceTempView("batch_counts")
        rows = spark.sql("SELECT batch, word, count FROM batch_counts").collect()
        dupes = spark.sql("SELECT batch, word, COUNT(*) AS n FROM batch_counts GROUP BY batch, word "
                          "HAVING COUNT(*) > 1").collect()
        total = spark.sql("SELECT SUM(count) AS words, COUNT(DISTINCT batch) AS batches FROM batch_counts").collect()[0]
    finally:
        spark.stop()
    return compare(rows, dupes, total["words"] or 0, total["batches"])


def compare(rows: list, dupes: list, words: int, batches: int) -> int:
    lines = read_lines()
    got: dict[str, Counter] = {}
    for row in rows:
        got.setdefault(row["batch"], Counter())[row["word"]] += row["count"]
    problems = [f"row ({d['batch']}, {d['word']}) appears {d['n']} times" for d in dupes[:10]]
    ranges: dict[int, list[tuple[int, int]]] = {}
    for batch, counts in got.items():
        partition, span = batch.split(":")
        start, end = (int(x) for x in span.split("-"))
        ranges.setdefault(int(partition), []).append((start, end))
        expected = Counter(w for step in range(start, end) for w in words_of(line_at(lines, int(partition), step)))
        if counts != expected:
            diff = {w: (counts.get(w, 0), n) for w, n in (expected | counts).items() if counts.get(w, 0) != n}
            problems.append(f"batch {batch}: (got, expected) differ for {len(diff)} words, e.g. {dict(list(diff.items())[:5])}")
    for partition, spans in sorted(ranges.items()):
        spans.sort()
        position = 0
        for start, end in spans:
            if start != position:
                problems.append(f"partition {partition}: batch {start}-{end} follows step {position} "
                                f"({'a gap' if start > position else 'an overlap'})")
            position = end
    if not got:
        problems.append("the output holds no rows")
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems[:20]))
        return 1
    steps = sum(end - start for spans in ranges.values() for start, end in spans)
    print(f"OK: {batches} batches, {steps} lines, {words} words: every count exact, every row once "
          f"({len(rows)} rows, partitions {sorted(ranges)})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    print(f"usage: python {sys.argv[0]} check <output-dir>   (run the topology with stormpy local)", file=sys.stderr)
    sys.exit(2)
