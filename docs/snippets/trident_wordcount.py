"""The Trident tutorial: an exactly-once word count into SQLite, and every line into Parquet.

    stormpy local docs/snippets/trident_wordcount.py --duration 8 -c wc.db=wc.db
    python3 docs/snippets/trident_wordcount.py check wc.db

Two partitions of a fixed text are emitted in batches of ``wc.per.batch`` lines; a batch's meta
is its range of line numbers, so a replayed txid re-emits exactly the same lines. ``Split``
raises on ``wc.fail.rate`` of its calls: the batch fails and is replayed, and nothing is counted
twice. With ``-c wc.lines=DIR`` every line is also written to Parquet through SparkState, once.
"""
import random
import sys
from collections import Counter

from stormpy.trident import Count, Function, PartitionedSpout, SparkState, SqliteMapState, TridentTopology

WORDS = "the cow jumped over the moon an apple a day keeps the doctor away".split()
PARTITIONS, LINES_PER_PARTITION = 2, 200


def line(partition, number):
    """Line ``number`` of a partition: a few words picked deterministically."""
    return " ".join(WORDS[(partition * 7 + number * k) % len(WORDS)] for k in (1, 3, 5))


class Lines(PartitionedSpout):
    outputs = ["partition", "number", "sentence"]

    def __init__(self, per_batch):
        self.per_batch = per_batch

    def partitions(self):
        return list(range(PARTITIONS))

    def emit_new_batch(self, txid, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        meta = {"start": start, "end": min(start + self.per_batch, LINES_PER_PARTITION)}
        self.emit_batch(txid, collector, partition, meta)
        return meta                                   # stored before the batch leaves

    def emit_batch(self, txid, collector, partition, meta):   # also a replay: the same lines
        for number in range(meta["start"], meta["end"]):
            collector.emit([partition, number, line(partition, number)])


class Split(Function):
    def __init__(self, fail_rate):
        self.fail_rate = fail_rate

    def execute(self, tup, collector):
        if random.random() < self.fail_rate:
            raise RuntimeError("injected failure: the batch is replayed")
        for word in tup["sentence"].split():
            collector.emit([word])


class TridentWordCount(TridentTopology):
    config = {"topology.max.spout.pending": 4, "topology.trident.batch.emit.interval.millis": 50,
              "spark.master": "local[2]", "spark.ui.enabled": False}

    def build(self, conf):
        lines = self.new_stream("lines", Lines(int(conf.get("wc.per.batch", 20))))
        (lines.each(["sentence"], Split(float(conf.get("wc.fail.rate", 0.01))), ["word"])
              .group_by(["word"])
              .persistent_aggregate(SqliteMapState.transactional(conf["wc.db"]), Count(), ["count"]))
        if conf.get("wc.lines"):
            lines.partition_persist(SparkState(path=conf["wc.lines"], format="parquet"),
                                    ["partition", "number", "sentence"], SparkState.updater())


def expected_counts():
    return Counter(w for p in range(PARTITIONS) for n in range(LINES_PER_PARTITION) for w in line(p, n).split())


def check_counts(db):
    """Read the committed counts back, as any program may, and compare them with the text."""
    counts = dict((key[0], value) for key, value in SqliteMapState.transactional(db).open_map().items())
    if counts != dict(expected_counts()):
        print(f"not exact (yet?): {sum(counts.values())} of {sum(expected_counts().values())} words counted")
        return 1
    print(f"OK: {sum(counts.values())} words, every count exact; the: {counts['the']}")
    return 0


def check_lines(path):
    """Read the Parquet with Spark SQL: every line of the text must be there exactly once."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark.read.parquet(path).createOrReplaceTempView("lines")
        rows, distinct = spark.sql("SELECT COUNT(*), COUNT(DISTINCT partition, number) FROM lines").first()
    finally:
        spark.stop()
    if rows != distinct or distinct != PARTITIONS * LINES_PER_PARTITION:
        print(f"not exact (yet?): {rows} rows, {distinct} distinct lines of {PARTITIONS * LINES_PER_PARTITION}")
        return 1
    print(f"OK: {rows} rows, every line exactly once")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check_counts(sys.argv[2]))
    if len(sys.argv) == 3 and sys.argv[1] == "check-lines":
        sys.exit(check_lines(sys.argv[2]))
    sys.exit(f"usage: python {sys.argv[0]} check WC_DB | check-lines PARQUET_DIR")
