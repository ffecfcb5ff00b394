"""One long-lived SparkSession per process (a worker, or ``stormpy local``), shared by its sinks.

A cold SparkSession costs 5-7 s on a small machine (about 4 s with the class archive ``stormpy
spark-archive`` records, ``stormpy.spark.class_archive``), so the session is created lazily on the
first batch and kept for the life of the process, never per batch. Sinks ``acquire_session``
in their executor thread and ``release_session`` when they close; the last release stops the
session, and an ``atexit`` hook stops it if the process exits with holders left (a worker
killed by its supervisor with SIGTERM still runs atexit hooks).

The builder is configured from the component config: ``spark.master`` (default ``local[*]``,
``spark://host:7077`` for a standalone cluster, ``sc://host:15002`` for Spark Connect, which
goes through ``builder.remote``), plus every other ``spark.*`` key except stormpy's own
``spark.sink.*`` keys. The first acquirer's settings build the session; later acquirers in the
same process share it (Spark has one SparkContext per JVM), and differing static keys are
logged, not applied.
"""
from __future__ import annotations

import atexit
import importlib.util
import logging
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stormpy import config as cfg
from stormpy.config import ConfigError
from stormpy.spark import class_archive
from stormpy.task.runtime import process_affinity

log = logging.getLogger(__name__)

DEFAULT_MASTER = cfg.SPARK_MASTER.default
# Keys that configure stormpy's sink, not Spark: never handed to the session builder.
SINK_PREFIX = "spark.sink."
STATE_PREFIX = "spark.state."   # stormpy.trident.SparkState's keys
# Defaults stormpy applies unless the config says otherwise: Arrow for columnar hand-over, and no
# console progress bars in worker logs.
BUILDER_DEFAULTS: dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}

# PySpark warns on every Arrow conversion that pandas 3 is not fully supported; the sink hands
# Spark pyarrow Tables, so the warning is noise in every batch's log.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)


@dataclass(frozen=True)
class SessionSettings:
    """What the session builder is given: a master URL or a Spark Connect remote, and options."""

    master: str | None
    remote: str | None
    options: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return f"remote {self.remote}" if self.remote else f"master {self.master}"


def _spark_value(value: Any) -> str:
    """Spark config values are strings; booleans in Spark's lower-case spelling."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def session_settings(conf: Mapping[str, Any]) -> SessionSettings:
    """Pick the builder settings out of a (component) config; pure, so it is tested alone.

    ``spark.remote`` or an ``sc://`` master selects Spark Connect; ``spark.app.name`` defaults
    to ``stormpy-<topology.name>`` so the Spark UI shows which topology a session serves.
    """
    master = conf.get(cfg.SPARK_MASTER.name) or DEFAULT_MASTER
    if not isinstance(master, str):
        raise ConfigError(f"config key 'spark.master' must be a string, got {master!r}")
    remote = conf.get("spark.remote")
    if master.startswith("sc://"):
        remote = remote or master
    # A Spark Connect server owns its static settings (UI, progress bars): only runtime keys the
    # user gave are sent, so stormpy's defaults would just produce "cannot modify" warnings.
    options = {} if remote else dict(BUILDER_DEFAULTS)
    name = conf.get(cfg.TOPOLOGY_NAME.name)
    options["spark.app.name"] = f"stormpy-{name}" if name else "stormpy"
    for key, value in conf.items():
        if not key.startswith("spark.") or key.startswith((SINK_PREFIX, STATE_PREFIX)) or value is None:
            continue
        if key in ("spark.master", "spark.remote"):
            continue
        options[key] = _spark_value(value)
    if remote:
        return SessionSettings(master=None, remote=str(remote), options=options)
    return SessionSettings(master=master, remote=None, options=options)


def _build(settings: SessionSettings, conf: Mapping[str, Any]) -> tuple[Any, Path | None]:
    """Create (or join) the process's SparkSession; slow on first call (JVM + SparkContext).

    A driver started here maps the host's class archive when ``stormpy spark-archive`` recorded
    one (``stormpy.spark.class_archive``); returns the session and the archive it started with.
    """
    if settings.remote:         # no local JVM (and a connect-only pyspark has no SparkContext)
        return _start(settings, settings.options), None
    from pyspark import SparkContext

    # A JVM this process started before (a session stopped and built again) is reused as it is.
    archive = class_archive.usable_archive(conf) if SparkContext._gateway is None else None
    options = class_archive.with_archive(settings.options, archive) if archive else None
    if archive is None or options is None:
        return _start(settings, settings.options), None
    try:
        inode = archive.stat().st_ino
    except OSError:         # recorded again or set aside since usable_archive looked
        return _start(settings, settings.options), None
    try:
        return _start(settings, options), archive
    except Exception:
        if SparkContext._gateway is not None:    # the JVM came up: whatever failed, it was not the archive
            raise
        log.warning("the Spark driver's JVM exited before its gateway came up, started with the class archive %s; "
                    "starting it once more without", archive, exc_info=True)
    # A truncated archive is mapped lazily and could also kill a JVM after its gateway is up; the
    # sidecar's size check (usable_archive) is what keeps a worker from meeting one.
    if class_archive.is_broken(archive):
        class_archive.set_aside(archive, inode)
    return _start(settings, settings.options), None


def _start(settings: SessionSettings, options: Mapping[str, str]) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if settings.remote:
        if importlib.util.find_spec("grpc") is None:  # Spark Connect's client transport
            raise ConfigError(f"spark.master {settings.remote!r} is a Spark Connect URL, which needs the "
                              "Spark Connect client: pip install 'pyspark[connect]'")
        builder = builder.remote(settings.remote)
    else:
        assert settings.master is not None    # session_settings gives a master or a remote
        builder = builder.master(settings.master)
    for key, value in options.items():
        builder = builder.config(key, value)
    with process_affinity():   # stormpy local pins its executor threads to one core
        return builder.getOrCreate()


class SessionManager:
    """Reference-counted holder of the process's SparkSession; safe to call from any thread.

    Creation happens under the lock, so two sinks whose first batches close at once start one
    session, the second waiting for the first.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: Any = None
        self._settings: SessionSettings | None = None
        self._holders = 0

    def acquire(self, conf: Mapping[str, Any]) -> Any:
        """Return the shared session, creating it from ``conf`` if needed; pair with ``release``."""
        settings = session_settings(conf)
        with self._lock:
            if self._session is None:
                started = time.monotonic()
                log.info("starting SparkSession (%s)", settings.describe())
                self._session, archive = _build(settings, conf)
                self._settings = settings
                log.info("SparkSession ready in %.1f s (Spark %s%s)", time.monotonic() - started,
                         self._session.version, f", started with the class archive {archive}" if archive else "")
            elif settings != self._settings:
                self._log_difference(settings)
            self._holders += 1
            return self._session

    def _log_difference(self, settings: SessionSettings) -> None:
        assert self._settings is not None
        theirs = self._settings.options
        differing = sorted(k for k, v in settings.options.items() if theirs.get(k) != v and k != "spark.app.name")
        if settings.master != self._settings.master or settings.remote != self._settings.remote:
            differing.insert(0, "spark.master")
        if differing:
            log.warning("this process's SparkSession already runs with other settings; shared as it is, "
                        "ignoring %s", ", ".join(differing))

    def release(self, reason: str) -> None:
        """Drop one holder; the last one stops the session."""
        with self._lock:
            if self._holders > 0:
                self._holders -= 1
            if self._holders > 0 or self._session is None:
                return
        self.stop(reason)

    def stop(self, reason: str) -> None:
        """Stop the session now, whoever holds it (process exit); idempotent."""
        with self._lock:
            session, self._session, self._settings, self._holders = self._session, None, None, 0
        if session is None:
            return
        log.info("stopping SparkSession: %s", reason)
        try:
            session.stop()
        except Exception:  # noqa: BLE001 - a JVM that is already gone must not break shutdown
            log.warning("SparkSession did not stop cleanly", exc_info=True)

    @property
    def is_active(self) -> bool:
        return self._session is not None

    @property
    def holders(self) -> int:
        return self._holders


_manager = SessionManager()
atexit.register(lambda: _manager.stop("process exit"))


def acquire_session(conf: Mapping[str, Any]) -> Any:
    """The process's SparkSession, built from ``conf`` on first use; call ``release_session`` after."""
    return _manager.acquire(conf)


def release_session(reason: str) -> None:
    """Give back a session from ``acquire_session``; the last holder's release stops Spark."""
    _manager.release(reason)


def stop_session(reason: str) -> None:
    """Stop the process's SparkSession regardless of holders (worker shutdown)."""
    _manager.stop(reason)


def is_session_active() -> bool:
    """Whether this process currently has a stormpy-managed SparkSession."""
    return _manager.is_active
