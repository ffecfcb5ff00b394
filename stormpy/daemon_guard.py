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

:func:`warn_if_open` is the one WARNING line each daemon logs at start when it listens beyond
loopback with security off (Nimbus, UI, log viewer, worker, dev ZooKeeper), saying what anyone
who reaches the port can do and how to close it (docs/reference/security-settings.md).

:class:`ThreadGuard` is the run-time counterpart: every framework thread of a worker (transfer
send/receive, heartbeats, refresh, error reporter, executors) runs its body under one guard, so
an exception never ends a thread silently. The guard logs it with its traceback, reports it as a
component error (the worker reports under ``__system``: ``stormpy errors`` and the UI show it)
and restarts the body after a short pause; when failures pile up (``max_failures`` within
``window_secs``, over all the guard's threads) the guard calls ``on_fatal`` instead, which for a
worker ends the process with :data:`FATAL_EXIT_CODE` so the supervisor starts a fresh one.
"""
from __future__ import annotations

import errno
import fcntl
import ipaddress
import logging
import os
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
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


def is_loopback(host: str | None) -> bool:
    """Whether binding ``host`` keeps a port on this machine (127.0.0.0/8, ::1, localhost).
    Empty, ``*``, ``0.0.0.0`` and other names count as reachable from outside."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


#: What anyone who reaches a daemon's port can do with security off, and the setting that
#: closes it: the text of :func:`warn_if_open` (docs/reference/security-settings.md says the same).
EXPOSURES: dict[str, tuple[str, str]] = {
    "Nimbus": ("can submit a topology, whose code then runs on every supervisor, and kill or "
               "rebalance any topology", "storm.thrift.auth.secret.file"),
    "UI": ("can kill, rebalance, activate and deactivate topologies and read their configuration",
           "ui.auth.enable with ui.users.file (on by itself with storm.thrift.auth.secret.file)"),
    "log viewer": ("can read every worker log of this supervisor",
                   "ui.auth.enable with ui.users.file (on by itself with storm.thrift.auth.secret.file)"),
    "worker": ("can inject tuples into this topology and forge acks or Trident $commit messages",
               "storm.messaging.curve.enable (with storm.thrift.auth.secret.file)"),
    "dev ZooKeeper": ("can rewrite assignments (which code runs where) and read or change every "
                      "topology's cluster state", "storm.zookeeper.auth.payload (digest ACLs on every node)"),
}


def warn_if_open(daemon: str, host: str | None, port: int, *, secured: bool) -> bool:
    """Log one WARNING when ``daemon`` (a key of :data:`EXPOSURES`) listens on ``host:port``
    beyond loopback with its security off; returns whether it warned. Called once at start."""
    if secured or is_loopback(host):
        return False
    exposes, secure_with = EXPOSURES[daemon]
    shown = "every interface" if host in (None, "", "*", "0.0.0.0", "::") else host
    log.warning("SECURITY: %s listens on %s port %d with security off: anyone who reaches it %s. "
                "Set %s, or keep the port behind a firewall (docs/reference/security-settings.md).",
                daemon, shown, port, exposes, secure_with)
    return True


FATAL_EXIT_CODE = 3
"""Exit status of a worker whose framework threads kept failing (:class:`ThreadGuard`): the
supervisor sees the process gone and restarts the worker."""


class ThreadGuard:
    """Runs framework threads so that none dies silently (see the module doc).

    ``report(thread_name, text)`` is told about every failure (it must not raise; if it does,
    the log keeps the error). ``on_fatal(reason)`` is called once, from the failing thread,
    at the ``max_failures``-th failure within ``window_secs``; after that (or
    after :meth:`stop`) bodies are no longer restarted. Thread-safe.
    """

    def __init__(self, owner: str, *, report: Callable[[str, str], None] | None = None,
                 on_fatal: Callable[[str], None] | None = None, max_failures: int = 5,
                 window_secs: float = 60.0, backoff_secs: float = 0.2) -> None:
        self.owner = owner
        self._report = report
        self._on_fatal = on_fatal
        self.max_failures = max(1, int(max_failures))
        self.window_secs = float(window_secs)
        self.backoff_secs = float(backoff_secs)
        self._lock = threading.Lock()
        self._recent: deque[float] = deque()
        self._stop = threading.Event()
        self.failures: dict[str, int] = {}       # thread name -> failures so far
        self.restarts: dict[str, int] = {}       # thread name -> restarts of its body
        self.fatal_reason: str | None = None

    # ------------------------------------------------------------ threads
    def start_thread(self, name: str, target: Callable[[], None], *, restart: bool = True,
                     daemon: bool = True) -> threading.Thread:
        """Start ``target`` on a new thread named ``name`` under this guard."""
        thread = threading.Thread(target=self.run, args=(name, target, restart), name=name, daemon=daemon)
        thread.start()
        return thread

    def run(self, name: str, target: Callable[[], None], restart: bool = True) -> None:
        """Call ``target`` until it returns; each exception is reported and, while within the
        budget and not stopping, ``target`` is called again after the backoff. A body that must
        not be restarted (``restart=False``: an executor, whose loop restarts itself) and still
        ends by an exception leaves work nobody does: that is fatal at once."""
        while True:
            try:
                target()
                return
            except BaseException as exc:  # noqa: BLE001 - the point: nothing ends a thread unseen
                if isinstance(exc, (KeyboardInterrupt, SystemExit)) and threading.current_thread() is threading.main_thread():
                    raise
                again = self.failed(name, exc, handled="restarted" if restart else "thread ended",
                                    fatal=not restart)
            if not (restart and again):
                return
            if self._stop.wait(self.backoff_secs):
                return
            with self._lock:
                self.restarts[name] = self.restarts.get(name, 0) + 1
            log.warning("%s: restarting thread %s (restart #%d)", self.owner, name, self.restarts[name])

    def failed(self, name: str, exc: BaseException, *, handled: str = "restarted", count: bool = True,
               fatal: bool = False) -> bool:
        """Record a failure of thread ``name`` (also for threads that handle their own errors,
        such as executor loops and heartbeats): log, report, and (``count``) count it against
        the budget. A thread that retries an outside service (ZooKeeper away) reports only the
        first failure of a streak, with ``count=False``, so an outage never ends the process.
        ``fatal`` gives up at once (the thread cannot go on). Returns False when the guard gave up
        or is stopping, True when the caller may retry."""
        text = "".join(traceback.format_exception(exc)).rstrip()
        now = time.monotonic()
        fatal = fatal and not self._stop.is_set()   # a thread ending during shutdown is no news
        with self._lock:
            self.failures[name] = self.failures.get(name, 0) + 1
            if count:
                self._recent.append(now)
            while self._recent and now - self._recent[0] > self.window_secs:
                self._recent.popleft()
            too_many = (fatal or len(self._recent) >= self.max_failures) and self.fatal_reason is None
            if too_many:
                self.fatal_reason = (f"thread {name} ended by {type(exc).__name__}: {exc}" if fatal else
                                     f"{len(self._recent)} framework thread failures within "
                                     f"{self.window_secs:g}s (last: thread {name}: {type(exc).__name__}: {exc})")
            fatal = self.fatal_reason is not None
        stopping = self._stop.is_set()
        verdict = "giving up" if fatal else ("stopping" if stopping else handled)
        log.error("%s: thread %s failed (%s): %s", self.owner, name, verdict, text)
        self._send_report(name, f"framework thread {name} failed ({verdict}): {text}")
        if too_many:
            log.critical("%s: %s; ending the process", self.owner, self.fatal_reason)
            self._send_report(name, f"{self.owner} ends: {self.fatal_reason}")
            if self._on_fatal is not None:
                try:
                    self._on_fatal(self.fatal_reason)   # type: ignore[arg-type]
                except Exception:  # noqa: BLE001 - nothing left to tell but the log
                    log.exception("%s: the fatal handler failed", self.owner)
        return not fatal and not stopping

    def _send_report(self, name: str, text: str) -> None:
        if self._report is None:
            return
        try:
            self._report(name, text)
        except Exception:  # noqa: BLE001 - reporting must never take the guarded thread down
            log.exception("%s: could not report the failure of thread %s", self.owner, name)

    def stop(self) -> None:
        """No more restarts: the owner is shutting down."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()
