"""Sync's pure parts (assignment -> ports, safe unzip) and localstate files, on a real disk."""
from __future__ import annotations

import zipfile

import pytest

from stormpy.supervisor import localstate
from stormpy.supervisor.slot import LocalAssignment
from stormpy.supervisor.sync import CodeDownloadError, local_assignments, safe_extract
from stormpy.thrift import storm


def assignment(placements: dict[tuple[int, int], tuple[str, int]]) -> storm.Assignment:
    return storm.Assignment(
        master_code_dir="/x", node_host={"sup-a": "host-a", "sup-b": "host-b"},
        executor_node_port={storm.ExecutorInfo(task_start=s, task_end=e): storm.NodeInfo(node=n, port={p})
                            for (s, e), (n, p) in placements.items()})


def test_local_assignments_keeps_only_this_node_and_its_ports():
    assignments = {
        "t1": assignment({(1, 1): ("sup-a", 6700), (2, 2): ("sup-b", 6700), (3, 4): ("sup-a", 6700),
                          (5, 5): ("sup-a", 6701), (6, 6): ("sup-a", 9999)}),
        "t0": assignment({(1, 2): ("sup-a", 6702)}),
    }
    got = local_assignments(assignments, "sup-a", [6700, 6701, 6702])
    assert got == {6700: LocalAssignment.of("t1", [(1, 1), (3, 4)]),
                   6701: LocalAssignment.of("t1", [(5, 5)]),
                   6702: LocalAssignment.of("t0", [(1, 2)])}


def test_port_claimed_twice_keeps_first_topology():
    assignments = {"a": assignment({(1, 1): ("sup-a", 6700)}), "b": assignment({(1, 1): ("sup-a", 6700)})}
    assert local_assignments(assignments, "sup-a", [6700]) == {6700: LocalAssignment.of("a", [(1, 1)])}


def test_safe_extract_refuses_path_tricks(tmp_path):
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("../evil.py", "x = 1")
    with pytest.raises(CodeDownloadError, match="unsafe path"):
        safe_extract(bad, tmp_path / "out")
    assert not (tmp_path / "evil.py").exists()
    notzip = tmp_path / "not.zip"
    notzip.write_bytes(b"hello")
    with pytest.raises(CodeDownloadError, match="not a zip"):
        safe_extract(notzip, tmp_path / "out2")
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w") as zf:
        zf.writestr("pkg/topo.py", "x = 1")
    safe_extract(good, tmp_path / "out3")
    assert (tmp_path / "out3" / "pkg" / "topo.py").read_text() == "x = 1"


def test_localstate_round_trip_and_torn_files(tmp_path):
    ls = localstate.LocalState(tmp_path)
    assert ls.supervisor_id() is None and ls.local_assignments() == {} and ls.approved_workers() == {}
    ls.set_supervisor_id("sup-1")
    ls.set_local_assignments({6700: ("t1", [(3, 4), (1, 1)])})
    ls.set_approved_workers({"w1": 6700})
    again = localstate.LocalState(tmp_path)
    assert again.supervisor_id() == "sup-1"
    assert again.local_assignments() == {6700: ("t1", [(1, 1), (3, 4)])}
    assert again.approved_workers() == {"w1": 6700}
    (again.root / localstate.LS_APPROVED_WORKERS).write_bytes(b"\xff\x00garbage")
    assert again.approved_workers() == {}


def test_worker_heartbeat_files(tmp_path):
    hb = storm.LSWorkerHeartbeat(time_secs=5, topology_id="t", executors=[storm.ExecutorInfo(task_start=1, task_end=2)],
                                 port=6700, pid=42)
    assert localstate.read_worker_heartbeat(tmp_path, "w") is None
    localstate.write_worker_heartbeat(tmp_path, "w", hb)
    assert localstate.read_worker_heartbeat(tmp_path, "w") == hb
    localstate.write_pid(tmp_path, "w", 42)
    assert localstate.read_pid(tmp_path, "w") == 42
    localstate.remove_worker_dir(tmp_path, "w")
    assert localstate.read_pid(tmp_path, "w") is None
