"""Standbys that all lack the same code: one of them leads rather than none.

The leader dies just after a submit, before any standby copied the new topology's code. Each
standby sees the others registered; if each waited for another to hold the code, the cluster
would stay without a leader until a supervisor uploaded it, and without one at all when none
holds it. Here the "leader" is a ZooKeeper session that records a live topology with its code
digests and then ends; the standbys are real ``LeaderElector`` threads with their own sessions,
``CodeReplicator`` and ``CodeRecovery`` (which publishes what each lacks under
``/code-requests``), and empty or filled stormdist directories.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stormpy.cluster_state import ClusterState
from stormpy.nimbus.files import CODE_FILE, CONF_FILE, TOPOLOGY_FILE, NimbusFiles
from stormpy.nimbus.ha import CodeRecovery, CodeReplicator, LeaderElector
from stormpy.nimbus.server import nimbus_summary
from stormpy.testing import wait_until
from stormpy.thrift import storm

pytestmark = pytest.mark.timeout(120)

TOPOLOGY = "wc-1-1"
DEAD_LEADER = "127.0.0.1:9"
# Nothing listens on these ports: a standby's copy from the leader fails at once.
STANDBYS = ("127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4")


class Standby:
    """One standby Nimbus's HA parts: registration, stormdist, replicator, recovery, elector."""

    def __init__(self, conf: dict[str, Any], host_port: str, root: Path, with_code: bool) -> None:
        self.host_port = host_port
        self.state = ClusterState(conf)
        host, port = host_port.split(":")
        self.state.register_nimbus(host_port, nimbus_summary(host, int(port), 0, False))
        self.files = NimbusFiles(root, max_upload_bytes=1 << 20, stream_expiration_secs=60)
        if with_code:
            (self.files.stormdist_root / TOPOLOGY).mkdir()
            for name in (CODE_FILE, TOPOLOGY_FILE, CONF_FILE):
                (self.files.stormdist_root / TOPOLOGY / name).write_bytes(b"x")
        self.led = threading.Event()
        self.stop = threading.Event()
        self.elector = LeaderElector(self.state, CodeReplicator(self.state, self.files, host_port, peer_timeout_secs=2),
                                     host_port, 0.5, on_leader=self.led.set, on_standby=lambda: None,
                                     stop_event=self.stop, recovery=CodeRecovery(self.state, self.files, host_port))

    def close(self) -> None:
        self.stop.set()
        self.elector.join(10)
        self.state.close()


@pytest.fixture
def leader_died(zk_conf: dict[str, Any]) -> None:
    """A leader recorded a live topology and its code digests, then its session ended."""
    state = ClusterState(zk_conf)
    try:
        assert state.acquire_leadership(DEAD_LEADER, timeout=10)
        state.set_storm_base(TOPOLOGY, storm.StormBase(name="wc", status=storm.TopologyStatus.ACTIVE,
                                                       num_workers=1, launch_time_secs=1))
        state.set_code_digests(TOPOLOGY, {name: "0" * 64 for name in (CODE_FILE, TOPOLOGY_FILE, CONF_FILE)})
    finally:
        state.close()


@pytest.fixture
def standbys(zk_conf: dict[str, Any], tmp_path: Path) -> Iterator[Callable[[str, bool], Standby]]:
    """Makes standbys (a host:port, whether its stormdist holds the code); closes them after."""
    made: list[Standby] = []

    def make(host_port: str, with_code: bool) -> Standby:
        made.append(Standby(zk_conf, host_port, tmp_path / host_port.replace(":", "-"), with_code))
        return made[-1]

    try:
        yield make
    finally:
        for standby in made:
            standby.close()


def _leaders(nodes: list[Standby]) -> list[str]:
    return [n.host_port for n in nodes if n.elector.leading]


def test_standbys_that_all_lack_the_code_elect_one_of_them(leader_died: None, standbys: Any) -> None:
    nodes = [standbys(hp, False) for hp in STANDBYS]
    for node in nodes:
        assert node.elector.replicator.missing_code() == [TOPOLOGY]
        node.elector.start()
    started = time.monotonic()
    wait_until(lambda: _leaders(nodes), 20, "one of the standbys lacking the code to lead")
    print(f"a standby led {time.monotonic() - started:.1f}s after the standbys started")
    time.sleep(2.0)   # several more rounds: the others stay standbys
    leaders = _leaders(nodes)
    assert len(leaders) == 1 and nodes[0].state.leader() == leaders[0], leaders
    # The leader asks the supervisors for the code it leads without (CODE MISSING).
    assert TOPOLOGY in nodes[0].state.code_requests().get(leaders[0], [])


def test_a_standby_lacking_the_code_leaves_the_lead_to_one_that_holds_it(leader_died: None,
                                                                         standbys: Any) -> None:
    lacking = [standbys(hp, False) for hp in STANDBYS[:2]]
    holder = standbys(STANDBYS[2], True)
    for node in lacking:
        node.elector.start()
    wait_until(lambda: all(node.state.code_requests().get(node.host_port) for node in lacking), 10,
               "the standbys lacking the code to ask for it")
    time.sleep(1.5)   # their rounds see the holder registered and asking for nothing: they wait
    assert _leaders(lacking + [holder]) == [], "a standby lacking the code led while one holding it was registered"
    holder.elector.start()
    wait_until(lambda: holder.elector.leading, 20, "the standby holding the code to lead")
    time.sleep(1.0)
    assert _leaders(lacking + [holder]) == [holder.host_port]


def test_a_submit_during_a_standbys_round_is_not_called_missing_until_a_round_could_copy_it(
        zk_conf: dict[str, Any], standbys: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A topology whose StormBase lands after a standby's round read what it lacks (here: while
    the round offers code to its peers) had no chance to be copied in that round: the round
    neither asks the supervisors for it nor logs CODE MISSING. The next round, whose copy from
    the (unreachable) leader fails, does both."""
    leader = ClusterState(zk_conf)
    try:
        assert leader.acquire_leadership(DEAD_LEADER, timeout=10)   # alive; nothing listens there
        node = standbys(STANDBYS[0], False)
        replicator = node.elector.replicator
        offer = replicator.offer_to_peers

        def submit_then_offer() -> None:
            leader.set_storm_base(TOPOLOGY, storm.StormBase(name="wc", status=storm.TopologyStatus.ACTIVE,
                                                            num_workers=1, launch_time_secs=1))
            leader.set_code_digests(TOPOLOGY, {name: "0" * 64 for name in (CODE_FILE, TOPOLOGY_FILE, CONF_FILE)})
            replicator.offer_to_peers = offer   # type: ignore[method-assign]  # once
            offer()

        replicator.offer_to_peers = submit_then_offer   # type: ignore[method-assign]
        with caplog.at_level(logging.ERROR, logger="stormpy.nimbus.ha"):
            node.elector.step(acquire_timeout=0)
            assert replicator.missing_code() == [TOPOLOGY], "the submit landed within the round"
            assert TOPOLOGY not in node.state.code_requests().get(node.host_port, [])
            assert "CODE MISSING" not in caplog.text
            node.elector.step(acquire_timeout=0)
            assert TOPOLOGY in node.state.code_requests().get(node.host_port, [])
            assert f"CODE MISSING: topology {TOPOLOGY}" in caplog.text
    finally:
        leader.close()
