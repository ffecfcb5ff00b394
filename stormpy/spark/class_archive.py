"""A class-data-sharing archive of the Spark driver's classes, so that a worker's Spark starts faster.

A worker's first Spark batch waits for a driver JVM to start and load some 12,000 classes from
the pyspark wheel's jars: 9-10 s on a 2-core host, paid again by every restarted worker. Java's
class data sharing (CDS) lets the JVM map those classes, already parsed and verified, from an
archive instead: measured on that host, getOrCreate 5.5-6.5 s -> 3.4-3.9 s and the first job
3.5-4.3 s -> 2.2-2.6 s. ``stormpy spark-archive`` records the archive once per host (a local Spark
job in a child process whose JVM dumps the classes it loaded as it exits, ``-XX:ArchiveClassesAtExit``);
afterwards every session stormpy builds with the same ``storm.local.dir`` starts its driver with
``-XX:SharedArchiveFile``.

Why the care around the file:
- HotSpot checks that an archive fits its own build and the classpath and otherwise runs without
  it (a warning), but it maps a *truncated* archive and dies of SIGBUS. So the archive becomes
  visible only by a rename once the dumping JVM has exited cleanly, a sidecar records its size,
  and a session uses it only when the size still matches.
- The file name carries a digest of the ``java`` that spark-submit will run (resolved as
  ``spark-class`` does) and of the pyspark install, so an upgrade of either leaves the old archive
  unused rather than half-matching; the command removes archives of other digests.
- Should a driver still fail to start with the archive, the session is built again without it,
  and if that works the archive is set aside (``.bad``): a worker never crash-loops on it.

Only a driver stormpy starts itself is concerned: Spark Connect has no local JVM, and the executors
of a standalone cluster are the Spark workers' JVMs.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stormpy import config as cfg
from stormpy.disk_layout import atomic_write
from stormpy.errors import UserError

log = logging.getLogger(__name__)

JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"
SUFFIX = ".jsa"
SIDECAR_SUFFIX = ".json"
BAD_SUFFIX = ".bad"
CREATE_TIMEOUT_SECS = 600
# Options a user may already give that decide class sharing themselves: stormpy then adds nothing.
_USER_CDS_OPTIONS = ("-XX:SharedArchiveFile", "-Xshare:off", "-XX:ArchiveClassesAtExit")


def archive_dir(conf: Mapping[str, Any]) -> Path:
    return Path(str(conf.get(cfg.STORM_LOCAL_DIR.name) or cfg.STORM_LOCAL_DIR.default)).resolve() / "spark"


def _java() -> Path | None:
    """The java spark-submit will run: ``$JAVA_HOME/bin/java``, else the first on PATH (spark-class's order)."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return Path(found).resolve() if found and os.path.exists(found) else None


def archive_key() -> str | None:
    """A digest of the JVM build and pyspark install an archive belongs to; None without java."""
    import pyspark

    java = _java()
    if java is None:
        return None
    stat = java.stat()
    facts = {"java": str(java), "size": stat.st_size, "mtime": stat.st_mtime_ns,
             "pyspark": pyspark.__version__, "pyspark_dir": str(Path(pyspark.__file__).resolve().parent)}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def archive_path(conf: Mapping[str, Any], key: str) -> Path:
    return archive_dir(conf) / f"spark-classes-{key}{SUFFIX}"


def usable_archive(conf: Mapping[str, Any]) -> Path | None:
    """The archive a driver started now may use: this JVM's and pyspark's, whole (its recorded size)."""
    key = archive_key()
    if key is None:
        return None
    path = archive_path(conf, key)
    try:
        recorded = json.loads(path.with_suffix(SIDECAR_SUFFIX).read_text())["size"]
        size = path.stat().st_size
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if size != recorded:
        log.warning("Spark class archive %s has %d bytes where %s bytes were written: not used "
                    "(run stormpy spark-archive again)", path, size, recorded)
        return None
    return path


def with_archive(options: Mapping[str, str], archive: Path) -> dict[str, str] | None:
    """``options`` with the driver told to map ``archive``; None when the user's own JVM options
    already decide class sharing."""
    current = options.get(JAVA_OPTIONS_KEY, "")
    if any(flag in current for flag in _USER_CDS_OPTIONS):
        return None
    return {**options, JAVA_OPTIONS_KEY: f"{current} -XX:SharedArchiveFile={archive}".strip()}


def set_aside(archive: Path) -> None:
    """Move an archive a driver could not start with out of the way, keeping it to look at."""
    try:
        os.replace(archive, archive.with_suffix(SUFFIX + BAD_SUFFIX))
        archive.with_suffix(SIDECAR_SUFFIX).unlink(missing_ok=True)
    except OSError:
        log.warning("could not set aside the Spark class archive %s", archive, exc_info=True)


# ---------------------------------------------------------------- recording one

def create_archive(conf: Mapping[str, Any], progress: Callable[[str], None] = log.info) -> Path:
    """Record the archive for this host's java and pyspark under ``<storm.local.dir>/spark/``."""
    key = archive_key()
    if key is None:
        raise UserError("no java found ($JAVA_HOME/bin/java or java on PATH): Spark needs Java 17")
    target = archive_path(conf, key)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".recording-", suffix=SUFFIX)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()    # the JVM creates it; an empty file left from a failed run is never taken for one
    log_file = target.parent / "spark-archive.log"
    try:
        _record(tmp, log_file, progress)
        sidecar = {"size": tmp.stat().st_size, "java": str(_java()),
                   "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        # Sidecar gone first: a driver starting in between finds no archive rather than a wrong size.
        target.with_suffix(SIDECAR_SUFFIX).unlink(missing_ok=True)
        os.replace(tmp, target)     # a driver mapping the old archive keeps its (unlinked) file
        atomic_write(target.with_suffix(SIDECAR_SUFFIX), json.dumps(sidecar).encode())
        os.chmod(target.with_suffix(SIDECAR_SUFFIX), 0o644)    # workers may run as other users
    finally:
        tmp.unlink(missing_ok=True)
    for other in target.parent.glob("spark-classes-*"):
        if not other.name.startswith(target.stem + "."):    # another java's or pyspark's
            other.unlink(missing_ok=True)
    return target


def _record(out: Path, log_file: Path, progress: Callable[[str], None]) -> None:
    """Run the recording job in a child process and wait for its JVM's dump."""
    started = time.monotonic()
    with open(log_file, "wb") as sink:
        child = subprocess.Popen([sys.executable, "-m", __name__, str(out)], stdout=sink, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        try:
            while True:
                try:
                    code = child.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    elapsed = time.monotonic() - started
                    if elapsed > CREATE_TIMEOUT_SECS:
                        raise UserError(f"recording the Spark class archive took over {CREATE_TIMEOUT_SECS} s; "
                                        f"see {log_file}") from None
                    progress(f"... {elapsed:.0f} s")
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    if code != 0 or not out.is_file() or out.stat().st_size == 0:
        raise UserError(f"the Spark job recording the class archive failed (exit {code}); see {log_file}")


def _recording_job(out: str) -> None:
    """A local Spark job that loads what a sink's batches load (Arrow rows in, Parquet and JSON out and
    back), then stops its JVM and waits for it, so the archive is whole when this process exits."""
    import pyarrow as pa
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").appName("stormpy-spark-archive")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .config(JAVA_OPTIONS_KEY, f"-XX:ArchiveClassesAtExit={out} -Xlog:cds=off -Xlog:cds+dynamic=off")
             .getOrCreate())
    with tempfile.TemporaryDirectory(prefix="stormpy-spark-archive-") as scratch:
        frame = spark.createDataFrame(pa.table({"word": ["a", "b"], "count": [1, 2]}).to_pandas())
        for fmt in ("parquet", "json"):
            frame.write.mode("append").format(fmt).save(f"{scratch}/{fmt}")
            spark.read.format(fmt).load(f"{scratch}/{fmt}").groupBy("word").sum("count").collect()
    gateway = SparkContext._gateway
    spark.stop()
    assert gateway is not None
    jvm = gateway.proc
    gateway.shutdown()
    jvm.stdin.close()        # the gateway server exits on stdin's end; the JVM dumps as it exits
    sys.exit(jvm.wait())


if __name__ == "__main__":
    _recording_job(sys.argv[1])
