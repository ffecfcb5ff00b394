"""Word count into Parquet through the Spark sink: counts per word and time window.

    stormpy local examples/spark_wordcount.py --duration 20 -c wordcount.output=/tmp/wc
    python examples/spark_wordcount.py check /tmp/wc          # Spark SQL reads it back

A reliable spout emits the bundled text (examples/data/sentences.txt) ``wordcount.passes``
times (default 5) and then stops emitting; failed sentences are replayed. A bolt splits
sentences into ``(word, ts)`` tuples. The sink, a ``SparkSinkBolt``, receives the words in
batches (``spark.sink.batch.secs``, 5 s here) and its ``handle_batch`` counts them per
``wordcount.window.secs`` tumbling window in Spark, appending ``window_start, window_end,
word, count, batch_id`` rows to Parquet at ``wordcount.output``. A window that spans two
batches has a row in each, so readers sum: the total per word equals its count in the text
times the number of passes.

The word tuples are acked only once their batch's counts are in Parquet; if Spark fails, the
sentences are replayed and counted in a later batch.
"""
from __future__ import annotations

import itertools
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from stormpy import Bolt, Grouping, Spout, Topology
from stormpy.spark import SparkSinkBolt

DATA = Path(__file__).resolve().parent / "data" / "sentences.txt"
DEFAULT_OUTPUT = "/tmp/stormpy-spark-wordcount"
_WORD = re.compile(r"[a-z']+")


def read_sentences(path: Path = DATA) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def expected_counts(passes: int, path: Path = DATA) -> Counter[str]:
    """What the Parquet output must sum to per word after ``passes`` passes over the text."""
    counts: Counter[str] = Counter()
    for sentence in read_sentences(path):
        counts.update(_WORD.findall(sentence.lower()))
    return Counter({word: n * passes for word, n in counts.items()})


class SentenceSpout(Spout):
    """Emits the text ``wordcount.passes`` times, tracking each sentence until it is acked."""

    outputs = ["sentence"]

    def initialize(self, stormconf: dict[str, Any], context: Any) -> None:
        lines = read_sentences(Path(stormconf.get("wordcount.text") or DATA))
        passes = int(stormconf.get("wordcount.passes", 5))
        self.todo = iter(itertools.chain.from_iterable(itertools.repeat(lines, passes)))
        self.total = len(lines) * passes
        self.ids = itertools.count()
        self.pending: dict[int, str] = {}
        self.replays: list[int] = []
        self.acked = 0

    def next_tuple(self) -> None:
        if self.replays:
            tup_id = self.replays.pop()
        else:
            sentence = next(self.todo, None)
            if sentence is None:
                return
            tup_id = next(self.ids)
            self.pending[tup_id] = sentence
        self.emit([self.pending[tup_id]], tup_id=tup_id)

    def ack(self, tup_id: int) -> None:
        if self.pending.pop(tup_id, None) is not None:
            self.acked += 1
            if self.acked == self.total:
                self.logger.info("all %d sentences are counted in Parquet", self.total)

    def fail(self, tup_id: int) -> None:
        if tup_id in self.pending:
            self.replays.append(tup_id)


class SplitBolt(Bolt):
    """Sentence -> one ``(word, ts)`` tuple per word, anchored to the sentence."""

    outputs = ["word", "ts"]

    def process(self, tup: Any) -> None:
        now = time.time()
        for word in _WORD.findall(tup.values.sentence.lower()):
            self.emit([word, now])


class WindowCountSink(SparkSinkBolt):
    """Counts each batch's words per tumbling window in Spark and appends them to Parquet."""

    schema = "word STRING, ts DOUBLE"
    format = "parquet"

    def initialize(self, stormconf: dict[str, Any], context: Any) -> None:
        self.path = stormconf.get("wordcount.output") or DEFAULT_OUTPUT
        self.window_secs = int(stormconf.get("wordcount.window.secs", 10))
        super().initialize(stormconf, context)

    def handle_batch(self, spark: Any, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        counts = (df.groupBy(F.window(F.timestamp_seconds("ts"), f"{self.window_secs} seconds").alias("w"), "word")
                  .count()
                  .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                          "word", "count", F.lit(batch_id).alias("batch_id")))
        self.write(spark, counts, batch_id)  # the built-in writer: parquet, append, at self.path

    def close(self) -> None:
        rows = int(self.metrics.get("rows", 0))
        self.logger.info("wrote %d words in %d batches to %s; read them with: python %s check %s", rows,
                         int(self.metrics.get("batches", 0)), self.sink.path, __file__, self.sink.path)
        super().close()


class SparkWordCount(Topology):
    config = {
        "topology.max.spout.pending": 2000,
        "spark.sink.batch.secs": 5,
        "spark.sql.shuffle.partitions": 2,
    }
    sentences = SentenceSpout.spec(par=1)
    split = SplitBolt.spec(inputs={sentences: Grouping.SHUFFLE}, par=2)
    sink = WindowCountSink.spec(inputs={split: Grouping.fields("word")}, par=2)


def check(path: str, passes: int = 5) -> int:
    """Read the output with Spark SQL and compare the totals per word with the text's counts."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    try:
        spark.read.parquet(path).createOrReplaceTempView("word_windows")
        totals = spark.sql("SELECT word, SUM(count) AS total FROM word_windows GROUP BY word")
        got = {row["word"]: row["total"] for row in totals.collect()}
        spark.sql("SELECT window_start, word, SUM(count) AS n FROM word_windows "
                  "GROUP BY window_start, word ORDER BY n DESC LIMIT 5").show(truncate=False)
    finally:
        spark.stop()
    expected = expected_counts(passes)
    wrong = {w: (got.get(w, 0), n) for w, n in expected.items() if got.get(w, 0) != n}
    extra = set(got) - set(expected)
    if wrong or extra:
        print(f"MISMATCH: {len(wrong)} words differ (got, expected), e.g. {dict(list(wrong.items())[:5])}; "
              f"unexpected words: {sorted(extra)[:5]}")
        return 1
    print(f"OK: {len(expected)} words, {sum(expected.values())} in total, as expected for {passes} passes")
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5))
    print(__doc__)
    sys.exit(2)
