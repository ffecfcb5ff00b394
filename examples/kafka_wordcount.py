"""Exactly-once word count from a Kafka topic: OpaqueKafkaSpout -> split -> Trident count.

    python examples/kafka_wordcount.py fill localhost:9092 sentences      # the bundled text, once
    stormpy local examples/kafka_wordcount.py --duration 20 \\
        -c kafka.bootstrap=localhost:9092 -c wc.topic=sentences -c wc.db=/tmp/kafka-wc.db
    python examples/kafka_wordcount.py check /tmp/kafka-wc.db             # counts == the text's words

Each Kafka partition of ``wc.topic`` is one Trident partition; a batch's meta is the offset
range it read, kept by Trident's coordinator (ZooKeeper on a cluster), so a replayed txid
re-reads from where the previous batch ended and the opaque SqliteMapState counts every
record exactly once, whatever fails. No broker at hand? ``python examples/kafka_wordcount.py
mock`` runs librdkafka's mock cluster (3 brokers in this process) and prints its address.

Config (``-c key=value``): ``kafka.bootstrap``, ``wc.topic``, ``wc.db`` (the SQLite state;
on a cluster a path every worker can reach), ``wc.batch`` (records per partition per batch),
``kafka.conf`` (a JSON object of librdkafka settings: TLS, SASL, ...).
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

from stormpy.trident import Count, Function, OpaqueKafkaSpout, SqliteMapState, TridentTopology

DATA = Path(__file__).resolve().parent / "data" / "sentences.txt"
_WORD = re.compile(r"[a-z']+")
_DEFAULT_DB = os.path.join(tempfile.gettempdir(), "stormpy-kafka-wordcount.db")


class Split(Function):
    def execute(self, tup, collector):
        for word in _WORD.findall(tup["value"].lower()):
            collector.emit([word])


class KafkaWordCount(TridentTopology):
    config = {"topology.max.spout.pending": 4, "topology.trident.batch.emit.interval.millis": 50}

    def build(self, conf):
        spout = OpaqueKafkaSpout(conf.get("kafka.bootstrap", "localhost:9092"), [conf.get("wc.topic", "sentences")],
                                 max_batch_size=int(conf.get("wc.batch", 200)),
                                 kafka_conf=json.loads(conf.get("kafka.conf") or "{}"))
        (self.new_stream("sentences", spout, par=2)
             .each(["value"], Split(), ["word"])
             .group_by(["word"])
             .persistent_aggregate(SqliteMapState.opaque(conf.get("wc.db") or _DEFAULT_DB), Count(), ["count"])
             .parallelism_hint(2))


def expected_counts() -> Counter:
    lines = [line.strip() for line in DATA.read_text().splitlines() if line.strip()]
    return Counter(w for line in lines for w in _WORD.findall(line.lower()))


def main(argv: list[str]) -> int:
    if argv[:1] == ["fill"] and len(argv) == 3:
        from stormpy.testing.kafka import produce
        lines = [line.strip() for line in DATA.read_text().splitlines() if line.strip()]
        produce(argv[1], argv[2], [line.encode() for line in lines])
        print(f"wrote {len(lines)} sentences to {argv[2]}")
        return 0
    if argv[:1] == ["check"] and len(argv) == 2:
        got = Counter({key[0]: value for key, value in SqliteMapState.opaque(argv[1]).open_map().items()})
        want = expected_counts()
        if got != want:
            print(f"MISMATCH: {sum(got.values())} words counted, {sum(want.values())} in the text")
            return 1
        print(f"OK: {sum(got.values())} words, {len(got)} distinct, every count exact")
        return 0
    if argv[:1] == ["mock"]:
        from stormpy.testing.kafka import _hold
        _hold(3)
        return 0
    print(__doc__.split("\n\n")[1])
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
