"""Public test helpers: fixed-input topology runs, a real ZooKeeper server, daemon subprocesses.

``complete_topology`` (Storm's ``Testing.completeTopology``) is for users' unit tests; the
rest is used by stormpy's own tests and by ``stormpy dev-zookeeper``: they start real
processes (never fakes) and always stop them with an escalating, logged shutdown.
``wait_until`` is the one polling wait, for tests and library code alike.
"""
from stormpy.testing.complete import CompletedTopology, FixedTuple, TopologyIncomplete, complete_topology
from stormpy.testing.ha import current_leader, wait_for_leader
from stormpy.testing.processes import DaemonProcess, WaitTimeout, free_port, wait_until
from stormpy.testing.zookeeper import ZooKeeperServer, ZooKeeperUnavailable

__all__ = ["CompletedTopology", "DaemonProcess", "FixedTuple", "TopologyIncomplete", "WaitTimeout",
           "ZooKeeperServer", "ZooKeeperUnavailable", "complete_topology", "current_leader", "free_port", "wait_for_leader",
           "wait_until"]
