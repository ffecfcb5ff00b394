"""The windows-and-state how-to: a tumbling count window and a stateful counter under test."""
from collections import Counter

from stormpy import Bolt, Grouping, Spout, StatefulBolt, Topology, WindowedBolt
from stormpy.testing import complete_topology


class Words(Spout):
    outputs = ["word"]

    def next_tuple(self):            # replaced by a feeder under complete_topology
        pass


class WindowCount(WindowedBolt):
    """Counts the words of every one-second window."""

    outputs = ["word", "count"]

    def process_window(self, window):
        for word, n in sorted(Counter(t.values.word for t in window.get()).items()):
            self.emit([word, n])


class WindowedWords(Topology):
    words = Words.spec()
    counts = (WindowCount().with_tumbling_window(WindowedBolt.Duration(1))
              .spec(inputs={words: Grouping.GLOBAL}))


def test_tumbling_windows():
    words = [["a"], ["b"], ["a"], ["c"], ["c"], ["c"]]
    result = complete_topology(WindowedWords, {"words": words}, timeout_secs=30)
    totals = Counter()
    for word, n in result.emitted("counts"):      # one window, or two if the input straddled a second
        totals[word] += n
    assert totals == {"a": 2, "b": 1, "c": 3}
    assert result.acked == {"words": 6}            # acked once they left their window


class WordCounter(StatefulBolt):
    """Keeps one count per word in a KeyValueState, restored from the last checkpoint."""

    outputs = ["word", "count"]

    def init_state(self, state):
        self.counts = state

    def process(self, tup):
        word = tup.values.word
        self.counts.put(word, self.counts.get(word, 0) + 1)
        self.emit([word, self.counts.get(word)])


class StatefulWords(Topology):
    config = {"topology.state.provider": "memory", "topology.state.checkpoint.interval.ms": 100}
    words = Words.spec()
    counter = WordCounter.spec(inputs={words: Grouping.fields("word")}, par=2)


def test_stateful_counts():
    result = complete_topology(StatefulWords, {"words": [["a"], ["b"], ["a"]]}, timeout_secs=30)
    assert sorted(result.emitted("counter")) == [["a", 1], ["a", 2], ["b", 1]]
    assert result.acked == {"words": 3}       # acked once their checkpoint committed
