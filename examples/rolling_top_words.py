"""Storm's RollingTopWords with windowed bolts: ``stormpy local examples/rolling_top_words.py --duration 20``.

- ``WordSpout`` emits words of the bundled text (examples/data/sentences.txt) at random, a
  few hundred a second, each tracked by the acker and replayed if it fails.
- ``RollingCountBolt`` (a ``WindowedBolt``, fields-grouped on ``word``): a sliding window of
  9 seconds that advances every 3 seconds. Each window it counts its words and emits
  ``[word, count, start_ms, end_ms]``, anchored to the window's tuples.
- ``TotalRankingsBolt`` (a ``WindowedBolt`` on a global grouping, tumbling 3 s): keeps the
  latest rolling count of every word and prints the top N with the window they come from.

A word tuple is acked when it has left the last 9-second window holding it, and the counts
emitted from it have left the rankings window: about 15 s after it was emitted, within the
30 s message timeout (submit checks that window length + slide fit in it).
"""
from __future__ import annotations

import itertools
import random
import re
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from stormpy import Grouping, Spout, Topology, WindowedBolt

DATA = Path(__file__).resolve().parent / "data" / "sentences.txt"
_WORD = re.compile(r"[a-z']+")
TOP_N = 5


class WordSpout(Spout):
    """Random words of the text (frequent words stay frequent), replayed when they fail."""

    outputs = ["word"]

    def initialize(self, stormconf, context):
        path = Path(stormconf.get("rolling.text") or DATA)
        self.words = _WORD.findall(path.read_text().lower())
        self.random = random.Random(context.task_id)
        self.ids = itertools.count()
        self.pending = {}
        self.replays = []
        self.pause_secs = float(stormconf.get("rolling.pause.secs", 0.003))

    def next_tuple(self):
        if self.replays:
            tup_id = self.replays.pop()
        else:
            tup_id = next(self.ids)
            self.pending[tup_id] = self.random.choice(self.words)
            time.sleep(self.pause_secs)  # a steady trickle, like Storm's TestWordSpout
        self.emit([self.pending[tup_id]], tup_id=tup_id)

    def ack(self, tup_id):
        self.pending.pop(tup_id, None)

    def fail(self, tup_id):
        if tup_id in self.pending:
            self.replays.append(tup_id)


class RollingCountBolt(WindowedBolt):
    """Counts each word over the last 9 seconds, every 3 seconds."""

    outputs = ["word", "count", "start", "end"]

    def process_window(self, window):
        counts = Counter(t.values.word for t in window.get())
        for word, count in counts.items():
            self.emit([word, count, window.start_timestamp, window.end_timestamp])


def _clock(ms):
    return datetime.fromtimestamp(ms / 1000.0).strftime("%H:%M:%S")


class TotalRankingsBolt(WindowedBolt):
    """The global top N, printed every 3 seconds with the bounds of the counting windows."""

    outputs = ["rankings"]

    def initialize(self, stormconf, context):
        self.latest = {}  # word -> (count, start, end) from the newest counting window

    def process_window(self, window):
        for tup in window.get():
            word, count, start, end = tup.values
            if word not in self.latest or self.latest[word][2] <= end:
                self.latest[word] = (count, start, end)
        newest_end = max(end for _count, _start, end in self.latest.values())
        current = {w: v for w, v in self.latest.items() if v[2] >= newest_end - 1000}
        self.latest = current
        top = sorted(current.items(), key=lambda item: (-item[1][0], item[0]))[:TOP_N]
        start = min(v[1] for _w, v in top)
        end = max(v[2] for _w, v in top)
        words = ", ".join(f"{w}={v[0]}" for w, v in top)
        print(f"window [{_clock(start)} - {_clock(end)}] ({start}..{end} ms) top {TOP_N}: {words}", flush=True)
        self.emit([[[w, v[0]] for w, v in top]])


class RollingTopWords(Topology):
    config = {"topology.message.timeout.secs": 30}
    words = WordSpout.spec(par=1)
    counter = (RollingCountBolt().with_window(WindowedBolt.Duration(9), WindowedBolt.Duration(3))
               .spec(inputs={words: Grouping.fields("word")}, par=2))
    rankings = (TotalRankingsBolt().with_tumbling_window(WindowedBolt.Duration(3))
                .spec(inputs={counter: Grouping.GLOBAL}, par=1))


if __name__ == "__main__":
    print("run me with: stormpy local examples/rolling_top_words.py --duration 20", file=sys.stderr)
