import json
from collections import Counter

from streamparse import Bolt


class PixelCounterBolt(Bolt):
    outputs = []

    def initialize(self, conf, ctx):
        self.counts = Counter()
        self.out = conf.get("pixelcount.out")   # where close() writes the counts (the example's test)

    def process_tick(self, tup):
        self.log("counts: %r" % self.counts.most_common(5))

    def process(self, tup):
        url = tup.values[1]
        self.counts[url] += 1

    def close(self):
        if self.out:
            with open(f"{self.out}.{self.task_id}", "w") as f:
                json.dump(self.counts, f)
