"""Logging set-up: the CLI logs to stderr; daemons and workers also to files under storm.log.dir."""
from __future__ import annotations

import logging
import logging.handlers
import os
import threading
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"


def setup_cli_logging(level: int = logging.INFO) -> None:
    """Plain stderr logging for short commands; quiet for third-party libraries."""
    logging.basicConfig(level=level, format=FORMAT)
    for noisy in ("kazoo", "py4j", "thriftpy2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def add_file_log(path: str | os.PathLike[str], level: int = logging.INFO,
                 max_bytes: int = 100 * 1024 * 1024, backups: int = 5) -> Path:
    """Also log to ``path`` (rotated at ``max_bytes``, ``backups`` old files kept); returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.RotatingFileHandler(target, maxBytes=max(0, int(max_bytes)), backupCount=backups)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(level)
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > level or root.level == logging.NOTSET:
        root.setLevel(level)
    return target


def daemon_log_path(log_dir: str, daemon: str) -> Path:
    """``<storm.log.dir>/<daemon>.log`` — nimbus.log, supervisor.log, ui.log."""
    return Path(log_dir) / f"{daemon}.log"


def worker_log_path(log_dir: str, topology_id: str, port: int) -> Path:
    """``<storm.log.dir>/workers-artifacts/<topology-id>/<port>/worker.log`` (DESIGN section 9)."""
    return Path(log_dir) / "workers-artifacts" / topology_id / str(port) / "worker.log"


def worker_out_path(log_path: Path) -> Path:
    """``worker.log.out`` next to ``worker.log``: the worker process's raw stdout/stderr (as Storm's),
    which only holds what bypasses logging (a crash before logging starts, C-level output)."""
    return log_path.with_name(log_path.name + ".out")


class LogWriter:
    """A text stream that sends each line to a logger: a supervised worker's ``sys.stdout`` and
    ``sys.stderr`` (Storm redirects System.out/err to its STDOUT/STDERR loggers), so a user's
    ``print`` lands in the rotating worker.log instead of an ever-growing file."""

    def __init__(self, logger: logging.Logger, level: int, fallback: object) -> None:
        self._logger = logger
        self._level = level
        self._fallback = fallback
        self._buffer = ""
        self._busy = threading.local()

    def write(self, text: str) -> int:
        if getattr(self._busy, "on", False):      # logging itself reporting a failure: do not loop
            return self._fallback.write(text)  # type: ignore[attr-defined, no-any-return]
        self._busy.on = True
        try:
            self._buffer += text
            *lines, self._buffer = self._buffer.split("\n")
            for line in lines:
                self._logger.log(self._level, "%s", line)
        finally:
            self._busy.on = False
        return len(text)

    def flush(self) -> None:
        if self._buffer:
            self.write("\n")

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fallback.fileno()  # type: ignore[attr-defined, no-any-return]
