"""A Nimbus restarted after SIGKILL accepts writes at once (issue 20 item 3).

Its predecessor's ZooKeeper session still holds ``/leader-lock`` until it expires. When that
lock node provably belongs to this Nimbus's own previous incarnation (same host:port, same
``storm.local.dir`` with the session recorded in it), the restarted Nimbus removes it and leads
at once: ``stormpy kill`` succeeds within 12 s of ``stormpy list`` answering. Otherwise (here: a
fresh local dir) nothing of the old session is touched and the CLI waits for the leader,
printing one line, up to ``nimbus.leader.wait.secs``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nimbus_helpers import simple_topology, submit
from stormpy.testing import wait_for_leader

REPO = Path(__file__).resolve().parents[2]


def cli(conf: dict[str, Any], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    conf_file = tmp_path / "client.json"
    conf_file.write_text(json.dumps({k: conf[k] for k in ("storm.zookeeper.servers", "storm.zookeeper.port",
                                                          "storm.zookeeper.root", "nimbus.seeds",
                                                          "nimbus.thrift.port") if k in conf}
                                    | {"nimbus.leader.wait.secs": 30}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "stormpy.cli", *args, "--config", str(conf_file)],
                          capture_output=True, text=True, timeout=90, env=env)


def start(daemons: Any, conf: dict[str, Any]) -> Any:
    return daemons.start("nimbus", conf, ready_port=conf["nimbus.thrift.port"], timeout=60)


def test_restarted_nimbus_accepts_kill_at_once(daemons: Any, cluster_conf: dict[str, Any], tmp_path: Path) -> None:
    conf = {**cluster_conf, "storm.zookeeper.session.timeout": 20000}   # expiry beyond the 12 s
    nimbus = start(daemons, conf)
    wait_for_leader(conf, 60)
    submit(conf, "quick", simple_topology())
    nimbus.kill(signal.SIGKILL)
    start(daemons, conf)
    deadline = time.monotonic() + 60
    while True:
        listed = cli(conf, tmp_path, "list")
        if listed.returncode == 0:
            break
        assert time.monotonic() < deadline, listed.stderr
    answered = time.monotonic()
    assert "quick" in listed.stdout
    killed = cli(conf, tmp_path, "kill", "quick", "-w", "0")
    took = time.monotonic() - answered
    assert killed.returncode == 0, killed.stderr
    assert took < 12.0, f"kill took {took:.1f}s after list answered"   # a CLI start on a loaded machine; not the 20 s expiry
    assert "Waiting" not in killed.stderr + listed.stderr


def test_foreign_stale_lock_is_waited_for_with_one_line(daemons: Any, cluster_conf: dict[str, Any],
                                                        tmp_path: Path) -> None:
    nimbus = start(daemons, cluster_conf)
    wait_for_leader(cluster_conf, 60)
    submit(cluster_conf, "patient", simple_topology())
    nimbus.kill(signal.SIGKILL)
    # Same host:port, another local dir: it cannot prove the stale lock is its own, so it
    # leaves it to expire (4 s here) and keeps the topology whose code it lacks.
    start(daemons, {**cluster_conf, "storm.local.dir": str(tmp_path / "other-local")})
    killed = cli(cluster_conf, tmp_path, "kill", "patient", "-w", "0")
    assert killed.returncode == 0, killed.stdout + killed.stderr
    waits = [line for line in killed.stderr.splitlines() if line.startswith("Waiting up to 30s for a leader Nimbus")]
    assert len(waits) == 1, killed.stderr
    assert "Killed topology 'patient'" in killed.stdout
