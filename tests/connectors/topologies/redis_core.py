"""RedisStreamSpout (at least once) -> EntrySink. ``-c``: conn.url, conn.stream, conn.group, conn.db."""
from __future__ import annotations

from typing import Any

from record_sink import EntrySink

from stormpy import Topology
from stormpy.redis import RedisStreamSpout


class RedisEntries(Topology):
    config = {"topology.message.timeout.secs": 10, "topology.max.spout.pending": 100}

    @classmethod
    def compile_storm_topology(cls, conf: Any) -> Any:
        from stormpy.api.compile import compile_topology

        spout = RedisStreamSpout(conf["conn.url"], [conf["conn.stream"]], group=conf["conn.group"],
                                 claim_idle_ms=12_000, claim_interval_ms=1000)

        class Entries(Topology):
            config = cls.config
            entries = spout.spec(par=2)
            sink = EntrySink.spec(inputs=[entries], par=2)

        return compile_topology(Entries, conf)
