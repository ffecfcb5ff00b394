"""One multilang subprocess: start, handshake, JSON messages delimited by ``end`` lines.

Two daemon threads per subprocess read its stdout (complete messages into a queue) and its
stderr (logged as the component's warnings); the executor thread that owns the component does
everything else, so the component needs no locks. A subprocess that exits or closes stdout
makes the next ``read`` raise :class:`ShellProcessDied`, which crashes the task: its held
tuples fail and replay and the executor re-creates it (a new subprocess).
"""
from __future__ import annotations

import json
import logging
import os
import queue
import shlex
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from stormpy.task.runtime import process_affinity

log = logging.getLogger(__name__)

_EOF = object()


class ShellProcessDied(RuntimeError):
    """The subprocess exited (or closed its stdout); the message says how."""


class ShellProtocolError(RuntimeError):
    """The subprocess sent something that is not a multilang message."""


def command_line(command: str, script: str) -> list[str]:
    """Storm runs ``execution_command`` followed by the script's words."""
    return [command, *shlex.split(script or "")]


def code_dir(argv: list[str]) -> str:
    """Where to run the command: the code directory on ``sys.path`` holding the script (Storm
    runs shell components in the topology's resources directory), else the current one."""
    for arg in argv[1:2]:
        if os.path.isabs(arg):
            return os.path.dirname(arg)
        for entry in sys.path:
            if entry and os.path.isfile(os.path.join(entry, arg)):
                return entry
    return os.getcwd()


class ShellProcess:
    """A running multilang subprocess and its reader threads."""

    def __init__(self, argv: list[str], name: str, logger: logging.Logger | logging.LoggerAdapter) -> None:
        self.argv = argv
        self.name = name
        self.logger = logger
        self.cwd = code_dir(argv)
        self.pid_dir = tempfile.mkdtemp(prefix="stormpy-multilang-")
        self.messages: queue.SimpleQueue[Any] = queue.SimpleQueue()
        try:
            with process_affinity():   # not the one core the executor thread may be pinned to
                self.proc = subprocess.Popen(argv, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True, bufsize=1)
        except OSError as exc:
            raise ShellProcessDied(f"{name}: cannot start {' '.join(argv)!r} in {self.cwd}: {exc}") from None
        self._threads = [threading.Thread(target=self._read_stdout, name=f"multilang-out-{name}", daemon=True),
                         threading.Thread(target=self._read_stderr, name=f"multilang-err-{name}", daemon=True)]
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------ reader threads
    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        lines: list[str] = []
        try:
            for line in self.proc.stdout:
                line = line.rstrip("\n")
                if line != "end":
                    lines.append(line)
                    continue
                text = "\n".join(lines)
                lines = []
                try:
                    self.messages.put(json.loads(text))
                except ValueError:
                    self.messages.put(ShellProtocolError(f"{self.name}: not a JSON message: {text[:200]!r}"))
        except Exception as exc:  # noqa: BLE001 - the executor learns it through the queue
            self.logger.warning("multilang %s: reading stdout failed: %s", self.name, exc)
        finally:
            self.messages.put(_EOF)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        try:
            for line in self.proc.stderr:
                self.logger.warning("[%s stderr] %s", self.name, line.rstrip("\n"))
        except Exception as exc:  # noqa: BLE001
            self.logger.warning("multilang %s: reading stderr failed: %s", self.name, exc)

    # ------------------------------------------------------------ protocol
    def send(self, message: Any) -> None:
        """Write one message (JSON, then ``end``)."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(message) + "\nend\n")
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            # A process that died shows here (broken pipe) or in read() (end of its stdout),
            # whichever the executor reaches first: both name the exit the same way.
            status = self._exit_text()
            verb = "stopped reading" if status == "still running" else "exited"
            raise ShellProcessDied(f"{self.name}: subprocess {self.proc.pid} {verb} ({status}): {exc}") from None

    def read(self, timeout: float | None) -> Any:
        """The next message, or None after ``timeout`` seconds (0: only what already arrived)."""
        try:
            item = self.messages.get(block=bool(timeout), timeout=timeout if timeout else None) \
                if timeout != 0 else self.messages.get_nowait()
        except queue.Empty:
            return None
        if item is _EOF:
            self.messages.put(_EOF)    # every later read sees it too
            raise ShellProcessDied(f"{self.name}: subprocess {self.proc.pid} exited ({self._exit_text()})")
        if isinstance(item, Exception):
            raise item
        return item

    def handshake(self, conf: dict[str, Any], context: dict[str, Any], timeout: float) -> int:
        """Send conf/context/pidDir, wait for ``{"pid": n}``; returns the pid."""
        self.send({"conf": conf, "context": context, "pidDir": self.pid_dir})
        reply = self.read(timeout)
        if reply is None:
            raise ShellProtocolError(f"{self.name}: no handshake answer within {timeout:g}s")
        if not isinstance(reply, dict) or "pid" not in reply:
            raise ShellProtocolError(f"{self.name}: handshake answer without pid: {reply!r}")
        return int(reply["pid"])

    def _exit_text(self) -> str:
        try:
            code = self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return "still running"
        return f"exit code {code}"

    def kill(self) -> None:
        """Stop the subprocess (closing stdin first lets well-behaved ones exit)."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.logger.warning("multilang %s: subprocess %s did not exit after SIGKILL", self.name, self.proc.pid)
        for path in Path(self.pid_dir).glob("*"):
            path.unlink(missing_ok=True)
        try:
            os.rmdir(self.pid_dir)
        except OSError:
            pass
