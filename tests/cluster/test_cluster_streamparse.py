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
from typing import Any

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
        def errors() -> list[Any]:   # written to ZooKeeper by the worker's reporter thread, maybe after the acks
            with cluster.client() as client:
                return client.getTopologyInfo(topology_id).errors.get("upper") or []

        wait_until(lambda: any("exited (exit code 3)" in e.error for e in errors()), 30,
                   "the subprocess's exit to be the component's error")
    finally:
        cluster.kill_topology(name)


# ---------------------------------------------------------------- streamparse's own Thrift calls

def storm_client(cluster: ProcessCluster):
    """A client from Storm's IDL (not stormpy's), framed binary, as streamparse builds it."""
    import thriftpy2
    from thriftpy2.protocol import TBinaryProtocolFactory
    from thriftpy2.rpc import make_client
    from thriftpy2.transport import TFramedTransportFactory

    idl = thriftpy2.load(str(FIXTURES / "storm_client.thrift"), module_name="storm_client_thrift")
    client = make_client(idl.Nimbus, "127.0.0.1", cluster.conf["nimbus.thrift.port"],
                         proto_factory=TBinaryProtocolFactory(), trans_factory=TFramedTransportFactory(),
                         timeout=30000)
    return idl, client


def build_jar(path: Path) -> None:
    """What ``sparse submit`` uploads: a JAR whose resources/ holds the project's src/."""
    import zipfile

    src = FIXTURES / "wordcount" / "src"
    with zipfile.ZipFile(path, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        jar.writestr("org/apache/storm/flux/Flux.class", b"\xca\xfe\xba\xbe")
        for file in sorted(src.rglob("*.py")):
            jar.write(file, f"resources/{file.relative_to(src).as_posix()}")


def test_sparse_list_and_submit_jar_through_storms_idl(cluster: ProcessCluster) -> None:
    from packaging.version import Version

    idl, client = storm_client(cluster)
    name = f"sparse-{uuid.uuid4().hex[:6]}"
    out = cluster.base / f"sparse-out-{uuid.uuid4().hex[:6]}"
    out.mkdir()
    try:
        summary = client.getClusterInfo()                        # sparse list
        assert all(t.name != name for t in summary.topologies)
        # nimbus_storm_version(): streamparse takes its Storm >= 1.1 path only on a parseable version
        assert Version(summary.nimbuses[0].version) >= Version("1.1.0")
        assert client.getLeader().isLeader
        assert client.isTopologyNameAllowed(name) is True
        assert client.isTopologyNameAllowed("bad/name") is False
        json.loads(client.getNimbusConf())

        jar = cluster.base / f"{name}.jar"
        build_jar(jar)
        location = client.beginFileUpload()
        data = jar.read_bytes()
        for start in range(0, len(data), 1000):
            client.uploadChunk(location, data[start:start + 1000])
        client.finishFileUpload(location)

        def shell(script: str):
            return idl.ComponentObject(shell=idl.ShellComponent(execution_command="streamparse_run", script=script))

        spout_common = idl.ComponentCommon(inputs={}, streams={"default": idl.StreamInfo(["word"], False)},
                                           parallelism_hint=2, json_conf="{}")
        bolt_common = idl.ComponentCommon(
            inputs={idl.GlobalStreamId("word_spout", "default"): idl.Grouping(fields=["word"])},
            streams={"default": idl.StreamInfo(["word", "count"], False)}, parallelism_hint=2,
            json_conf=json.dumps({"wordcount.bolt.flag": "from-jar"}))
        topology = idl.StormTopology(
            spouts={"word_spout": idl.SpoutSpec(shell("spouts.words.WordSpout"), spout_common)},
            bolts={"count_bolt": idl.Bolt(shell("bolts.wordcount.WordCountBolt"), bolt_common)}, state_spouts={})
        conf = {"topology.workers": 2, "wordcount.words.limit": 150, "wordcount.out.dir": str(out),
                "topology.python.path": "/nowhere/bin/python", "streamparse.version": "5.0.0"}
        client.submitTopologyWithOpts(name, location, json.dumps(conf), topology,
                                      idl.SubmitOptions(initial_status=idl.TopologyInitialStatus.ACTIVE))
        assert client.isTopologyNameAllowed(name) is False

        topology_id = wait_until(lambda: cluster.topology_id(name), 30, "the sparse topology to be listed")
        cluster.wait_workers(topology_id, 2)
        wait_until(lambda: len(set(acked_ids(out))) >= 300, 120, "all 300 words of the JAR topology acked")
        page = client.getTopologyPageInfo(topology_id, ":all-time", False)
        assert page.name == name and page.num_tasks >= 4 and json.loads(page.topology_conf)["wordcount.words.limit"] == 150
        comp = client.getComponentPageInfo(topology_id, "count_bolt", ":all-time", False)
        assert comp.component_type == idl.ComponentType.BOLT and comp.num_tasks == 2
        assert any(t.name == name for t in client.getClusterInfo().topologies)
    finally:
        if cluster.topology_id(name) is not None:
            client.killTopologyWithOpts(name, idl.KillOptions(wait_secs=0))
        client.close()
