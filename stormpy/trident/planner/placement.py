"""Where a Trident state lives, and the submit-time check that it can serve the whole topology.

A state kept in one process (``MemoryMapState``) or on one host's disk (``SqliteMapState``, a
``SparkState`` on a path without a scheme) is only correct while every task that uses it runs
there: a partition that moves to another worker or host finds an empty state there, and the
counts start again while the coordinator's txids go on. So:

- the Trident compiler records, in each bolt's component config, the host-local states it uses
  (``topology.trident.host.local.states``: descriptions only, Nimbus never imports user code);
- Nimbus, at submit, refuses the topology with one line when such a state meets a cluster of more
  than one supervisor host (any number of workers: a single worker moves host when its supervisor
  dies), unless the topology sets
  ``topology.trident.state.allow.host.local`` (the storage is in fact shared).

The check uses the supervisors registered at submit; a host that joins later is not seen, and
its slots may then receive the topology's workers (documented in the README).
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from stormpy import config as cfg
from stormpy.thrift import storm

log = logging.getLogger(__name__)

HOST = "host"
PROCESS = "process"


def state_placement(factory: Any) -> tuple[str, str] | None:
    """``(scope, description)`` of a state factory kept on one host or in one process; None if shared.

    A factory says so with ``placement() -> "host" | "process" | None``; map state factories ask
    their backing class (its ``placement`` attribute).
    """
    placement = getattr(factory, "placement", None)
    if placement is None:
        return None
    scope = placement() if callable(placement) else placement
    if scope not in (HOST, PROCESS):
        return None
    describe = getattr(factory, "describe", None)
    return scope, (describe() if callable(describe) else repr(factory))


def component_entries(factories: list[Any]) -> list[dict[str, str]]:
    """The ``topology.trident.host.local.states`` value of a bolt using these factories ([] if none)."""
    entries: list[dict[str, str]] = []
    for factory in factories:
        found = state_placement(factory)
        if found is not None:
            entry = {"state": found[1], "scope": found[0]}
            if entry not in entries:
                entries.append(entry)
    return entries


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
