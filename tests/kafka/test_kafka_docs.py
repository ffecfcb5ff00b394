"""README "Connectors": its KafkaSpout topology runs as written (``stormpy local``) against the mock
Kafka cluster and acks what it reads."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from stormpy.testing.kafka import produce

REPO = Path(__file__).resolve().parents[2]


def test_readme_connectors_example_runs_as_written(kafka_cluster: Any, tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    code = readme.split("\n## Connectors\n", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    topo = tmp_path / "event_counts.py"
    topo.write_text(code)
    produce(kafka_cluster.bootstrap_servers, "events", [(f"k{i % 5}".encode(), b"{}") for i in range(100)])
    env = {**os.environ, "PYTHONPATH": str(REPO), "KAFKA_BOOTSTRAP": kafka_cluster.bootstrap_servers}
    proc = subprocess.run([sys.executable, "-m", "stormpy.cli", "local", str(topo), "--duration", "12"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    acked = [int(m) for m in re.findall(r"spout tuples emitted=\d+ acked=(\d+)", out)]
    assert acked and acked[-1] == 100, out[-3000:]
    assert "no component reported an error" in out


def test_readme_streamparse_line_is_the_kafka_jvm_examples() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("- **Kafka (`examples/kafka-jvm`).**", 1)[1]
    line = section.split("```python", 1)[1].split("```", 1)[0].strip()
    example = (REPO / "examples" / "kafka-jvm" / "topologies" / "pixelcount.py").read_text()
    assert line in example, "the README shows the line examples/kafka-jvm runs (tests/kafka/test_kafka_examples.py)"


def test_readme_tls_sasl_settings_reach_librdkafka() -> None:
    from stormpy.kafka import KafkaSpoutConfig

    readme = (REPO / "README.md").read_text()
    section = readme.split("### A production Kafka or Redis: TLS and SASL", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    scope: dict[str, Any] = {"conf": {"kafka.user": "svc", "kafka.password": "s3cret"}}
    exec(code, scope)
    config = KafkaSpoutConfig(bootstrap_servers="kafka.internal:9093", topics=["t"], group_id="g",
                              kafka_conf=scope["kafka_conf"])
    consumer_conf = config.consumer_conf()
    assert consumer_conf["security.protocol"] == "SASL_SSL" and consumer_conf["sasl.password"] == "s3cret"
    assert consumer_conf["enable.auto.commit"] is False, "the spout keeps control of commits"
