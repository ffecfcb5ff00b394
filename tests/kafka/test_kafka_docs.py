"""The Kafka how-to (docs/how-to/kafka-redis-files.md): its KafkaSpout topology
(docs/snippets/kafka_event_counts.py) runs as written (``stormpy local``) against the mock Kafka
cluster and acks what it reads; its TLS/SASL settings reach librdkafka; the streamparse page shows
the line examples/kafka-jvm runs."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from stormpy.testing.kafka import produce

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def test_docs_kafka_example_runs_as_written(kafka_cluster: Any, tmp_path: Path) -> None:
    snippet = DOCS / "snippets" / "kafka_event_counts.py"
    assert "```{literalinclude} ../snippets/kafka_event_counts.py" in (DOCS / "how-to" / "kafka-redis-files.md").read_text()
    topo = tmp_path / "event_counts.py"
    topo.write_text(snippet.read_text())
    produce(kafka_cluster.bootstrap_servers, "events", [(f"k{i % 5}".encode(), b"{}") for i in range(100)])
    env = {**os.environ, "PYTHONPATH": str(REPO), "KAFKA_BOOTSTRAP": kafka_cluster.bootstrap_servers}
    proc = subprocess.run([sys.executable, "-m", "stormpy.cli", "local", str(topo), "--duration", "12"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    acked = [int(m) for m in re.findall(r"spout tuples emitted=\d+ acked=(\d+)", out)]
    assert acked and acked[-1] == 100, out[-3000:]
    assert "no component reported an error" in out


def test_docs_streamparse_line_is_the_kafka_jvm_examples() -> None:
    """The page includes the spout line from examples/kafka-jvm (which tests/kafka/test_kafka_examples.py
    runs) by its first and last words: both must still be on one line of the example."""
    page = (DOCS / "reference" / "streamparse.md").read_text()
    block = page.split("```{literalinclude} ../../examples/kafka-jvm/topologies/pixelcount.py", 1)[1].split("```", 1)[0]
    start = block.split(":start-at: ", 1)[1].splitlines()[0]
    end = block.split(":end-at: ", 1)[1].splitlines()[0]
    example = (REPO / "examples" / "kafka-jvm" / "topologies" / "pixelcount.py").read_text()
    assert [line for line in example.splitlines() if start in line and end in line and "KafkaSpoutConfig(" in line]


def test_docs_tls_sasl_settings_reach_librdkafka() -> None:
    from stormpy.kafka import KafkaSpoutConfig

    snippet = DOCS / "snippets" / "kafka_sasl.py"
    scope: dict[str, Any] = {}
    exec(compile(snippet.read_text(), str(snippet), "exec"), scope)
    kafka_conf = scope["kafka_conf"]({"kafka.user": "svc", "kafka.password": "s3cret"})
    config = KafkaSpoutConfig(bootstrap_servers="kafka.internal:9093", topics=["t"], group_id="g",
                              kafka_conf=kafka_conf)
    consumer_conf = config.consumer_conf()
    assert consumer_conf["security.protocol"] == "SASL_SSL" and consumer_conf["sasl.password"] == "s3cret"
    assert consumer_conf["enable.auto.commit"] is False, "the spout keeps control of commits"
