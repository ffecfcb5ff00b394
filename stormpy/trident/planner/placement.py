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
its slots may then receive the topology's workers (docs/concepts/trident-state.md).
"""
from __future__ import annotations

import logging
from typing import Any

from stormpy.topology.placement import HOST, PROCESS

log = logging.getLogger(__name__)


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
