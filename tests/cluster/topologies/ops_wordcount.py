"""Word count for the operations tests: the count bolt raises on every 1000th tuple it sees.

The spout is unbounded and throttled (a few sentences per call, a short sleep) so it runs for the
whole module on a shared 2-core machine; each bolt logs a line per 500 tuples so worker logs grow.
"""
import itertools
import time

from stormpy import Bolt, Grouping, Spout, Topology

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away",
             "four score and seven years ago", "snow white and the seven dwarfs", "i am at two with nature"]


class Sentences(Spout):
    outputs = ["sentence"]

    def initialize(self, stormconf, context):
        self.ids = itertools.count()
        self.lines = itertools.cycle(SENTENCES)

    def next_tuple(self):
        for _ in range(5):
            self.emit([next(self.lines)], tup_id=next(self.ids))
        time.sleep(0.01)


class Split(Bolt):
    outputs = ["word"]

    def process(self, tup):
        for word in tup.values.sentence.split():
            self.emit([word])


class Count(Bolt):
    outputs = ["word", "count"]

    def initialize(self, stormconf, context):
        self.counts = {}
        self.seen = 0

    def process(self, tup):
        self.seen += 1
        if self.seen % 1000 == 0:
            raise ValueError(f"count-boom at tuple {self.seen} of task {self.context.task_id}")
        if self.seen % 500 == 0:
            self.logger.info("count task %d has seen %d tuples", self.context.task_id, self.seen)
        word = tup.values.word
        self.counts[word] = self.counts.get(word, 0) + 1
        self.emit([word, self.counts[word]])


class OpsWordCount(Topology):
    config = {"topology.max.spout.pending": 300, "topology.message.timeout.secs": 10}
    sentences = Sentences.spec(par=1)
    split = Split.spec(inputs={sentences: Grouping.SHUFFLE}, par=2)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=2)
