"""Benchmark: how long a worker's Spark driver takes to start, with and without the class archive.

    python benchmarks/spark_start.py [--runs 5] [--local-dir DIR]

A topology with a Spark sink or SparkState waits for its process's SparkSession at the first
batch, and again in every restarted worker. Each run here is a new process that does what a
worker does: ``stormpy.spark.session.acquire_session`` (a driver JVM and a SparkContext, master
``local[1]``), then a first job like a sink's (a few Arrow rows appended to Parquet). Runs
alternate between a ``storm.local.dir`` holding the archive ``stormpy spark-archive`` records
(``--local-dir``; recorded there first if it has none) and an empty one, so that the machine's
drift falls on both. The bare primitive beside them: ``java -version`` (a JVM that loads next to
nothing), timed the same number of times.

Printed: per run, seconds to the session and to the end of the first job; then medians of each,
and the ratio of the two configurations.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stormpy.spark.class_archive import _java, create_archive, usable_archive

WORKER = """
import json, sys, tempfile, time
t0 = time.monotonic()
import pyarrow as pa
from stormpy.spark.session import acquire_session, release_session
conf = json.loads(sys.argv[1])
spark = acquire_session(conf)
t1 = time.monotonic()
args = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
archive = any(str(a).startswith("-XX:SharedArchiveFile=") for a in args)
with tempfile.TemporaryDirectory() as out:
    spark.createDataFrame(pa.table({"word": ["a", "b"], "count": [1, 2]}).to_pandas()).write.parquet(out + "/p")
t2 = time.monotonic()
print(json.dumps({"session": t1 - t0, "first_job": t2 - t1, "archive": archive}))
release_session("benchmark run done")
"""


def one_start(local_dir: Path, with_archive: bool) -> dict[str, float]:
    """One worker-like start in a new process; checks that its driver JVM was (or was not) given the archive."""
    conf = {"storm.local.dir": str(local_dir), "spark.master": "local[1]", "spark.ui.enabled": False}
    run = subprocess.run([sys.executable, "-c", WORKER, json.dumps(conf)], capture_output=True, text=True,
                         timeout=300)
    if run.returncode != 0:
        raise SystemExit(f"spark_start.py: a run failed:\n{run.stderr[-3000:]}")
    result = json.loads(run.stdout.strip().splitlines()[-1])
    if result.pop("archive") != with_archive:
        raise SystemExit(f"spark_start.py: a run {'without' if with_archive else 'with'} the archive where it "
                         f"should be {'with' if with_archive else 'without'}:\n{run.stderr[-3000:]}")
    return {k: float(v) for k, v in result.items()}


def bare_jvm() -> float:
    java = _java()
    if java is None:
        raise SystemExit("spark_start.py: no java ($JAVA_HOME/bin/java or java on PATH)")
    started = time.monotonic()
    subprocess.run([str(java), "-version"], capture_output=True, check=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="Runs of each configuration.")
    parser.add_argument("--local-dir", type=Path, default=None,
                        help="A storm.local.dir with the archive (recorded there if missing; default: a temp dir).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stormpy-spark-start-") as scratch:
        with_dir = args.local_dir or Path(scratch) / "with-archive"
        without_dir = Path(scratch) / "without"
        conf = {"storm.local.dir": str(with_dir)}
        if usable_archive(conf) is None:
            started = time.monotonic()
            path = create_archive(conf, progress=lambda line: None)
            print(f"recorded {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - started:.0f} s")
        figures: dict[str, list[dict[str, float]]] = {"with the archive": [], "without": []}
        bare: list[float] = []
        for i in range(args.runs):
            for name, local_dir in (("with the archive", with_dir), ("without", without_dir)):
                figures[name].append(one_start(local_dir, local_dir == with_dir))
                print(f"run {i + 1} {name:>16}: session {figures[name][-1]['session']:.2f} s, "
                      f"first job {figures[name][-1]['first_job']:.2f} s", flush=True)
            bare.append(bare_jvm())
    medians = {name: {part: statistics.median(r[part] for r in runs) for part in ("session", "first_job")}
               for name, runs in figures.items()}
    for name, m in medians.items():
        print(f"medians {name:>16}: session {m['session']:.2f} s, first job {m['first_job']:.2f} s, "
              f"together {m['session'] + m['first_job']:.2f} s")
    print(f"bare JVM start (java -version): median {statistics.median(bare):.2f} s")
    total = {name: m["session"] + m["first_job"] for name, m in medians.items()}
    print(f"with the archive / without: session {medians['with the archive']['session'] / medians['without']['session']:.2f}x, "
          f"together {total['with the archive'] / total['without']:.2f}x")


if __name__ == "__main__":
    main()
