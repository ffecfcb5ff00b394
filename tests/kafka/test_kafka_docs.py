"""The Kafka how-to (docs/how-to/kafka-redis-files.md): its KafkaSpout topology
(docs/snippets/kafka_event_counts.py) runs as written (``stormpy local``) against the mock Kafka
cluster and acks what it reads; its TLS/SASL settings reach librdkafka; the streamparse page shows
the line examples/kafka-jvm runs."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from stormpy.testing.kafka import committed_offsets, produce

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def test_docs_kafka_example_runs_as_written(kafka_cluster: Any, tmp_path: Path) -> None:
    """Runs until the group has committed every record, then stops it as a user does (SIGTERM).

    Not a fixed ``--duration``: librdkafka's mock group coordinator finishes a rebalance as soon as
    the leader's SyncGroup carries every member's assignment, so a follower whose own SyncGroup
    arrives a moment later (a loaded CI machine) is refused, rejoins, and the next rebalance waits
    ``session.timeout.ms`` - 1 s. A real broker hands that follower its assignment; here the two
    spouts simply get their partitions about 12 s later, which a fixed 12 s run did not survive."""
    snippet = DOCS / "snippets" / "kafka_event_counts.py"
    assert "```{literalinclude} ../snippets/kafka_event_counts.py" in (DOCS / "how-to" / "kafka-redis-files.md").read_text()
    topo = tmp_path / "event_counts.py"
    topo.write_text(snippet.read_text())
    produce(kafka_cluster.bootstrap_servers, "events", [(f"k{i % 5}".encode(), b"{}") for i in range(100)])
    env = {**os.environ, "PYTHONPATH": str(REPO), "KAFKA_BOOTSTRAP": kafka_cluster.bootstrap_servers}
    log_path = tmp_path / "local.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "stormpy.cli", "local", str(topo), "--duration", "90"],
                                cwd=tmp_path, env=env, stdout=log_file, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 80
            committed: dict[int, int] = {}
            while time.monotonic() < deadline and proc.poll() is None:
                committed = committed_offsets(kafka_cluster.bootstrap_servers, "event-counter", "events")
                if sum(max(offset, 0) for offset in committed.values()) >= 100:
                    break
                time.sleep(1.0)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out = log_path.read_text()
    assert proc.returncode == 0, out[-3000:]
    committed = committed_offsets(kafka_cluster.bootstrap_servers, "event-counter", "events")
    assert sum(max(offset, 0) for offset in committed.values()) == 100, (committed, out[-3000:])
    progress = re.findall(r"spout tuples emitted=\d+ acked=(\d+) failed=(\d+)", out)
    assert progress and int(progress[-1][0]) >= 100 and progress[-1][1] == "0", out[-3000:]
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
