"""``stormpy dev-zookeeper``: a real, single-node ZooKeeper for development and tests.

Runs ZooKeeper from a distribution the user points at (``dev.zookeeper.home``, else
``$ZOOKEEPER_HOME``) or from the jars bundled in the pyspark wheel of the ``spark`` extra (see
``stormpy.testing.zookeeper``; without either, one line says where the jars come from) on ``storm.zookeeper.port`` with its data in
``dev.zookeeper.path``, logs quietly to ``<dev.zookeeper.path>/zookeeper.log``, and stops it
cleanly on SIGTERM or Ctrl-C. Without Java the command fails with one line saying so.
"""
from __future__ import annotations

import logging

from stormpy import config as cfg
from stormpy.daemon_guard import DaemonLock, warn_if_open
from stormpy.errors import UserError
from stormpy.signals import StopOnSignals
from stormpy.testing.processes import port_open
from stormpy.testing.zookeeper import ZooKeeperServer, ZooKeeperUnavailable

log = logging.getLogger(__name__)


def run_dev_zookeeper(conf: cfg.Config) -> int:
    """Start ZooKeeper and block until a signal; returns the exit code."""
    port = conf[cfg.STORM_ZOOKEEPER_PORT]
    # Two servers on one data dir would corrupt it: the lock comes before any file is written.
    with DaemonLock(conf[cfg.DEV_ZOOKEEPER_PATH], "dev-zookeeper", key="dev.zookeeper.path"):
        if port_open("127.0.0.1", port):
            raise UserError(f"port {port} is already in use (another ZooKeeper?); set storm.zookeeper.port")
        from stormpy.tls import zookeeper_server_files, zookeeper_ssl_enabled

        tls = zookeeper_server_files(conf) if zookeeper_ssl_enabled(conf) else None   # TLS only, client certs needed
        server = ZooKeeperServer(conf[cfg.DEV_ZOOKEEPER_PATH], port, host="0.0.0.0", tls=tls,
                                 zookeeper_home=conf[cfg.DEV_ZOOKEEPER_HOME])
        warn_if_open("dev ZooKeeper", "0.0.0.0", port,
                     secured=bool(conf.get(cfg.STORM_ZOOKEEPER_AUTH_PAYLOAD.name)) or tls is not None)
        with StopOnSignals(who="dev-zookeeper") as signals:
            return _serve(server, port, signals)


def _serve(server: ZooKeeperServer, port: int, signals: StopOnSignals) -> int:
    try:
        try:
            server.start(timeout=90)
        except ZooKeeperUnavailable as exc:
            lines = str(exc).splitlines()
            if len(lines) > 1:  # the server's own output: worth seeing, but not as the error line
                log.error("ZooKeeper output:\n%s", "\n".join(lines[1:]))
            raise UserError(lines[0] if lines else "ZooKeeper did not start") from None
        log.info("dev ZooKeeper running on port %d%s (data in %s, log %s); Ctrl-C to stop",
                 port, " (TLS only)" if server.tls else "", server.data_dir, server.log_path)
        if not signals.wait(alive=server.is_alive):
            log.error("ZooKeeper exited unexpectedly (code %s):\n%s", server.proc and server.proc.returncode,
                      server.tail())
            return 1
        return 0
    finally:
        server.stop(reason=f"stormpy dev-zookeeper stopping: {signals.reason('exiting')}")

