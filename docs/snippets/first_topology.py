"""The first-topology tutorial's word count: a replaying spout, a split bolt, a counting bolt."""
import sys
from collections import Counter

from stormpy import Bolt, Grouping, Spout, Topology

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away",
             "four score and seven years ago", "snow white and the seven dwarfs"]


class SentenceSpout(Spout):
    outputs = ["sentence"]

    def initialize(self, stormconf, context):
        self.pending = {}          # tuple id -> sentence, until the acker says it is done
        self.next_id = 0

    def next_tuple(self):
        sentence = SENTENCES[self.next_id % len(SENTENCES)]
        self.pending[self.next_id] = sentence
        self.emit([sentence], tup_id=self.next_id)      # a tup_id makes the tuple tracked
        self.next_id += 1

    def ack(self, tup_id):
        del self.pending[tup_id]                         # its whole tuple tree was processed

    def fail(self, tup_id):
        self.emit([self.pending[tup_id]], tup_id=tup_id)   # replay it


class SplitBolt(Bolt):
    outputs = ["word"]

    def process(self, tup):
        for word in tup.values.sentence.split():
            self.emit([word])                            # anchored to tup, acked after process()


class CountBolt(Bolt):
    outputs = ["word", "count"]

    def initialize(self, stormconf, context):
        self.counts = Counter()
        self.top = int(stormconf.get("wordcount.top", 3))

    def process(self, tup):
        self.counts[tup.values.word] += 1
        self.emit([tup.values.word, self.counts[tup.values.word]])

    def close(self):
        top = ", ".join(f"{w}={n}" for w, n in self.counts.most_common(self.top))
        sys.stdout.write(f"top words: {top}\n")


class WordCount(Topology):
    config = {"topology.max.spout.pending": 1000}
    sentences = SentenceSpout.spec()
    split = SplitBolt.spec(inputs={sentences: Grouping.SHUFFLE}, par=2)
    count = CountBolt.spec(inputs={split: Grouping.fields("word")})
