"""A streamparse project on a real cluster: ``stormpy submit topologies/wordcount.py -e prod`` from
the project root (config.json names the Nimbus; ``src/`` travels in the archive; the components
import ``streamparse``, which is not installed), and every spout tuple is acked.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from process_cluster import REPO, ProcessCluster
from stormpy.testing import wait_until

pytestmark = pytest.mark.timeout(300)

CLUSTER_SUPERVISORS = 1
CLUSTER_PORTS = 2
FIXTURES = REPO / "tests" / "streamparse" / "fixtures"


def project_copy(cluster: ProcessCluster, fixture: str) -> Path:
    root = cluster.base / f"{fixture}-{uuid.uuid4().hex[:6]}"
    shutil.copytree(FIXTURES / fixture, root, ignore=shutil.ignore_patterns("__pycache__"))
    config = json.loads((root / "config.json").read_text())
    for env in config["envs"].values():
        env["nimbus"] = f"127.0.0.1:{cluster.conf['nimbus.thrift.port']}"
    (root / "config.json").write_text(json.dumps(config))
    return root


def submit_from(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``stormpy submit`` run from the project root with no stormpy config file: config.json is
    the only place the Nimbus address comes from."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "stormpy.cli", "submit", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def acked_ids(out: Path) -> list[str]:
    return [line for path in out.glob("acked-*.txt") for line in path.read_text().split()]


def test_quickstart_project_submitted_unchanged_acks_every_tuple(cluster: ProcessCluster) -> None:
    root = project_copy(cluster, "wordcount")
    out = cluster.base / f"wc-out-{uuid.uuid4().hex[:6]}"
    out.mkdir()
    name = f"spwc-{uuid.uuid4().hex[:6]}"
    result = submit_from(root, "topologies/wordcount.py", "-e", "prod", "--name", name, "--workers", "2",
                         "-c", f"wordcount.out.dir={out}")
    assert result.returncode == 0, result.stdout + result.stderr
    try:
        topology_id = wait_until(lambda: cluster.topology_id(name), 30, "the topology to be listed")
        cluster.wait_workers(topology_id, 2)
        # prod: 2 spout tasks x 400 words (config.json's options), ids "<task>-<n>"
        wait_until(lambda: len(set(acked_ids(out))) >= 800, 120, "all 800 spout tuples acked")
        ids = acked_ids(out)
        assert len(set(ids)) == 800
        info = cluster.topology_info(topology_id)
        tasks = {e.component_id: 0 for e in info.executors}
        for e in info.executors:
            tasks[e.component_id] += e.executor_info.task_end - e.executor_info.task_start + 1
        assert tasks["count_bolt"] == 3 and tasks["word_spout"] == 2
    finally:
        cluster.kill_topology(name)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_multilang_bolt_on_the_cluster_acks_every_tuple_after_a_crash(cluster: ProcessCluster) -> None:
    """The topology's directory (with upper_bolt.js) is the code archive; the Node process of one
    task exits once on the word "crash": its tuple fails, is replayed, and the task restarts."""
    out = cluster.base / f"ml-out-{uuid.uuid4().hex[:6]}"
    out.mkdir()
    name = f"ml-{uuid.uuid4().hex[:6]}"
    cluster.cli("submit", str(FIXTURES / "multilang" / "multilang_words.py"), "--name", name, "--workers", "2",
                "-c", f"multilang.test.dir={out}", "-c", "multilang.test.count=200",
                "-c", "topology.message.timeout.secs=10")
    try:
        topology_id = wait_until(lambda: cluster.topology_id(name), 30, "the topology to be listed")
        cluster.wait_workers(topology_id, 2)
        wait_until(lambda: len(set(acked_ids(out))) >= 200, 120, "all 200 words acked")
        assert set(acked_ids(out)) == {str(i) for i in range(200)}
        assert (out / "crashed").exists()
        with cluster.client() as client:
            errors = client.getTopologyInfo(topology_id).errors.get("upper") or []
        assert any("exited (exit code 3)" in e.error for e in errors), errors
    finally:
        cluster.kill_topology(name)
