"""The sink's built-in writer: one batch's DataFrame to a path (parquet/json/csv/orc) or a table.

Why batches are staged: Spark's file committer keeps its work files in ``<path>/_temporary``
and deletes that directory when a job commits, so two sinks appending to the same path at
the same time (two tasks, or two workers) break each other's jobs ("File ... does not exist").
So an ``append`` to a path writes each batch into its own hidden staging directory
``<path>/_stormpy_staging/<tag>`` (Spark readers skip names starting with ``_``) and then
renames the finished files into ``<path>`` through the Hadoop FileSystem API, keeping any
``partition_by`` sub-directories. Renames are atomic per file, so readers never see a batch's
half-written files, and a failed batch leaves nothing in the output.

Without JVM access (Spark Connect) and for other modes or tables, writes go straight to the
target, serialized per target within the process (concurrent appends from several worker
processes then need a table format or a path per worker).
"""
from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

from stormpy.spark.settings import SinkSettings

log = logging.getLogger(__name__)

STAGING_DIR = "_stormpy_staging"

_target_locks: dict[str, threading.Lock] = {}
_target_locks_guard = threading.Lock()


class WriteError(RuntimeError):
    """A batch whose files could not be moved into the output; the batch fails and replays."""


def _lock_for(target: str) -> threading.Lock:
    with _target_locks_guard:
        lock = _target_locks.get(target)
        if lock is None:
            lock = _target_locks[target] = threading.Lock()
        return lock


def _writer(df: Any, settings: SinkSettings, mode: str) -> Any:
    writer = df.write.format(settings.format).mode(mode)
    if settings.options:
        writer = writer.options(**settings.options)
    if settings.partition_by:
        writer = writer.partitionBy(*settings.partition_by)
    return writer


def _hadoop(spark: Any) -> tuple[Any, Any] | None:
    """(jvm, hadoop Configuration), or None when the session has no local JVM (Spark Connect)."""
    jvm = getattr(spark, "_jvm", None)
    jsc = getattr(getattr(spark, "sparkContext", None), "_jsc", None) if jvm is not None else None
    if jvm is None or jsc is None:
        return None
    return jvm, jsc.hadoopConfiguration()


def write_batch(spark: Any, df: Any, settings: SinkSettings, tag: str) -> None:
    """Write one batch with the configured writer; returns when the data is in place.

    ``tag`` names the batch (task and batch id); a random suffix keeps staging directories of
    re-started tasks apart.
    """
    if settings.table:
        with _lock_for(f"table:{settings.table}"):
            _writer(df, settings, settings.mode).saveAsTable(settings.table)
        return
    assert settings.path is not None
    hadoop = _hadoop(spark) if settings.mode == "append" else None
    if hadoop is None:
        with _lock_for(f"path:{settings.path}"):
            _writer(df, settings, settings.mode).save(settings.path)
        return
    jvm, hconf = hadoop
    staging = f"{settings.path.rstrip('/')}/{STAGING_DIR}/{tag}-{uuid.uuid4().hex[:12]}"
    Path = jvm.org.apache.hadoop.fs.Path
    staging_path = Path(staging)
    fs = staging_path.getFileSystem(hconf)
    try:
        _writer(df, settings, "errorifexists").save(staging)
        _publish(fs, Path, staging_path, Path(settings.path))
    finally:
        try:
            fs.delete(staging_path, True)
        except Exception:  # noqa: BLE001 - a leftover staging dir is hidden and harmless
            log.warning("could not remove staging directory %s", staging, exc_info=True)


def _publish(fs: Any, Path: Any, staging: Any, target: Any) -> None:
    """Rename every data file under ``staging`` to the same relative place under ``target``."""
    root = fs.makeQualified(staging).toUri().getPath().rstrip("/") + "/"
    files = fs.listFiles(staging, True)
    moved = 0
    made: set[str] = set()
    while files.hasNext():
        source = files.next().getPath()
        relative = source.toUri().getPath()[len(root):]
        if any(part.startswith(("_", ".")) for part in relative.split("/")):
            continue  # _SUCCESS and checksum files stay behind and are deleted with the staging dir
        dest = Path(target, relative)
        parent = dest.getParent().toString()
        if parent not in made:
            fs.mkdirs(dest.getParent())
            made.add(parent)
        if not fs.rename(source, dest):
            raise WriteError(f"could not move {source.toString()} to {dest.toString()}; the batch fails "
                             f"({moved} of its files were already in place)")
        moved += 1
