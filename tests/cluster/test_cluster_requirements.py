"""Topology dependencies on a real cluster (issue 28): two topologies pin different versions of one
small package (wheels built here, offline, installed with ``supervisor.pip.no.index``), one with
``stormpy submit -r FILE --wheels DIR``, the other through a streamparse project's
``virtualenvs/<name>.txt``; each bolt imports its own version. A pin no wheel satisfies is a
topology error in ``stormpy list`` and the UI while the supervisor keeps running and retrying.
"""
from __future__ import annotations

import json
import textwrap
import urllib.request
import uuid
from pathlib import Path

import pytest

from process_cluster import ProcessCluster
from stormpy.testing import wait_until
from stormpy.testing.wheels import build_wheel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CLUSTER_SUPERVISORS = 1
CLUSTER_PORTS = 3
CLUSTER_CONF = {"supervisor.pip.no.index": True, "supervisor.pip.retry.secs": 2}

PACKAGE = "stormpy-probe-pkg"

PROBE_TOPOLOGY = textwrap.dedent('''\
    """Writes which stormpy_probe_pkg its bolt imported, and from which interpreter."""
    import json
    import os
    import sys
    import time

    from stormpy import Bolt, Grouping, Spout, Topology


    class TickSpout(Spout):
        outputs = ["n"]

        def initialize(self, stormconf, context):
            self.n = 0

        def next_tuple(self):
            time.sleep(0.2)
            self.n += 1
            self.emit([self.n])


    class VersionBolt(Bolt):
        outputs = []

        def initialize(self, stormconf, context):
            import stormpy_probe_pkg

            out = os.path.join(stormconf["probe.out.dir"], stormconf["probe.name"] + ".json")
            with open(out + ".tmp", "w") as f:
                json.dump({"version": stormpy_probe_pkg.__version__, "prefix": sys.prefix}, f)
            os.replace(out + ".tmp", out)

        def process(self, tup):
            pass


    class Probe(Topology):
        ticks = TickSpout.spec()
        version = VersionBolt.spec(inputs={ticks: Grouping.SHUFFLE})
    ''')


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    for version in ("1.0", "2.0"):
        build_wheel(out, PACKAGE, version)
    return out


def probe_file(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "probe.py"
    path.write_text(PROBE_TOPOLOGY)
    return path


def reported(out_dir: Path, name: str) -> dict | None:
    path = out_dir / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_two_topologies_each_import_their_own_pinned_version(cluster: ProcessCluster, wheels: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    suffix = uuid.uuid4().hex[:6]
    # 1: plain `stormpy submit -r requirements.txt --wheels DIR`
    plain = probe_file(tmp_path / "plain")
    requirements = tmp_path / "plain" / "requirements.txt"
    requirements.write_text(f"{PACKAGE}==1.0\n")
    one = f"pinned-one-{suffix}"
    # 2: a streamparse project: virtualenvs/<name>.txt is picked up as `sparse submit` does
    project = tmp_path / "project"
    two = f"pinned-two-{suffix}"
    topology = probe_file(project / "topologies")
    (project / "config.json").write_text(json.dumps({"topology_specs": "topologies/",
                                                     "virtualenv_specs": "virtualenvs", "envs": {}}))
    (project / "virtualenvs").mkdir()
    (project / "virtualenvs" / f"{two}.txt").write_text(f"{PACKAGE}==2.0\n")
    common = ["-c", f"probe.out.dir={json.dumps(str(out))}", "--wheels", str(wheels)]
    cluster.cli("submit", str(plain), "--name", one, "-r", str(requirements), "-c", f"probe.name={one}", *common)
    cluster.cli("submit", str(topology), "--name", two, "-c", f"probe.name={two}", *common)
    try:
        first = wait_until(lambda: reported(out, one), 180, f"the bolt of {one} to report its version")
        second = wait_until(lambda: reported(out, two), 180, f"the bolt of {two} to report its version")
        assert first["version"] == "1.0" and second["version"] == "2.0"
        assert first["prefix"] != second["prefix"]            # two virtualenvs, one per requirements hash
        venvs = cluster.base / "supervisor-0" / "local" / "supervisor" / "virtualenvs"
        assert {Path(first["prefix"]), Path(second["prefix"])} == set(venvs.iterdir())
        listing = cluster.cli("list").stdout
        assert one in listing and two in listing and "requirements not installed" not in listing
    finally:
        for name in (one, two):
            if cluster.topology_id(name) is not None:
                cluster.kill_topology(name)


def test_failed_install_is_a_topology_error_not_a_crash_loop(cluster: ProcessCluster, wheels: Path,
                                                             tmp_path: Path) -> None:
    name = f"unsatisfiable-{uuid.uuid4().hex[:6]}"
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"{PACKAGE}==9.9\n")         # no such wheel, and no index allowed
    cluster.cli("submit", str(probe_file(tmp_path / "topo")), "--name", name, "-r", str(requirements),
                "--wheels", str(wheels), "-c", "probe.out.dir=\"/nonexistent\"", "-c", f"probe.name={name}")
    try:
        topology_id = cluster.topology_id(name)
        line = wait_until(lambda: next((ln for ln in cluster.cli("list").stdout.splitlines()
                                        if ln.startswith(f"WARNING {name}: ")), None), 120,
                          f"stormpy list to show why {name} has no workers")
        assert "requirements not installed on 127.0.0.1" in line and "9.9" in line, line
        url = f"http://127.0.0.1:{cluster.conf['ui.port']}/api/v1/topology/{topology_id}"
        with urllib.request.urlopen(url, timeout=30) as resp:
            doc = json.loads(resp.read())
        assert "requirements not installed" in doc["schedulerInfo"]
        page = f"http://127.0.0.1:{cluster.conf['ui.port']}/topology.html?id={topology_id}"
        with urllib.request.urlopen(page, timeout=30) as resp:
            html = resp.read().decode()
        assert "Scheduler Info" in html and "requirements not installed on 127.0.0.1" in html
        assert cluster.worker_pids(topology_id) == []
        assert cluster.supervisors[0].is_alive()              # the supervisor reports and retries; it does not die
        errors = cluster.cli("errors", name).stdout
        assert "__requirements" in errors and "requirements not installed" in errors
    finally:
        if cluster.topology_id(name) is not None:
            cluster.kill_topology(name)
