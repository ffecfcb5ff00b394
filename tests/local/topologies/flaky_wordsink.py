"""A streamparse-style topology written like user code elsewhere (only the imports changed).

A replaying spout emits a fixed set of records, a bolt fails about 5% of its tuples, and a
fields-grouped sink counts records. The spout prints ALL ACKED once every record has been
acked, and a summary from close().
"""
import random
from collections import Counter

from stormpy import Bolt, Grouping, Spout, Topology


class RecordSpout(Spout):
    outputs = ["key", "value"]

    def initialize(self, stormconf, context):
        self.total = int(stormconf.get("flaky.records", 300))
        self.to_send = list(range(self.total))
        self.replay = []
        self.acked = Counter()
        self.failed = 0
        print(f"spout conf flaky.tag={stormconf.get('flaky.tag')!r}", flush=True)

    def next_tuple(self):
        if self.replay:
            msg_id = self.replay.pop(0)
        elif self.to_send:
            msg_id = self.to_send.pop()
        else:
            return
        self.emit([f"key{msg_id % 17}", msg_id], tup_id=msg_id)

    def ack(self, tup_id):
        self.acked[tup_id] += 1
        if len(self.acked) == self.total:
            print("ALL ACKED", flush=True)

    def fail(self, tup_id):
        self.failed += 1
        self.replay.append(tup_id)

    def close(self):
        dupes = sum(1 for n in self.acked.values() if n > 1)
        print(f"spout summary: acked={len(self.acked)} of {self.total} duplicates={dupes} "
              f"failed={self.failed} pending_replays={len(self.replay)}", flush=True)


class FlakyBolt(Bolt):
    outputs = ["key", "value"]

    def initialize(self, conf, ctx):
        self.rand = random.Random(ctx["taskid"])

    def process(self, tup):
        if self.rand.random() < 0.05:
            self.fail(tup)
            return
        self.emit([tup.values.key, tup.values.value])


class SinkBolt(Bolt):
    outputs = []

    def initialize(self, conf, ctx):
        self.counts = Counter()

    def process(self, tup):
        self.counts[tup.values.key] += 1


class FlakyTopology(Topology):
    spout = RecordSpout.spec()
    flaky = FlakyBolt.spec(inputs=[spout], par=2)
    sink = SinkBolt.spec(inputs={flaky: Grouping.fields("key")}, par=2)
