"""Where Trident keeps coordinator state and spout metas, and the layout of its paths.

The store itself is the runtime's TransactionalState (stormpy.cluster_state.transactional):
ZooKeeper under ``transactional.zookeeper.root`` on a cluster, an in-process store in
``stormpy local``; every task gets it as ``context.transactional_state``. The path helpers live
here so every Trident component agrees on the layout: ``coordinator/currtx``,
``coordinator/currattempts``, ``spouts/<stream>/<partition>/<txid>`` (transactional metas),
``spouts/<stream>/<partition>/committed`` (opaque).
"""
from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from stormpy.cluster_state.transactional import TransactionalState


def transactional_state(context: Any, conf: dict[str, Any]) -> TransactionalState:
    """The task's TransactionalState; a runtime that offers none cannot run Trident components.

    There is deliberately no private fallback: a per-process store would let two workers of one
    cluster each keep their own coordinator txid, which is exactly the bug exactly-once forbids.
    """
    state = getattr(context, "transactional_state", None)
    if state is None:
        raise RuntimeError("this runtime gives tasks no context.transactional_state; Trident components "
                           "need one (a cluster worker or stormpy local provide it)")
    return state


# ------------------------------------------------------------------ layout
COORDINATOR_CURRENT_TX = "coordinator/currtx"
COORDINATOR_ATTEMPTS = "coordinator/currattempts"


def partition_key(partition: Any) -> str:
    """A path element naming a JSON-able partition id (no '/' survives quoting)."""
    return quote(json.dumps(partition, sort_keys=True), safe="")


def spout_partition_path(stream: str, partition: Any) -> str:
    return f"spouts/{quote(stream, safe='')}/{partition_key(partition)}"


def spout_meta_path(stream: str, partition: Any, txid: int) -> str:
    return f"{spout_partition_path(stream, partition)}/{txid}"


def spout_committed_path(stream: str, partition: Any) -> str:
    return f"{spout_partition_path(stream, partition)}/committed"
