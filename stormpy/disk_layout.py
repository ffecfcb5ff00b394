"""Files on a supervisor host's local disk that the supervisor AND its workers use.

Layout under ``storm.local.dir`` (DESIGN section 5, seed 000 section 2)::

    supervisor/stormdist/<topology-id>/  stormcode.zip, stormtopology.ser, stormconf.json, code/
    supervisor/virtualenvs/<hash>/       a topology's requirements installed (submit -r), ready when .ready exists
    supervisor/tmp/                      downloads in progress (moved into stormdist when complete)
    workers/<worker-id>/heartbeats       LSWorkerHeartbeat, written by the worker
    workers/<worker-id>/pid              the worker's pid, written by the supervisor at launch
    workers/<worker-id>/supervisor-conf.json   the conf the worker was launched with

This module sits below ``stormpy.supervisor`` and ``stormpy.worker`` so that a worker process
(user code's host) never imports daemon code: both sides agree on paths here. The
supervisor's own keyed state (``supervisor/localstate/``) stays in
``stormpy.supervisor.localstate``.

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


_host_local_dir: Path | None = None
_worker_state_dir: Path | None = None


def set_host_local_dir(local_dir: str | Path, run_as_user: bool = False) -> None:
    """Called once by a worker process with its supervisor's ``storm.local.dir`` and whether the
    supervisor runs its workers as their submitters (``supervisor.run.worker.as.user``).

    A task's config is its topology's (as submitted, every default filled in), which carries
    neither: host-wide files a task looks for (the Spark class archive, an as-user worker's
    state directory) are found through this.
    """
    global _host_local_dir, _worker_state_dir
    _host_local_dir = Path(local_dir).resolve()
    _worker_state_dir = user_state_dir(_host_local_dir, os.geteuid()) if run_as_user else None


def host_local_dir() -> Path | None:
    """The supervisor's ``storm.local.dir`` in a worker process; None elsewhere (``stormpy local``)."""
    return _host_local_dir


def worker_state_dir() -> Path | None:
    """In a worker run as its submitter, the state directory its supervisor made the user's
    (``user_state_dir``); None elsewhere."""
    return _worker_state_dir


def user_state_dir(local_dir: str | os.PathLike[str], uid: int) -> Path:
    """Default state files of the workers run as the user ``uid`` (``supervisor.run.worker.as.user``):
    made theirs by the supervisor and kept across their workers, whose own directories (their
    working directories) are removed with them. Named by uid: a number, never a path."""
    return Path(local_dir) / "state" / "users" / str(int(uid))


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


PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make it ``0700``: it holds files with credentials."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, PRIVATE_DIR_MODE)
    return path


def write_private(path: Path, data: bytes | str) -> None:
    """Write a file only its owner may read (``0600`` from the first byte, also when it existed):
    worker and topology configs can carry ``storm.zookeeper.auth.payload`` and other secrets."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    os.fchmod(fd, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)


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


# What ``stormpy submit -r FILE --wheels DIR`` adds to the code archive; the supervisor builds
# the topology's virtualenv from it (stormpy.supervisor.virtualenvs).
REQUIREMENTS_DIR = ".stormpy-requirements"
REQUIREMENTS_FILE = "requirements.txt"
WHEELS_DIR = "wheels"


def virtualenvs_root(local_dir: str | os.PathLike[str]) -> Path:
    """Topologies' virtualenvs, one per requirements hash, shared by topologies that agree."""
    return Path(local_dir) / "supervisor" / "virtualenvs"


def downloads_tmp(local_dir: str | os.PathLike[str]) -> Path:
    return Path(local_dir) / "supervisor" / "tmp"
