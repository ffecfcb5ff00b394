"""Assignments -> this supervisor's ports, and topology code on local disk (DESIGN section 5).

The supervisor's *sync thread* runs :meth:`Syncer.sync_once` every ``supervisor.sync.freq.secs``
and whenever a ZooKeeper watch on ``/assignments`` fires. One sync:

1. reads every assignment and keeps the executors placed on this supervisor, grouped by port;
2. downloads the code of topologies that are new here from Nimbus (``stormcode.zip``,
   ``stormtopology.ser``, ``stormconf.json``) into ``supervisor/tmp/<random>``, unzips the code
   into ``code/`` and renames the whole directory into ``supervisor/stormdist/<topology-id>``,
   so a worker never sees a half-written topology;
3. stores the local assignment in localstate and publishes it to the process loop;
4. deletes code of topologies neither assigned here nor still running on a port.

Only this thread writes ``stormdist``; the process loop only reads it (``code_ready``).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from stormpy.disk_layout import private_dir
from stormpy.supervisor import localstate
from stormpy.supervisor.slot import LocalAssignment

log = logging.getLogger(__name__)

CODE_FILES = ("stormcode.zip", "stormtopology.ser", "stormconf.json")
MAX_UNZIPPED_BYTES = 1024 * 1024 * 1024


class CodeDownloadError(Exception):
    """A topology's files could not be fetched or unpacked; the sync retries next time."""


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
                    raise CodeDownloadError(f"topology archive has an unsafe path: {info.filename!r}")
                total += info.file_size
                if total > MAX_UNZIPPED_BYTES:
                    raise CodeDownloadError("topology archive unpacks to more than 1 GiB")
            target.mkdir(parents=True, exist_ok=True)
            zf.extractall(target)
    except zipfile.BadZipFile as exc:
        raise CodeDownloadError(f"topology archive is not a zip file: {exc}") from None


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
                 lstate: localstate.LocalState, connect_nimbus: Callable[[], Any]) -> None:
        # connect_nimbus() returns a context manager yielding a Nimbus client (nimbus_client.connect)
        self.conf = conf
        self.state = state
        self.supervisor_id = supervisor_id
        self.ports = sorted(int(p) for p in ports)
        self.local_dir = conf["storm.local.dir"]
        self.lstate = lstate
        self.connect_nimbus = connect_nimbus
        self._failed_downloads: dict[str, int] = {}

    def sync_once(self, running_topologies: Iterable[str]) -> dict[int, LocalAssignment]:
        """One sync (see module doc). Returns port -> what should run there."""
        assignments = self.state.assignments()
        wanted = local_assignments(assignments, self.supervisor_id, self.ports)
        for topology_id in sorted({la.topology_id for la in wanted.values()}):
            if not self.code_ready(topology_id):
                self._download(topology_id, assignments[topology_id].master_code_dir)
        self.lstate.set_local_assignments({port: (la.topology_id, sorted(la.executors))
                                           for port, la in wanted.items()})
        keep = {la.topology_id for la in wanted.values()} | set(running_topologies)
        self.remove_stale_code(keep)
        return wanted

    def code_ready(self, topology_id: str) -> bool:
        return (localstate.stormdist_dir(self.local_dir, topology_id) / "stormconf.json").exists()

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
            safe_extract(tmp / "stormcode.zip", tmp / "code")
            target = localstate.stormdist_dir(self.local_dir, topology_id)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():      # a half-cleaned leftover; the fresh copy wins
                shutil.rmtree(target, ignore_errors=True)
            os.rename(tmp, target)
            self._failed_downloads.pop(topology_id, None)
            log.info("code of %s is ready in %s", topology_id, target)
        except Exception as exc:  # noqa: BLE001 - Nimbus down, bad archive: retry on the next sync
            count = self._failed_downloads[topology_id] = self._failed_downloads.get(topology_id, 0) + 1
            log.warning("cannot download code of %s from Nimbus (attempt %d): %s", topology_id, count, exc)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def remove_stale_code(self, keep: set[str]) -> None:
        root = localstate.stormdist_root(self.local_dir)
        if not root.is_dir():
            return
        for entry in root.iterdir():
            if entry.name not in keep:
                log.info("removing code of %s: no longer assigned to this supervisor", entry.name)
                shutil.rmtree(entry, ignore_errors=True)
        tmp = localstate.downloads_tmp(self.local_dir)
        if tmp.is_dir():
            for entry in tmp.iterdir():
                # Only this thread downloads, and not right now: anything here is a leftover.
                shutil.rmtree(entry, ignore_errors=True)
