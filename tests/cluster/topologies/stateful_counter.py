"""Stateful counter for the cluster fault test: replaying spout -> StatefulBolt (SQLite state).

The counter keeps ``n<id>`` (times id was counted) and ``total`` in its KeyValueState, held in
``self.state`` the way Storm users name it (``initialize`` sets it to None). It writes
its pid when it starts (so the test can SIGKILL the worker holding the state), what
``init_state`` restored (``inits.jsonl``) and how many tuples each checkpoint covered
(``checkpoints.jsonl``), so the test can see "restored from a commit, not from zero" and
bound the double counts by one checkpoint's tuples.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from cluster_common import ReplayingSentenceSpout

from stormpy import Grouping, StatefulBolt, Topology


def append_line(path: Path, value: object) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(value) + "\n")
        f.flush()
        os.fsync(f.fileno())


class IdSpout(ReplayingSentenceSpout):
    outputs = ["id"]

    def next_tuple(self):
        for _ in range(self.per_call):
            i = self._next_id()
            if i is None:
                return
            self.emit([i], tup_id=i)


class StatefulIdCounter(StatefulBolt):
    outputs: list[str] = []

    def initialize(self, stormconf, context):
        self.out = Path(stormconf["test.out.dir"])
        (self.out / f"counter-pid-{context.task_id}.txt").write_text(str(os.getpid()))
        self.since_prepare = 0
        self.in_checkpoint = 0
        self.state = None          # the natural field name (issue 20): the bolt owns it

    def init_state(self, state):
        self.state = state
        append_line(self.out / "inits.jsonl", {"pid": os.getpid(), "total": state.get("total", 0), "at": time.time()})

    def process(self, tup):
        key = f"n{tup.values[0]}"
        self.state.put(key, self.state.get(key, 0) + 1)
        self.state.put("total", self.state.get("total", 0) + 1)
        self.since_prepare += 1

    def pre_prepare(self, txid):
        self.in_checkpoint, self.since_prepare = self.since_prepare, 0

    def pre_commit(self, txid):
        append_line(self.out / "checkpoints.jsonl", {"txid": txid, "tuples": self.in_checkpoint})

    def pre_rollback(self):
        self.since_prepare = 0


class StatefulCount(Topology):
    config = {"topology.max.spout.pending": 200, "topology.message.timeout.secs": 10,
              "topology.state.checkpoint.interval.ms": 500}
    ids = IdSpout.spec(par=1)
    counter = StatefulIdCounter.spec(inputs={ids: Grouping.fields("id")}, par=1)
