"""ShellBolt/ShellSpout through Storm's multilang protocol with real subprocesses: a Node.js
bolt (which crashes once: its tuples fail, replay, and the task restarts with a new process) and
a Perl spout (emit with ids, ack/fail answered with sync, replay on fail), in a real in-process
topology with the real acker.
"""
from __future__ import annotations

import shutil
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from stormpy import Bolt, Grouping, Topology
from stormpy.local.runner import LocalTopology
from stormpy.spout import ReliableSpout, ShellSpout
from stormpy.bolt import ShellBolt
from stormpy.testing import wait_until

pytestmark = pytest.mark.timeout(120)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "multilang"
WORDS = ["alpha", "be", "crash", "delta", "e", "foxtrot", "golf", "hotel", "india", "juliet"] * 2
SEEN: dict[str, list[Any]] = defaultdict(list)
LOCK = threading.Lock()


def record(key: str, value: Any) -> None:
    with LOCK:
        SEEN[key].append(value)


class WordSpout(ReliableSpout):
    outputs = ["word"]

    def initialize(self, conf, ctx):
        self.i = 0

    def next_tuple(self):
        if self.i < len(WORDS):
            self.emit([WORDS[self.i]], tup_id=self.i)
            self.i += 1

    def ack(self, tup_id):
        super().ack(tup_id)
        record("acked", tup_id)

    def fail(self, tup_id):
        record("failed", tup_id)
        super().fail(tup_id)


class Collect(Bolt):
    def process(self, tup):
        record("collected", tuple(tup.values))


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_shell_bolt_processes_every_tuple_and_survives_a_crash(tmp_path: Path) -> None:
    SEEN.clear()

    class NodeTopology(Topology):
        words = WordSpout.spec()
        upper = ShellBolt.spec(command="node", script=str(FIXTURES / "upper_bolt.js"), inputs=[words],
                               outputs=["word", "length"], par=2)
        collect = Collect.spec(inputs={upper: Grouping.fields("word")})

    local = LocalTopology(NodeTopology, "node-ml", user_overrides={
        "multilang.test.dir": str(tmp_path), "topology.message.timeout.secs": 10})
    with local:
        wait_until(lambda: len(set(SEEN["acked"])) == len(WORDS), 60, f"all {len(WORDS)} words acked")
        restarts = sum(t.restarts for ex in local.runtime.executors.values() if ex.component_id == "upper"
                       for t in ex.tasks.values())
    assert (tmp_path / "crashed").exists()
    assert restarts >= 1
    errors = local.reporter.errors.get("upper") or []
    assert any("exited (exit code 3)" in text for _, _, text in errors), errors
    assert SEEN["failed"], "the tuple in the crashed process must fail and replay"
    collected = Counter(SEEN["collected"])
    for word in set(WORDS):
        assert collected[(word.upper(), len(word))] >= WORDS.count(word)
    metrics = [e["metrics"] for e in local.runtime.stats().values() if e["component"] == "upper"]
    assert sum(m.get("words_seen", 0) for m in metrics) >= 1


class FailN3Once(Bolt):
    def initialize(self, conf, ctx):
        self.failed = False

    def process(self, tup):
        if tup.values[0] == "n3" and not self.failed:
            self.failed = True
            self.fail(tup)
            return
        record("spout-words", tup.values[0])


@pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not installed")
def test_perl_shell_spout_emits_acks_and_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    SEEN.clear()
    monkeypatch.syspath_prepend(str(FIXTURES))     # a relative script is found in the code dir

    class PerlTopology(Topology):
        numbers = ShellSpout.spec(command="perl", script="numbers_spout.pl", outputs=["word"])
        check = FailN3Once.spec(inputs={numbers: Grouping.GLOBAL})

    local = LocalTopology(PerlTopology, "perl-ml", user_overrides={"multilang.test.count": 10})
    with local:
        wait_until(lambda: local.totals()["acked"] >= 10, 60, "the Perl spout's 10 tuples acked")
        totals = local.totals()
    assert totals["failed"] == 1 and totals["acked"] == 10
    assert sorted(SEEN["spout-words"], key=lambda w: int(w[1:])) == [f"n{i}" for i in range(1, 11)]
