"""RecordSink: stores each tuple's key in a SQLite table shared by every worker of this host
(counting deliveries), then acks; the cluster tests compare the table with their input."""
from __future__ import annotations

import sqlite3
import time
from typing import Any

from stormpy import Bolt


class RecordSink(Bolt):
    key_field = "line"

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.db = sqlite3.connect(stormconf["conn.db"], timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS records (key TEXT PRIMARY KEY, deliveries INTEGER)")

    def key(self, tup: Any) -> str:
        return str(tup.values[0])

    def process(self, tup: Any) -> None:
        for _ in range(100):
            try:
                self.db.execute("INSERT INTO records VALUES (?, 1) ON CONFLICT (key) "
                                "DO UPDATE SET deliveries = deliveries + 1", (self.key(tup),))
                return
            except sqlite3.OperationalError:   # another worker holds the lock
                time.sleep(0.05)
        raise RuntimeError("records table stayed locked")


class EntrySink(RecordSink):
    """For Redis Streams tuples (stream, id, fields): the key is the entry's ``n`` field."""

    def key(self, tup: Any) -> str:
        return tup.values.fields["n"]
