"""The acceptance run of issue 14: ``stormpy local examples/trident_spark.py`` then ``check`` prints OK.

Real processes: the CLI runs the topology for 6 s (pyarrow writes the Parquet: no JVM in it), with
the example's injected failures replaying batches (at ``tspark.fail.rate=0.01`` a 50-line batch
fails 4 times in 10, and dozens of batches run in 6 s); ``check`` reads the Parquet back with Spark
SQL in another process and compares every batch's counts with the input text. The check of a copy
with one duplicated row runs beside it (two Spark starts at once, not one after the other).
"""
from __future__ import annotations

import os
import shutil
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


def run_together(*commands: list[str], timeout: float) -> list[subprocess.CompletedProcess[str]]:
    """Run the commands at once; their results in order (each killed at ``timeout``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
             for c in commands]
    results = []
    try:
        for command, proc in zip(commands, procs):
            out, err = proc.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(command, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


@pytest.mark.slow   # a 6 s run, then two Spark starts at once: 25-60 s on 2 cores
def test_local_run_then_check_prints_ok_with_exact_counts(tmp_path):
    out = tmp_path / "counts"
    local = run(sys.executable, "-m", "stormpy.cli", "local", str(EXAMPLE), "--duration", "6",
                "-c", f"tspark.output={out}", "-c", "tspark.fail.rate=0.01", timeout=150)
    assert local.returncode == 0, local.stderr[-3000:]
    assert local.stdout.count(f"check them: python examples/trident_spark.py check {out}") == 2, \
        "the output dir and the check command are printed at the start and at the end"
    assert "injected failure" in local.stdout + local.stderr, "the run replayed batches"
    # the same output with one row duplicated (what a non-idempotent writer would leave) is caught
    duplicated = tmp_path / "duplicated"
    shutil.copytree(out, duplicated)
    victim = sorted(duplicated.glob("part-*"))[0]
    (duplicated / f"part-zz-copy{''.join(victim.suffixes)}").write_bytes(victim.read_bytes())
    check, bad = run_together([sys.executable, str(EXAMPLE), "check", str(out)],
                              [sys.executable, str(EXAMPLE), "check", str(duplicated)], timeout=150)
    assert check.returncode == 0 and check.stdout.startswith("OK: "), check.stdout + check.stderr[-2000:]
    assert bad.returncode == 1 and "FAILED" in bad.stdout, bad.stdout + bad.stderr[-2000:]


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
