"""``benchmarks/local_wordcount.py --sentences N``: the fixed-work mode used for instruction
counts (issue 24) runs the acked word count to its last ack and says how much it counted."""
from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_fixed_number_of_sentences_is_counted_and_acked() -> None:
    sentences = [line.strip().lower().rstrip(".") for line in
                 (REPO / "examples" / "data" / "sentences.txt").read_text().splitlines() if line.strip()]
    words = sum(len(s.split()) for s in itertools.islice(itertools.cycle(sentences), 300))
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "local_wordcount.py"), "--par", "2",
                          "--sentences", "300"], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-2000:]
    assert re.search(r"^tuple path: (pure Python|compiled \(Cython\))$", run.stdout, re.M), run.stdout
    assert re.search(rf"par 2, acking on\): 300 sentences, {words:,} words counted in [\d.]+ CPU-seconds",
                     run.stdout), run.stdout


def test_a_negative_count_is_refused() -> None:
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "local_wordcount.py"), "--sentences", "-1"],
                         capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode != 0 and "--sentences must be 0 or more" in run.stderr
