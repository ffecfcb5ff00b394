"""Daemon subprocesses for tests and dev tools: start, wait until ready, stop with escalation.

``DaemonProcess`` runs ``python -m stormpy.cli <command> --config <file>`` (so the code under
test is the working tree, not an installed console script), sends its output to a log file,
waits for readiness with a timeout that names what it waited for, and stops it the way a
daemon supervisor should: SIGTERM, a bounded wait, SIGKILL, reap. Every failure message
carries the tail of the daemon's log, because that is what a person needs to see first.

Fault hooks (``kill(signal.SIGKILL)``, ``pid``) are public on purpose: tests crash daemons
through them instead of reaching into private attributes.
"""
from __future__ import annotations

import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from stormpy.disk_layout import write_private

log = logging.getLogger(__name__)

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A wait ran out of time; the message names what was awaited (an AssertionError for pytest)."""


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll ``predicate`` until it returns a truthy value and return that value.

    Raises WaitTimeout("timed out after Ns waiting for <what>") so a failing test says what it
    was waiting for. Exceptions raised by the predicate propagate: a broken check is a bug,
    not a reason to keep polling.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


#: Ports handed out by :func:`free_port` in this process (never twice).
_HANDED_OUT: set[int] = set()
_PORT_RNG = random.Random()
_LOWEST_PORT = 10000


def tear_down_on_sigterm() -> None:
    """Make SIGTERM end this test run the way Ctrl-C does, so its fixtures tear down.

    A run killed with SIGTERM (a CI time limit, ``timeout``) otherwise dies at once and leaves
    every ZooKeeper, daemon, worker, Spark and Redis process its tests started running. As a
    ``KeyboardInterrupt`` pytest unwinds: the fixtures stop what they started and the atexit
    hooks (Redis, Spark, Kafka holders) run. A second SIGTERM kills as before. Main thread only
    (where Python runs signal handlers); a no-op elsewhere.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise KeyboardInterrupt(f"signal {signum}: tearing the test run down")

    signal.signal(signal.SIGTERM, interrupt)


def _ephemeral_low() -> int:
    """The first port of the OS's ephemeral range (Linux ``ip_local_port_range``; 32768 elsewhere)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago, below the OS's ephemeral range.

    Why not the port the OS gives a bind to port 0: that comes from the ephemeral range, which
    every outgoing connection (a ZooKeeper client's) and every other listener bound to port 0
    (a JVM's RMI port) also draws from, so between this call and the daemon's bind another
    process could take it ("address already in use"). Below the range only another caller of
    this function can, and the choice is random over ~20,000 ports (never the same twice in one
    process)."""
    high = _ephemeral_low()
    if high - _LOWEST_PORT >= 1000:
        for _ in range(100):
            port = _PORT_RNG.randrange(_LOWEST_PORT, high)
            if port in _HANDED_OUT:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def log_tail(path: str | os.PathLike[str] | None, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, or a note that it does not exist."""
    if path is None:
        return "(no log file)"
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def stop_process(proc: subprocess.Popen[Any], name: str, reason: str, grace_secs: float = 10.0) -> int | None:
    """Stop ``proc``: SIGTERM, wait ``grace_secs``, then SIGKILL and reap. Returns the exit code."""
    if proc.poll() is not None:
        return proc.returncode
    log.info("stopping %s (pid %d): %s", name, proc.pid, reason)
    try:
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=grace_secs)
    except subprocess.TimeoutExpired:
        log.warning("%s (pid %d) ignored SIGTERM for %gs; sending SIGKILL (%s)", name, proc.pid, grace_secs, reason)
    except ProcessLookupError:
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    return proc.wait(timeout=30)


def write_daemon_config(path: str | os.PathLike[str], conf: Mapping[str, Any]) -> Path:
    """Write ``conf`` as a YAML (JSON is YAML) config file for ``--config``; returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_private(target, json.dumps(dict(conf), indent=1, sort_keys=True, default=str))   # 0600: credentials
    return target


class DaemonProcess:
    """One stormpy daemon (``nimbus``, ``supervisor``, ``ui``, ...) as a child process.

    ``conf`` is written to ``<log_dir>/<name>.yaml`` and passed with ``--config``; stdout and
    stderr go to ``<log_dir>/<name>.out``. Used from the test thread only.
    """

    def __init__(self, command: str | Sequence[str], conf: Mapping[str, Any], log_dir: str | os.PathLike[str],
                 *, name: str | None = None, env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike[str] | None = None, extra_args: Sequence[str] = ()) -> None:
        self.command = [command] if isinstance(command, str) else list(command)
        self.conf = dict(conf)
        self.name = name or self.command[0]
        self.log_dir = Path(log_dir)
        self.config_path = self.log_dir / f"{self.name}.yaml"
        self.output_path = self.log_dir / f"{self.name}.out"
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------ lifecycle
    def argv(self) -> list[str]:
        """The command line this daemon runs with."""
        return [sys.executable, "-m", "stormpy.cli", *self.command, "--config", str(self.config_path),
                *self.extra_args]

    def start(self) -> "DaemonProcess":
        """Write the config file and start the process (does not wait for readiness)."""
        if self.is_alive():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        write_daemon_config(self.config_path, self.conf)
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # The working tree must win over any installed copy, wherever the test runs from.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        out = open(self.output_path, "ab")
        try:
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=self.cwd, start_new_session=True)
        finally:
            out.close()
        log.info("started %s (pid %d): %s", self.name, self.proc.pid, " ".join(self.argv()))
        return self

    def wait_ready(self, check: Callable[[], Any], timeout: float = 60.0, what: str | None = None) -> Any:
        """Wait until ``check()`` is truthy; fail early (with the log tail) if the process exits."""
        label = what or f"{self.name} to become ready"

        def ready() -> Any:
            if self.proc is not None and self.proc.poll() is not None:
                raise WaitTimeout(f"{self.name} exited with code {self.proc.returncode} while waiting for "
                                  f"{label}\n--- {self.output_path} ---\n{self.log_tail()}")
            return check()

        try:
            return wait_until(ready, timeout, label, interval=0.2)
        except WaitTimeout as exc:
            if "exited with code" in str(exc):
                raise
            raise WaitTimeout(f"{exc}\n--- {self.output_path} ---\n{self.log_tail()}") from None

    def wait_for_port(self, port: int, host: str = "127.0.0.1", timeout: float = 60.0) -> None:
        """Wait until the daemon accepts TCP connections on ``port``."""
        self.wait_ready(lambda: port_open(host, port), timeout, f"{self.name} to listen on {host}:{port}")

    def stop(self, reason: str = "test finished", grace_secs: float = 10.0) -> int | None:
        """SIGTERM, bounded wait, SIGKILL, reap; returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        return stop_process(self.proc, self.name, reason, grace_secs)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Fault hook: send ``sig`` (default SIGKILL) and, for SIGKILL, reap the process."""
        if self.proc is None or self.proc.poll() is not None:
            return
        log.info("sending signal %d to %s (pid %d)", sig, self.name, self.proc.pid)
        self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait(timeout=30)

    # ------------------------------------------------------------ inspection
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the daemon's output file."""
        return log_tail(self.output_path, lines)

    def output(self) -> str:
        """The daemon's whole output so far."""
        try:
            return self.output_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> "DaemonProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(reason="context exit")

    def __repr__(self) -> str:
        return f"DaemonProcess({self.name!r}, pid={self.pid}, alive={self.is_alive()})"
