"""The operator CLI end to end: `stormpy submit/list/deactivate/activate/rebalance/kill` as
subprocesses against a real Nimbus and ZooKeeper, and their one-line failures."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stormpy.client.commands import format_table, format_uptime
from stormpy.client.nimbus_client import open_client
from stormpy.client.submit import code_files
from stormpy.cluster_state import ClusterState
from stormpy.testing import DaemonProcess, free_port, wait_until
from stormpy.testing.processes import write_daemon_config

ROOT = Path(__file__).resolve().parents[2]

WORDCOUNT = '''
from stormpy import Bolt, Grouping, Spout, Topology
from helpers import WORDS


class Words(Spout):
    outputs = ["word"]

    def next_tuple(self):
        self.emit([WORDS[0]])


class Count(Bolt):
    outputs = ["word", "count"]

    def process(self, tup):
        self.emit([tup.values[0], 1])


class WordCount(Topology):
    config = {"topology.workers": 2, "topology.acker.executors": 0}
    words = Words.spec(par=2)
    count = Count.spec(inputs={words: Grouping.fields("word")}, par=4)
'''

BAD_FIELD = WORDCOUNT.replace('Grouping.fields("word")', 'Grouping.fields("nope")')


@pytest.fixture(scope="module")
def cli_conf(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("cli")
    return {**zookeeper.client_conf(f"/m/cli-{uuid.uuid4().hex[:8]}"),
            "storm.local.dir": str(base / "storm-local"), "storm.log.dir": str(base / "logs"),
            "storm.local.hostname": "127.0.0.1", "nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": free_port(),
            "nimbus.monitor.freq.secs": 1, "storm.zookeeper.session.timeout": 4000}


@pytest.fixture(scope="module")
def nimbus(cli_conf: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess("nimbus", cli_conf, tmp_path_factory.mktemp("cli-nimbus"))
    daemon.start()
    try:
        daemon.wait_for_port(cli_conf["nimbus.thrift.port"], timeout=60)
        yield daemon
    finally:
        daemon.stop(reason="module finished")


@pytest.fixture(scope="module")
def config_file(cli_conf: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_daemon_config(tmp_path_factory.mktemp("cli-config") / "storm.yaml", cli_conf)


@pytest.fixture
def topo_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "helpers.py").write_text("WORDS = ['storm']\n")
    (directory / "wordcount.py").write_text(WORDCOUNT)
    for skipped in (".git/config", "__pycache__/x.pyc", "venv/pyvenv.cfg", "venv/lib/big.py", "stale.pyc"):
        (directory / skipped).parent.mkdir(parents=True, exist_ok=True)
        (directory / skipped).write_text("skip me")
    return directory


def stormpy(*args: str, config: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "stormpy.cli", *args]
    if config is not None:
        argv += ["--config", str(config)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode != 0, result
    lines = [line for line in result.stderr.splitlines() if line.startswith("stormpy: error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_round_trip_from_the_shell(nimbus: DaemonProcess, config_file: Path, topo_dir: Path,
                                   cli_conf: dict[str, Any]) -> None:
    result = stormpy("submit", str(topo_dir / "wordcount.py"), "--name", "wc", "-c", "my.setting=[1, 2]",
                     "--workers", "3", config=config_file)
    assert result.returncode == 0, result.stderr
    assert "Submitted topology 'wc' as wc-" in result.stdout and "Uploading topology code" in result.stderr
    listing = stormpy("list", config=config_file)
    assert listing.returncode == 0, listing.stderr
    header, _rule, row = listing.stdout.splitlines()
    assert header.split() == ["NAME", "ID", "STATUS", "WORKERS", "EXECUTORS", "UPTIME"]
    assert row.split()[0] == "wc" and row.split()[2] == "ACTIVE"
    topology_id = row.split()[1]

    client = open_client("127.0.0.1", cli_conf["nimbus.thrift.port"])
    try:
        conf = json.loads(client.getTopologyConf(topology_id))
        code_dir = ClusterState(cli_conf)
        try:
            master = code_dir.assignment(topology_id).master_code_dir
        finally:
            code_dir.close()
        download = client.beginFileDownload(master + "/stormcode.zip")
        data = b""
        while chunk := client.downloadChunk(download):
            data += chunk
    finally:
        client.close()
    assert conf["topology.module"] == "wordcount" and conf["my.setting"] == [1, 2]
    assert conf["topology.workers"] == 3 and conf["topology.name"] == "wc"
    assert sorted(zipfile.ZipFile(io.BytesIO(data)).namelist()) == ["helpers.py", "wordcount.py"]

    for command, status in (("deactivate", "INACTIVE"), ("activate", "ACTIVE")):
        result = stormpy(command, "wc", config=config_file)
        assert result.returncode == 0 and f"{command.capitalize()}d topology 'wc'" in result.stdout, result
        assert stormpy("list", config=config_file).stdout.splitlines()[2].split()[2] == status

    result = stormpy("rebalance", "wc", "-w", "0", "-n", "2", "-e", "count=2", config=config_file)
    assert result.returncode == 0 and "Rebalancing topology 'wc' to 2 worker(s), count=2" in result.stdout, result
    one_line_error(stormpy("rebalance", "wc", "-e", "count=99", config=config_file), "1 to 4 executors")
    one_line_error(stormpy("submit", str(topo_dir / "wordcount.py"), "--name", "wc", config=config_file),
                   "already alive")

    result = stormpy("kill", "wc", "-w", "1", config=config_file)
    assert result.returncode == 0 and "Killed topology 'wc'" in result.stdout, result
    wait_until(lambda: "No topologies running." in stormpy("list", config=config_file).stdout, 60,
               "the killed topology to disappear from `stormpy list`")
    one_line_error(stormpy("kill", "wc", config=config_file), "'wc' is not alive")


@pytest.mark.parametrize("command", [["list"], ["kill", "x"], ["activate", "x"], ["deactivate", "x"],
                                     ["rebalance", "x"]])
def test_unreachable_nimbus_is_one_line(command: list[str]) -> None:
    port = free_port()
    result = stormpy(*command, "-c", f"nimbus.thrift.port={port}", "-c", "nimbus.seeds=[127.0.0.1]")
    one_line_error(result, f"cannot reach Nimbus at 127.0.0.1:{port}")


def test_not_alive_is_one_line(nimbus: DaemonProcess, config_file: Path) -> None:
    for command in ("activate", "deactivate", "kill", "rebalance"):
        one_line_error(stormpy(command, "ghost", config=config_file), "topology 'ghost' is not alive")


def test_bad_topology_files_fail_before_uploading(nimbus: DaemonProcess, config_file: Path, tmp_path: Path) -> None:
    syntax = tmp_path / "broken.py"
    syntax.write_text("def oops(:\n")
    one_line_error(stormpy("submit", str(syntax), config=config_file), "broken.py:1", "syntax error")
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    one_line_error(stormpy("submit", str(empty), config=config_file), "no Topology subclass")
    (tmp_path / "helpers.py").write_text("WORDS = ['x']\n")
    bad = tmp_path / "badfield.py"
    bad.write_text(textwrap.dedent(BAD_FIELD))
    # an undeclared grouping field fails where the Topology class is defined (streamparse's rule)
    one_line_error(stormpy("submit", str(bad), config=config_file), "badfield.py:", "'nope'")
    one_line_error(stormpy("submit", str(tmp_path / "missing.py"), config=config_file), "not found")
    good = tmp_path / "good.py"
    good.write_text(textwrap.dedent(WORDCOUNT))
    one_line_error(stormpy("submit", str(good), "--name", "a/b", config=config_file), "invalid topology:", "'/'")
    assert not list((Path(json.loads(config_file.read_text())["storm.local.dir"]) / "nimbus" / "inbox").glob("*"))


def test_code_files_skip_vcs_venvs_and_caches(topo_dir: Path) -> None:
    assert sorted(name for _path, name in code_files(topo_dir)) == ["helpers.py", "wordcount.py"]


def test_formatting_helpers() -> None:
    assert format_uptime(5) == "5s" and format_uptime(65) == "1m 5s" and format_uptime(90061) == "1d 1h 1m"
    table = format_table(["NAME", "N"], [["a", 1], ["bb", 10]])
    assert table.splitlines() == ["NAME   N", "----  --", "a      1", "bb    10"]



def test_nimbus_addresses_from_seeds_and_old_nimbus_host() -> None:
    from stormpy.client.nimbus_client import nimbus_addresses
    from stormpy.config import Config

    assert nimbus_addresses(Config()) == [("localhost", 6627)]
    assert nimbus_addresses(Config({"nimbus.host": "old", "nimbus.thrift.port": 7000})) == [("old", 7000)]
    assert nimbus_addresses(Config({"nimbus.seeds": ["a", "b:9"], "nimbus.host": "old"})) == [("a", 6627), ("b", 9)]
