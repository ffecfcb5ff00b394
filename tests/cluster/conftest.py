"""Fixtures of the process-cluster tests; the cluster itself is ``process_cluster.ProcessCluster``."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from process_cluster import ProcessCluster, module_cluster, print_logs_if_failed


@pytest.fixture(scope="module")
def process_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    """ZooKeeper + Nimbus + 2 supervisors x 3 ports as real processes, shared by one test module.

    A module may set ``CLUSTER_SUPERVISORS``, ``CLUSTER_PORTS``, ``CLUSTER_CONF`` and
    ``CLUSTER_NIMBUSES`` (several Nimbus daemons, all in ``nimbus.seeds``).
    """
    module = request.module
    with module_cluster(request, tmp_path_factory.mktemp("cluster"), getattr(module, "CLUSTER_SUPERVISORS", 2),
                        getattr(module, "CLUSTER_PORTS", 3), getattr(module, "CLUSTER_CONF", None),
                        getattr(module, "CLUSTER_NIMBUSES", 1)) as cluster:
        yield cluster


@pytest.fixture
def cluster(process_cluster: ProcessCluster, request: pytest.FixtureRequest) -> Iterator[ProcessCluster]:
    """The module's cluster for one test; prints the logs when this test fails."""
    yield process_cluster
    print_logs_if_failed(process_cluster, request)
