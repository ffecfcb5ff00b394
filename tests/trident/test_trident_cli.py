"""`stormpy local FILE` loads a TridentTopology subclass, runs it and exits 0 with exact counts."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = Path(__file__).resolve().parent / "topologies" / "trident_wc_local.py"


def test_stormpy_local_runs_a_trident_file():
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "stormpy.cli", "local", str(TOPOLOGY), "--duration", "10"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    commits = [line for line in proc.stdout.splitlines() if line.startswith("committed txid")]
    # 2 partitions x 100 lines; "the" appears 3 times per pair of lines: 300 exactly, never more
    assert commits and commits[-1].endswith("the=300"), commits[-3:]
    assert all(int(line.rsplit("=", 1)[1]) <= 300 for line in commits)
    assert "component lines:" in proc.stderr and "flaky split" in proc.stderr


def test_invalid_trident_file_is_one_line(tmp_path):
    bad = tmp_path / "bad_trident.py"
    bad.write_text(
        "from stormpy.trident import TridentTopology, PartitionedSpout, Function\n"
        "class L(PartitionedSpout):\n    outputs = ['sentence']\n    def partitions(self): return [0]\n"
        "class T(TridentTopology):\n    def build(self, conf):\n"
        "        self.new_stream('lines', L()).each(['sentnce'], lambda t, c: None, ['w'])\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "stormpy.cli", "local", str(bad), "--duration", "1"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "stream 'lines'" in proc.stderr and "'sentnce'" in proc.stderr
    assert "Traceback" not in proc.stderr
