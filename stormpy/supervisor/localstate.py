"""The supervisor's keyed state under ``<storm.local.dir>/supervisor/localstate/``.

Keys: LSSupervisorId, LSSupervisorAssignments, LSApprovedWorkers (DESIGN section 5). The
paths shared with workers (stormdist, code dirs, worker heartbeats and pids) live in
``stormpy.disk_layout``, re-exported here for the supervisor's modules.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TypeVar

from stormpy.disk_layout import (  # noqa: F401 - re-exported: the supervisor's modules use them via localstate
    atomic_write,
    code_dir,
    downloads_tmp,
    heartbeat_path,
    pid_path,
    read_pid,
    read_struct,
    read_worker_heartbeat,
    remove_worker_dir,
    stormdist_dir,
    stormdist_root,
    worker_conf_path,
    worker_dir,
    workers_root,
    write_pid,
    write_worker_heartbeat,
)
from stormpy.thrift import serialize, storm

log = logging.getLogger(__name__)

T = TypeVar("T")

LS_ID = "supervisor-id"
LS_LOCAL_ASSIGNMENTS = "local-assignments"
LS_APPROVED_WORKERS = "approved-workers"


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
