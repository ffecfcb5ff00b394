"""Assignments -> this supervisor's ports, and topology code on local disk (DESIGN section 5).

The supervisor's *sync thread* runs :meth:`Syncer.sync_once` every ``supervisor.sync.freq.secs``
and whenever a ZooKeeper watch on ``/assignments`` fires. One sync:

1. reads every assignment and keeps the executors placed on this supervisor, grouped by port;
2. downloads the code of topologies that are new here from Nimbus (``stormcode.zip``,
   ``stormtopology.ser``, ``stormconf.json``) into ``supervisor/tmp/<random>``, unzips the code
   into ``code/`` and renames the whole directory into ``supervisor/stormdist/<topology-id>``,
   so a worker never sees a half-written topology;
3. builds (or reuses) the virtualenv of a topology submitted with ``-r`` requirements
   (``stormpy.supervisor.virtualenvs``); a failed install is reported as a topology error
   (component ``__requirements``: ``stormpy list``, ``stormpy errors`` and the UI show it) and
   retried after ``supervisor.pip.retry.secs``, while the topology's workers wait;
4. stores the local assignment in localstate and publishes it to the process loop;
5. deletes code of topologies neither assigned here nor still running on a port, and the
   virtualenvs none of the remaining code needs;
6. offers code back: a Nimbus that lacks a topology's code (a failover right after a submit, a
   Nimbus restarted with an empty ``storm.local.dir``) asks under ``/code-requests``; a
   supervisor holding it uploads its three files (the Nimbus keeps them only when they match the
   SHA-256 recorded at submit), at most once per ``OFFER_INTERVAL_SECS`` per Nimbus and topology.

A download that fails is retried with exponential backoff (``DOWNLOAD_BACKOFF_SECS`` doubling
up to ``DOWNLOAD_BACKOFF_MAX_SECS``), never every second. A code archive that fails its checks
(digest other than the one recorded at submit, unsafe paths, not a zip, too big unpacked) is
reported once as a topology error (component ``__supervisor``: the UI and ``stormpy errors``; not
again while any supervisor's report stands) and under ``/code-failures`` (``stormpy list``), which
is cleared once a download works.

Only this thread writes ``stormdist`` and ``virtualenvs``; the process loop only reads them
(``code_ready``, ``worker_python``).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import time
import uuid
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from stormpy import config as C
from stormpy.client.nimbus_client import upload_file
from stormpy.streams import REQUIREMENTS_COMPONENT
from stormpy.disk_layout import private_dir
from stormpy.supervisor import localstate
from stormpy.supervisor.slot import LocalAssignment
from stormpy.supervisor.virtualenvs import RequirementsError, Virtualenvs
from stormpy.thrift import storm

log = logging.getLogger(__name__)

CODE_FILES = ("stormcode.zip", "stormtopology.ser", "stormconf.json")
MAX_UNZIPPED_BYTES = 1024 * 1024 * 1024
DOWNLOAD_BACKOFF_SECS = 1.0
DOWNLOAD_BACKOFF_MAX_SECS = 60.0          # an archive failing its checks: the same bytes would come again
UNREACHABLE_BACKOFF_MAX_SECS = 8.0        # Nimbus away or failing over: it may be back any moment
OFFER_INTERVAL_SECS = 30.0
ERROR_COMPONENT = "__supervisor"


class CodeDownloadError(Exception):
    """A topology's files could not be fetched or unpacked; the sync retries next time."""


class CodeCheckError(CodeDownloadError):
    """The files arrived but fail their checks: retrying at once would fetch the same bytes."""


@dataclass
class _Failures:
    count: int = 0
    retry_at: float = 0.0
    reported: bool = False


def local_assignments(assignments: Mapping[str, Any], supervisor_id: str,
                      ports: Iterable[int]) -> dict[int, LocalAssignment]:
    """The executors that ``assignments`` (topology id -> storm.Assignment) place on this node.

    A port claimed by two topologies (Nimbus never does this) keeps the first in id order.
    """
    mine = set(int(p) for p in ports)
    by_port: dict[int, tuple[str, set[tuple[int, int]]]] = {}
    for topology_id in sorted(assignments):
        assignment = assignments[topology_id]
        for executor, node_port in (assignment.executor_node_port or {}).items():
            if node_port.node != supervisor_id:
                continue
            for port in node_port.port:
                port = int(port)
                if port not in mine:
                    log.warning("assignment of %s uses port %d, which is not one of this supervisor's %s",
                                topology_id, port, sorted(mine))
                    continue
                owner = by_port.setdefault(port, (topology_id, set()))
                if owner[0] != topology_id:
                    log.error("port %d is assigned to both %s and %s; keeping %s", port, owner[0],
                              topology_id, owner[0])
                    continue
                owner[1].add((executor.task_start, executor.task_end))
    return {port: LocalAssignment(tid, frozenset(execs)) for port, (tid, execs) in by_port.items()}


def safe_extract(archive: Path, target: Path) -> None:
    """Unzip ``archive`` into ``target``, refusing absolute paths, ``..`` and zip bombs."""
    try:
        with zipfile.ZipFile(archive) as zf:
            total = 0
            for info in zf.infolist():
                name = PurePosixPath(info.filename)
                if name.is_absolute() or ".." in name.parts or info.filename.startswith(("/", "\\")):
                    raise CodeCheckError(f"topology archive has an unsafe path: {info.filename!r}")
                total += info.file_size
                if total > MAX_UNZIPPED_BYTES:
                    raise CodeCheckError("topology archive unpacks to more than 1 GiB")
            target.mkdir(parents=True, exist_ok=True)
            zf.extractall(target)
    except zipfile.BadZipFile as exc:
        raise CodeCheckError(f"topology archive is not a zip file: {exc}") from None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_digests(directory: Path, expected: Mapping[str, str]) -> None:
    """CodeCheckError unless each file's SHA-256 is the one Nimbus recorded at submit (none
    recorded: a topology submitted before digests existed; nothing to compare)."""
    for name, want in sorted(expected.items()):
        if name in CODE_FILES and sha256_file(directory / name) != want:
            raise CodeCheckError(f"{name} does not match the SHA-256 Nimbus recorded at submit "
                                 "(corrupted or altered on the way)")


def download_file(client: Any, remote: str, local: Path) -> int:
    """Fetch ``remote`` through Nimbus's beginFileDownload/downloadChunk; returns bytes written."""
    handle = client.beginFileDownload(remote)
    size = 0
    # 0600: stormconf.json can carry the topology's credentials (the code too, as users write it)
    with os.fdopen(os.open(local, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        while True:
            chunk = client.downloadChunk(handle)
            if not chunk:
                return size
            out.write(chunk)
            size += len(chunk)


class Syncer:
    """Keeps local code and the local assignment in line with ZooKeeper (the sync thread)."""

    def __init__(self, conf: Mapping[str, Any], state: Any, supervisor_id: str, ports: Iterable[int],
                 lstate: localstate.LocalState, connect_nimbus: Callable[[], Any], *, hostname: str = "",
                 open_nimbus: Callable[[str, int], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # connect_nimbus() returns a context manager yielding the leader's client (nimbus_client.connect);
        # open_nimbus(host, port) a client of one given Nimbus (code offers), closed by the caller.
        self.conf = conf
        self.state = state
        self.supervisor_id = supervisor_id
        self.ports = sorted(int(p) for p in ports)
        self.local_dir = conf[C.STORM_LOCAL_DIR.name]
        self.lstate = lstate
        self.connect_nimbus = connect_nimbus
        self.open_nimbus = open_nimbus
        self.hostname = hostname
        self.clock = clock
        self._failed_downloads: dict[str, _Failures] = {}
        self._offered: dict[tuple[str, str], float] = {}
        self.virtualenvs = Virtualenvs(conf)
        self.pip_retry_secs = float(conf.get(C.SUPERVISOR_PIP_RETRY_SECS.name) or 0)
        self._failed_installs: dict[str, float] = {}    # topology id -> clock time of the next try

    def sync_once(self, running_topologies: Iterable[str]) -> dict[int, LocalAssignment]:
        """One sync (see module doc). Returns port -> what should run there."""
        assignments = self.state.assignments()
        wanted = local_assignments(assignments, self.supervisor_id, self.ports)
        for topology_id in sorted({la.topology_id for la in wanted.values()}):
            if not self.code_downloaded(topology_id) and self.clock() >= self._retry_at(topology_id):
                self._download(topology_id, assignments[topology_id].master_code_dir)
            if self.code_downloaded(topology_id) and not self.code_ready(topology_id):
                self.install_requirements(topology_id)
        self.lstate.set_local_assignments({port: (la.topology_id, sorted(la.executors))
                                           for port, la in wanted.items()})
        keep = {la.topology_id for la in wanted.values()} | set(running_topologies)
        self.remove_stale_code(keep)
        for topology_id in set(self._failed_downloads) - keep:
            self._clear_failures(topology_id)
        self.offer_code()
        return wanted

    def _retry_at(self, topology_id: str) -> float:
        failures = self._failed_downloads.get(topology_id)
        return failures.retry_at if failures is not None else 0.0

    def next_retry_in(self, topology_ids: Iterable[str]) -> float:
        """Seconds until the next download of these (not ready) topologies may be tried."""
        now = self.clock()
        waits = [max(0.0, self._retry_at(t) - now) for t in topology_ids if not self.code_downloaded(t)]
        return min(waits, default=0.0)

    def code_downloaded(self, topology_id: str) -> bool:
        return (localstate.stormdist_dir(self.local_dir, topology_id) / "stormconf.json").exists()

    def code_ready(self, topology_id: str) -> bool:
        """Downloaded, and its requirements (if any) installed: a worker may start."""
        return self.code_downloaded(topology_id) and self.virtualenvs.is_ready(
            localstate.code_dir(self.local_dir, topology_id))

    def worker_python(self, topology_id: str) -> str | None:
        """The interpreter the topology's workers run (its virtualenv's), None: the supervisor's."""
        try:
            return self.virtualenvs.python_for(localstate.code_dir(self.local_dir, topology_id))
        except RequirementsError:
            return None      # code_ready said no: the slot does not launch

    def install_requirements(self, topology_id: str) -> None:
        """Build the topology's virtualenv unless backing off after a failure; failures are reported."""
        if self.clock() < self._failed_installs.get(topology_id, 0.0):
            return                                      # backing off after a failure
        try:
            self.virtualenvs.ensure(topology_id, localstate.code_dir(self.local_dir, topology_id))
        except RequirementsError as exc:
            self._failed_installs[topology_id] = self.clock() + self.pip_retry_secs
            log.error("requirements of %s not installed (retry in %gs): %s", topology_id, self.pip_retry_secs, exc)
            self._report(topology_id, f"requirements not installed on {self._host()}: {exc}")
            return
        if self._failed_installs.pop(topology_id, None) is not None:
            self._clear_report(topology_id)

    def _host(self) -> str:
        return str(self.conf.get(C.STORM_LOCAL_HOSTNAME.name) or socket.gethostname())

    def _report(self, topology_id: str, text: str) -> None:
        try:
            self.state.report_error(topology_id, REQUIREMENTS_COMPONENT, storm.ErrorInfo(
                error=text, error_time_secs=int(time.time()), host=self._host(), port=0))
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away: the next retry reports again
            log.warning("cannot report the requirements error of %s: %s", topology_id, exc)

    def _clear_report(self, topology_id: str) -> None:
        try:
            self.state.clear_component_errors(topology_id, REQUIREMENTS_COMPONENT)
        except Exception as exc:  # noqa: BLE001
            log.warning("cannot clear the requirements error of %s: %s", topology_id, exc)

    def topology_conf(self, topology_id: str) -> dict[str, Any]:
        """The topology's own config (for worker.childopts, topology.environment); {} if unreadable."""
        path = localstate.stormdist_dir(self.local_dir, topology_id) / "stormconf.json"
        try:
            value = json.loads(path.read_text())
            return value if isinstance(value, dict) else {}
        except (OSError, ValueError):
            return {}

    def _download(self, topology_id: str, master_code_dir: str) -> None:
        tmp = localstate.downloads_tmp(self.local_dir) / f"{topology_id}-{uuid.uuid4().hex[:8]}"
        private_dir(tmp)   # 0700, renamed into stormdist as it is
        try:
            with self.connect_nimbus() as client:
                for name in CODE_FILES:
                    # Relative to the serving Nimbus's stormdist: after a failover the leader's
                    # directory differs from the master_code_dir its predecessor wrote.
                    size = download_file(client, f"{topology_id}/{name}", tmp / name)
                    log.info("downloaded %s of %s (%d bytes)", name, topology_id, size)
            check_digests(tmp, self.state.code_digests(topology_id))
            safe_extract(tmp / "stormcode.zip", tmp / "code")
            target = localstate.stormdist_dir(self.local_dir, topology_id)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():      # a half-cleaned leftover; the fresh copy wins
                shutil.rmtree(target, ignore_errors=True)
            os.rename(tmp, target)
            self._clear_failures(topology_id)
            log.info("code of %s is ready in %s", topology_id, target)
        except Exception as exc:  # noqa: BLE001 - Nimbus down, bad archive: retry after a backoff
            self._failed(topology_id, exc)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _failed(self, topology_id: str, exc: Exception) -> None:
        """Back off exponentially; a failed check is reported once per streak (see module doc)."""
        failures = self._failed_downloads.setdefault(topology_id, _Failures())
        failures.count += 1
        checks = isinstance(exc, CodeCheckError)
        cap = DOWNLOAD_BACKOFF_MAX_SECS if checks else UNREACHABLE_BACKOFF_MAX_SECS
        delay = min(cap, DOWNLOAD_BACKOFF_SECS * 2 ** (failures.count - 1))
        failures.retry_at = self.clock() + delay
        what = "the code archive of %s fails its checks" if checks else "cannot download code of %s from Nimbus"
        log.warning(what + " (attempt %d; next in %.0fs): %s", topology_id, failures.count, delay, exc)
        if not checks or failures.reported:
            return
        failures.reported = True
        text = (f"code archive of {topology_id} fails its checks on supervisor {self.hostname or self.supervisor_id}"
                f": {exc}; retrying with backoff up to {DOWNLOAD_BACKOFF_MAX_SECS:.0f}s")
        try:
            # Once per topology: when another supervisor already reported it, add only our status.
            if not self.state.code_failure_reporters(topology_id):
                self.state.report_error(topology_id, ERROR_COMPONENT, storm.ErrorInfo(
                    error=text, error_time_secs=int(time.time()), host=self.hostname or None, port=0))
            self.state.set_code_failure(topology_id, self.supervisor_id, text)
        except Exception as report_exc:  # noqa: BLE001 - ZooKeeper away: the log line above stands
            failures.reported = False
            log.warning("could not report the code failure of %s: %s", topology_id, report_exc)

    def _clear_failures(self, topology_id: str) -> None:
        failures = self._failed_downloads.pop(topology_id, None)
        if failures is not None and failures.reported:
            try:
                self.state.set_code_failure(topology_id, self.supervisor_id, None)
            except Exception as exc:  # noqa: BLE001 - ephemeral: it goes with the session anyway
                log.debug("could not clear the code failure of %s: %s", topology_id, exc)

    # ------------------------------------------------------------ code offers (see module doc)
    def offer_code(self) -> list[tuple[str, str]]:
        """Upload code that a Nimbus asks for and this supervisor holds; returns (nimbus, id) offered."""
        if self.open_nimbus is None:
            return []
        try:
            requests = self.state.code_requests()
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away: next sync
            log.debug("cannot read code requests: %s", exc)
            return []
        now = self.clock()
        offered = []
        for host_port, topology_ids in sorted(requests.items()):
            for topology_id in topology_ids:
                key = (host_port, topology_id)
                if not self.code_downloaded(topology_id) or now < self._offered.get(key, 0.0):
                    continue
                self._offered[key] = now + OFFER_INTERVAL_SECS
                try:
                    self._upload(host_port, topology_id)
                except Exception as exc:  # noqa: BLE001 - that Nimbus away or refusing: try later
                    log.warning("could not offer the code of %s to Nimbus %s: %s", topology_id, host_port, exc)
                    continue
                log.info("offered the code of %s to Nimbus %s, which lacks it", topology_id, host_port)
                offered.append(key)
        live = {(hp, t) for hp, ids in requests.items() for t in ids}
        for key in set(self._offered) - live:
            del self._offered[key]
        return offered

    def _upload(self, host_port: str, topology_id: str) -> None:
        host, _, port = host_port.rpartition(":")
        directory = localstate.stormdist_dir(self.local_dir, topology_id)
        assert self.open_nimbus is not None
        client = self.open_nimbus(host, int(port))
        try:
            for name in CODE_FILES:
                upload_file(client, directory / name)
        finally:
            client.close()

    def remove_stale_code(self, keep: set[str]) -> None:
        root = localstate.stormdist_root(self.local_dir)
        if not root.is_dir():
            return
        keys: set[str] = set()
        for entry in root.iterdir():
            if entry.name not in keep:
                log.info("removing code of %s: no longer assigned to this supervisor", entry.name)
                shutil.rmtree(entry, ignore_errors=True)
                self._failed_installs.pop(entry.name, None)
                self.virtualenvs.forget(entry / "code")
            else:
                key = self.virtualenvs.key_for(entry / "code")
                if key is not None:
                    keys.add(key)
        self.virtualenvs.remove_unused(keys)
        tmp = localstate.downloads_tmp(self.local_dir)
        if tmp.is_dir():
            for entry in tmp.iterdir():
                # Only this thread downloads, and not right now: anything here is a leftover.
                shutil.rmtree(entry, ignore_errors=True)
