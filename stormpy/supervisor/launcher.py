"""Spawning and killing worker processes (Storm's ``ContainerLauncher``); used by the process loop.

A worker is ``python -m stormpy.worker <topology-id> <supervisor-id> <port> <worker-id>
--conf <file>``, started in its own session with stdout and stderr appended to
``<storm.log.dir>/workers-artifacts/<topology-id>/<port>/worker.log.out`` (the worker logs to
``worker.log`` next to it, rotating). Nothing ties its life to
the supervisor: no pipes, no shared process group, so stopping (or SIGKILLing) the supervisor
leaves its workers running and a restarted supervisor adopts them by pid.

Every kill names its reason, and the reason reaches the supervisor's log.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from stormpy import config as C
from stormpy import disk_layout
from stormpy.logs import worker_log_path, worker_out_path
from stormpy.supervisor import localstate

log = logging.getLogger(__name__)


def worker_command(topology_id: str, supervisor_id: str, port: int, worker_id: str, conf_file: Path,
                   childopts: str | list[str] | None = None, python: str | None = None) -> list[str]:
    """The argv of a worker process; ``python`` is the topology's virtualenv (default: ours)."""
    opts = childopts.split() if isinstance(childopts, str) else list(childopts or [])
    return [python or sys.executable, *opts, "-m", "stormpy.worker", topology_id, supervisor_id, str(port),
            worker_id, "--conf", str(conf_file)]


class Launcher:
    """Starts workers and answers "is this worker alive"; called by the supervisor's process loop."""

    def __init__(self, conf: Mapping[str, Any], supervisor_id: str) -> None:
        self.conf = conf
        self.supervisor_id = supervisor_id
        # absolute, so a worker's argv names its files wherever it is inspected from
        self.local_dir = str(Path(conf[C.STORM_LOCAL_DIR.name]).resolve())
        self.log_dir = str(Path(conf[C.STORM_LOG_DIR.name]).resolve())
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def launch(self, topology_id: str, port: int, worker_id: str,
               topology_conf: Mapping[str, Any] | None = None, python: str | None = None) -> int:
        """Fork a worker (in ``python``: the topology's virtualenv, if it has one); returns its pid
        (also written to the worker's pid file)."""
        topology_conf = topology_conf or {}
        conf_file = localstate.worker_conf_path(self.local_dir, worker_id)
        # 0600 in a 0700 dir: the supervisor's conf can hold storm.zookeeper.auth.payload
        disk_layout.private_dir(conf_file.parent)
        disk_layout.write_private(conf_file, json.dumps(dict(self.conf), sort_keys=True, default=str))
        log_path = worker_log_path(self.log_dir, topology_id, port)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        childopts = topology_conf.get(C.WORKER_CHILDOPTS.name) or self.conf.get(C.WORKER_CHILDOPTS.name)
        argv = worker_command(topology_id, self.supervisor_id, port, worker_id, conf_file, childopts, python)
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (topology_conf.get(C.TOPOLOGY_ENVIRONMENT.name) or {}).items()})
        env["PYTHONUNBUFFERED"] = "1"
        # The worker writes worker.log itself (rotating at worker.log.max.bytes); its raw
        # stdout/stderr go to worker.log.out, which only holds what bypasses logging.
        with open(worker_out_path(log_path), "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True, close_fds=True)
        self._children[proc.pid] = proc
        localstate.write_pid(self.local_dir, worker_id, proc.pid)
        log.info("launched worker %s for %s on port %d: pid %d, log %s", worker_id, topology_id, port,
                 proc.pid, log_path)
        return proc.pid

    def is_alive(self, pid: int, worker_id: str) -> bool:
        """Whether ``pid`` is still the worker ``worker_id`` (guards against pid reuse)."""
        child = self._children.get(pid)
        if child is not None:
            if child.poll() is None:
                return True
            log.info("worker %s (pid %d) exited with code %s", worker_id, pid, child.returncode)
            del self._children[pid]
            return False
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            return worker_id in proc.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return False

    def kill(self, pid: int, worker_id: str, reason: str, force: bool = False) -> None:
        """SIGTERM (or SIGKILL when ``force``) the worker, saying why."""
        sig = signal.SIGKILL if force else signal.SIGTERM
        if not self.is_alive(pid, worker_id):
            return
        log.info("%s worker %s (pid %d): %s", "SIGKILL" if force else "SIGTERM", worker_id, pid, reason)
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def reap(self) -> None:
        """Collect exited children so they do not linger as zombies."""
        for pid, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[pid]
