"""Public test helpers: a real ZooKeeper server and daemon subprocesses.

These are used by stormpy's own tests and by ``stormpy dev-zookeeper``; they start real
processes (never fakes) and always stop them with an escalating, logged shutdown.
"""
from stormpy.testing.processes import DaemonProcess, free_port, wait_until
from stormpy.testing.zookeeper import ZooKeeperServer, ZooKeeperUnavailable

__all__ = ["DaemonProcess", "ZooKeeperServer", "ZooKeeperUnavailable", "free_port", "wait_until"]
