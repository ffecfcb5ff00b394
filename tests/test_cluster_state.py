"""ClusterState against a real ZooKeeper: typed round trips, retention, watches, session loss."""
from __future__ import annotations

import threading
from typing import Any

import pytest

from stormpy.cluster_state import ClusterState, NotLeaderError, ZkHeartbeatSink
from stormpy.errors import UserError
from stormpy.testing import free_port, wait_until
from stormpy.thrift import storm


@pytest.fixture
def state(zk_conf: dict[str, Any]):
    st = ClusterState(zk_conf)
    try:
        yield st
    finally:
        st.close()


def _base(name: str = "wc", status: int = storm.TopologyStatus.ACTIVE) -> storm.StormBase:
    return storm.StormBase(name=name, status=status, num_workers=2, component_executors={"spout": 2},
                           launch_time_secs=1000)


def test_chroot_is_created_and_isolated(zk_conf: dict[str, Any]) -> None:
    with ClusterState(zk_conf) as a, ClusterState({**zk_conf, "storm.zookeeper.root": zk_conf["storm.zookeeper.root"] + "-other"}) as b:
        a.set_storm_base("wc-1-1000", _base())
        assert a.active_storms() == ["wc-1-1000"]
        assert b.active_storms() == []


def test_storm_base_and_assignment_round_trip(state: ClusterState) -> None:
    state.set_storm_base("wc-1-1000", _base())
    assert state.storm_base("wc-1-1000") == _base()
    assert state.storm_base("missing") is None
    executor = storm.ExecutorInfo(task_start=1, task_end=2)
    assignment = storm.Assignment(master_code_dir="/x/stormdist/wc-1-1000", node_host={"sup1": "host1"},
                                  executor_node_port={executor: storm.NodeInfo(node="sup1", port={6700})},
                                  executor_start_time_secs={executor: 1000})
    state.set_assignment("wc-1-1000", assignment)
    assert state.assignment("wc-1-1000") == assignment
    assert state.assignments() == {"wc-1-1000": assignment}
    state.setup_heartbeats("wc-1-1000")
    state.report_error("wc-1-1000", "spout", storm.ErrorInfo(error="boom", error_time_secs=1))
    state.remove_topology("wc-1-1000")
    assert state.active_storms() == [] and state.assignment_ids() == []
    assert state.heartbeat_storms() == [] and state.error_topologies() == []


def test_supervisor_info_is_ephemeral(zk_conf: dict[str, Any], state: ClusterState) -> None:
    other = ClusterState(zk_conf)
    try:
        other.set_supervisor_info("sup-a", storm.SupervisorInfo(time_secs=1, hostname="h", meta=[6700]))
        assert state.supervisors()["sup-a"].hostname == "h"
    finally:
        other.close()
    assert state.supervisors() == {}


def test_worker_heartbeats_through_sink(state: ClusterState) -> None:
    sink = ZkHeartbeatSink(state)
    executor = storm.ExecutorInfo(task_start=3, task_end=3)
    stats = storm.ExecutorStats(emitted={":all-time": {"default": 5}}, transferred={":all-time": {"default": 5}},
                                specific=storm.ExecutorSpecificStats(spout=storm.SpoutStats(
                                    acked={}, failed={}, complete_ms_avg={})))
    beat = storm.ClusterWorkerHeartbeat(storm_id="t-1-1", executor_stats={executor: stats}, time_secs=5,
                                        uptime_secs=2)
    sink.send("t-1-1", "sup-a-b", 6700, beat)
    assert state.worker_heartbeats("t-1-1") == {("sup-a-b", 6700): beat}
    sink.remove("t-1-1", "sup-a-b", 6700)
    assert state.worker_heartbeats("t-1-1") == {}


def test_many_supervisors_and_heartbeats_are_read_pipelined(zk_conf: dict[str, Any], state: ClusterState) -> None:
    """``get_many`` (supervisors(), worker_heartbeats()) returns what one-by-one reads return,
    including nodes that vanish between the children listing and the read."""
    other = ClusterState(zk_conf)
    try:
        for i in range(30):
            other.set_supervisor_info(f"sup-{i}", storm.SupervisorInfo(time_secs=i, hostname=f"h{i}", meta=[6700]))
            other.set_worker_heartbeat("t-1-1", f"sup-{i}", 6700, storm.ClusterWorkerHeartbeat(
                storm_id="t-1-1", executor_stats={}, time_secs=i, uptime_secs=1))
        assert {sid: info.hostname for sid, info in state.supervisors().items()} == {f"sup-{i}": f"h{i}" for i in range(30)}
        beats = state.worker_heartbeats("t-1-1")
        assert {slot: beat.time_secs for slot, beat in beats.items()} == {(f"sup-{i}", 6700): i for i in range(30)}
        paths = ["/supervisors/sup-0", "/supervisors/missing", "/no/such/parent"]
        got = state.session.get_many(paths)
        assert got["/supervisors/sup-0"] == state.get_data("/supervisors/sup-0") is not None
        assert got["/supervisors/missing"] is None and got["/no/such/parent"] is None
    finally:
        other.close()
    assert state.supervisors() == {}


def test_errors_keep_newest_ten_newest_first(state: ClusterState) -> None:
    for i in range(13):
        state.report_error("t-1-1", "bolt", storm.ErrorInfo(error=f"e{i}", error_time_secs=i, host="h", port=1))
    state.report_error("t-1-1", "spout", storm.ErrorInfo(error="s", error_time_secs=1))
    errors = state.errors("t-1-1")
    assert [e.error for e in errors["bolt"]] == [f"e{i}" for i in range(12, 2, -1)]
    assert [e.error for e in errors["spout"]] == ["s"]


def test_watches_fire_on_change(state: ClusterState) -> None:
    seen: list[Any] = []
    changed = threading.Event()

    def on_base(base: Any) -> None:
        seen.append(base.status if base else None)
        changed.set()

    watch = state.watch_storm_base("t-1-1", on_base)
    wait_until(lambda: seen == [None], 10, "the initial storm-base callback")
    state.set_storm_base("t-1-1", _base(status=storm.TopologyStatus.INACTIVE))
    wait_until(lambda: seen[-1:] == [storm.TopologyStatus.INACTIVE], 10, "the storm-base change callback")
    state.remove_storm_base("t-1-1")
    wait_until(lambda: seen[-1:] == [None], 10, "the storm-base removal callback")
    watch.stop()

    calls: list[int] = []
    state.watch_assignments(lambda: calls.append(1))
    wait_until(lambda: calls, 10, "the initial assignments callback")
    before = len(calls)
    state.set_assignment("t-2-2", storm.Assignment(master_code_dir="/a"))
    wait_until(lambda: len(calls) > before, 10, "a callback for a new assignment")
    before = len(calls)
    state.set_assignment("t-2-2", storm.Assignment(master_code_dir="/b"))
    wait_until(lambda: len(calls) > before, 10, "a callback for a changed assignment")


def test_session_loss_recreates_ephemerals_and_rearms_watches(zk_conf: dict[str, Any]) -> None:
    states: list[str] = []
    with ClusterState(zk_conf, listener=states.append) as victim, ClusterState(zk_conf) as observer:
        victim.set_supervisor_info("sup-x", storm.SupervisorInfo(time_secs=1, hostname="hx"))
        seen: list[Any] = []
        victim.watch_storm_base("t-9-9", lambda base: seen.append(base.name if base else None))
        wait_until(lambda: seen == [None], 10, "the initial watch callback")
        old_session = victim.session_id
        victim.expire_session()
        wait_until(lambda: "LOST" in states, 30, "the victim to see its session LOST")
        wait_until(lambda: victim.session_id not in (None, old_session) and victim.is_connected(), 30,
                   "the victim to reconnect with a new session")
        wait_until(lambda: "sup-x" in observer.supervisors(), 30, "the supervisor node to be re-created")
        observer.set_storm_base("t-9-9", _base(name="after-loss"))
        wait_until(lambda: "after-loss" in seen, 30, "the re-armed watch to fire after session loss")


def test_unreachable_zookeeper_is_a_user_error() -> None:
    conf = {"storm.zookeeper.servers": ["127.0.0.1"], "storm.zookeeper.port": free_port(),
            "storm.zookeeper.connection.timeout": 1000}
    with pytest.raises(UserError, match="cannot reach ZooKeeper"):
        ClusterState(conf)


def test_ephemeral_left_by_a_killed_predecessor_is_taken_over(zk_conf: dict[str, Any]) -> None:
    """A supervisor restarted before its old session expired must own its node, not inherit it."""
    old = ClusterState(zk_conf)
    old.set_supervisor_info("sup-r", storm.SupervisorInfo(time_secs=1, hostname="old"))
    new = ClusterState(zk_conf)
    try:
        new.set_supervisor_info("sup-r", storm.SupervisorInfo(time_secs=2, hostname="new"))
        old.close()   # the predecessor's session ends: its ephemerals go, ours must stay
        assert new.supervisor_info("sup-r").hostname == "new"
    finally:
        old.close()
        new.close()


def test_leader_only_writes_are_checked_at_the_write(zk_conf: dict[str, Any]) -> None:
    """A Nimbus that competes for leadership and is not the leader cannot write topology state."""
    with ClusterState(zk_conf) as leader, ClusterState(zk_conf) as standby:
        assert leader.acquire_leadership("nimbus-a:6627", timeout=10)
        assert not standby.acquire_leadership("nimbus-b:6627", timeout=0)
        leader.set_storm_base("t-1-1", _base())
        with pytest.raises(NotLeaderError, match="refusing to write the StormBase of t-1-1.*not the leader"):
            standby.set_storm_base("t-1-1", _base(name="rogue"))
        with pytest.raises(NotLeaderError):
            standby.set_assignment("t-1-1", storm.Assignment(master_code_dir="/x"))
        with pytest.raises(NotLeaderError):
            standby.remove_topology("t-1-1")
        assert leader.storm_base("t-1-1").name == "wc"
        standby.report_error("t-1-1", "spout", storm.ErrorInfo(error="e", error_time_secs=1))  # not leader-only
        leader.release_leadership()
        with pytest.raises(NotLeaderError, match="released"):
            leader.set_storm_base("t-1-1", _base())
        assert standby.acquire_leadership("nimbus-b:6627", timeout=10)
        standby.set_storm_base("t-1-1", _base(name="new-leader"))
        assert leader.storm_base("t-1-1").name == "new-leader"


def test_session_loss_drops_leadership_at_once_then_retakes_it(zk_conf: dict[str, Any]) -> None:
    """LOST clears the lock on kazoo's thread, so no write slips through with a dead session's lock."""
    states: list[str] = []
    with ClusterState(zk_conf, listener=states.append) as nimbus:
        assert nimbus.acquire_leadership("nimbus-a:6627", timeout=10)
        nimbus.expire_session()
        wait_until(lambda: "LOST" in states, 30, "the session to be LOST")
        wait_until(lambda: nimbus.is_leader() and states[-1] == "CONNECTED", 30,
                   "leadership re-acquired on the new session")
        nimbus.set_storm_base("t-1-1", _base())
        assert nimbus.storm_base("t-1-1") == _base()
