"""``stormpy nimbus``: wire Nimbus together, run until SIGTERM/SIGINT, shut down cleanly.

Start order matters: connect to ZooKeeper, take the leader lock (a Nimbus restarted after
SIGKILL waits here until its predecessor's session expires), recover (orphan cleanup and
``startup`` transitions, which re-schedule pending kills and rebalances), and only then open
the Thrift port, so no client can act on half-recovered state. The main thread just waits
for a signal; the work happens on the timer and connection threads.
"""
from __future__ import annotations

import logging
import socket
import threading

from stormpy import config as cfg
from stormpy.cluster_state import ClusterState
from stormpy.daemon_guard import check_ports_free, local_dir_lock
from stormpy.errors import UserError
from stormpy.logs import add_file_log, daemon_log_path
from stormpy.nimbus.core import Nimbus
from stormpy.nimbus.files import NimbusFiles
from stormpy.nimbus.monitor import EventTimer, NimbusMonitor
from stormpy.auth import read_secret
from stormpy.nimbus.server import NimbusHandler, ThriftServer, nimbus_summary
from stormpy.signals import StopOnSignals

log = logging.getLogger(__name__)


def advertised_host(conf: cfg.Config) -> str:
    """``storm.local.hostname`` or this machine's name: what supervisors and clients see."""
    return conf[cfg.STORM_LOCAL_HOSTNAME] or socket.getfqdn() or socket.gethostname()


class NimbusDaemon:
    """One Nimbus process: owns the ClusterState, the timer, the monitor and the Thrift server."""

    def __init__(self, conf: cfg.Config) -> None:
        self.conf = conf
        self.host = advertised_host(conf)
        self.port = conf[cfg.NIMBUS_THRIFT_PORT]
        self.host_port = f"{self.host}:{self.port}"
        self.stop_event = threading.Event()
        self.state: ClusterState | None = None
        self.timer: EventTimer | None = None
        self.server: ThriftServer | None = None

    def start(self) -> None:
        """Connect, lead, recover, serve. Returns once serving (or when stopped while waiting)."""
        self.state = ClusterState(self.conf, listener=self._on_zk_state)
        files = NimbusFiles(self.conf[cfg.STORM_LOCAL_DIR], max_upload_bytes=self.conf[cfg.NIMBUS_FILE_UPLOAD_MAX_BYTES],
                            stream_expiration_secs=self.conf[cfg.NIMBUS_FILE_COPY_EXPIRATION_SECS])
        if not self._wait_for_leadership():
            return
        self.timer = EventTimer().start()
        nimbus = Nimbus(self.conf, self.state, files, self.timer.schedule)
        nimbus.startup()
        self.server = ThriftServer(NimbusHandler(nimbus, self.host_port), "0.0.0.0", self.port,
                                   self.conf[cfg.NIMBUS_THRIFT_MAX_BUFFER_SIZE],
                                   idle_timeout_secs=self.conf[cfg.NIMBUS_THRIFT_IDLE_TIMEOUT_SECS],
                                   max_connections=self.conf[cfg.NIMBUS_THRIFT_MAX_CONNECTIONS],
                                   max_buffered_bytes=self.conf[cfg.NIMBUS_THRIFT_MAX_BUFFERED_BYTES],
                                   secret=read_secret(self.conf))
        try:
            self.server.start()
        except OSError as exc:
            raise UserError(f"Nimbus cannot listen on port {self.port}: {exc.strerror or exc} "
                            "(another Nimbus running? set nimbus.thrift.port)") from None
        self.state.register_nimbus(self.host_port, nimbus_summary(self.host, self.port, 0, True))
        NimbusMonitor(nimbus, self.timer, self.host_port).start()
        log.info("Nimbus %s is serving (local dir %s)", self.host_port, files.root)

    def _wait_for_leadership(self) -> bool:
        assert self.state is not None
        announced = False
        while not self.stop_event.is_set():
            if self.state.acquire_leadership(self.host_port, timeout=1.0):
                return True
            if not announced:
                log.info("waiting for the leader lock (another Nimbus, or the session of a killed one, holds it)")
                announced = True
        return False

    def _on_zk_state(self, state: str) -> None:
        if state == "LOST":
            log.warning("ZooKeeper session lost: housekeeping pauses until leadership is re-acquired")

    def stop(self, reason: str) -> None:
        log.info("Nimbus stopping: %s", reason)
        self.stop_event.set()
        if self.server is not None:
            self.server.stop(reason)
        if self.timer is not None:
            self.timer.stop(reason)
        if self.state is not None:
            self.state.release_leadership()
            self.state.close()


def run_nimbus(conf: cfg.Config) -> int:
    """Run Nimbus in the foreground until SIGTERM or Ctrl-C; returns the exit code."""
    # Refuse before taking leadership or touching <storm.local.dir>/nimbus: a second Nimbus on
    # the same dir or port would otherwise wait for the lock and then fail half-way.
    with local_dir_lock(conf[cfg.STORM_LOCAL_DIR], "nimbus"):
        check_ports_free("Nimbus", [(conf[cfg.NIMBUS_THRIFT_PORT], "nimbus.thrift.port")])
        path = add_file_log(daemon_log_path(conf[cfg.STORM_LOG_DIR], "nimbus"))
        log.info("Nimbus logging to %s", path)
        daemon = NimbusDaemon(conf)
        with StopOnSignals(daemon.stop_event, who="nimbus") as signals:
            try:
                daemon.start()
                signals.wait()
            finally:
                daemon.stop(reason=signals.reason("stop requested" if daemon.stop_event.is_set()
                                                  else "startup failed"))
    return 0
