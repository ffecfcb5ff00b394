"""``stormpy local`` as a user runs it: a subprocess, its output, its exit code, Ctrl-C."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FLAKY = Path(__file__).resolve().parent / "topologies" / "flaky_wordsink.py"


class LocalProcess:
    """A ``stormpy local`` subprocess whose stdout and stderr lines are collected by a thread."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "stormpy.cli", "local", *args], cwd=REPO, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for_line(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        pytest.fail(f"no line containing {text!r} within {timeout:.0f}s; output:\n" + "\n".join(self.lines[-40:]))

    def wait(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"stormpy local did not exit within {timeout:.0f}s; output:\n" + "\n".join(self.lines[-40:]))
        self._reader.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(10)


@pytest.fixture
def run_local() -> Iterator[object]:
    procs: list[LocalProcess] = []

    def start(*args: str) -> LocalProcess:
        proc = LocalProcess(*args)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()


def test_wordcount_example_runs_for_a_duration_and_prints_counts(run_local) -> None:
    proc = run_local("examples/wordcount.py", "--duration", "3", "-c", "wordcount.top=3")
    assert proc.wait(90) == 0, "\n".join(proc.lines)
    tops = [line for line in proc.lines if line.startswith("count task") and "top:" in line]
    assert len(tops) == 2, "\n".join(proc.lines)
    assert all(len(line.split("top: ")[1].split(", ")) == 3 for line in tops)
    assert any("acked=" in line for line in proc.lines)


def test_streamparse_style_topology_acks_everything_and_stops_on_ctrl_c(run_local) -> None:
    proc = run_local(str(FLAKY), "-c", "flaky.records=400", "-c", "flaky.tag=[a, 2]")
    proc.wait_for_line("spout conf flaky.tag=['a', 2]", 60)
    proc.wait_for_line("ALL ACKED", 90)
    proc.proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0, "\n".join(proc.lines)
    summary = proc.wait_for_line("spout summary:", 1)
    assert "acked=400 of 400 duplicates=0" in summary
    assert "pending_replays=0" in summary
    failed = int(summary.split("failed=")[1].split()[0])
    assert failed > 0, "the 5% failing bolt failed nothing"


def test_sigterm_stops_cleanly_too(run_local) -> None:
    proc = run_local("examples/streams_demo.py")
    proc.wait_for_line("stormpy local: running", 60)
    time.sleep(1.0)
    proc.proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, "\n".join(proc.lines)
    assert any(line.startswith("odd_sink[") for line in proc.lines)


def test_bad_topology_file_is_a_one_line_error(run_local, tmp_path: Path) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("def oops(:\n")
    proc = run_local(str(bad))
    assert proc.wait(60) == 1
    errors = [line for line in proc.lines if line.startswith("stormpy: error:")]
    assert len(errors) == 1 and "syntax error" in errors[0], proc.lines


NEVER_INIT = Path(__file__).resolve().parent / "topologies" / "never_init.py"
CRASH_LOOP = Path(__file__).resolve().parent / "topologies" / "crash_loop.py"


def test_healthy_run_names_its_units_and_says_no_errors(run_local) -> None:
    proc = run_local("examples/wordcount.py", "--duration", "6")
    assert proc.wait(90) == 0, "\n".join(proc.lines)
    progress = [line for line in proc.lines if line.startswith("[") and "spout tuples emitted=" in line]
    assert progress and all("spout tuples acked/s" in line and "bolt tuples executed=" in line for line in progress)
    assert proc.lines[-1] == "stormpy local: no component reported an error"


def test_component_that_never_initializes_fails_the_run(run_local) -> None:
    proc = run_local(str(NEVER_INIT), "--duration", "4")
    assert proc.wait(90) == 1, "\n".join(proc.lines)
    errors = [line for line in proc.lines if line.startswith("stormpy local: error:")]
    assert len(errors) == 1, "\n".join(proc.lines)
    assert errors[0].startswith("stormpy local: error: component broken never initialized: ")
    assert errors[0].endswith("last: RuntimeError: no database at db.invalid")


def test_component_that_crash_loops_fails_the_run_and_healthy_ones_are_not_blamed(run_local) -> None:
    proc = run_local(str(CRASH_LOOP), "--duration", "4")
    assert proc.wait(90) == 1, "\n".join(proc.lines)
    errors = [line for line in proc.lines if line.startswith("stormpy local: error:")]
    assert len(errors) == 1, "\n".join(proc.lines)
    assert errors[0].startswith("stormpy local: error: component looping crash-looped the whole run: ")
    assert "KeyError: 'missing-field'" in errors[0]
    assert not any("component good" in line or "component sink" in line for line in proc.lines)


def test_readme_topology_example_runs_as_written(run_local, tmp_path: Path) -> None:
    """The README's example ("## A topology") runs under the name its text gives it, and acks."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## A topology\n", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    assert "stormpy local my_wordcount.py" in section
    topo = tmp_path / "my_wordcount.py"
    topo.write_text(code)
    proc = run_local(str(topo), "--duration", "3")
    assert proc.wait(90) == 0, "\n".join(proc.lines)
    final = [line for line in proc.lines if line.startswith("[") and "spout tuples emitted=" in line][-1]
    assert "acked=0 " not in final and proc.lines[-1] == "stormpy local: no component reported an error"


def test_a_plain_word_count_run_is_quiet(run_local) -> None:
    """Issue 20: a first ``stormpy local`` run of a topology that never mentions streamparse says
    nothing about streamparse, and the framework logs no INFO line a user has nothing to do with
    (executor shutdowns, a fresh checkpoint spout); the user's own component logs stay."""
    proc = run_local(str(REPO / "examples" / "wordcount.py"), "--duration", "2")
    assert proc.wait(90) == 0, "\n".join(proc.lines)
    assert not [line for line in proc.lines if "streamparse" in line or "pystorm" in line], "\n".join(proc.lines)
    framework_info = [line for line in proc.lines if " INFO stormpy." in line and " INFO stormpy.component." not in line]
    assert framework_info == [], "\n".join(framework_info)
    assert proc.lines[-1] == "stormpy local: no component reported an error"


def test_a_streamparse_import_is_announced_once(run_local, tmp_path: Path) -> None:
    topo = tmp_path / "sp_topology.py"
    topo.write_text(
        "from streamparse import Bolt, Spout, Topology\n\n"
        "class Numbers(Spout):\n"
        "    outputs = ['n']\n"
        "    def initialize(self, conf, ctx):\n"
        "        self.i = 0\n"
        "    def next_tuple(self):\n"
        "        self.i += 1\n"
        "        self.emit([self.i], tup_id=self.i)\n\n"
        "class Drop(Bolt):\n"
        "    def process(self, tup):\n"
        "        pass\n\n"
        "class SpTopology(Topology):\n"
        "    numbers = Numbers.spec()\n"
        "    drop = Drop.spec(inputs=[numbers])\n")
    proc = run_local(str(topo), "--duration", "2")
    assert proc.wait(90) == 0, "\n".join(proc.lines)
    said = [line for line in proc.lines if "not installed" in line]
    assert len(said) == 1 and "`import streamparse` resolves to stormpy's compatible modules" in said[0], \
        "\n".join(proc.lines)
    final = [line for line in proc.lines if line.startswith("[") and "spout tuples emitted=" in line][-1]
    assert "acked=0 " not in final
