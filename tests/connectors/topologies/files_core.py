"""DirectorySpout (par 2) -> RecordSink. ``-c``: conn.dir, conn.db."""
from __future__ import annotations

from typing import Any

from record_sink import RecordSink

from stormpy import Topology
from stormpy.files import DirectorySpout


class FileLines(Topology):
    config = {"topology.message.timeout.secs": 10, "topology.max.spout.pending": 100}

    @classmethod
    def compile_storm_topology(cls, conf: Any) -> Any:
        from stormpy.api.compile import compile_topology

        spout = DirectorySpout(conf["conn.dir"], pattern="*.txt", lock_timeout_secs=6, poll_interval_secs=0.5)

        class Lines(Topology):
            config = cls.config
            lines = spout.spec(par=2)
            sink = RecordSink.spec(inputs=[lines], par=2)

        return compile_topology(Lines, conf)
