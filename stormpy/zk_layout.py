"""Every ZooKeeper path stormpy uses, as functions (DESIGN section 4).

Paths are relative to the cluster root: ``cluster_state`` connects with
``storm.zookeeper.root`` as kazoo's chroot, so ``/storms/x`` really is ``<root>/storms/x``.
Only this module spells paths; everything else asks ``cluster_state`` for meaning.
"""
from __future__ import annotations

STORMS_ROOT = "/storms"
ASSIGNMENTS_ROOT = "/assignments"
SUPERVISORS_ROOT = "/supervisors"
WORKERBEATS_ROOT = "/workerbeats"
ERRORS_ROOT = "/errors"
NIMBUSES_ROOT = "/nimbuses"
LEADER_LOCK = "/leader-lock"
CODE_ROOT = "/code"
CODE_REQUESTS_ROOT = "/code-requests"
CODE_FAILURES_ROOT = "/code-failures"

ALL_ROOTS = (STORMS_ROOT, ASSIGNMENTS_ROOT, SUPERVISORS_ROOT, WORKERBEATS_ROOT, ERRORS_ROOT, NIMBUSES_ROOT,
             CODE_ROOT, CODE_REQUESTS_ROOT, CODE_FAILURES_ROOT)


def storm(topology_id: str) -> str:
    return f"{STORMS_ROOT}/{topology_id}"


def assignment(topology_id: str) -> str:
    return f"{ASSIGNMENTS_ROOT}/{topology_id}"


def supervisor(supervisor_id: str) -> str:
    return f"{SUPERVISORS_ROOT}/{supervisor_id}"


def workerbeats(topology_id: str) -> str:
    return f"{WORKERBEATS_ROOT}/{topology_id}"


def worker_beat(topology_id: str, node: str, port: int) -> str:
    return f"{WORKERBEATS_ROOT}/{topology_id}/{node}-{port}"


def errors(topology_id: str) -> str:
    return f"{ERRORS_ROOT}/{topology_id}"


def component_errors(topology_id: str, component_id: str) -> str:
    return f"{ERRORS_ROOT}/{topology_id}/{component_id}"


def error_prefix(topology_id: str, component_id: str) -> str:
    """Prefix for sequential error nodes: ZooKeeper appends the sequence number to ``e``."""
    return f"{ERRORS_ROOT}/{topology_id}/{component_id}/e"


def nimbus(host_port: str) -> str:
    return f"{NIMBUSES_ROOT}/{host_port}"


def code(topology_id: str) -> str:
    """What Nimbus recorded at submit about the topology's code files (their SHA-256): any
    copy offered back later (a supervisor's) must match it."""
    return f"{CODE_ROOT}/{topology_id}"


def code_request(host_port: str) -> str:
    """Ephemeral: the topologies whose code the Nimbus at ``host_port`` lacks (supervisors offer it)."""
    return f"{CODE_REQUESTS_ROOT}/{host_port}"


def code_failures(topology_id: str) -> str:
    return f"{CODE_FAILURES_ROOT}/{topology_id}"


def code_failure(topology_id: str, supervisor_id: str) -> str:
    """Ephemeral: why this supervisor cannot use the topology's code archive (shown by ``stormpy list``)."""
    return f"{CODE_FAILURES_ROOT}/{topology_id}/{supervisor_id}"


def transactional_topology(topology_name: str) -> str:
    """A topology's Trident state subtree. Relative to ``transactional.zookeeper.root``, which
    is its own chroot (Storm keeps it outside ``storm.zookeeper.root``), and keyed by the
    topology NAME, not id, so a resubmitted topology resumes its transactions."""
    return f"/{topology_name}"


def transactional_node(topology_name: str, path: str) -> str:
    """Node of a ``TransactionalState`` path (relative, '/'-separated) of one topology."""
    parts = [p for p in path.split("/") if p]
    return "/".join([transactional_topology(topology_name), *parts])
