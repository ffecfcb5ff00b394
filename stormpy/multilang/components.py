"""The stormpy components that run ShellBolt/ShellSpout subprocesses (Storm's multilang).

Each task owns one :class:`~stormpy.multilang.process.ShellProcess`, started in ``initialize``
and stopped in ``close``. Everything happens on the executor thread:

- a bolt writes each tuple to the subprocess and, so that simple bolts (which answer each tuple
  at once) keep tuples flowing in order, handles the answers that arrive within
  ``MULTILANG_ANSWER_WAIT_SECS``; anything later (asynchronous bolts) is handled from
  ``on_timer``. Tuples stay held until the subprocess acks or fails them by id, so a crash
  fails them and the spout replays. A ``__heartbeat`` tuple goes out every
  ``HEARTBEAT_SECS``; no ``sync`` within ``topology.subprocess.timeout.secs`` crashes the task.
- a spout sends ``next``/``ack``/``fail``/``activate``/``deactivate`` and handles messages until
  the subprocess answers ``sync`` (Storm's spout protocol is synchronous).

The subprocess crashing (exit, closed stdout, garbage on stdout) raises in the executor
thread: the task crashes, is reported, and is re-created with a new subprocess.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from stormpy import config as cfg
from stormpy.multilang.process import ShellProcess, ShellProtocolError, command_line
from stormpy.api.component import Bolt, Spout
from stormpy.api.tuple import Tuple

log = logging.getLogger(__name__)

HEARTBEAT_SECS = 1.0
MULTILANG_ANSWER_WAIT_SECS = 0.05
LOG_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


class _ShellComponent:
    """What shell bolts and spouts share: the subprocess, the handshake, the common commands."""

    command: str
    script: str
    shell: ShellProcess | None = None

    def _start_process(self, stormconf: Mapping[str, Any], context: Any) -> None:
        name = f"{context.component_id}:{context.task_id}"
        self.timeout_secs = float(cfg.read(stormconf, cfg.TOPOLOGY_SUBPROCESS_TIMEOUT_SECS))
        self.shell = ShellProcess(command_line(self.command, self.script), name, self.logger)
        pid = self.shell.handshake(_json_safe(dict(stormconf)), _json_safe(dict(context)), self.timeout_secs)
        self.logger.info("multilang %s: started %r (pid %d) in %s", name, " ".join(self.shell.argv), pid,
                         self.shell.cwd)

    def _common_command(self, msg: Mapping[str, Any]) -> bool:
        """log / error / metrics; True if ``msg`` was one of them."""
        command = msg.get("command")
        if command == "log":
            self.logger.log(LOG_LEVELS.get(msg.get("level", 2), logging.INFO), "%s", msg.get("msg"))
        elif command == "error":
            self.report_error(msg.get("msg", ""))          # type: ignore[attr-defined]
        elif command == "metrics":
            params = msg.get("params")
            if isinstance(params, (int, float)):
                self.metrics.set(str(msg.get("name")), params)  # type: ignore[attr-defined]
        else:
            return False
        return True

    def _emit(self, msg: Mapping[str, Any], **kwargs: Any) -> None:
        tasks = self.emit(msg.get("tuple") or [], stream=msg.get("stream"),  # type: ignore[attr-defined]
                          direct_task=msg.get("task"), need_task_ids=True, **kwargs)
        if msg.get("need_task_ids", True):
            self.shell.send(tasks or [])    # type: ignore[union-attr]

    def close(self) -> None:
        if self.shell is not None:
            self.shell.kill()
            self.shell = None


class ShellBoltRunner(_ShellComponent, Bolt):
    """A bolt whose tuples are processed by a multilang subprocess (one per task)."""

    outputs = None
    auto_ack = False          # the subprocess acks or fails by id
    auto_anchor = False       # its emits name their anchors
    timer_interval_secs = 0.05

    def __init__(self, command: str, script: str) -> None:
        self.command = command
        self.script = script

    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        self.pending: dict[str, Tuple] = {}
        self.next_id = 0
        self.last_sync = self.last_heartbeat = time.monotonic()
        self._start_process(stormconf, context)

    def process(self, tup: Tuple) -> None:
        self.next_id += 1
        tup_id = str(self.next_id)
        self.pending[tup_id] = tup
        self._send({"id": tup_id, "comp": tup.component, "stream": tup.stream, "task": tup.task,
                           "tuple": list(tup.values)})
        deadline = time.monotonic() + MULTILANG_ANSWER_WAIT_SECS
        while tup_id in self.pending:
            wait = deadline - time.monotonic()
            if wait <= 0 or not self._handle(self.shell.read(wait)):   # type: ignore[union-attr]
                break
        self._drain()

    def process_tick(self, tup: Tuple) -> None:
        """Tick tuples go to the subprocess too (Storm does the same)."""
        self.process(tup)

    def _send(self, message: Any) -> None:
        self.shell.send(message)   # type: ignore[union-attr]

    def on_timer(self) -> None:
        self._drain()
        now = time.monotonic()
        if now - self.last_heartbeat >= HEARTBEAT_SECS:
            self.last_heartbeat = now
            self._send({"id": f"hb-{int(now * 1000)}", "comp": "__system", "stream": "__heartbeat",
                               "task": -1, "tuple": []})
        if now - self.last_sync > self.timeout_secs:
            raise ShellProtocolError(f"multilang subprocess answered no heartbeat for {self.timeout_secs:g}s")

    def _drain(self) -> None:
        while self._handle(self.shell.read(0)):   # type: ignore[union-attr]
            pass

    def _handle(self, msg: Any) -> bool:
        """Act on one message; False when there was none."""
        if msg is None:
            return False
        if not isinstance(msg, dict):
            raise ShellProtocolError(f"unexpected multilang message {msg!r}")
        command = msg.get("command")
        if command == "emit":
            anchors = [self.pending[a] for a in msg.get("anchors") or [] if a in self.pending]
            self._emit(msg, anchors=anchors)
        elif command in ("ack", "fail"):
            tup = self.pending.pop(str(msg.get("id")), None)
            if tup is not None:
                (self.ack if command == "ack" else self.fail)(tup)
        elif command == "sync":
            self.last_sync = time.monotonic()
        elif not self._common_command(msg):
            raise ShellProtocolError(f"unknown multilang bolt command {command!r}")
        return True


class ShellSpoutRunner(_ShellComponent, Spout):
    """A spout whose tuples come from a multilang subprocess (one per task)."""

    outputs = None

    def __init__(self, command: str, script: str) -> None:
        self.command = command
        self.script = script

    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        self._start_process(stormconf, context)

    def _command(self, message: Mapping[str, Any]) -> None:
        """Send one spout command and handle messages until the subprocess says ``sync``."""
        self.shell.send(dict(message))   # type: ignore[union-attr]
        while True:
            msg = self.shell.read(self.timeout_secs)   # type: ignore[union-attr]
            if msg is None:
                raise ShellProtocolError(f"no sync for {message.get('command')!r} within {self.timeout_secs:g}s")
            if not isinstance(msg, dict):
                raise ShellProtocolError(f"unexpected multilang message {msg!r}")
            command = msg.get("command")
            if command == "sync":
                return
            if command == "emit":
                self._emit(msg, tup_id=msg.get("id"))
            elif not self._common_command(msg):
                raise ShellProtocolError(f"unknown multilang spout command {command!r}")

    def next_tuple(self) -> None:
        self._command({"command": "next"})

    def ack(self, tup_id: Any) -> None:
        self._command({"command": "ack", "id": tup_id})

    def fail(self, tup_id: Any) -> None:
        self._command({"command": "fail", "id": tup_id})

    def activate(self) -> None:
        if self.shell is not None:
            self._command({"command": "activate"})

    def deactivate(self) -> None:
        if self.shell is not None:
            self._command({"command": "deactivate"})
