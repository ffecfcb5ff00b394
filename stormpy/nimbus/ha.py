"""Nimbus high availability: code replication to standbys and the leader election loop.

Storm's rule (DESIGN section 14): several Nimbus daemons run; the one holding ``/leader-lock``
leads, the others are standbys that serve reads and copy every active topology's code from the
leader every ``nimbus.code.sync.freq.secs``. A Nimbus competes for the lock only when it holds
the code of every active topology (those with a StormBase), and if it wins the lock while some
code is still missing (a topology submitted a moment ago) it gives the lock up again, syncs and
competes anew, so a leader can always serve the code its supervisors need.

Threads: ``LeaderElector`` runs one thread ("nimbus-ha"). While standby it syncs code and then
blocks in the lock recipe for up to one sync period (being next in line makes failover
immediate once the leader's session ends); while leader it only watches for the loss of the
lock (session expiry), after which it is a standby again.
"""
from __future__ import annotations

import logging
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from stormpy.client.nimbus_client import open_client
from stormpy.cluster_state import ClusterState
from stormpy.nimbus.files import CODE_FILE, CONF_FILE, TOPOLOGY_FILE, NimbusFiles, check_code_archive

log = logging.getLogger(__name__)

CODE_FILES = (CODE_FILE, TOPOLOGY_FILE, CONF_FILE)
DOWNLOAD_TIMEOUT_SECS = 60.0


def split_host_port(host_port: str) -> tuple[str, int]:
    host, _, port = host_port.rpartition(":")
    return host, int(port)


class CodeReplicator:
    """Copies the code of active topologies from the leader into this Nimbus's stormdist."""

    def __init__(self, state: ClusterState, files: NimbusFiles, host_port: str, secret: bytes | None = None) -> None:
        self.state = state
        self.files = files
        self.host_port = host_port
        self.secret = secret   # storm.thrift.auth.secret.file: the leader refuses downloads without it

    def missing_code(self) -> list[str]:
        """Active topologies (with a StormBase) whose code this Nimbus does not hold."""
        return sorted(set(self.state.active_storms()) - set(self.files.stormdist_ids()))

    def sync_once(self) -> list[str]:
        """Fetch missing code from the leader, drop code of topologies that are gone; returns the
        ids fetched. Only for standbys: the leader is the one that removes topologies."""
        active = set(self.state.active_storms())
        for topology_id in sorted(set(self.files.stormdist_ids()) - active):
            if self.state.storm_base(topology_id) is None:   # re-read: no race with a fresh submit
                log.info("removing code of %s: the topology is gone", topology_id)
                self.files.remove_stormdist(topology_id)
        missing = self.missing_code()
        if not missing:
            return []
        leader = self.state.leader()
        if leader is None or leader == self.host_port:
            log.info("cannot sync code of %s yet: no other Nimbus leads", ", ".join(missing))
            return []
        host, port = split_host_port(leader)
        fetched = []
        client = open_client(host, port, DOWNLOAD_TIMEOUT_SECS, self.secret)
        try:
            for topology_id in missing:
                self._fetch(client, topology_id)
                fetched.append(topology_id)
                log.info("replicated code of %s from leader %s", topology_id, leader)
        finally:
            client.close()
        return fetched

    def _fetch(self, client: object, topology_id: str) -> None:
        target = self.files.stormdist(topology_id)
        tmp = self.files.stormdist_root / f".tmp-{topology_id}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True, mode=0o700)   # its stormconf.json can carry credentials
        try:
            for name in CODE_FILES:
                _download(client, f"{topology_id}/{name}", tmp / name)
            check_code_archive(tmp / CODE_FILE)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _download(client: object, remote: str, local: Path) -> None:
    handle = client.beginFileDownload(remote)  # type: ignore[attr-defined]
    with open(local, "wb") as out:
        for _ in range(1 << 20):   # bounded: 1 MiB chunks, 1 TiB at most
            chunk = client.downloadChunk(handle)  # type: ignore[attr-defined]
            if not chunk:
                return
            out.write(chunk)
    raise RuntimeError(f"download of {remote} did not end")


class LeaderElector:
    """The "nimbus-ha" thread: sync code, compete for leadership, notice its loss."""

    def __init__(self, state: ClusterState, replicator: CodeReplicator, host_port: str, sync_freq_secs: float,
                 on_leader: Callable[[], None], on_standby: Callable[[], None], stop_event: threading.Event) -> None:
        self.state = state
        self.replicator = replicator
        self.host_port = host_port
        self.sync_freq_secs = max(0.5, float(sync_freq_secs))
        self.on_leader = on_leader
        self.on_standby = on_standby
        self.stop_event = stop_event
        self.leading = False
        self._thread = threading.Thread(target=self._run, name="nimbus-ha", daemon=True)

    def start(self) -> "LeaderElector":
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.step()
            except Exception:  # ZooKeeper or the leader unreachable: retry after a pause
                if self.stop_event.is_set():
                    return
                log.exception("Nimbus HA round failed; retrying in %.1fs", self.sync_freq_secs)
                self.stop_event.wait(min(self.sync_freq_secs, 5.0))

    def step(self, acquire_timeout: float | None = None) -> None:
        """One round; blocks up to one sync period (``acquire_timeout``: how long to wait for the
        lock, default the sync period; 0 = only if free now, Nimbus's start-up try)."""
        if self.state.is_leader():
            if not self.leading:
                self._become_leader()
            self.stop_event.wait(min(self.sync_freq_secs, 1.0))
            return
        if self.leading:
            log.warning("Nimbus %s lost leadership; it is a standby now", self.host_port)
            self.leading = False
            self.on_standby()
        self.replicator.sync_once()
        missing = self.replicator.missing_code()
        if missing and self._others_registered():
            log.info("not competing for leadership: code of %s is not here yet", ", ".join(missing))
            if acquire_timeout is None:
                self.stop_event.wait(self.sync_freq_secs)
            return
        timeout = self.sync_freq_secs if acquire_timeout is None else acquire_timeout
        if not self.state.acquire_leadership(self.host_port, timeout=timeout):
            return
        missing = self.replicator.missing_code()
        if missing and self._others_registered():
            log.warning("giving up leadership: code of %s is not available locally; syncing first",
                        ", ".join(missing))
            self.state.release_leadership()
            self.replicator.sync_once()
            return
        self._become_leader()

    def _others_registered(self) -> bool:
        """Another Nimbus is registered: it may hold the missing code, so waiting makes sense. A
        lone Nimbus whose code is gone leads anyway (its startup drops those topologies)."""
        return any(hp != self.host_port for hp in self.state.nimbuses())

    def _become_leader(self) -> None:
        log.info("Nimbus %s is the leader; recovering", self.host_port)
        try:
            self.on_leader()
        except Exception:
            log.exception("recovery as leader failed; giving up leadership")
            self.state.release_leadership()
            raise
        self.leading = True
