"""Start-up guards of the daemons: one live daemon of a kind per directory, free ports first.

A second ``stormpy supervisor`` started on the same ``storm.local.dir`` would read the first
one's supervisor id from localstate, "replace" its ZooKeeper node and write the same logs.
:class:`DaemonLock` prevents that with an ``fcntl.flock`` on ``<dir>/<kind>/daemon.lock``: the
kernel drops the lock when the holder dies (even by SIGKILL), so a stale lock file never blocks a
restart. Locks are per daemon kind because a Nimbus and a supervisor on one machine may share
``storm.local.dir`` (their subdirectories differ). The lock fd is not inherited by workers
(Python opens files close-on-exec), so a supervisor's surviving workers never lock out its restart.

:func:`check_ports_free` binds each port the daemon is about to serve on and releases it at once,
before anything irreversible happens (leadership, localstate, ZooKeeper nodes).

Both raise :class:`~stormpy.errors.UserError`: the CLI prints one line and exits 1. Called from
the daemons' main threads.
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
from collections.abc import Iterable
from pathlib import Path

from stormpy.errors import UserError

log = logging.getLogger(__name__)

LOCK_NAME = "daemon.lock"


class DaemonLock:
    """An exclusive, process-lifetime lock of ``<directory>/daemon.lock`` for one daemon kind.

    ``acquire()`` raises UserError naming the holder's pid when another live process holds it;
    ``release()`` (or process exit) frees it. ``key`` names the config key to change in the message.
    """

    def __init__(self, directory: str | os.PathLike[str], kind: str, key: str = "storm.local.dir") -> None:
        self.directory = Path(directory)
        self.kind = kind
        self.key = key
        self.path = self.directory / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> "DaemonLock":
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise UserError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
            who = f"pid {holder}" if holder else "another process"
            raise UserError(f"another {self.kind} ({who}) is already running with {self.key} "
                            f"{self.directory.parent.resolve() if self.key == 'storm.local.dir' else self.directory}; "
                            f"stop it or give this {self.kind} its own {self.key}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        log.debug("%s holds %s", self.kind, self.path)
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)           # closing the fd releases the flock
            self._fd = None

    def __enter__(self) -> "DaemonLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text.isdigit() else None
    except (OSError, ValueError):
        return None


def local_dir_lock(local_dir: str | os.PathLike[str], kind: str) -> DaemonLock:
    """The lock of daemon ``kind`` (nimbus, supervisor, ui) under ``<storm.local.dir>/<kind>/``."""
    return DaemonLock(Path(local_dir) / kind, kind)


def port_in_use(port: int, host: str = "0.0.0.0") -> str | None:
    """Why ``port`` cannot be bound on ``host`` (e.g. "Address already in use"), or None if free.
    SO_REUSEADDR as the real servers set it, so sockets in TIME_WAIT do not count as taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def check_ports_free(kind: str, ports: Iterable[tuple[int, str]], host: str = "0.0.0.0") -> None:
    """Raise UserError for the first ``(port, config key)`` that cannot be bound."""
    for port, key in ports:
        reason = port_in_use(port, host)
        if reason is not None:
            raise UserError(f"{kind} cannot use port {port} ({key}): {reason.lower()} "
                            f"(another daemon running? set {key})")
