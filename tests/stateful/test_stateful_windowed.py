"""StatefulWindowedBolt in local mode: the windows survive a restart of the topology."""
from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stormpy import Spout, StatefulWindowedBolt, Topology, WindowedBolt
from stormpy.local.runner import LocalTopology
from stormpy.testing import wait_until

STATE: dict[str, Any] = {}
wait = functools.partial(wait_until, interval=0.02)


def reset(**values: Any) -> None:
    STATE.clear()
    STATE.update(acked=[], windows=[], inits=[], lock=threading.Lock(), **values)


class IdSpout(Spout):
    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.next_id = STATE["start"]
        self.replays: list[int] = []

    def next_tuple(self) -> None:
        if self.replays:
            n = self.replays.pop(0)
        elif self.next_id < STATE["end"]:
            n = self.next_id
            self.next_id += 1
        else:
            return
        self.emit([n], tup_id=n)
        time.sleep(0.002)

    def ack(self, tup_id: Any) -> None:
        with STATE["lock"]:
            STATE["acked"].append(tup_id)

    def fail(self, tup_id: Any) -> None:
        self.replays.append(tup_id)


class Tens(StatefulWindowedBolt):
    outputs = ["ns"]

    def init_state(self, state: Any) -> None:
        self.kv = state
        with STATE["lock"]:
            STATE["inits"].append(state.get("windows", 0))

    def process_window(self, window: Any) -> None:
        ns = [t.values.n for t in window.get()]
        self.kv.put("windows", self.kv.get("windows", 0) + 1)
        with STATE["lock"]:
            STATE["windows"].append(ns)
        self.emit([ns])


class Topo(Topology):
    ids = IdSpout.spec()
    tens = Tens().with_tumbling_window(WindowedBolt.Count(10)).spec(inputs=[ids])


@pytest.fixture
def local_topology() -> Iterator[Callable[..., LocalTopology]]:
    started: list[LocalTopology] = []

    def start(conf: dict[str, Any]) -> LocalTopology:
        local = LocalTopology(Topo, "stateful-windows", user_overrides={
            "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 10, **conf})
        started.append(local)
        return local.start()

    yield start
    for local in started:
        local.stop(drain_secs=0)


def test_window_contents_survive_a_restart(local_topology: Any, tmp_path: Path) -> None:
    conf = {"topology.state.provider": "sqlite", "topology.state.provider.config": {"path": str(tmp_path / "w.db")}}
    reset(start=0, end=15)
    first = local_topology(conf)
    # 15 acked = every tuple's checkpoint committed, 10..14 still in the open window
    wait(lambda: len(set(STATE["acked"])) == 15, timeout=30, what="the first 15 tuples acked")
    assert STATE["windows"] == [list(range(10))]
    first.stop(drain_secs=0)

    reset(start=15, end=20)
    local_topology(conf)
    wait(lambda: STATE["windows"], timeout=30, what="the window completed after the restart")
    assert STATE["windows"] == [list(range(10, 20))], "tuples 10..14 came back from the committed window"
    assert STATE["inits"] == [1], "the user's state (one window processed) was restored too"
    wait(lambda: len(set(STATE["acked"])) == 5, timeout=30, what="the new tuples acked")
