"""The submit-time check that a Trident state kept on one host or in one process can serve the
whole topology (see ``stormpy.trident.planner.placement`` for how states declare where they live).

The Trident compiler records, in each bolt's component config, the host-local states it uses
(``topology.trident.host.local.states``: descriptions only); Nimbus reads them here from the
Thrift struct, so the check imports no Trident or user code.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from stormpy import config as cfg
from stormpy.thrift import storm

#: Where a state lives: on one host's disk, or in one worker process's memory.
HOST = "host"
PROCESS = "process"


def check_host_local_states(topology: Any, conf: Mapping[str, Any],
                            supervisors: Mapping[str, Any]) -> None:
    """Refuse (InvalidTopologyException, one line) a host-local state the topology would outgrow."""
    if conf.get(cfg.TOPOLOGY_TRIDENT_STATE_ALLOW_HOST_LOCAL.name):
        return
    entries: list[tuple[str, dict[str, Any]]] = []
    for cid, bolt in sorted((topology.bolts or {}).items()):
        text = bolt.common.json_conf if bolt.common is not None else None
        try:
            comp_conf = json.loads(text) if text else {}
        except ValueError:
            continue
        for entry in comp_conf.get(cfg.TOPOLOGY_TRIDENT_HOST_LOCAL_STATES.name) or []:
            if isinstance(entry, dict):
                entries.append((cid, entry))
    if not entries:
        return
    hosts = sorted({info.hostname for info in supervisors.values() if getattr(info, "hostname", None)})
    workers = int(conf.get(cfg.TOPOLOGY_WORKERS.name) or 1)
    allow = f"-c {cfg.TOPOLOGY_TRIDENT_STATE_ALLOW_HOST_LOCAL.name}=true"
    for cid, entry in entries:
        state, scope = entry.get("state", "?"), entry.get("scope")
        if scope == PROCESS and len(hosts) > 1:
            raise storm.InvalidTopologyException(
                msg=f"component {cid!r}: state {state} lives in one worker's memory, and this topology "
                    f"runs {workers} worker(s) on a cluster of {len(hosts)} supervisor host(s): a task that "
                    f"moves would start from an empty state; use SqliteMapState on one host or RedisMapState "
                    f"(or {allow} for tests)")
        if scope == HOST and len(hosts) > 1:
            raise storm.InvalidTopologyException(
                msg=f"component {cid!r}: state {state} lives on one host's disk, and the cluster has "
                    f"{len(hosts)} supervisor hosts ({', '.join(hosts[:4])}{', ...' if len(hosts) > 4 else ''}): "
                    f"a task placed or moved elsewhere would not see it; use RedisMapState (or HDFS for "
                    f"SparkState), or {allow} if that path is on storage every host mounts")
