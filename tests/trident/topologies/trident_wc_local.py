"""A Trident word count for `stormpy local` (tests/trident/test_trident_cli.py runs it)."""
import itertools

from stormpy.trident import Count, Function, MapGet, PartitionedSpout, TridentTopology
from stormpy.trident.topology import Stream  # noqa: F401  (the file imports like a user's would)

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away"]
LINES = 100


class Lines(PartitionedSpout):
    outputs = ["sentence"]

    def partitions(self):
        return [0, 1]

    def emit_new_batch(self, txid, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        meta = {"start": start, "end": min(start + 10, LINES)}
        self.emit_batch(txid, collector, partition, meta)
        return meta

    def emit_batch(self, txid, collector, partition, meta):
        for i in range(meta["start"], meta["end"]):
            collector.emit([SENTENCES[(i + partition) % 2]])


CALLS = itertools.count()  # shared by the process's Split instances; next() is atomic under the GIL


class Split(Function):
    """Fails its 5th call and every 40th after: a random 2% left all 200 sentences unfailed about once in 57 runs."""

    def execute(self, tup, collector):
        if next(CALLS) % 40 == 5:
            raise RuntimeError("flaky split")
        for w in tup["sentence"].split():
            collector.emit([w])


class Counts:
    """A hand-written transactional map (a State of its own, not a BackingMap) that prints each commit."""

    store = {}

    def make_state(self, conf, context, partition_index, num_partitions):
        return self

    def begin_commit(self, txid):
        self.txid = txid

    def commit(self, txid):
        print(f"committed txid {txid}: the={self.store.get(('the',), [0, 0])[1]}", flush=True)

    def multi_get(self, keys):
        return [self.store[k][1] if k in self.store else None for k in keys]

    def multi_update(self, keys, updaters):
        out = []
        for key, update in zip(keys, updaters):
            stored = self.store.get(key)
            if stored is not None and stored[0] == self.txid:
                out.append(stored[1])
                continue
            value = update(None if stored is None else stored[1])
            self.store[key] = [self.txid, value]
            out.append(value)
        return out


class WordCount(TridentTopology):
    config = {"topology.trident.batch.emit.interval.millis": 20, "topology.message.timeout.secs": 3}

    def build(self, conf):
        (self.new_stream("lines", Lines(), par=2)
             .each(["sentence"], Split(), ["word"])
             .group_by(["word"])
             .persistent_aggregate(Counts(), Count(), ["count"]))
