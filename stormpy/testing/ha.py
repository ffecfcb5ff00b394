"""Waiting for Nimbus leadership in tests and harnesses (several Nimbus daemons, DESIGN section 14).

A Nimbus opens its Thrift port as a standby and leads only after winning ``/leader-lock`` and
recovering; a test that needs leader-only calls (submit, kill, rebalance) waits for that here,
reading ZooKeeper directly: the lock holder and its ``/nimbuses`` registration (``isLeader`` is
written once recovery is done).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stormpy.cluster_state import ClusterState
from stormpy.testing.processes import wait_until


def current_leader(conf: Mapping[str, Any]) -> str | None:
    """``host:port`` of the Nimbus that holds the lock and has registered as leader, else None."""
    with ClusterState(conf) as state:
        leader = state.leader()
        info = state.nimbuses().get(leader) if leader else None
        return leader if info is not None and info.isLeader else None


def wait_for_leader(conf: Mapping[str, Any], timeout: float = 60.0, host_port: str | None = None,
                    other_than: str | None = None) -> str:
    """Wait until a Nimbus leads (``host_port`` if given; not ``other_than``); returns it."""
    def ready() -> str | None:
        leader = current_leader(conf)
        if leader is None or (host_port is not None and leader != host_port) or leader == other_than:
            return None
        return leader
    who = host_port or ("a Nimbus other than " + other_than if other_than else "a Nimbus")
    return wait_until(ready, timeout, f"{who} to lead (hold /leader-lock, registered isLeader)", interval=0.3)
