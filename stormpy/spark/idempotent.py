"""Idempotent batch files: a (txid, partition) batch written so that a replay replaces it.

Used by ``stormpy.trident.SparkState``. Spark's own writers only append (new random file names
each time) or overwrite whole directories, so a batch replayed after a crash between Spark's
write and the Trident commit would land twice. Here every batch goes through three steps:

1. ``stage``: Spark writes the batch's DataFrame into a fresh hidden directory
   ``<root>/_stormpy_staging/<ns>-p<P>-t<T>-<random>`` (Spark readers skip names starting
   with ``_``; ``partition_by`` sub-directories are kept). This is the slow part and may run on a
   background thread before the commit.
2. ``publish``: each staged data file is renamed to a DETERMINISTIC name in the output,
   ``<root>[/<col>=<v>...]/part-<ns>-p<PPPPP>-t<TTTTTTTTTTTT>-<NNNNN><ext>``; a rename onto an
   existing name replaces that file (atomically on a local disk), so the second attempt of a
   txid overwrites the first one's files instead of adding to them.
3. the per-partition manifest ``<root>/_stormpy_state/<ns>-p<PPPPP>.json`` (hidden too) records
   ``{"txid": T, "files": [...]}``, written (atomically) BEFORE any rename and holding the union
   of what this txid's attempts may have published; after the renames, files an earlier
   attempt of the same txid published but this one did not (an opaque replay with other
   partition values, or fewer rows) are deleted, then the manifest is trimmed to this
   attempt's files. Commits of a partition are strictly in txid order and a committed txid is
   never replayed, so only the txid in the manifest can have an earlier attempt's leftovers.

``ns`` keeps different states (or topologies) writing into one root apart. A crash at any point
leaves either nothing visible (staging only), or a state the replay of the same txid repairs.
What a reader sees: nothing of a batch until its commit; then, per output directory, one file
appears (or replaces the earlier attempt's file) in one rename. Without ``partition_by`` and on a
local disk a batch's rows therefore appear all at once; with ``partition_by`` they appear one
directory at a time, within milliseconds, and an opaque replay may briefly show the earlier
attempt's rows in a directory the new attempt does not touch until the stale file is deleted.
On HDFS/S3 (the Hadoop FileSystem API) a rename cannot replace, so a replayed file is deleted
and then renamed: a reader may briefly miss it.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from typing import Any

from stormpy.config import ConfigError

log = logging.getLogger(__name__)

STAGING_DIR = "_stormpy_staging"
MANIFEST_DIR = "_stormpy_state"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def namespace(text: str) -> str:
    """A file-name-safe namespace (no leading ``_``/``.``, which would hide the files)."""
    cleaned = _UNSAFE.sub("-", text).strip("-_.") or "trident"
    return cleaned[:80]


def _hidden(relative: str) -> bool:
    return any(part.startswith(("_", ".")) for part in relative.split("/") if part and part != ".")


def _extension(name: str) -> str:
    """``part-00000-<uuid>-c000.snappy.parquet`` -> ``.snappy.parquet``."""
    base = name.rsplit("/", 1)[-1]
    dot = base.find(".")
    return base[dot:] if dot > 0 else ""


#: URL schemes of object stores: a "rename" there is a copy and a delete, so a reader can see a
#: half-published batch and a crash can leave one. SparkState refuses them (``check_atomic_rename``).
OBJECT_STORES = ("s3", "s3a", "s3n", "gs", "wasb", "wasbs", "abfs", "abfss", "oss", "cos", "cosn", "obs")


def check_atomic_rename(path: str) -> None:
    """Refuse an output whose filesystem cannot rename a file into place atomically.

    The exactly-once publish (step 2 above) relies on a rename within one filesystem that
    either happens whole or not at all: true of a local disk, a shared POSIX mount (NFS) and
    HDFS; not of object stores, whatever Spark committer is configured (the committers make
    Spark's own job output safe, not renames made by stormpy).
    """
    scheme = path.split("://", 1)[0].lower() if "://" in path else ""
    if scheme in OBJECT_STORES:
        raise ConfigError(f"SparkState path {path!r}: {scheme}:// is an object store, where a rename is a copy and a "
                         "delete, not atomic, so SparkState cannot publish a batch exactly once there; use a path on "
                         "a local or shared POSIX filesystem or HDFS (or SparkSinkBolt, which is at-least-once)")


class StaleOutputError(RuntimeError):
    """The output already holds a later txid of the same namespace and partition than the commit."""


class LocalFiles:
    """The output on the local disk: plain os calls, renames that replace atomically."""

    def __init__(self, root: str) -> None:
        self.root = root

    def join(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def uri(self, relative: str) -> str:
        return self.join(relative)

    def data_files(self, relative_dir: str) -> list[str]:
        """Data files under ``relative_dir`` (paths relative to it), hidden names skipped."""
        base = self.join(relative_dir)
        found = []
        for directory, _dirs, names in os.walk(base):
            rel_dir = os.path.relpath(directory, base).replace(os.sep, "/")
            if _hidden(rel_dir):
                continue
            for name in names:
                if not name.startswith(("_", ".")):
                    found.append(name if rel_dir == "." else f"{rel_dir}/{name}")
        return sorted(found)

    def replace(self, source: str, dest: str) -> None:
        os.makedirs(os.path.dirname(self.join(dest)), exist_ok=True)
        os.replace(self.join(source), self.join(dest))

    def delete(self, relative: str) -> None:
        try:
            os.remove(self.join(relative))
        except FileNotFoundError:
            pass

    def remove_tree(self, relative: str) -> None:
        shutil.rmtree(self.join(relative), ignore_errors=True)

    def read_text(self, relative: str) -> str | None:
        try:
            with open(self.join(relative), encoding="utf-8") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def write_text(self, relative: str, text: str) -> None:
        """Write atomically: a temporary file renamed over the target (fsync'ed first)."""
        path = self.join(relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def exists(self, relative: str) -> bool:
        return os.path.exists(self.join(relative))

    def list_dir(self, relative: str) -> list[str]:
        try:
            return sorted(os.listdir(self.join(relative)))
        except FileNotFoundError:
            return []


class HadoopFiles:
    """The output through the JVM's Hadoop FileSystem (HDFS, S3A, ...): same operations, RPCs."""

    def __init__(self, spark: Any, root: str) -> None:
        self.root = root.rstrip("/")
        jvm = spark._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._jvm = jvm
        self._fs = self._Path(self.root).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def _path(self, relative: str) -> Any:
        return self._Path(f"{self.root}/{relative}" if relative else self.root)

    def uri(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def data_files(self, relative_dir: str) -> list[str]:
        base = self._path(relative_dir)
        if not self._fs.exists(base):
            return []
        prefix = self._fs.makeQualified(base).toUri().getPath().rstrip("/") + "/"
        found = []
        files = self._fs.listFiles(base, True)
        while files.hasNext():
            relative = files.next().getPath().toUri().getPath()[len(prefix):]
            if not _hidden(relative):
                found.append(relative)
        return sorted(found)

    def replace(self, source: str, dest: str) -> None:
        target = self._path(dest)
        self._fs.mkdirs(target.getParent())
        self._fs.delete(target, False)  # Hadoop's rename never replaces: delete first
        if not self._fs.rename(self._path(source), target):
            raise OSError(f"could not rename {self.uri(source)} to {self.uri(dest)}")

    def delete(self, relative: str) -> None:
        self._fs.delete(self._path(relative), False)

    def remove_tree(self, relative: str) -> None:
        try:
            self._fs.delete(self._path(relative), True)
        except Exception:  # noqa: BLE001 - a leftover hidden staging dir is harmless
            log.warning("could not remove %s", self.uri(relative), exc_info=True)

    def read_text(self, relative: str) -> str | None:
        path = self._path(relative)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_text(self, relative: str, text: str) -> None:
        tmp = f"{relative}.{uuid.uuid4().hex[:8]}.tmp"
        stream = self._fs.create(self._path(tmp), True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        self.replace(tmp, relative)

    def exists(self, relative: str) -> bool:
        return bool(self._fs.exists(self._path(relative)))

    def list_dir(self, relative: str) -> list[str]:
        path = self._path(relative)
        if not self._fs.exists(path):
            return []
        return sorted(str(status.getPath().getName()) for status in self._fs.listStatus(path))


def local_files(root: str) -> LocalFiles:
    """Operations on a root of this machine's filesystem (a plain or ``file:`` path), no Spark needed."""
    if root.startswith("file:"):
        return LocalFiles("/" + root[len("file:"):].lstrip("/"))
    return LocalFiles(os.path.abspath(root))


def files_for(spark: Any, root: str, force_hadoop: bool = False) -> LocalFiles | HadoopFiles:
    """Local-disk operations when ``root`` is on this machine's filesystem, else Hadoop's."""
    if not force_hadoop:
        if root.startswith("file:"):
            return local_files(root)
        if "://" not in root:
            default_fs = "file:///"
            jsc = getattr(getattr(spark, "sparkContext", None), "_jsc", None)
            if jsc is not None:
                default_fs = str(jsc.hadoopConfiguration().get("fs.defaultFS") or "file:///")
            if default_fs.startswith("file:"):
                return LocalFiles(os.path.abspath(root))
    return HadoopFiles(spark, root if "://" in root or root.startswith("file:") else os.path.abspath(root))


class BatchFiles:
    """Stage and publish the batches of ONE state partition under one output root."""

    def __init__(self, files: LocalFiles | HadoopFiles, ns: str, partition: int) -> None:
        self.files = files
        self.ns = namespace(ns)
        self.partition = partition
        self.manifest = f"{MANIFEST_DIR}/{self.ns}-p{partition:05d}.json"

    def file_prefix(self, txid: int) -> str:
        return f"part-{self.ns}-p{self.partition:05d}-t{txid:012d}-"

    def new_staging(self, txid: int) -> str:
        """A fresh hidden directory (relative to the root) for one attempt's Spark write."""
        return f"{STAGING_DIR}/{self.ns}-p{self.partition:05d}-t{txid:012d}-{uuid.uuid4().hex[:12]}"

    def clean_staging(self) -> int:
        """Remove this partition's staging directories left by a task that died mid-write.

        Called once when a task takes the partition over (before its first write): a partition
        has one owner task at a time, so every staging directory of it is an orphan by then.
        """
        prefix = f"{self.ns}-p{self.partition:05d}-t"
        orphans = [name for name in self.files.list_dir(STAGING_DIR) if name.startswith(prefix)]
        for name in orphans:
            self.files.remove_tree(f"{STAGING_DIR}/{name}")
        if orphans:
            log.info("removed %d orphaned staging directories of %s partition %d", len(orphans), self.ns,
                     self.partition)
        return len(orphans)

    def staging_uri(self, staging: str) -> str:
        return self.files.uri(staging)

    def discard(self, staging: str) -> None:
        self.files.remove_tree(staging)

    def read_manifest(self) -> tuple[int | None, list[str]]:
        text = self.files.read_text(self.manifest)
        if not text:
            return None, []
        try:
            data = json.loads(text)
            return int(data["txid"]), list(data["files"])
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable manifest %s ignored: %r", self.files.uri(self.manifest), text[:200])
            return None, []

    def publish(self, txid: int, staging: str | None) -> list[str]:
        """Move the staged files of ``txid`` into place, replacing any earlier attempt's.

        ``staging`` None means the batch is empty (an opaque replay may still have to remove
        what an earlier attempt of the txid published). Returns the published relative paths.
        """
        if staging is not None and not self.files.exists(staging):
            # removed by clean_staging of a task that took the partition over: this task is a
            # zombie and must not publish "nothing" over what an earlier attempt of txid published
            raise RuntimeError(f"staging directory {self.files.uri(staging)} of txid {txid} is gone "
                               f"(partition {self.partition} taken over by another task?)")
        staged = self.files.data_files(staging) if staging is not None else []
        prefix = self.file_prefix(txid)
        moves = []
        for index, relative in enumerate(staged):
            directory = relative.rsplit("/", 1)[0] + "/" if "/" in relative else ""
            moves.append((relative, f"{directory}{prefix}{index:05d}{_extension(relative)}"))
        new = [dest for _, dest in moves]
        last_txid, listed = self.read_manifest()
        if last_txid is not None and last_txid > txid:
            raise StaleOutputError(
                f"{self.files.uri('')} already holds txid {last_txid} of '{self.ns}' partition {self.partition}, "
                f"and this commit is txid {txid}: txids restarted (a new `stormpy local` run, or the topology's "
                "transactional state was reset); write each run to a new path or give it another namespace")
        earlier = set(listed) if last_txid == txid else set()
        if new or earlier:
            self.files.write_text(self.manifest, json.dumps({"txid": txid, "files": sorted(earlier | set(new))}))
        for source, dest in moves:
            self.files.replace(f"{staging}/{source}", dest)
        stale = earlier - set(new)
        for relative in sorted(stale):
            self.files.delete(relative)
        if stale:
            self.files.write_text(self.manifest, json.dumps({"txid": txid, "files": sorted(new)}))
        if staging is not None:
            self.files.remove_tree(staging)
        if earlier:
            log.info("txid %d partition %d replayed: %d files replaced, %d stale removed", txid, self.partition,
                     len(earlier & set(new)), len(stale))
        return new
