"""The README's cluster walkthrough, run literally (issue 20).

The shell commands of the first ``bash`` block under "## Running a cluster" are taken from the
README as they are written and run one by one through ``bash`` in a scratch directory holding a
copy of ``examples/``: the daemons (``stormpy dev-zookeeper``/``nimbus``/``supervisor``, the
"shell N" lines) in the background, each in a process group of its own; the client commands in
the foreground, each of which must exit 0. At the end every daemon, and every worker its
supervisors forked, is stopped by PID.

The walkthrough uses the default ports (ZooKeeper 2181, Nimbus 6627, log viewers 8000/8001,
worker ports 6700-6703 and 6710-6711) and the default ``dev.zookeeper.path``: when one of those
is taken (another cluster on this machine), the test skips and says which.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from stormpy import config as cfg
from stormpy.testing import wait_until
from stormpy.testing.processes import log_tail, port_open
from stormpy.testing.zookeeper import ZooKeeperUnavailable, java_executable, pyspark_jars_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
DAEMONS = ("dev-zookeeper", "nimbus", "supervisor", "ui", "logviewer")


def walkthrough() -> list[str]:
    """The command lines of the walkthrough's first bash block (comment-only lines dropped)."""
    section = (REPO / "README.md").read_text().split("\n## Running a cluster\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def daemon_kind(line: str) -> str | None:
    words = shlex.split(line, comments=True)
    return words[1] if len(words) > 1 and words[0] == "stormpy" and words[1] in DAEMONS else None


def ports_of(line: str) -> list[int]:
    """The ports the daemon on ``line`` binds: its ``-c`` overrides, else the defaults."""
    kind = daemon_kind(line)
    overrides = dict(re.findall(r"-c '?([\w.]+)=([^' ]+)'?", line))
    if kind == "dev-zookeeper":
        return [int(overrides.get(cfg.STORM_ZOOKEEPER_PORT.name, cfg.STORM_ZOOKEEPER_PORT.default))]
    if kind == "nimbus":
        return [int(overrides.get(cfg.NIMBUS_THRIFT_PORT.name, cfg.NIMBUS_THRIFT_PORT.default))]
    if kind == "supervisor":
        slots = overrides.get(cfg.SUPERVISOR_SLOTS_PORTS.name)
        ports = [int(p) for p in slots.strip("[]").split(",")] if slots else list(cfg.SUPERVISOR_SLOTS_PORTS.default)
        return ports + [int(overrides.get(cfg.LOGVIEWER_PORT.name, cfg.LOGVIEWER_PORT.default))]
    if kind == "ui":
        return [int(overrides.get(cfg.UI_PORT.name, cfg.UI_PORT.default))]
    return []


class Walkthrough:
    """The background daemons and their logs; ``stop`` ends them (and their workers) by PID."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p), "PYTHONUNBUFFERED": "1"}
        self.daemons: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.transcript: list[str] = []

    def start_daemon(self, line: str) -> subprocess.Popen[bytes]:
        out = self.workdir / f"daemon-{len(self.daemons)}.out"
        proc = subprocess.Popen(["bash", "-c", line], cwd=self.workdir, env=self.env, start_new_session=True,
                                stdout=open(out, "wb"), stderr=subprocess.STDOUT)
        self.daemons.append((line, proc, out))
        self.transcript.append(f"$ {line} &   (pid {proc.pid})")
        return proc

    def run(self, line: str, timeout: float = 180) -> str:
        result = subprocess.run(["bash", "-e", "-c", line], cwd=self.workdir, env=self.env, capture_output=True,
                                text=True, timeout=timeout)
        output = (result.stdout + result.stderr).strip()
        self.transcript.append(f"$ {line}\n{output}\n(exit {result.returncode})")
        assert result.returncode == 0, f"`{line}` failed as written:\n{output}\n\n{self.report()}"
        return output

    def worker_pids(self) -> list[int]:
        """Workers forked by this walkthrough's supervisors (their command line names our dirs)."""
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
            try:
                cmd = proc.info["cmdline"] or []
                if "stormpy.worker" in cmd and (str(self.workdir) in " ".join(cmd)
                                                or str(proc.info["cwd"] or "").startswith(str(self.workdir))):
                    found.append(proc.info["pid"])
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def report(self) -> str:
        parts = ["\n".join(self.transcript)]
        parts += [f"--- {line} ---\n{log_tail(out, 40)}" for line, _proc, out in self.daemons]
        return "\n".join(parts)

    def stop(self) -> None:
        for _line, proc, _out in reversed(self.daemons):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)    # its own group: bash and the daemon under it
        for _line, proc, _out in self.daemons:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        for pid in self.worker_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[Walkthrough]:
    try:
        java_executable()
        pyspark_jars_dir()
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"stormpy dev-zookeeper cannot run here: {exc}")
    taken = sorted({p for line in walkthrough() for p in ports_of(line) if port_open("127.0.0.1", p)})
    if taken:
        pytest.skip(f"the walkthrough uses the default ports and {taken} are taken (another cluster runs here)")
    zk_dir = Path(cfg.DEV_ZOOKEEPER_PATH.default)
    zk_dir_existed = zk_dir.exists()
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    w = Walkthrough(tmp_path)
    try:
        yield w
    finally:
        w.stop()
        if not zk_dir_existed:     # the dev ZooKeeper's data dir is ours only when we created it
            shutil.rmtree(zk_dir, ignore_errors=True)


def test_readme_cluster_walkthrough_runs_as_written(walk: Walkthrough) -> None:
    lines = walkthrough()
    assert any(daemon_kind(line) == "supervisor" and "logviewer.port" in line for line in lines), \
        "the second supervisor's command must give its log viewer a port of its own"
    for line in lines:
        kind = daemon_kind(line)
        if kind is None:
            walk.run(line)
            if line.startswith("stormpy submit"):
                wait_until(lambda: len(walk.worker_pids()) == 2, 90, f"the 2 workers of `{line}`")
            continue
        proc = walk.start_daemon(line)
        ports = ports_of(line)

        def up() -> bool:
            if proc.poll() is not None:
                out = log_tail(walk.daemons[-1][2], 20)
                if kind == "dev-zookeeper" and "already running" in out:
                    pytest.skip(f"another dev ZooKeeper holds {cfg.DEV_ZOOKEEPER_PATH.default}: {out.strip()}")
                raise AssertionError(f"`{line}` exited {proc.returncode} as written:\n{out}\n\n{walk.report()}")
            return all(port_open("127.0.0.1", p) for p in ports[-1:])

        wait_until(up, 90, f"`{line}` serving on port {ports[-1]}")
        time.sleep(2)           # a daemon that refuses its config exits within moments of starting
        assert up(), f"`{line}` stopped right after starting:\n{walk.report()}"

    # `stormpy kill wordcount -w 5`: the topology is gone once its workers stopped
    wait_until(lambda: not walk.worker_pids(), 90, "the killed topology's workers to stop")
    assert "wordcount" not in walk.run("stormpy list"), walk.report()
    for line, proc, _out in walk.daemons:
        assert proc.poll() is None, f"`{line}` died during the walkthrough:\n{walk.report()}"
