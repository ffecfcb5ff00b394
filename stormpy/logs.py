"""Logging set-up: the CLI logs to stderr; daemons and workers also to files under storm.log.dir."""
from __future__ import annotations

import logging
import logging.handlers
import os
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"


def setup_cli_logging(level: int = logging.INFO) -> None:
    """Plain stderr logging for short commands; quiet for third-party libraries."""
    logging.basicConfig(level=level, format=FORMAT)
    for noisy in ("kazoo", "py4j", "thriftpy2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def add_file_log(path: str | os.PathLike[str], level: int = logging.INFO) -> Path:
    """Also log to ``path`` (rotated at 100 MiB, 5 kept); returns the path for messages."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.RotatingFileHandler(target, maxBytes=100 * 1024 * 1024, backupCount=5)
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
