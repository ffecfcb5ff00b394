"""The acceptance run of issue 14: ``stormpy local examples/trident_spark.py`` then ``check`` prints OK.

Real processes: the CLI runs the topology (Spark starts inside it) for 10 s, with the example's
injected failures replaying batches (at ``tspark.fail.rate=0.01`` a 50-line batch fails 4 times in
10, and dozens of batches run in 10 s); ``check`` reads the Parquet back with Spark SQL in another
process and compares every batch's counts with the input text.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "trident_spark.py"

pytestmark = pytest.mark.timeout(240)


def run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.slow   # a 10 s run and two Spark starts: 35-90 s on 2 cores
def test_local_run_then_check_prints_ok_with_exact_counts(tmp_path):
    out = tmp_path / "counts"
    local = run(sys.executable, "-m", "stormpy.cli", "local", str(EXAMPLE), "--duration", "10",
                "-c", f"tspark.output={out}", "-c", "tspark.fail.rate=0.01", timeout=150)
    assert local.returncode == 0, local.stderr[-3000:]
    assert local.stdout.count(f"check them: python examples/trident_spark.py check {out}") == 2, \
        "the output dir and the check command are printed at the start and at the end"
    assert "injected failure" in local.stdout + local.stderr, "the run replayed batches"
    check = run(sys.executable, str(EXAMPLE), "check", str(out), timeout=120)
    assert check.returncode == 0 and check.stdout.startswith("OK: "), check.stdout + check.stderr[-2000:]
    # the same output with one row duplicated (what a non-idempotent writer would leave) is caught
    victim = sorted(out.glob("part-*"))[0]
    (out / f"part-zz-copy{''.join(victim.suffixes)}").write_bytes(victim.read_bytes())
    bad = run(sys.executable, str(EXAMPLE), "check", str(out), timeout=120)
    assert bad.returncode == 1 and "FAILED" in bad.stdout, bad.stdout


def test_without_output_a_new_default_directory_is_used_and_printed(tmp_path):
    env_tmp = tmp_path / "tmp"
    env_tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(env_tmp)}
    local = subprocess.run([sys.executable, "-m", "stormpy.cli", "local", str(EXAMPLE), "--duration", "5"],
                           capture_output=True, text=True, timeout=150, cwd=ROOT, env=env)
    assert local.returncode == 0, local.stderr[-3000:]
    printed = {line.rsplit(" check ", 1)[1] for line in local.stdout.splitlines() if "check them:" in line}
    assert len(printed) == 1, local.stdout[-2000:]
    out = Path(printed.pop())
    assert out.parent == env_tmp and out.name.startswith("stormpy-trident-spark-"), out


def test_check_refuses_a_missing_directory(tmp_path):
    result = run(sys.executable, str(EXAMPLE), "check", str(tmp_path / "nope"), timeout=30)
    assert result.returncode == 2 and "is not a directory" in result.stderr
