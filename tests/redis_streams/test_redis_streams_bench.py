"""benchmarks/redis_streams.py runs as its docs show it (on a small stream): both figures printed,
the topology's once its group is drained."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_redis_streams_benchmark_prints_both_figures() -> None:
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "redis_streams.py"), "--entries", "2000"],
                         capture_output=True, text=True, timeout=240, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-2000:]
    assert re.search(r"^run 1: bare redis-py reader .*: [\d,]+ entries/s$", run.stdout, re.M), run.stdout
    found = re.search(r"^run 1: stormpy local, .*: ([\d,]+) entries/s, [\d.]+% of the bare reader, [\d.]+ CPU-s "
                      r"for 2,000 entries; moved off the executor loop: (.*)$", run.stdout, re.M)
    assert found and int(found.group(1).replace(",", "")) > 0, run.stdout


def test_bad_arguments_are_one_clear_error() -> None:
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "redis_streams.py"), "--entries", "0"],
                         capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 2 and "--entries and --runs must be positive" in run.stderr, run.stderr
