"""The Kafka examples as a user runs them, against the mock Kafka cluster: examples/kafka_wordcount.py
(fill, ``stormpy local``, check: exact counts) and the streamparse ``kafka-jvm`` project with
stormpy's KafkaSpout in place of the Java one (``stormpy local topologies/pixelcount.py -e prod``)."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from stormpy.testing.kafka import produce

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str], cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    proc = subprocess.run(args, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_kafka_wordcount_example_counts_exactly(kafka_cluster: Any, kafka_names: Any, tmp_path: Path) -> None:
    topic, _ = kafka_names
    bootstrap = kafka_cluster.bootstrap_servers
    example = str(REPO / "examples" / "kafka_wordcount.py")
    assert "wrote" in run([sys.executable, example, "fill", bootstrap, topic])
    db = tmp_path / "kafka-wc.db"
    run([sys.executable, "-m", "stormpy.cli", "local", example, "--duration", "15", "-c", f"kafka.bootstrap={bootstrap}",
         "-c", f"wc.topic={topic}", "-c", f"wc.db={db}"])
    assert "every count exact" in run([sys.executable, example, "check", str(db)])


def test_streamparse_kafka_jvm_project_runs_with_kafka_spout(kafka_cluster: Any, tmp_path: Path) -> None:
    rnd = random.Random(11)
    urls = [f"http://example.com/{p}" for p in ("home", "about", "blog", "shop")]
    pixels = [{"ip": f"10.0.0.{rnd.randint(1, 9)}", "url": rnd.choice(urls), "timestamp": 1700000000 + i}
              for i in range(300)]
    produce(kafka_cluster.bootstrap_servers, "pixels", [json.dumps(p).encode() for p in pixels])
    out = tmp_path / "counts"
    project = REPO / "examples" / "kafka-jvm"
    run([sys.executable, "-m", "stormpy.cli", "local", "topologies/pixelcount.py", "-e", "prod", "--duration", "15",
         "-c", f"pixelcount.out={out}"], cwd=project, env={"KAFKA_BOOTSTRAP": kafka_cluster.bootstrap_servers})
    counts: Counter = Counter()
    for path in tmp_path.glob("counts.*"):
        counts.update(json.loads(path.read_text()))
    assert counts == Counter(p["url"] for p in pixels)


def test_kafka_wordcount_mock_command_prints_a_bootstrap_address() -> None:
    proc = subprocess.Popen([sys.executable, str(REPO / "examples" / "kafka_wordcount.py"), "mock"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("bootstrap 127.0.0.1:"), line
        produce(line.split(" ", 1)[1].strip(), "hello", [b"a"])     # a real (mock) broker answers
    finally:
        if proc.stdin:
            proc.stdin.close()               # the holder exits when its stdin closes
        proc.wait(30)


def test_the_spout_cost_benchmark_acks_every_record_and_prints_its_figures() -> None:
    """benchmarks/kafka_spout_cost.py (docs/reference/benchmarks.md) at a small size: it exits
    non-zero when the spout did not emit and ack every record it was handed."""
    out = run([sys.executable, str(REPO / "benchmarks" / "kafka_spout_cost.py"), "--records", "1000", "--rounds", "1"])
    assert "1,000 records" in out and "spout next_tuple + ack:" in out and "spout / bare read (min):" in out, out
