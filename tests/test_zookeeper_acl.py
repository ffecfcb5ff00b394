"""ZooKeeper digest ACLs (``storm.zookeeper.auth.scheme``/``storm.zookeeper.auth.payload``,
DESIGN 13) on a real ZooKeeper: nodes stormpy creates are closed to anonymous clients."""
from __future__ import annotations

import uuid
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from stormpy.cluster_state import ClusterState
from stormpy.config import Config


def test_nodes_are_closed_to_anonymous_and_wrong_clients(zookeeper: Any) -> None:
    root = f"/acl-{uuid.uuid4().hex[:8]}/storm"
    conf = {**zookeeper.client_conf(root), "storm.zookeeper.auth.scheme": "digest",
            "storm.zookeeper.auth.payload": "stormpy:s3cret-payload"}
    state = ClusterState(Config(conf))
    try:
        state.report_error("topo-1-1", "spout", _error_info())
        assert state.errors("topo-1-1")
    finally:
        state.close()
    hosts = conf["storm.zookeeper.servers"][0] + ":" + str(conf["storm.zookeeper.port"])
    for auth in (None, [("digest", "stormpy:wrong")]):
        anonymous = KazooClient(hosts=hosts, auth_data=auth)
        anonymous.start(timeout=15)
        try:
            with pytest.raises(NoAuthError):
                anonymous.get_children(root)
            with pytest.raises(NoAuthError):
                anonymous.get(root)
            with pytest.raises(NoAuthError):
                anonymous.create(root + "/evil", b"x")
            with pytest.raises(NoAuthError):
                anonymous.delete(root, recursive=True)
        finally:
            anonymous.stop()
            anonymous.close()
    again = ClusterState(Config(conf))   # the right payload reads it back
    try:
        assert again.errors("topo-1-1")
    finally:
        again.close()


def _error_info() -> Any:
    from stormpy.thrift import storm

    return storm.ErrorInfo(error="boom", error_time_secs=1, host="h", port=1)
