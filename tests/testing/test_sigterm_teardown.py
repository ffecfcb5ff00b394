"""``tear_down_on_sigterm`` (tests/conftest.py installs it): a test run killed with SIGTERM, as a
CI time limit kills, still tears its fixtures down, so the processes its tests started stop."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from stormpy.testing import wait_until

REPO = Path(__file__).resolve().parents[2]

CONFTEST = """
import subprocess
from pathlib import Path

import pytest

from stormpy.testing.processes import tear_down_on_sigterm

tear_down_on_sigterm()
HERE = Path(__file__).parent


@pytest.fixture
def child():
    proc = subprocess.Popen(["sleep", "300"])
    (HERE / "child.pid").write_text(str(proc.pid))
    yield proc
    proc.kill()
    proc.wait()
    (HERE / "torn-down").write_text("yes")
"""

TEST = """
import time


def test_runs_until_killed(child):
    time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_run_killed_with_sigterm_stops_what_its_fixtures_started(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(TEST))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                            "-p", "no:xdist", str(tmp_path / "test_inner.py")],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    child_pid = 0
    try:
        child_pid = int(wait_until(lambda: (tmp_path / "child.pid").exists() and (tmp_path / "child.pid").read_text(),
                                   60, "the inner test's fixture to start its child"))
        assert _alive(child_pid)
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=60)
        left = _alive(child_pid)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if child_pid and _alive(child_pid):   # this test fails, and leaves nothing behind either
            os.kill(child_pid, signal.SIGKILL)
    assert (tmp_path / "torn-down").exists(), out
    assert not left, "the fixture's child outlived the killed run"
    assert run.returncode != 0 and "tearing the test run down" in out, out
