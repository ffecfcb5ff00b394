"""The sink's built-in writer: one batch's DataFrame to a path (parquet/json/csv/orc) or a table.

Why batches are staged: Spark's file committer keeps its work files in ``<path>/_temporary``
and deletes that directory when a job commits, so two sinks appending to the same path at
the same time (two tasks, or two workers) break each other's jobs ("File ... does not exist").
So an ``append`` to a path writes each batch into its own hidden staging directory
``<path>/_stormpy_staging/<tag>`` (Spark readers skip names starting with ``_``) and then
renames the finished files into ``<path>``, keeping any ``partition_by`` sub-directories: with
``os.rename`` on local disk (no JVM round trips), through the Hadoop FileSystem API elsewhere.
Renames are atomic per file, so readers never see a batch's half-written files, and a failed
batch leaves nothing in the output.

Through Spark Connect or a cluster master, an ``append`` to a path this worker sees (a local
disk, or a shared mount every Spark executor sees) takes the Parquet hand-over
(``write_handed_over``, ``spark.state.handover``): the worker writes the batch's Arrow table as
an uncompressed Parquet file into ``<path>/_stormpy_staging/<tag>-<random>-in``, the Spark job
reads that file and writes the requested format into the staging directory beside it, and the
files are renamed into ``<path>`` as above. The rows do not travel inside the job's plan (Spark
Connect's ``LocalRelation`` costs the server's driver ~4 us a row), and the hand-over file is
removed once the job is done, whether it succeeded or not.

Otherwise without JVM access (Spark Connect), and for other modes or tables, writes go straight
to the target, serialized per target within the process (concurrent appends from several
worker processes then need a table format or a path per worker).
"""
from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from typing import Any

from stormpy.spark.settings import SinkSettings

log = logging.getLogger(__name__)

STAGING_DIR = "_stormpy_staging"
#: Hadoop committer settings of the Spark jobs that write a hidden staging directory (the sink's
#: staged appends, SparkState's batches; writer options reach the job's Hadoop configuration and
#: the user's ``options`` win). The staging directory is published by stormpy's renames only
#: after the job succeeded, and removed otherwise, so the committer's second rename pass
#: (algorithm 1) and its ``_SUCCESS`` marker buy nothing here: ~0.05 s of the Spark driver's CPU
#: per job measured through Spark Connect.
STAGED_JOB_OPTIONS = {"mapreduce.fileoutputcommitter.algorithm.version": "2",
                      "mapreduce.fileoutputcommitter.marksuccessfuljobs": "false"}

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


def _writer(df: Any, settings: SinkSettings, mode: str, staged: bool = False) -> Any:
    """``df.write`` with the sink's format, options and partitioning; ``staged``: into a hidden
    staging directory that stormpy publishes (``STAGED_JOB_OPTIONS`` apply)."""
    writer = df.write.format(settings.format).mode(mode)
    options = {**STAGED_JOB_OPTIONS, **settings.options} if staged else settings.options
    if options:
        writer = writer.options(**options)
    if settings.partition_by:
        writer = writer.partitionBy(*settings.partition_by)
    return writer


def _hadoop(spark: Any) -> tuple[Any, Any] | None:
    """(jvm, lazy hadoop Configuration), or None when the session has no local JVM (Spark Connect)."""
    jvm = getattr(spark, "_jvm", None)
    jsc = getattr(getattr(spark, "sparkContext", None), "_jsc", None) if jvm is not None else None
    if jvm is None or jsc is None:
        return None
    return jvm, _LazyHadoopConf(jsc)


class _LazyHadoopConf:
    """The session's Hadoop Configuration, fetched from the JVM only when first used."""

    def __init__(self, jsc: Any) -> None:
        self._jsc = jsc
        self._conf: Any = None

    def get(self, key: str) -> Any:
        return self.java().get(key)

    def java(self) -> Any:
        if self._conf is None:
            self._conf = self._jsc.hadoopConfiguration()
        return self._conf


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
    local_root = _local_directory(settings.path, spark, hconf)
    if local_root is not None:
        _write_staged_local(df, settings, staging, local_root)
        return
    Path = jvm.org.apache.hadoop.fs.Path
    staging_path = Path(staging)
    fs = staging_path.getFileSystem(hconf.java())
    try:
        _writer(df, settings, "error", staged=True).save(staging)
        _publish(fs, Path, staging_path, Path(settings.path))
    finally:
        try:
            fs.delete(staging_path, True)
        except Exception:  # noqa: BLE001 - a leftover staging dir is hidden and harmless
            log.warning("could not remove staging directory %s", staging, exc_info=True)


def handover_directory(spark: Any, settings: SinkSettings) -> str | None:
    """The OS path of the sink's output when its batches may take the Parquet hand-over: an
    ``append`` to a path on this worker's filesystem (None: a table, another mode, a remote
    URL, or a relative path through Spark Connect, which the server would resolve against its
    own working directory)."""
    if settings.table or settings.mode != "append" or not settings.path:
        return None
    path = settings.path
    if path.startswith("file:"):
        return "/" + path[len("file:"):].lstrip("/")
    if "://" in path:
        return None
    hadoop = _hadoop(spark)
    if hadoop is None:
        return path if os.path.isabs(path) else None
    return _local_directory(path, spark, hadoop[1])


def write_handed_over(spark: Any, table: Any, schema: Any, settings: SinkSettings, target: str, tag: str) -> None:
    """Append one batch's Arrow ``table`` to the local directory ``target`` through a Spark job
    that reads it from a staged Parquet file (``arrow_writer.handover_dataframe``), staged and
    renamed into place like every staged append; the hand-over file is removed once the job is
    done, also when it failed."""
    from stormpy.spark.arrow_writer import handover_dataframe

    staging_dir = os.path.join(target, STAGING_DIR, f"{tag}-{uuid.uuid4().hex[:12]}")
    handed = f"{staging_dir}-in"
    os.makedirs(os.path.dirname(staging_dir), exist_ok=True)
    try:
        # ``file://``: these are paths of this worker's filesystem whatever the server's default one
        _write_staged_local(handover_dataframe(spark, table, schema, handed, uri=f"file://{handed}"), settings,
                            staging_dir, target)
    finally:
        shutil.rmtree(handed, ignore_errors=True)


def write_arrow_batch(table: Any, settings: SinkSettings, tag: str) -> None:
    """Append one batch's Arrow table to a local path without Spark (``arrow_writer``).

    Staged and renamed like a Spark write (readers never see half a batch), under names unique
    to the batch, as Spark's own appends are.
    """
    from stormpy.spark.arrow_writer import write_table

    assert settings.path is not None
    target = settings.path[len("file:"):] if settings.path.startswith("file:") else settings.path
    target = os.path.abspath(target)
    unique = f"{tag}-{uuid.uuid4().hex[:12]}"
    staging_dir = os.path.join(target, STAGING_DIR, unique)
    os.makedirs(os.path.dirname(staging_dir), exist_ok=True)
    try:
        for moved, relative in enumerate(write_table(table, staging_dir, settings.format, settings.partition_by,
                                                     settings.options)):
            directory, _, name = relative.rpartition("/")
            dest_dir = os.path.join(target, directory)
            os.makedirs(dest_dir, exist_ok=True)
            try:
                os.rename(os.path.join(staging_dir, relative), os.path.join(dest_dir, f"{unique}-{name}"))
            except OSError as exc:
                raise WriteError(f"could not move {name} into {dest_dir}: {exc}; the batch fails "
                                 f"({moved} of its files were already in place)") from None
    finally:
        shutil.rmtree(staging_dir, ignore_errors=True)


def _local_directory(path: str, spark: Any, hconf: Any) -> str | None:
    """The OS path when ``path`` is on the local filesystem, else None (HDFS, S3, ...)."""
    if path.startswith("file:"):
        return "/" + path[len("file:"):].lstrip("/")
    if "://" in path:
        return None
    default_fs = _default_fs.get(id(spark))
    if default_fs is None:
        default_fs = _default_fs[id(spark)] = str(hconf.get("fs.defaultFS") or "file:///")
    return os.path.abspath(path) if default_fs.startswith("file:") else None


# Session id -> fs.defaultFS: one JVM round trip per session instead of one per batch.
_default_fs: dict[int, str] = {}


def _write_staged_local(df: Any, settings: SinkSettings, staging: str, target: str) -> None:
    """Local-disk variant of staging: the same steps with os calls instead of Hadoop RPCs."""
    staging_dir = os.path.join(target, STAGING_DIR, os.path.basename(staging))
    try:
        _writer(df, settings, "error", staged=True).save(f"file://{staging_dir}")   # a path of this worker's disk
        moved = 0
        for directory, _dirs, names in os.walk(staging_dir):
            relative_dir = os.path.relpath(directory, staging_dir)
            if any(part.startswith(("_", ".")) for part in relative_dir.split(os.sep) if part != "."):
                continue
            for name in names:
                if name.startswith(("_", ".")):
                    continue  # _SUCCESS and .crc checksums stay behind
                dest_dir = os.path.normpath(os.path.join(target, relative_dir))
                os.makedirs(dest_dir, exist_ok=True)
                try:
                    os.rename(os.path.join(directory, name), os.path.join(dest_dir, name))
                except OSError as exc:
                    raise WriteError(f"could not move {name} into {dest_dir}: {exc}; the batch fails "
                                     f"({moved} of its files were already in place)") from None
                moved += 1
    finally:
        shutil.rmtree(staging_dir, ignore_errors=True)


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
