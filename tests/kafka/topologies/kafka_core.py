"""KafkaSpout (at least once) -> RecordSink, for the Kafka tests (local runner and process cluster).

Config keys (``-c`` at submit): ``kwc.bootstrap`` (the mock cluster's address), ``kwc.topic``,
``kwc.group``, ``kwc.db`` (a SQLite file every worker of this host shares), ``kwc.spout.par``.
``RecordSink`` inserts each record's (partition, offset, value) into table ``records`` and
counts its deliveries, then acks: the test compares the table with the topic, and the group's
committed offsets with the table.
"""
from __future__ import annotations

import sqlite3
import time
from typing import Any

from stormpy import Bolt, Topology
from stormpy.kafka import KafkaSpout, KafkaSpoutConfig, RetryPolicy


class RecordSink(Bolt):
    """Stores every record it sees (first delivery wins, deliveries counted) before acking it."""

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.db = sqlite3.connect(stormconf["kwc.db"], timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS records (partition INTEGER, offset INTEGER, value TEXT, "
                        "deliveries INTEGER, PRIMARY KEY (partition, offset))")

    def process(self, tup: Any) -> None:
        v = tup.values
        for _ in range(50):
            try:
                self.db.execute("INSERT INTO records VALUES (?, ?, ?, 1) ON CONFLICT (partition, offset) "
                                "DO UPDATE SET deliveries = deliveries + 1", (v.partition, v.offset, v.value))
                return
            except sqlite3.OperationalError:   # another worker holds the lock
                time.sleep(0.05)
        raise RuntimeError("records table stayed locked")


def core_topology(conf: Any) -> type:
    spout = KafkaSpout(KafkaSpoutConfig(bootstrap_servers=conf["kwc.bootstrap"], topics=[conf["kwc.topic"]],
                                        group_id=conf["kwc.group"], offset_commit_period_ms=300,
                                        retry=RetryPolicy(initial_delay_ms=100, delay_period_ms=50),
                                        # a SIGKILLed worker's consumer leaves the group within seconds
                                        kafka_conf={"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                                                    "max.poll.interval.ms": 20000}))

    class Records(Topology):
        config = {"topology.message.timeout.secs": 10, "topology.max.spout.pending": 200}
        records = spout.spec(par=int(conf.get("kwc.spout.par", 2)))
        sink = RecordSink.spec(inputs=[records], par=2)

    return Records




class CoreKafkaRecords(Topology):
    """What ``stormpy submit`` loads: the spout's settings come from the submit's ``-c kwc.*``."""

    config = {"topology.message.timeout.secs": 10, "topology.max.spout.pending": 200}

    @classmethod
    def compile_storm_topology(cls, conf: Any) -> Any:
        from stormpy.api.compile import compile_topology
        return compile_topology(core_topology(conf), conf)
