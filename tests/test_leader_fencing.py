"""Versioned (fenced) leader writes against a real ZooKeeper (issue 26 item 8): two Nimbus-like
writers compete for ``/leader-lock``; after the first one's session expires and the second
leads, the first one's write, retried with what it held when it started, fails and the
successor's assignment and StormBase stand.
"""
from __future__ import annotations

import threading
from typing import Any

import pytest

from stormpy import zk_layout
from stormpy.cluster_state import ClusterState, NotLeaderError
from stormpy.testing import wait_until
from stormpy.thrift import serialize, storm


def _assignment(node: str) -> storm.Assignment:
    executor = storm.ExecutorInfo(task_start=1, task_end=1)
    return storm.Assignment(master_code_dir="/x", node_host={node: node},
                            executor_node_port={executor: storm.NodeInfo(node=node, port={6700})},
                            executor_start_time_secs={executor: 1})


def _base(workers: int) -> storm.StormBase:
    return storm.StormBase(name="wc", status=storm.TopologyStatus.ACTIVE, num_workers=workers, launch_time_secs=1)


@pytest.fixture
def writers(zk_conf: dict[str, Any]):
    conf = {**zk_conf, "storm.zookeeper.session.timeout": 4000}
    a, b = ClusterState(conf), ClusterState(conf)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_deposed_leaders_retried_write_cannot_overwrite_its_successor(writers) -> None:
    old, new = writers
    assert old.acquire_leadership("127.0.0.1:1001", timeout=5)
    old.set_assignment("wc-1-1", _assignment("old"))
    old.set_storm_base("wc-1-1", _base(1))
    # A write in flight: the fence (leader lock node) it checks is taken when the write starts.
    what = "write the assignment of wc-1-1"
    fence = old.leadership.fence(what)
    assert fence is not None and fence.startswith(zk_layout.LEADER_LOCK + "/")

    # The successor waits in line for the lock, as a standby does.
    won: list[bool] = []
    waiter = threading.Thread(target=lambda: won.append(new.acquire_leadership("127.0.0.1:1002", timeout=30)))
    waiter.start()
    wait_until(lambda: len(old.session.zk.get_children(zk_layout.LEADER_LOCK)) == 2, 10, "the standby in line")
    old_session = old.session_id
    old.expire_session()                 # a long partition: ZooKeeper ends the old leader's session
    waiter.join(30)
    assert won == [True], "the successor leads once the old leader's session ended"
    wait_until(lambda: old.session_id not in (None, old_session) and old.is_connected(), 30,
               "the old leader to reconnect with a new session")
    assert not old.is_leader()
    new.set_assignment("wc-1-1", _assignment("new"))
    new.set_storm_base("wc-1-1", _base(2))

    # kazoo's retry of the old write re-runs this attempt after the reconnection: it must fail.
    assert old.session.write_fenced(fence, zk_layout.assignment("wc-1-1"), serialize(_assignment("old"))) is False
    assert old.session.write_fenced(fence, zk_layout.storm("wc-1-1"), None) is False
    with pytest.raises(NotLeaderError):
        old.set_assignment("wc-1-1", _assignment("old"))
    with pytest.raises(NotLeaderError):
        old.remove_storm_base("wc-1-1")
    assert new.assignment("wc-1-1") == _assignment("new")
    assert new.storm_base("wc-1-1") == _base(2)
    assert new.leader() == "127.0.0.1:1002"


def test_fenced_writes_create_update_and_delete(writers) -> None:
    leader, reader = writers
    assert leader.acquire_leadership("127.0.0.1:1001", timeout=5)
    leader.set_code_digests("wc-1-1", {"stormcode.zip": "ab" * 32})
    assert reader.code_digests("wc-1-1") == {"stormcode.zip": "ab" * 32}
    leader.set_code_digests("wc-1-1", {"stormcode.zip": "cd" * 32})
    assert reader.code_digests("wc-1-1") == {"stormcode.zip": "cd" * 32}
    leader.remove_code_digests("wc-1-1")
    leader.remove_code_digests("wc-1-1")            # deleting what is gone is fine
    assert reader.code_digests("wc-1-1") == {}
    leader.release_leadership()
    with pytest.raises(NotLeaderError):
        leader.set_storm_base("wc-1-1", _base(1))
    assert reader.storm_base("wc-1-1") is None
