"""The REAL streamparse 5 ``sparse`` program against stormpy's Nimbus: ``sparse list``,
``sparse submit -j <jar>`` (and, with Leiningen present, plain ``sparse submit``, which builds the
JAR with ``lein jar``), ``sparse kill``; the submitted topology runs and acks every spout tuple.

streamparse must never be importable by stormpy's own processes (they use the import alias), so
the real one lives in a separate virtualenv named by ``SPARSE_VENV`` (``.ci/run`` makes one,
non-fatally; by hand: ``python3 -m venv /tmp/sparse-venv && /tmp/sparse-venv/bin/pip install
streamparse``). Without it these tests report themselves skipped with the reason.

The cluster is real: the session's ZooKeeper, a ``stormpy nimbus`` and a ``stormpy supervisor``
process; its workers are killed at teardown whatever happened.
"""
from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import subprocess
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from stormpy.client.nimbus_client import connect
from stormpy.testing import free_port, wait_until

pytestmark = pytest.mark.timeout(300)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "wordcount"

#: The streamparse quickstart's project.clj minus the Storm dependencies: this machine reaches no
#: Maven repository, and ``lein jar`` needs none of them to pack ``_resources/`` (sparse's layout).
PROJECT_CLJ = """(defproject wordcount "0.0.1-SNAPSHOT"
  :resource-paths ["_resources"]
  :target-path "_build"
  :min-lein-version "2.0.0"
  :jvm-opts ["-client"]
  :dependencies  []
  :jar-exclusions     [#"log4j\\.properties" #"org\\.apache\\.storm\\.(?!flux)" #"trident" #"META-INF" #"meta-inf" #"\\.yaml"]
  :uberjar-exclusions [#"log4j\\.properties" #"org\\.apache\\.storm\\.(?!flux)" #"trident" #"META-INF" #"meta-inf" #"\\.yaml"]
  )
"""

FAST = {"nimbus.monitor.freq.secs": 1, "nimbus.task.launch.secs": 30, "nimbus.task.timeout.secs": 10,
        "supervisor.heartbeat.frequency.secs": 1, "supervisor.monitor.frequency.secs": 1,
        "supervisor.sync.freq.secs": 1, "supervisor.worker.start.timeout.secs": 60,
        "supervisor.worker.shutdown.sleep.secs": 1, "worker.heartbeat.frequency.secs": 1,
        "task.heartbeat.frequency.secs": 1, "task.refresh.poll.secs": 1}


@pytest.fixture
def program() -> Path:
    """``$SPARSE_VENV/bin/sparse`` if that venv really has streamparse; else skip with the reason
    (before any daemon starts: a skip costs nothing)."""
    venv = os.environ.get("SPARSE_VENV")
    if not venv:
        pytest.skip("SPARSE_VENV is not set (python3 -m venv DIR && DIR/bin/pip install streamparse; "
                    "then SPARSE_VENV=DIR)")
    program, python = Path(venv) / "bin" / "sparse", Path(venv) / "bin" / "python"
    if not program.exists() or not python.exists():
        pytest.skip(f"{venv} has no bin/sparse: streamparse is not installed there")
    probe = subprocess.run([str(python), "-c", "import streamparse; print(streamparse.__version__)"],
                           capture_output=True, text=True, timeout=60, env=sparse_env())
    if probe.returncode != 0:
        pytest.skip(f"streamparse is not importable in {venv}: {probe.stderr.strip().splitlines()[-1:]}")
    if not probe.stdout.startswith("5."):
        pytest.skip(f"{venv} has streamparse {probe.stdout.strip()}, these tests are for streamparse 5")
    return program


def sparse_env() -> dict[str, str]:
    """The environment a user's shell would give sparse: no stormpy on PYTHONPATH (sparse must use
    its own streamparse), LEIN_ROOT because CI runs as root (sparse refuses otherwise)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "LEIN_ROOT": "1", "PYTHONWARNINGS": "ignore"}


def sparse(program: Path, project: Path, *args: str, timeout: float = 120, expect_rc: int = 0) -> str:
    result = subprocess.run([str(program), *args], cwd=project, env=sparse_env(), capture_output=True,
                            text=True, timeout=timeout)
    out = result.stdout + result.stderr
    assert result.returncode == expect_rc, f"sparse {' '.join(args)} exited {result.returncode}:\n{out}"
    return out


JAVA_TOPOLOGY = """from streamparse import Grouping, JavaBolt, Topology

from spouts.words import WordSpout


class JavaCount(Topology):
    word_spout = WordSpout.spec()
    count_bolt = JavaBolt.spec(full_class_name="com.example.CountBolt", args_list=["x", 1],
                               inputs={word_spout: Grouping.fields("word")}, outputs=["word", "count"])
"""


@pytest.fixture
def sparse_cluster(program: Path, cluster_conf: dict[str, Any], daemons: Any,
                   tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Nimbus + one supervisor (2 slots) as processes; their workers are SIGKILLed at teardown."""
    conf = {**cluster_conf, **FAST}
    daemons.start("nimbus", conf, ready_port=conf["nimbus.thrift.port"])
    local = tmp_path / "supervisor-local"
    sup_conf = {**conf, "storm.local.dir": str(local), "storm.log.dir": str(tmp_path / "supervisor-logs"),
                "supervisor.slots.ports": [free_port(), free_port()], "logviewer.port": free_port()}
    daemons.start("supervisor", sup_conf)

    def supervisors() -> int:
        with connect(conf) as client:
            return len(client.getClusterInfo().supervisors)
    wait_until(supervisors, 60, "the supervisor to register with Nimbus", interval=0.5)
    try:
        yield conf
    finally:
        daemons.stop_all(reason="test teardown")
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info["cmdline"] or []
            if "stormpy.worker" in " ".join(cmd) and any(str(local) in part for part in cmd):
                try:
                    proc.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    pass


def project_for(conf: dict[str, Any], root: Path) -> Path:
    """The quickstart fixture (streamparse's layout) with config.json pointing at this Nimbus,
    without ssh (use_ssh_for_nimbus) and without worker virtualenvs (use_virtualenv)."""
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__"))
    config = json.loads((root / "config.json").read_text())
    for env in config["envs"].values():
        env.update({"nimbus": f"127.0.0.1:{conf['nimbus.thrift.port']}", "use_ssh_for_nimbus": False,
                    "use_virtualenv": False})
    (root / "config.json").write_text(json.dumps(config, indent=2))
    return root


def build_jar(project: Path, target: Path) -> Path:
    """What ``lein jar`` makes of a streamparse project: META-INF/MANIFEST.MF and src/ as resources/."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: stormpy tests\r\n\r\n")
        for path in sorted((project / "src").rglob("*.py")):
            jar.write(path, "resources/" + path.relative_to(project / "src").as_posix())
    return target


def acked(out_dir: Path) -> set[str]:
    return {line for path in out_dir.glob("acked-*.txt") for line in path.read_text().split()}


def listed(program: Path, project: Path, name: str) -> bool:
    """Whether ``sparse list`` shows ``name`` (its table wraps names, so look for the id's start)."""
    out = sparse(program, project, "list", "-e", "beta")
    return "No topologies found." not in out and f"| {name[:5]}" in out


def test_sparse_list_submit_jar_kill(program: Path, sparse_cluster: dict[str, Any], tmp_path: Path) -> None:
    project = project_for(sparse_cluster, tmp_path / "wordcount")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    jar = build_jar(project, tmp_path / "wordcount.jar")
    name = f"sp{uuid.uuid4().hex[:6]}"

    assert "No topologies found." in sparse(program, project, "list", "-e", "beta")
    out = sparse(program, project, "submit", "-e", "beta", "-n", "wordcount", "-N", name, "-j", str(jar),
                 "-o", f"wordcount.out.dir={out_dir}")
    assert f"Using prebuilt JAR: {jar}" in out and f"Submitting {name} topology to nimbus...done" in out, out
    # beta: 1 spout task x wordcount.words.limit 100 (config.json's options), every one acked
    wait_until(lambda: len(acked(out_dir)) >= 100, 120, "all 100 spout tuples acked")
    assert len(acked(out_dir)) == 100
    with connect(sparse_cluster) as client:
        [summary] = [t for t in client.getClusterInfo().topologies if t.name == name]
        conf = json.loads(client.getTopologyConf(summary.id))
    assert (summary.status, summary.num_tasks) == ("ACTIVE", 3)     # spout, count bolt, acker
    assert summary.owner == getpass.getuser()     # sparse names no submitter: Nimbus's user, as in Storm
    assert conf["topology.original_name"] == "wordcount" and conf["wordcount.words.limit"] == 100

    table = sparse(program, project, "list", "-e", "beta")
    assert "ACTI" in table and f"| {name[:5]}" in table, table

    # -f with the same name kills the running one first (sparse polls `list` until it is gone)
    out = sparse(program, project, "submit", "-e", "beta", "-n", "wordcount", "-N", name, "-j", str(jar),
                 "-f", "--wait", "1", "-i")
    assert f'Killing current "{name}" topology.' in out and "Killed." in out, out
    with connect(sparse_cluster) as client:
        [summary] = [t for t in client.getClusterInfo().topologies if t.name == name]
    assert summary.status == "INACTIVE"                              # -i: submitted inactive

    sparse(program, project, "kill", "-e", "beta", "-n", name, "--wait", "1")
    wait_until(lambda: not listed(program, project, name), 60, f"sparse list to stop showing {name}",
               interval=1)

    # a JavaBolt: streamparse sends Storm's JavaObject (ComponentObject field 3), Nimbus refuses it
    (project / "topologies" / "javacount.py").write_text(JAVA_TOPOLOGY)
    out = sparse(program, project, "submit", "-e", "beta", "-n", "javacount", "-j", str(jar), expect_rc=1)
    assert "InvalidTopologyException" in out and "names 'com.example.CountBolt', not a Python" in out \
        and "cannot run in a stormpy worker" in out, out
    assert "No topologies found." in sparse(program, project, "list", "-e", "beta")


@pytest.fixture
def lein() -> str:
    found = shutil.which("lein")
    if found is None:
        pytest.skip("lein (Leiningen) is not installed: sparse cannot build its JAR")
    return found


def test_sparse_submit_builds_the_jar_with_lein(program: Path, lein: str, sparse_cluster: dict[str, Any],
                                                tmp_path: Path) -> None:
    """Plain ``sparse submit``: sparse copies src/ to _resources/resources, runs ``lein jar`` and
    uploads that JAR (which also carries src/ top-level, lein's default source path)."""
    project = project_for(sparse_cluster, tmp_path / "wordcount")
    (project / "project.clj").write_text(PROJECT_CLJ)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    name = f"sl{uuid.uuid4().hex[:6]}"
    out = sparse(program, project, "submit", "-e", "beta", "-n", "wordcount", "-N", name,
                 "-o", f"wordcount.out.dir={out_dir}", timeout=240)
    assert "JAR created:" in out and f"Submitting {name} topology to nimbus...done" in out, out
    wait_until(lambda: len(acked(out_dir)) >= 100, 120, "all 100 spout tuples acked")
    assert len(acked(out_dir)) == 100
    sparse(program, project, "kill", "-e", "beta", "-n", name, "--wait", "1")
    wait_until(lambda: not listed(program, project, name), 60, f"sparse list to stop showing {name}",
               interval=1)
