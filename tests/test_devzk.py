"""`stormpy dev-zookeeper`: a real ZooKeeper from the pyspark jars, clean stop, clear errors."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from stormpy.cluster_state import ClusterState
from stormpy.testing import DaemonProcess, free_port
from stormpy.testing.zookeeper import four_letter_word
from stormpy.thrift import storm


def test_dev_zookeeper_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    daemon = DaemonProcess("dev-zookeeper", {"storm.zookeeper.port": port,
                                             "dev.zookeeper.path": str(tmp_path / "zk")}, tmp_path / "logs")
    daemon.start()
    try:
        daemon.wait_ready(lambda: four_letter_word("127.0.0.1", port) == "imok", 90, "ZooKeeper to answer ruok")
        conf: dict[str, Any] = {"storm.zookeeper.servers": ["127.0.0.1"], "storm.zookeeper.port": port}
        with ClusterState(conf) as state:
            state.set_storm_base("t-1-1", storm.StormBase(name="t", status=storm.TopologyStatus.ACTIVE, num_workers=1))
            assert state.active_storms() == ["t-1-1"]
        daemon.kill(signal.SIGTERM)
        assert daemon.proc.wait(timeout=30) == 0, daemon.log_tail()
        assert four_letter_word("127.0.0.1", port) == "", "the Java server must be gone too"
        assert (tmp_path / "zk" / "data").is_dir() and (tmp_path / "zk" / "zookeeper.log").exists()
    finally:
        daemon.stop(reason="test finished")


def test_missing_java_is_one_clear_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)    # no java here
    result = subprocess.run([sys.executable, "-m", "stormpy.cli", "dev-zookeeper", "-c",
                             f"storm.zookeeper.port={free_port()}", "-c", f"dev.zookeeper.path={tmp_path / 'zk'}"],
                            capture_output=True, text=True, timeout=60, env=env,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("stormpy: error: Java is not installed")
    assert "Traceback" not in result.stderr


def test_port_in_use_is_one_clear_line(zookeeper: Any, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "stormpy.cli", "dev-zookeeper", "-c",
                             f"storm.zookeeper.port={zookeeper.port}", "-c", f"dev.zookeeper.path={tmp_path}"],
                            capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 1 and "already in use" in result.stderr and "Traceback" not in result.stderr


def zookeeper_distribution(root: Path) -> Path:
    """A directory laid out like an unpacked apache-zookeeper-*-bin: its jars in lib/ (here the
    ones the pyspark wheel carries, linked, so the test needs no download)."""
    from stormpy.testing.zookeeper import pyspark_jars_dir

    lib = root / "lib"
    lib.mkdir(parents=True)
    for jar in pyspark_jars_dir().glob("*.jar"):
        (lib / jar.name).symlink_to(jar)
    return root


def test_dev_zookeeper_runs_a_distribution_given_with_zookeeper_home(tmp_path: Path) -> None:
    port = free_port()
    home = zookeeper_distribution(tmp_path / "apache-zookeeper-bin")
    daemon = DaemonProcess(["dev-zookeeper", "--zookeeper-home", str(home)],
                           {"storm.zookeeper.port": port, "dev.zookeeper.path": str(tmp_path / "zk")},
                           tmp_path / "logs", name="dev-zookeeper")
    daemon.start()
    try:
        daemon.wait_ready(lambda: four_letter_word("127.0.0.1", port) == "imok", 90, "ZooKeeper to answer ruok")
        java = [p for p in __import__("psutil").Process(daemon.proc.pid).children(recursive=True)
                if "org.apache.zookeeper.server.ZooKeeperServerMain" in p.cmdline()]
        assert java and f"{home.resolve() / 'lib'}{os.sep}*" in java[0].cmdline()   # the distribution's jars
        # the image's HEALTHCHECK command, pointed at this server
        health = subprocess.run([sys.executable, "-m", "stormpy.healthcheck", "dev-zookeeper", "--config",
                                 str(daemon.config_path)], capture_output=True, text=True, timeout=30)
        assert health.returncode == 0 and "imok" in health.stdout, health.stderr
    finally:
        daemon.stop(reason="test finished")
    health = subprocess.run([sys.executable, "-m", "stormpy.healthcheck", "dev-zookeeper", "--config",
                             str(daemon.config_path)], capture_output=True, text=True, timeout=30)
    assert health.returncode == 1 and health.stderr.startswith("unhealthy: ZooKeeper does not answer")


def test_zookeeper_home_without_jars_is_one_clear_line(tmp_path: Path) -> None:
    env = {**os.environ, "ZOOKEEPER_HOME": str(tmp_path)}     # the environment variable, not the option
    result = subprocess.run([sys.executable, "-m", "stormpy.cli", "dev-zookeeper", "-c",
                             f"storm.zookeeper.port={free_port()}", "-c", f"dev.zookeeper.path={tmp_path / 'zk'}"],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"stormpy: error: no zookeeper-*.jar in {tmp_path.resolve()} or {tmp_path.resolve() / 'lib'}: the ZooKeeper "
        "home must be an unpacked apache-zookeeper-*-bin distribution")
