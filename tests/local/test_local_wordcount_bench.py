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
    assert re.search(rf"par 2, acking on\): 300 sentences, {words:,} words counted in [\d.]+ CPU-seconds "
                     r"\(start to last ack\); [\d,]+ counted words per CPU-second from the first ack to the last",
                     run.stdout), run.stdout


def test_a_negative_count_is_refused() -> None:
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "local_wordcount.py"), "--sentences", "-1"],
                         capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode != 0 and "--sentences must be 0 or more" in run.stderr


def test_the_user_code_alone_reference_runs_the_benchmarks_own_components() -> None:
    """``run_user_code``: the spout's sentences are split and every word counted, every
    sentence acked (the spout's latency samples closed), with no engine in between."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import local_wordcount as bench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    rate, spout, count = bench.run_user_code(0.05)
    sent = next(spout.ids)
    words = sum(len(s.split()) for s in itertools.islice(itertools.cycle(bench.SENTENCES), sent))
    assert sent and sent % 64 == 0
    assert sum(count.counts.values()) == words
    assert rate > 0 and not spout.started and spout.latencies_ms


def test_pairs_alternate_par_1_and_par_2_and_print_the_medians() -> None:
    """``--pairs N``: N runs of each parallelism, alternating, every other pair starting with
    par 2, each printed, then the medians (the middle run of each side) and their ratio, and the
    pairs' own ratios: their median, how many par 2 won, a bootstrap interval of that median
    (how the README compares par 2 with par 1)."""
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "local_wordcount.py"), "--par", "2",
                          "--pairs", "3", "--secs", "1", "--warmup", "0.5"], capture_output=True, text=True,
                         timeout=240, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-2000:]
    runs = re.findall(r"^  run (\d)/3, par (\d): ([\d,]+) counted words/s", run.stdout, re.M)
    assert [(r[0], r[1]) for r in runs] == [("1", "1"), ("1", "2"), ("2", "2"), ("2", "1"), ("3", "1"), ("3", "2")], \
        run.stdout
    rate = {p: sorted((int(r[2].replace(",", "")) for r in runs if r[1] == p)) for p in ("1", "2")}
    assert all(rate["1"]) and all(rate["2"]), run.stdout
    medians = re.search(r"^medians: par 2 ([\d,]+) counted words/s, par 1 ([\d,]+): par 2 / par 1 = ([\d.]+)x",
                        run.stdout, re.M)
    assert medians, run.stdout
    many, one = int(medians.group(1).replace(",", "")), int(medians.group(2).replace(",", ""))
    assert (many, one) == (rate["2"][1], rate["1"][1]), run.stdout
    assert abs(float(medians.group(3)) - many / one) < 0.0015, run.stdout
    in_order = {p: [int(r[2].replace(",", "")) for r in runs if r[1] == p] for p in ("1", "2")}
    paired = sorted(b / a for a, b in zip(in_order["1"], in_order["2"]))
    found = re.search(r"; pair by pair: median ([\d.]+)x \(([\d.]+)x to ([\d.]+)x\), par 2 ahead in (\d) of 3; "
                      r"90% interval of that median ([\d.]+)x to ([\d.]+)x \(bootstrap", run.stdout)
    assert found, run.stdout
    median, low, high, ahead, lo, hi = (float(found.group(i)) for i in (1, 2, 3, 4, 5, 6))
    assert abs(median - paired[1]) < 0.0015 and abs(low - paired[0]) < 0.0015 and abs(high - paired[2]) < 0.0015
    assert ahead == sum(r > 1.0 for r in paired), run.stdout
    assert paired[0] - 0.0015 <= lo <= median + 0.0015 <= hi + 0.003 <= paired[2] + 0.0045, run.stdout


def test_fixed_work_pairs_run_each_in_a_new_process_and_print_pair_by_pair() -> None:
    """``--pairs N --sentences M``: the same alternation, each run a new process doing M
    sentences, its figure the counted words per CPU-second from the first ack to the last."""
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "local_wordcount.py"), "--par", "2",
                          "--pairs", "2", "--sentences", "2000"], capture_output=True, text=True,
                         timeout=240, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-2000:]
    runs = re.findall(r"^  run (\d)/2, par (\d): ([\d,]+) counted words per CPU-second \(2,000 sentences", run.stdout, re.M)
    assert [(r[0], r[1]) for r in runs] == [("1", "1"), ("1", "2"), ("2", "2"), ("2", "1")], run.stdout
    rate = {p: [int(r[2].replace(",", "")) for r in runs if r[1] == p] for p in ("1", "2")}
    paired = sorted(b / a for a, b in zip(rate["1"], rate["2"]))
    found = re.search(r"^medians: par 2 [\d,]+ counted words per CPU-second, par 1 [\d,]+: par 2 / par 1 = [\d.]+x "
                      r"\(runs: [\d.]+x to [\d.]+x of par 1's median\); pair by pair: median ([\d.]+)x", run.stdout, re.M)
    assert found and abs(float(found.group(1)) - (paired[0] + paired[1]) / 2) < 0.0015, run.stdout


def test_pairs_need_a_parallelism_to_compare_and_run_alone() -> None:
    for args, said in ((["--pairs", "3"], "give --par 2 or more"), (["--pairs", "-1"], "--pairs must be 0 or more"),
                       (["--par", "2", "--pairs", "2", "--only-topology"], "takes no --only-topology")):
        run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "local_wordcount.py"), *args],
                             capture_output=True, text=True, timeout=120, cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
        assert run.returncode != 0 and said in run.stderr, (args, run.stderr)
