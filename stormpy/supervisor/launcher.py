"""Spawning and killing worker processes (Storm's ``ContainerLauncher``); used by the process loop.

A worker is ``python -m stormpy.worker <topology-id> <supervisor-id> <port> <worker-id>
--conf <file>``, started in its own session with stdout and stderr appended to
``<storm.log.dir>/workers-artifacts/<topology-id>/<port>/worker.log.out`` (the worker logs to
``worker.log`` next to it, rotating). Nothing ties its life to
the supervisor: no pipes, no shared process group, so stopping (or SIGKILLing) the supervisor
leaves its workers running and a restarted supervisor adopts them by pid.

Every kill names its reason, and the reason reaches the supervisor's log.

A worker holds only its topology's credentials (DESIGN 13, "what a topology's code can reach"):
its config is :func:`stormpy.auth.worker_conf` of the supervisor's, without the shared secret's
file, the ZooKeeper payload or any daemon key, with that topology's own ZooKeeper identity and
CURVE key. With ``supervisor.run.worker.as.user`` (a supervisor running as root) the worker runs
as the topology's ``topology.submitter.user``; the files it needs (its directory, its config,
the topology's code, its log directory, its state directory) are handed to that user, 0700/0600, and the directories
above them only let it pass (0711). A user that does not exist (or is root) is one line in the
supervisor's log and no worker.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import pwd
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil

from stormpy import auth
from stormpy import config as C
from stormpy import disk_layout
from stormpy.errors import UserError
from stormpy.logs import worker_log_path, worker_out_path
from stormpy.supervisor import localstate

log = logging.getLogger(__name__)


def worker_command(topology_id: str, supervisor_id: str, port: int, worker_id: str, conf_file: Path,
                   childopts: str | list[str] | None = None, python: str | None = None) -> list[str]:
    """The argv of a worker process; ``python`` is the topology's virtualenv (default: ours)."""
    opts = childopts.split() if isinstance(childopts, str) else list(childopts or [])
    return [python or sys.executable, *opts, "-m", "stormpy.worker", topology_id, supervisor_id, str(port),
            worker_id, "--conf", str(conf_file)]


class LaunchRefused(Exception):
    """The worker must not start (``supervisor.run.worker.as.user`` names no usable user)."""


#: Directory modes when workers run as other users: their own 0700, the ones above pass-only.
WORKER_OWNED_DIR_MODE = 0o700
PASS_THROUGH_BITS = 0o711


def worker_user(conf: Mapping[str, Any], topology_id: str, topology_conf: Mapping[str, Any]) -> pwd.struct_passwd | None:
    """The account a worker of ``topology_id`` runs as: None (the supervisor's own) unless
    ``supervisor.run.worker.as.user``; raises LaunchRefused with a one-line reason."""
    if not C.SUPERVISOR_RUN_WORKER_AS_USER.coerce(conf.get(C.SUPERVISOR_RUN_WORKER_AS_USER.name) or False):
        return None
    name = str(topology_conf.get(C.TOPOLOGY_SUBMITTER_USER.name) or "")
    if not name:
        raise LaunchRefused(f"supervisor.run.worker.as.user: topology {topology_id} has no topology.submitter.user; "
                            "worker not started")
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        raise LaunchRefused(f"supervisor.run.worker.as.user: user {name!r} (topology.submitter.user of "
                            f"{topology_id}) does not exist on this host; worker not started") from None
    if account.pw_uid == 0:
        raise LaunchRefused(f"supervisor.run.worker.as.user: topology {topology_id} asks to run as {name!r} "
                            "(uid 0); workers never run as root; worker not started")
    secret_file = conf.get(C.STORM_THRIFT_AUTH_SECRET_FILE.name)
    if secret_file and _owner_uid(Path(str(secret_file)).expanduser()) == account.pw_uid:
        raise LaunchRefused(f"supervisor.run.worker.as.user: topology {topology_id} asks to run as {name!r}, "
                            "which owns storm.thrift.auth.secret.file (the daemons' account); worker not started")
    if os.geteuid() != 0:
        raise LaunchRefused(f"supervisor.run.worker.as.user needs the supervisor to run as root to start "
                            f"{topology_id}'s worker as {name!r}; worker not started")
    return account


def _owner_uid(path: Path) -> int | None:
    try:
        return path.stat().st_uid
    except OSError:
        return None


def _open_nofollow(item: Path) -> int | None:
    """An fd on ``item`` itself, never on what a symlink there points at (None: a symlink, gone,
    or nothing that opens). Ownership and modes are then changed through the fd, so a user who owns the tree
    cannot swap an entry for a link to another file between a check and the change."""
    try:
        return os.open(item, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:   # a symlink (ELOOP), gone, a socket: nothing the worker needs handed over
        return None


def _set_owner(path: Path, uid: int, gid: int, dir_mode: int, file_mode: Callable[[int], int],
               recursive: bool) -> None:
    """``path`` (and its subtree) owned by uid:gid, directories ``dir_mode``, files
    ``file_mode(their mode)``; symlinks are skipped and never followed, nor are files with other
    links (a hard link to a file elsewhere)."""
    paths = [path, *path.rglob("*")] if recursive and path.is_dir() and not path.is_symlink() else [path]
    for item in paths:
        fd = _open_nofollow(item)
        if fd is None:
            continue
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                mode = dir_mode
            elif stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                mode = file_mode(stat.S_IMODE(info.st_mode))
            else:
                continue
            os.fchown(fd, uid, gid)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


def _give(path: Path, account: pwd.struct_passwd, recursive: bool = False) -> None:
    """``path`` (and its subtree) owned by ``account``; directories 0700, files keep their bits
    without group/other access."""
    _set_owner(path, account.pw_uid, account.pw_gid, WORKER_OWNED_DIR_MODE, lambda mode: mode & 0o700, recursive)


def _group_readable(mode: int) -> int:
    """The owner's bits, and the group's read (and execute where the owner has it)."""
    return (mode & 0o700) | 0o040 | (0o010 if mode & 0o100 else 0)


def _lend(path: Path, account: pwd.struct_passwd) -> None:
    """``path``'s subtree readable by ``account``'s group and owned by root, not by the worker's
    user: the topology's code and ``stormconf.json``, which the supervisor reads again at every
    launch (``topology.submitter.user`` among it), must not be writable by the worker."""
    _set_owner(path, 0, account.pw_gid, 0o750, _group_readable, True)


def open_worker_out(out_path: Path) -> int:
    """An append fd on ``worker.log.out``, created 0600 if missing. The directory belongs to the
    worker's user when workers run as other users, so the entry may have been replaced by a
    symlink or a hard link to another file since the last launch: such an entry is removed and
    the file made anew rather than opened (root must never write through it)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(3):
        try:
            fd = os.open(out_path, flags, 0o600)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            out_path.unlink()
            continue
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
            return fd
        os.close(fd)
        out_path.unlink()
    raise LaunchRefused(f"{out_path} keeps being replaced; worker not started")


def _let_pass(top: Path, below: Path) -> None:
    """Directories from ``top`` down to (excluding) ``below``: others may pass (o+x), not list."""
    for parent in reversed(below.parents):
        if parent == top or top in parent.parents:
            os.chmod(parent, (parent.stat().st_mode & 0o7777) | PASS_THROUGH_BITS)


#: The files a worker needs for ZooKeeper over TLS (storm.zookeeper.ssl.enable).
WORKER_TLS_KEYS = (C.STORM_TLS_CERTFILE.name, C.STORM_TLS_KEYFILE.name, C.STORM_TLS_CAFILE.name)


def copy_tls_files(worker_conf: dict[str, Any], worker_dir: Path) -> None:
    """With ``storm.zookeeper.ssl.enable``, copy the worker's certificate, key and CA into its
    directory (``tls-*.pem``, handed to its user with the rest) and point its config at them:
    a worker running as another user cannot read the originals (root's, ``0600``)."""
    if not worker_conf.get(C.STORM_ZOOKEEPER_SSL_ENABLE.name):
        return
    for key in WORKER_TLS_KEYS:
        source = worker_conf.get(key)
        if not source:
            continue
        copy = worker_dir / f"tls-{key.rsplit('.', 1)[1]}.pem"
        disk_layout.write_private(copy, Path(str(source)).expanduser().read_bytes())
        worker_conf[key] = str(copy)


def worker_env(topology_conf: Mapping[str, Any], account: pwd.struct_passwd | None,
               withhold_credentials: bool = True) -> dict[str, str]:
    """The worker's environment: the supervisor's, plus the topology's ``topology.environment``.
    With ``withhold_credentials`` (a secured cluster: a secret, a ZooKeeper payload or workers run
    as their submitters) variables that look like credentials (…PASSWORD, …SECRET, …TOKEN) are
    left out; on an open cluster the environment passes whole, as it always did (topologies
    may rely on, say, ``AWS_SECRET_ACCESS_KEY`` set for the supervisor)."""
    env = {k: v for k, v in os.environ.items() if not (withhold_credentials and C._looks_like_credential(k))}
    if account is not None:
        env.update({"HOME": account.pw_dir, "USER": account.pw_name, "LOGNAME": account.pw_name})
    env.update({str(k): str(v) for k, v in (topology_conf.get(C.TOPOLOGY_ENVIRONMENT.name) or {}).items()})
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Launcher:
    """Starts workers and answers "is this worker alive"; called by the supervisor's process loop."""

    def __init__(self, conf: Mapping[str, Any], supervisor_id: str) -> None:
        self.conf = conf
        self.supervisor_id = supervisor_id
        # absolute, so a worker's argv names its files wherever it is inspected from
        self.local_dir = str(Path(conf[C.STORM_LOCAL_DIR.name]).resolve())
        self.log_dir = str(Path(conf[C.STORM_LOG_DIR.name]).resolve())
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        as_users = C.SUPERVISOR_RUN_WORKER_AS_USER.coerce(conf.get(C.SUPERVISOR_RUN_WORKER_AS_USER.name) or False)
        if as_users and os.geteuid() != 0:
            raise UserError("supervisor.run.worker.as.user needs the supervisor to run as root "
                            "(it starts each worker as its topology's submitter)")
        worker_tls = conf.get(C.SUPERVISOR_WORKER_TLS_CERTFILE.name) and conf.get(C.SUPERVISOR_WORKER_TLS_KEYFILE.name)
        if as_users and conf.get(C.STORM_ZOOKEEPER_SSL_ENABLE.name) and not worker_tls:
            raise UserError("supervisor.run.worker.as.user with storm.zookeeper.ssl.enable needs "
                            "supervisor.worker.tls.certfile and supervisor.worker.tls.keyfile: a certificate for the "
                            "workers (they must not get this host's key)")
        credentials = bool(conf.get(C.STORM_THRIFT_AUTH_SECRET_FILE.name) or conf.get(C.STORM_ZOOKEEPER_AUTH_PAYLOAD.name))
        self.withhold_credentials = bool(as_users or credentials)
        if not as_users and credentials:
            log.warning("SECURITY: workers run as this supervisor's account, which can read its config and "
                        "storm.thrift.auth.secret.file: a topology's code can read them too. Run the supervisor "
                        "as root with supervisor.run.worker.as.user to run each worker as its submitter.")
        if conf.get(C.STORM_ZOOKEEPER_SSL_ENABLE.name) and not worker_tls:
            log.warning("SECURITY: workers get this host's TLS key for ZooKeeper (storm.zookeeper.ssl.enable): "
                        "set supervisor.worker.tls.certfile/keyfile to a certificate of their own")

    def launch(self, topology_id: str, port: int, worker_id: str,
               topology_conf: Mapping[str, Any] | None = None, python: str | None = None) -> int:
        """Fork a worker (in ``python``: the topology's virtualenv, if it has one); returns its pid
        (also written to the worker's pid file). Raises LaunchRefused when
        ``supervisor.run.worker.as.user`` names no usable account."""
        topology_conf = topology_conf or {}
        account = worker_user(self.conf, topology_id, topology_conf)
        conf_file = localstate.worker_conf_path(self.local_dir, worker_id)
        # 0600 in a 0700 dir; the topology's credentials only, never the cluster's
        disk_layout.private_dir(conf_file.parent)
        worker_conf = auth.worker_conf(self.conf, topology_id)
        # absolute too: a worker run as another user starts in its own directory, where a relative
        # storm.local.dir (its heartbeats, the Spark class archive) would name somewhere else
        worker_conf[C.STORM_LOCAL_DIR.name] = self.local_dir
        if account is not None:
            copy_tls_files(worker_conf, conf_file.parent)
        disk_layout.write_private(conf_file, json.dumps(worker_conf, sort_keys=True, default=str))
        log_path = worker_log_path(self.log_dir, topology_id, port)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        out_path = worker_out_path(log_path)
        if account is not None:
            self._hand_over(topology_id, conf_file.parent, log_path.parent, account)
            if python and Path(self.local_dir) in Path(python).parents:
                _let_pass(Path(self.local_dir), Path(python))     # the topology's virtualenv
        childopts = topology_conf.get(C.WORKER_CHILDOPTS.name) or self.conf.get(C.WORKER_CHILDOPTS.name)
        argv = worker_command(topology_id, self.supervisor_id, port, worker_id, conf_file, childopts, python)
        env = worker_env(topology_conf, account, self.withhold_credentials)
        as_user: dict[str, Any] = {}
        if account is not None:
            # umask 077: what the worker writes (its logs, its files) is its user's only
            as_user = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": [],
                       "cwd": str(conf_file.parent), "umask": 0o077}
        # The worker writes worker.log itself (rotating at worker.log.max.bytes); its raw
        # stdout/stderr go to worker.log.out, which only holds what bypasses logging.
        with os.fdopen(open_worker_out(out_path), "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True, close_fds=True, **as_user)
        self._children[proc.pid] = proc
        localstate.write_pid(self.local_dir, worker_id, proc.pid)
        log.info("launched worker %s for %s on port %d: pid %d%s, log %s", worker_id, topology_id, port,
                 proc.pid, f" as {account.pw_name}" if account is not None else "", log_path)
        return proc.pid

    def _hand_over(self, topology_id: str, worker_dir: Path, log_dir: Path, account: pwd.struct_passwd) -> None:
        """Give ``account`` its worker directory (config, heartbeats), its log directory and its
        state directory (``disk_layout.user_state_dir``), and lend it the topology's code (root's,
        readable by the account's group); the directories above them become pass-through (0711)."""
        code = disk_layout.stormdist_dir(self.local_dir, topology_id)
        for top, owned in ((Path(self.local_dir), worker_dir), (Path(self.log_dir), log_dir)):
            _let_pass(top, owned)
            _give(owned, account, recursive=True)
        state = disk_layout.user_state_dir(self.local_dir, account.pw_uid)   # the sqlite state's default
        state.mkdir(parents=True, exist_ok=True)
        os.chmod(state.parent, 0o711)       # users/: enter, not list
        _let_pass(Path(self.local_dir), state)
        _give(state, account)
        _let_pass(Path(self.local_dir), code)
        _lend(code, account)

    def is_alive(self, pid: int, worker_id: str) -> bool:
        """Whether ``pid`` is still the worker ``worker_id`` (guards against pid reuse)."""
        if pid <= 0:
            return False     # a launch that was refused
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
