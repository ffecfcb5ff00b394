"""``stormpy nimbus``: wire Nimbus together, run until SIGTERM/SIGINT, shut down cleanly.

Start order: connect to ZooKeeper, open the Thrift port and register under ``/nimbuses`` as a
standby (reads are served, leader-only calls are refused naming the leader), then compete for
the leader lock on the "nimbus-ha" thread (``ha.LeaderElector``: code first, Storm's rule).
On winning it, recover (orphan cleanup and ``startup`` transitions, which re-schedule pending
kills and rebalances) and start the monitor; leader-only calls are refused until recovery is
done. The main thread just waits for a signal; the work happens on the timer, HA and
connection threads.
"""
from __future__ import annotations

import logging
import socket
import threading

from stormpy import config as cfg
from stormpy.auth import read_secret
from stormpy.cluster_state import ClusterState
from stormpy.daemon_guard import check_ports_free, local_dir_lock, warn_if_open
from stormpy.errors import UserError
from stormpy.logs import add_file_log, daemon_log_path
from stormpy.nimbus.core import Nimbus
from stormpy.nimbus.files import NimbusFiles
from stormpy.nimbus.ha import CodeRecovery, CodeReplicator, LeaderElector, LeaderMemo, peer_timeout_secs
from stormpy.nimbus.monitor import EventTimer, NimbusMonitor
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
        self.nimbus: Nimbus | None = None
        self.monitor: NimbusMonitor | None = None
        self.elector: LeaderElector | None = None
        self.memo: LeaderMemo | None = None

    def start(self) -> None:
        """Connect, serve reads as a standby, and compete for leadership on the "nimbus-ha" thread.

        Returns once serving. Leader-only work (recovery, monitor) starts when this Nimbus leads.
        """
        self.state = ClusterState(self.conf, listener=self._on_zk_state)
        files = NimbusFiles(self.conf[cfg.STORM_LOCAL_DIR], max_upload_bytes=self.conf[cfg.NIMBUS_FILE_UPLOAD_MAX_BYTES],
                            stream_expiration_secs=self.conf[cfg.NIMBUS_FILE_COPY_EXPIRATION_SECS])
        files.cleanup_temporaries()
        self.timer = EventTimer().start()
        self.nimbus = Nimbus(self.conf, self.state, files, self.timer.schedule)
        from stormpy import tls
        from stormpy.client.nimbus_client import client_tls
        from stormpy.nimbus.authz import Policy

        replicator = CodeReplicator(self.state, files, self.host_port, read_secret(self.conf), client_tls(self.conf),
                                    peer_timeout_secs=peer_timeout_secs(self.conf))
        recovery = CodeRecovery(self.state, files, self.host_port)
        recovery.on_recovered = self.nimbus.code_recovered
        self.nimbus.recovery = recovery
        self.memo = LeaderMemo(files.root, self.host_port)
        self.elector = LeaderElector(self.state, replicator, self.host_port, self.conf[cfg.NIMBUS_CODE_SYNC_FREQ_SECS],
                                     self._on_leader, self._on_standby, self.stop_event, recovery,
                                     on_leading=self._remember_leader_session)
        policy = Policy(self.conf, enforce=tls.client_auth_required(self.conf, "nimbus.thrift"))
        server_tls = tls.server_context(self.conf, "nimbus.thrift") if tls.enabled(self.conf, "nimbus.thrift") else None
        self.server = ThriftServer(NimbusHandler(self.nimbus, self.host_port, policy), cfg.local_bind_host(self.conf),
                                   self.port,
                                   self.conf[cfg.NIMBUS_THRIFT_MAX_BUFFER_SIZE],
                                   idle_timeout_secs=self.conf[cfg.NIMBUS_THRIFT_IDLE_TIMEOUT_SECS],
                                   max_connections=self.conf[cfg.NIMBUS_THRIFT_MAX_CONNECTIONS],
                                   max_buffered_bytes=self.conf[cfg.NIMBUS_THRIFT_MAX_BUFFERED_BYTES],
                                   secret=read_secret(self.conf), tls=server_tls)
        try:
            self.server.bind()     # before taking over a stale lock: this process holds the port
        except OSError as exc:
            raise UserError(f"Nimbus cannot listen on port {self.port}: {exc.strerror or exc} "
                            "(another Nimbus running? set nimbus.thrift.port)") from None
        self._take_over_own_stale_lock()
        # Lead at once when the lock is free (the usual single-Nimbus start): recovery then ends
        # before the port serves, so no client sees a Nimbus without a leader.
        try:
            self.elector.step(acquire_timeout=0)
        except Exception as exc:  # noqa: BLE001 - the leader unreachable for a sync: the HA thread retries
            log.warning("first leadership round failed (the HA thread retries): %s", exc)
        self.server.start()
        warn_if_open("Nimbus", cfg.local_bind_host(self.conf), self.port,
                     secured=read_secret(self.conf) is not None or tls.client_auth_required(self.conf, "nimbus.thrift"))
        if not self.elector.leading:
            self._register(is_leader=False)
        self.elector.start()
        log.info("Nimbus %s is serving as %s (local dir %s)", self.host_port,
                 "the leader" if self.elector.leading else "a standby until it leads", files.root)

    def _take_over_own_stale_lock(self) -> None:
        """After a crash, our previous incarnation's lock node would block leadership until its
        session expires; remove it when it provably is ours (LeaderMemo), keeping HA's rules: a
        standby in line still goes first, and the code check of ``LeaderElector`` still applies."""
        assert self.state is not None and self.memo is not None
        previous = self.memo.previous()
        if previous is None:
            return
        try:
            if self.state.take_over_stale_leadership(self.host_port, previous):
                log.info("Nimbus %s takes over from its own previous incarnation at once", self.host_port)
        except Exception as exc:  # noqa: BLE001 - then the old session's expiry frees the lock, as before
            log.warning("could not remove the previous incarnation's leader lock: %s", exc)

    def _remember_leader_session(self) -> None:
        assert self.state is not None and self.memo is not None
        self.memo.remember(self.state.session_id)

    def _register(self, is_leader: bool) -> None:
        assert self.state is not None
        self.state.register_nimbus(self.host_port, nimbus_summary(self.host, self.port, 0, is_leader))

    def _on_leader(self) -> None:
        """The "nimbus-ha" thread, on winning the lock: recover, then start the monitor (once)."""
        assert self.nimbus is not None and self.timer is not None
        self._remember_leader_session()
        self.nimbus.startup()
        self.nimbus.leader_ready = True
        self._register(is_leader=True)
        if self.monitor is None:
            self.monitor = NimbusMonitor(self.nimbus, self.timer, self.host_port)
            self.monitor.start()

    def _on_standby(self) -> None:
        assert self.nimbus is not None
        self.nimbus.leader_ready = False
        self._register(is_leader=False)

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
        if self.elector is not None:
            self.elector.join(timeout=2)
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
