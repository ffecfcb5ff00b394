"""ZooKeeper state: the only package that calls kazoo (DESIGN sections 4 and 7.2).

- ``session``: one kazoo session, its CONNECTED/SUSPENDED/LOST handling and event thread;
- ``leadership``: Nimbus's ``/leader-lock`` and the check leader-only writes make;
- ``watches``: watches that survive reconnections;
- ``state``: ``ClusterState``, typed reads and writes of the cluster's paths;
- ``transactional``: ``TransactionalState`` for Trident (ZooKeeper and in-memory).
"""
from stormpy.cluster_state.leadership import NotLeaderError
from stormpy.cluster_state.session import StateListener, normalize_root, zookeeper_hosts
from stormpy.cluster_state.state import ClusterState, HeartbeatSink, ZkHeartbeatSink
from stormpy.cluster_state.transactional import (
    MemoryTransactionalState,
    TransactionalState,
    ZkTransactionalState,
    transactional_state_for,
)
from stormpy.cluster_state.watches import Watch

__all__ = ["ClusterState", "HeartbeatSink", "MemoryTransactionalState", "NotLeaderError", "StateListener",
           "TransactionalState", "Watch", "ZkHeartbeatSink", "ZkTransactionalState", "normalize_root",
           "transactional_state_for", "zookeeper_hosts"]
