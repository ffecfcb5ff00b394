"""The supervisor's and workers' files on local disk (DESIGN section 5, seed 000 section 2).

Layout under ``storm.local.dir``::

    supervisor/localstate/<key>          LSSupervisorId, LSSupervisorAssignments, LSApprovedWorkers
    supervisor/stormdist/<topology-id>/  stormcode.zip, stormtopology.ser, stormconf.json, code/
    supervisor/tmp/                      downloads in progress (moved into stormdist when complete)
    workers/<worker-id>/heartbeats       LSWorkerHeartbeat, written by the worker
    workers/<worker-id>/pid              the worker's pid, written by the supervisor at launch
    workers/<worker-id>/supervisor-conf.json   the conf the worker was launched with

Every write goes to a temporary file that is renamed over the target, so a reader (the
supervisor reading a heartbeat, a restarted supervisor reading its state) never sees half a
file even when the writer is SIGKILLed. Thrift structs use the compact protocol.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TypeVar

from stormpy.thrift import deserialize, serialize, storm

log = logging.getLogger(__name__)

T = TypeVar("T")

LS_ID = "supervisor-id"
LS_LOCAL_ASSIGNMENTS = "local-assignments"
LS_APPROVED_WORKERS = "approved-workers"


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (atomic on POSIX)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_struct(path: Path, cls: type[T]) -> T | None:
    """The struct in ``path``, or None when it is missing or unreadable (logged)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None
    try:
        return deserialize(cls, data)
    except Exception as exc:  # noqa: BLE001 - a torn or foreign file is "no state", not a crash
        log.warning("ignoring unreadable %s: %s", path, exc)
        return None


class LocalState:
    """Key -> Thrift struct files under ``<storm.local.dir>/supervisor/localstate``.

    Used by the supervisor's threads; each key has one writer (sync writes assignments, the
    process loop writes approved workers), so no lock is needed.
    """

    def __init__(self, local_dir: str | os.PathLike[str]) -> None:
        self.root = Path(local_dir) / "supervisor" / "localstate"
        self.root.mkdir(parents=True, exist_ok=True)

    def get(self, key: str, cls: type[T]) -> T | None:
        return read_struct(self.root / key, cls)

    def put(self, key: str, value: object) -> None:
        atomic_write(self.root / key, serialize(value))

    # typed helpers ------------------------------------------------------------

    def supervisor_id(self) -> str | None:
        value = self.get(LS_ID, storm.LSSupervisorId)
        return value.supervisor_id if value else None

    def set_supervisor_id(self, supervisor_id: str) -> None:
        self.put(LS_ID, storm.LSSupervisorId(supervisor_id=supervisor_id))

    def local_assignments(self) -> dict[int, tuple[str, list[tuple[int, int]]]]:
        value = self.get(LS_LOCAL_ASSIGNMENTS, storm.LSSupervisorAssignments)
        if value is None:
            return {}
        return {int(port): (la.topology_id, [(e.task_start, e.task_end) for e in la.executors])
                for port, la in (value.assignments or {}).items()}

    def set_local_assignments(self, assignments: dict[int, tuple[str, list[tuple[int, int]]]]) -> None:
        structs = {port: storm.LocalAssignment(topology_id=tid, executors=[
            storm.ExecutorInfo(task_start=s, task_end=e) for s, e in sorted(executors)])
            for port, (tid, executors) in assignments.items()}
        self.put(LS_LOCAL_ASSIGNMENTS, storm.LSSupervisorAssignments(assignments=structs))

    def approved_workers(self) -> dict[str, int]:
        value = self.get(LS_APPROVED_WORKERS, storm.LSApprovedWorkers)
        return dict(value.approved_workers or {}) if value else {}

    def set_approved_workers(self, workers: dict[str, int]) -> None:
        self.put(LS_APPROVED_WORKERS, storm.LSApprovedWorkers(approved_workers=dict(workers)))


# ---------------------------------------------------------------- worker directories

def workers_root(local_dir: str | os.PathLike[str]) -> Path:
    return Path(local_dir) / "workers"


def worker_dir(local_dir: str | os.PathLike[str], worker_id: str) -> Path:
    return workers_root(local_dir) / worker_id


def heartbeat_path(local_dir: str | os.PathLike[str], worker_id: str) -> Path:
    return worker_dir(local_dir, worker_id) / "heartbeats"


def pid_path(local_dir: str | os.PathLike[str], worker_id: str) -> Path:
    return worker_dir(local_dir, worker_id) / "pid"


def worker_conf_path(local_dir: str | os.PathLike[str], worker_id: str) -> Path:
    return worker_dir(local_dir, worker_id) / "supervisor-conf.json"


def write_worker_heartbeat(local_dir: str | os.PathLike[str], worker_id: str,
                           heartbeat: "storm.LSWorkerHeartbeat") -> None:
    """Called by the worker's heartbeat thread."""
    atomic_write(heartbeat_path(local_dir, worker_id), serialize(heartbeat))


def read_worker_heartbeat(local_dir: str | os.PathLike[str], worker_id: str) -> "storm.LSWorkerHeartbeat | None":
    return read_struct(heartbeat_path(local_dir, worker_id), storm.LSWorkerHeartbeat)


def write_pid(local_dir: str | os.PathLike[str], worker_id: str, pid: int) -> None:
    atomic_write(pid_path(local_dir, worker_id), str(pid).encode())


def read_pid(local_dir: str | os.PathLike[str], worker_id: str) -> int | None:
    try:
        return int(pid_path(local_dir, worker_id).read_text().strip())
    except (OSError, ValueError):
        return None


def remove_worker_dir(local_dir: str | os.PathLike[str], worker_id: str) -> None:
    shutil.rmtree(worker_dir(local_dir, worker_id), ignore_errors=True)


# ---------------------------------------------------------------- topology code

def stormdist_root(local_dir: str | os.PathLike[str]) -> Path:
    return Path(local_dir) / "supervisor" / "stormdist"


def stormdist_dir(local_dir: str | os.PathLike[str], topology_id: str) -> Path:
    """Where a topology's downloaded files live; ``code/`` inside is the unzipped user code."""
    return stormdist_root(local_dir) / topology_id


def code_dir(local_dir: str | os.PathLike[str], topology_id: str) -> Path:
    return stormdist_dir(local_dir, topology_id) / "code"


def downloads_tmp(local_dir: str | os.PathLike[str]) -> Path:
    return Path(local_dir) / "supervisor" / "tmp"
