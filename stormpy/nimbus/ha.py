"""Nimbus high availability: code replication to standbys and the leader election loop.

Storm's rule (DESIGN section 14): several Nimbus daemons run; the one holding ``/leader-lock``
leads, the others are standbys that serve reads and copy every active topology's code from the
leader every ``nimbus.code.sync.freq.secs``. A Nimbus competes for the lock only when it holds
the code of every active topology (those with a StormBase), and if it wins the lock while some
code is still missing (a topology submitted a moment ago) it gives the lock up again, syncs and
competes anew, so a leader can always serve the code its supervisors need. The exception: no
other registered Nimbus could hold that code (none is registered, or each asks for some of it
too, ``/code-requests``); then it competes and leads without it rather than leave the cluster
without a leader.

A Nimbus never deletes a live topology because it lacks its code (issue 26): a topology whose
code is in no Nimbus's stormdist (a failover within a sync period of its submit, a Nimbus
restarted with an empty ``storm.local.dir``) is kept, its assignment untouched (its workers run
on), and ``CodeRecovery`` asks the supervisors for it: the Nimbus publishes the ids under
``/code-requests/<host:port>`` (ephemeral), every supervisor holding the code in its stormdist
(and every other Nimbus holding it, ``CodeReplicator.offer_to_peers``) uploads the three files
with the ordinary upload calls, and the Nimbus installs an upload only
when its SHA-256 equals the digest the leader recorded under ``/code/<id>`` at submit, so nobody
can plant other code this way. Until then ``stormpy list`` and the UI show why.

Threads: ``LeaderElector`` runs one thread ("nimbus-ha"). While standby it syncs code and then
blocks in the lock recipe for up to one sync period (being next in line makes failover
immediate once the leader's session ends); while leader it only watches for the loss of the
lock (session expiry), after which it is a standby again.

A peer that stops answering (its host cut off the network in the middle of a code copy) holds
that thread for at most ``peer_timeout_secs``: ``storm.zookeeper.session.timeout``, capped at
``DOWNLOAD_TIMEOUT_SECS``. A leader silent that long has lost its ZooKeeper session too, or is
about to, so waiting longer only delays the failover; a live leader answers a chunk in
milliseconds. After such a failure the standby waits for the code until that leader's session
could have ended (at least ``peer_timeout_secs``, not a shorter sync period), and stops waiting
as soon as the leader changes: then it syncs from the new leader, or leads itself when no other
Nimbus is registered (the code then comes back from the supervisors).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from thriftpy2.transport import TTransportException

from stormpy.client.nimbus_client import open_client, upload_file
from stormpy.cluster_state import ClusterState
from stormpy.config import STORM_ZOOKEEPER_SESSION_TIMEOUT, read
from stormpy.nimbus.files import CODE_FILE, CONF_FILE, TOPOLOGY_FILE, NimbusFiles, check_code_archive

log = logging.getLogger(__name__)

CODE_FILES = (CODE_FILE, TOPOLOGY_FILE, CONF_FILE)
DOWNLOAD_TIMEOUT_SECS = 60.0
OFFER_INTERVAL_SECS = 30.0
#: A peer that went silent or away: the connection is useless, and every further call on it, or
#: a new one to the same peer at once, would wait as long (a local disk error is not one of them).
PEER_GONE_ERRORS = (TTransportException, socket.timeout, ConnectionError, ssl.SSLError)


def peer_timeout_secs(conf: Any) -> float:
    """How long a Nimbus waits on another Nimbus that does not answer (connect, each call of a
    code copy): ``storm.zookeeper.session.timeout``, at most ``DOWNLOAD_TIMEOUT_SECS``. A leader
    that cannot answer a standby for a session timeout is as dead as ZooKeeper will soon say it
    is; the standby must be free to take over by then, not a minute later."""
    return min(DOWNLOAD_TIMEOUT_SECS, max(1.0, read(conf, STORM_ZOOKEEPER_SESSION_TIMEOUT) / 1000.0))


def split_host_port(host_port: str) -> tuple[str, int]:
    host, _, port = host_port.rpartition(":")
    return host, int(port)


class CodeReplicator:
    """Copies the code of active topologies from the leader into this Nimbus's stormdist."""

    def __init__(self, state: ClusterState, files: NimbusFiles, host_port: str, secret: bytes | None = None,
                 tls: Any = None, peer_timeout_secs: float = DOWNLOAD_TIMEOUT_SECS) -> None:
        self.state = state
        self.files = files
        self.host_port = host_port
        self.secret = secret   # storm.thrift.auth.secret.file: the leader refuses downloads without it
        self.tls = tls         # nimbus.thrift.tls.enable: the client TLS context (stormpy.tls.client_context)
        self.peer_timeout_secs = peer_timeout_secs   # see peer_timeout_secs(conf)
        self.unanswered: str | None = None   # the leader whose last copy failed for want of an answer
        #: What was missing when the last ``sync_once`` began: a topology submitted after that
        #: read had no chance to be copied yet, so the round does not call it missing (step()).
        self.missing_at_sync: set[str] | None = None
        self._offered: dict[tuple[str, str], float] = {}

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
        self.missing_at_sync = set(missing)
        if not missing:
            return []
        leader = self.state.leader()
        if leader is None or leader == self.host_port:
            log.info("cannot sync code of %s yet: no other Nimbus leads", ", ".join(missing))
            return []
        host, port = split_host_port(leader)
        fetched: list[str] = []
        try:
            client = open_client(host, port, self.peer_timeout_secs, self.secret, self.tls)
        except Exception as exc:  # noqa: BLE001 - a leader that just died: supervisors may offer the code
            log.warning("cannot sync code of %s from leader %s: %s", ", ".join(missing), leader, exc)
            self.unanswered = leader
            return []
        self.unanswered = None
        try:
            for topology_id in missing:
                if fetched and self.state.leader() != leader:
                    log.info("leader changed from %s during the code sync; syncing the rest next round", leader)
                    break
                try:
                    self._fetch(client, topology_id)
                except PEER_GONE_ERRORS as exc:
                    # Connection broken or leader silent for peer_timeout_secs: every other
                    # topology would wait as long on it. The next round (or the new leader) retries.
                    log.warning("cannot sync code of %s from leader %s (no answer within %.0fs, or the "
                                "connection broke: %s); trying again next round",
                                ", ".join(missing[missing.index(topology_id):]), leader, self.peer_timeout_secs, exc)
                    self.unanswered = leader
                    break
                except Exception as exc:  # noqa: BLE001 - the others may still come
                    log.warning("cannot sync code of %s from leader %s: %s", topology_id, leader, exc)
                    continue
                fetched.append(topology_id)
                log.info("replicated code of %s from leader %s", topology_id, leader)
        finally:
            client.close()
        return fetched

    def offer_to_peers(self) -> list[tuple[str, str]]:
        """Upload code that another Nimbus asks for (``/code-requests``) and this one holds, as
        supervisors do: a leader that lacks a topology's code gets it from a standby that has it
        (the leader checks it against the digests recorded at submit). Returns (nimbus, id) offered."""
        now = time.monotonic()
        offered = []
        requests = self.state.code_requests()
        for host_port, topology_ids in sorted(requests.items()):
            if host_port == self.host_port:
                continue
            for topology_id in topology_ids:
                key = (host_port, topology_id)
                if not self.files.has_code(topology_id) or now < self._offered.get(key, 0.0):
                    continue
                self._offered[key] = now + OFFER_INTERVAL_SECS
                try:
                    host, port = split_host_port(host_port)
                    client = open_client(host, port, self.peer_timeout_secs, self.secret, self.tls)
                    try:
                        for name in CODE_FILES:
                            upload_file(client, self.files.stormdist(topology_id) / name)
                    finally:
                        client.close()
                except Exception as exc:  # noqa: BLE001 - that Nimbus away or refusing: try later
                    log.warning("could not offer the code of %s to Nimbus %s: %s", topology_id, host_port, exc)
                    continue
                log.info("offered the code of %s to Nimbus %s, which lacks it", topology_id, host_port)
                offered.append(key)
        live = {(hp, t) for hp, ids in requests.items() for t in ids}
        for key in set(self._offered) - live:
            del self._offered[key]
        return offered

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


class CodeRecovery:
    """Asks supervisors for code this Nimbus lacks and installs uploads that match the digests
    recorded at submit (see the module docstring). ``refresh`` runs on the "nimbus-ha" thread,
    ``offer`` on Thrift connection threads; one lock guards what is wanted."""

    REMIND_SECS = 60.0

    def __init__(self, state: ClusterState, files: NimbusFiles, host_port: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.state = state
        self.files = files
        self.host_port = host_port
        self.clock = clock
        self._lock = threading.Lock()
        self._wanted: dict[str, dict[str, str]] = {}     # topology id -> file -> sha256 recorded at submit
        self._published: list[str] | None = None
        self._told: dict[str, float] = {}
        self.on_recovered: Callable[[str], None] = lambda _topology_id: None

    def wants_uploads(self) -> bool:
        with self._lock:
            return any(self._wanted.values())

    def refresh(self, missing: list[str]) -> None:
        """Track the topologies whose code is missing here; publish the request, say it loudly."""
        now = self.clock()
        with self._lock:
            known = dict(self._wanted)
        wanted = {}
        for topology_id in missing:
            wanted[topology_id] = known.get(topology_id) or self.state.code_digests(topology_id)
        with self._lock:
            self._wanted = wanted
        for topology_id, digests in wanted.items():
            if now - self._told.get(topology_id, -self.REMIND_SECS) < self.REMIND_SECS:
                continue
            self._told[topology_id] = now
            if digests:
                log.error("CODE MISSING: topology %s has no code in %s on this Nimbus (%s). The topology is "
                          "kept and its workers keep running; asking the supervisors that hold it in their "
                          "stormdist to upload it (checked against the SHA-256 recorded at submit)",
                          topology_id, self.files.stormdist_root, self.host_port)
            else:
                log.error("CODE MISSING: topology %s has no code in %s on this Nimbus (%s) and no digest was "
                          "recorded at its submit, so no supervisor copy can be checked: the topology is kept "
                          "and its workers keep running; an operator must restore stormdist/%s or kill and "
                          "resubmit it", topology_id, self.files.stormdist_root, self.host_port, topology_id)
        for topology_id in set(self._told) - set(wanted):
            del self._told[topology_id]
        request = sorted(t for t, d in wanted.items() if d)
        if request != self._published:
            self.state.set_code_request(self.host_port, request)
            self._published = request

    def offer(self, upload: Path, digest: str) -> bool:
        """A finished upload with this SHA-256: True when it was code this Nimbus asked for
        (installed, or a duplicate of a file already taken, and then deleted)."""
        with self._lock:
            match = next(((tid, name, digests) for tid, digests in self._wanted.items()
                          for name, want in digests.items() if want == digest), None)
        if match is None:
            return False
        topology_id, name, digests = match
        with self._lock:
            if self.files.has_code(topology_id):
                upload.unlink(missing_ok=True)
                return True
            complete = self.files.adopt_recovered(topology_id, name, upload, digests)
            if complete and self.files.has_code(topology_id):
                self._wanted.pop(topology_id, None)
        if complete:
            log.warning("recovered the code of topology %s from a supervisor's copy (SHA-256 matches the "
                        "digests recorded at submit)", topology_id)
            self.on_recovered(topology_id)
        return True


class LeaderMemo:
    """``<storm.local.dir>/nimbus/leader-session.json``: the ZooKeeper session this Nimbus leads
    with. A Nimbus restarted after a crash (SIGKILL) finds its predecessor's lock node still
    holding ``/leader-lock`` until that session expires (``storm.zookeeper.session.timeout``).
    When the node's data is this Nimbus's host:port and its owner the session recorded here, it
    is provably this Nimbus's own previous incarnation: same advertised address, same local
    dir (whose daemon lock this process now holds, so that process is gone), and this process
    holds the port. Then the node may go at once (``ClusterState.take_over_stale_leadership``);
    anyone else's node is never touched."""

    NAME = "leader-session.json"

    def __init__(self, directory: Path, host_port: str) -> None:
        self.path = Path(directory) / self.NAME
        self.host_port = host_port
        self._written: int | None = None

    def remember(self, session_id: int | None) -> None:
        """Record the session this Nimbus leads with now (cheap when unchanged)."""
        if session_id is None or session_id == self._written:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"host_port": self.host_port, "session_id": session_id}))
        os.replace(tmp, self.path)
        self._written = session_id

    def previous(self) -> int | None:
        """The session recorded by an earlier run with the same host:port, else None."""
        try:
            memo = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(memo, dict) or memo.get("host_port") != self.host_port:
            return None
        session_id = memo.get("session_id")
        return session_id if isinstance(session_id, int) else None


class LeaderElector:
    """The "nimbus-ha" thread: sync code, compete for leadership, notice its loss."""

    def __init__(self, state: ClusterState, replicator: CodeReplicator, host_port: str, sync_freq_secs: float,
                 on_leader: Callable[[], None], on_standby: Callable[[], None], stop_event: threading.Event,
                 recovery: CodeRecovery | None = None, on_leading: Callable[[], None] | None = None) -> None:
        self.state = state
        self.on_leading = on_leading      # every round while leading (LeaderMemo)
        self.replicator = replicator
        self.recovery = recovery
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
            if self.on_leading is not None:
                self.on_leading()
            self._refresh_recovery()
            self.stop_event.wait(min(self.sync_freq_secs, 1.0))
            return
        if self.leading:
            log.warning("Nimbus %s lost leadership; it is a standby now", self.host_port)
            self.leading = False
            self.on_standby()
        # The leader first: code it has (every fresh submit's) is copied quietly. What is still
        # missing after that is asked of the supervisors, and said loudly (CODE MISSING).
        self.replicator.sync_once()
        try:
            self.replicator.offer_to_peers()
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away: the next round
            log.warning("could not offer code to other Nimbus daemons: %s", exc)
        # Only what this round's sync could have copied: a submit that landed after its read is
        # copied next round, not asked of the supervisors with a CODE MISSING error now.
        missing = self._refresh_recovery(among=self.replicator.missing_at_sync)
        if missing and self._another_may_hold(missing):
            log.info("not competing for leadership: code of %s is not here yet", ", ".join(missing))
            if acquire_timeout is None:
                wait = self.sync_freq_secs
                if self.replicator.unanswered is not None:
                    # Its host may be gone: give its session the time to end (the wait ends when
                    # the leader changes) rather than block on it again after a short sync period.
                    wait = max(wait, self.replicator.peer_timeout_secs)
                self._wait_for_code(wait)
            return
        timeout = self.sync_freq_secs if acquire_timeout is None else acquire_timeout
        if not self.state.acquire_leadership(self.host_port, timeout=timeout):
            return
        missing = self.replicator.missing_code()
        if missing and self._another_may_hold(missing):
            log.warning("giving up leadership: code of %s is not available locally; syncing first",
                        ", ".join(missing))
            self.state.release_leadership()
            self.replicator.sync_once()
            return
        self._become_leader()

    def _wait_for_code(self, secs: float) -> None:
        """Up to ``secs``, but go on as soon as the missing code arrived (a supervisor's copy) or
        the leader changed: when its session ended the code can no longer come from it and this
        Nimbus may be the one left to lead (``_another_may_hold``); a new leader is synced from
        at once. Without this a standby whose copy failed just before the leader's session
        expired would wait a whole ``nimbus.code.sync.freq.secs`` before taking over."""
        leader = self.state.leader()
        deadline = time.monotonic() + secs
        while not self.stop_event.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline or not self._refresh_recovery():
                return
            if self.state.leader() != leader:
                log.info("the leader changed (was %s) while this Nimbus waited for code; a new round starts",
                         leader or "none")
                return

    def _refresh_recovery(self, among: set[str] | None = None) -> list[str]:
        """The topologies whose code is missing here (only those ``among``, when given), asked of
        the supervisors (CodeRecovery)."""
        missing = self.replicator.missing_code()
        if among is not None:
            missing = [topology_id for topology_id in missing if topology_id in among]
        if self.recovery is not None:
            self.recovery.refresh(missing)
        return missing

    def _another_may_hold(self, missing: list[str]) -> bool:
        """Another registered Nimbus may hold the missing code, so waiting for it makes sense:
        one that asks the supervisors for none of it (``/code-requests``, published by each
        Nimbus's ``CodeRecovery``). A lone Nimbus whose code is gone leads anyway: it keeps those
        topologies (their workers run on) and recovers the code from the supervisors. So do
        standbys that all lack the same code (the leader died just after a submit, before any of
        them copied it): waiting for each other, none would ever lead."""
        others = [hp for hp in self.state.nimbuses() if hp != self.host_port]
        if not others:
            return False
        wanted = set(missing)
        requests = self.state.code_requests()
        return any(not wanted.intersection(requests.get(hp, ())) for hp in others)

    def _become_leader(self) -> None:
        log.info("Nimbus %s is the leader; recovering", self.host_port)
        try:
            self.on_leader()
        except Exception:
            log.exception("recovery as leader failed; giving up leadership")
            self.state.release_leadership()
            raise
        self.leading = True
