"""A class-data-sharing archive of the Spark driver's classes, so that a worker's Spark starts faster.

A worker's first Spark batch waits for a driver JVM to start and load some 12,000 classes from
the pyspark wheel's jars: 9-10 s on a 2-core host, paid again by every restarted worker. Java's
class data sharing (CDS) lets the JVM map those classes, already parsed and verified, from an
archive instead: on that host the session 7.1 s -> 4.4 s and a first Parquet write 3.8 s -> 1.5 s
(``benchmarks/spark_start.py``, medians). ``stormpy spark-archive`` records the archive once per host (a local Spark
job in a child process whose JVM dumps the classes it loaded as it exits, ``-XX:ArchiveClassesAtExit``);
afterwards every session stormpy builds with the same ``storm.local.dir`` starts its driver with
``-XX:SharedArchiveFile`` (on ``spark.driver.defaultJavaOptions``, so a user's
``spark.driver.extraJavaOptions``, from the topology or ``spark-defaults.conf``, stay as they are).

Why the care around the file:
- HotSpot checks that an archive fits its own build and the classpath and otherwise runs without
  it (a warning), but it maps a *truncated* archive and dies (SIGBUS, then abort). So the archive
  becomes visible only by a rename once the dumping JVM has exited cleanly, a sidecar records its
  size and inode, and a session uses it only while both still match.
- The file name carries a digest of the ``java`` that spark-submit will run (resolved as
  ``spark-class`` does) and of the pyspark install, so an upgrade of either leaves the old archive
  unused rather than half-matching; the command removes archives of other digests.
- Should a driver's JVM still die before its gateway comes up, the session is started again
  without the archive, and the archive is set aside (``.bad``) if ``java -version`` dies on it too:
  a worker never crash-loops on it, and a JVM that failed for another reason does not cost the
  host its archive.

Only a driver stormpy starts itself is concerned: Spark Connect has no local JVM, and the executors
of a standalone cluster are the Spark workers' JVMs.

Threads: ``usable_archive``, ``is_broken`` and ``set_aside`` run on the executor thread that
starts the process's session (under ``SessionManager``'s lock); ``create_archive`` on the CLI's.
Recordings and sessions in other processes meet only through renames.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil

from stormpy import config as cfg
from stormpy import disk_layout
from stormpy.errors import UserError

log = logging.getLogger(__name__)

JAVA_OPTIONS_KEY = "spark.driver.defaultJavaOptions"    # Spark prepends it to spark.driver.extraJavaOptions
USER_JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"
PREFIX = "spark-classes-"
SUFFIX = ".jsa"
SIDECAR_SUFFIX = ".json"
BAD_SUFFIX = ".bad"
RECORDING_PREFIX = ".recording-"
LOCK_NAME = ".spark-archive.lock"
CREATE_TIMEOUT_SECS = 600
PROBE_TIMEOUT_SECS = 60
# Options a user may already give that decide class sharing themselves: stormpy then adds nothing.
_USER_CDS_OPTIONS = ("-XX:SharedArchiveFile", "-Xshare:off", "-XX:ArchiveClassesAtExit")


def archive_dir(conf: Mapping[str, Any]) -> Path:
    """``<storm.local.dir>/spark``: in a worker the supervisor's ``storm.local.dir`` (a task's
    ``conf`` is its topology's, which does not carry the host's), elsewhere ``conf``'s."""
    host = disk_layout.host_local_dir()
    return (host or Path(str(cfg.read(conf, cfg.STORM_LOCAL_DIR))).resolve()) / "spark"


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
    """Where the archive of this digest lives; its sidecar is the same name with ``.json``."""
    return archive_dir(conf) / f"{PREFIX}{key}{SUFFIX}"


def usable_archive(conf: Mapping[str, Any]) -> Path | None:
    """The archive a driver started now may use: this JVM's and pyspark's, whole (its recorded size)."""
    key = archive_key()
    if key is None:
        return None
    path = archive_path(conf, key)
    try:
        recorded = json.loads(path.with_suffix(SIDECAR_SUFFIX).read_text())
        stat = path.stat()
        size, inode = int(recorded["size"]), int(recorded["inode"])
    except (OSError, ValueError, KeyError, TypeError):
        others = [p.name for p in path.parent.glob(f"{PREFIX}*{SUFFIX}") if p != path] if path.parent.is_dir() else []
        if others:
            log.info("no Spark class archive for this java and pyspark (%s has %s, recorded for another): run "
                     "stormpy spark-archive as the supervisor's user, with its environment and config",
                     path.parent, ", ".join(sorted(others)))
        return None
    if stat.st_ino != inode:
        log.info("Spark class archive %s is being recorded again: not used by this driver", path)
        return None
    if stat.st_size != size:
        log.warning("Spark class archive %s has %d bytes where %d bytes were written: not used "
                    "(run stormpy spark-archive again)", path, stat.st_size, size)
        return None
    if any(c.isspace() for c in str(path)):     # Spark splits Java options at spaces
        log.info("Spark class archive %s not used: its path has a space", path)
        return None
    return path


def with_archive(options: Mapping[str, str], archive: Path) -> dict[str, str] | None:
    """``options`` with the driver told to map ``archive``; None when the user's own JVM options
    already decide class sharing."""
    current = options.get(JAVA_OPTIONS_KEY, "")
    if any(flag in options.get(key, "") for key in (JAVA_OPTIONS_KEY, USER_JAVA_OPTIONS_KEY)
           for flag in _USER_CDS_OPTIONS):
        return None
    return {**options, JAVA_OPTIONS_KEY: f"{current} -XX:SharedArchiveFile={archive}".strip()}


def is_broken(archive: Path) -> bool:
    """Whether a bare ``java -version`` dies mapping ``archive`` (a JVM that merely finds the archive
    does not fit runs on without it and exits 0)."""
    java = _java()
    if java is None:
        return False
    with tempfile.TemporaryDirectory(prefix="stormpy-cds-probe-") as scratch:   # its hs_err file, if it dies
        try:
            probe = subprocess.run([str(java), "-XX:-CreateCoredumpOnCrash", f"-XX:SharedArchiveFile={archive}",
                                    "-version"], cwd=scratch,
                                   stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT_SECS)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return probe.returncode != 0 and b"A fatal error has been detected" in probe.stdout + probe.stderr


def set_aside(archive: Path, inode: int) -> None:
    """Move an archive java dies on out of the way, kept to look at (``.jsa.bad``); ``inode`` is
    the file found broken, so that an archive recorded again meanwhile is left alone."""
    try:
        if archive.stat().st_ino != inode:
            return
        os.replace(archive, archive.with_name(archive.name + BAD_SUFFIX))
        archive.with_suffix(SIDECAR_SUFFIX).unlink(missing_ok=True)
        log.warning("Spark class archive %s set aside as %s%s: java dies mapping it; run stormpy spark-archive "
                    "again", archive, archive.name, BAD_SUFFIX)
    except FileNotFoundError:
        pass        # another worker set it aside first
    except OSError as exc:
        log.warning("could not set aside the Spark class archive %s: %s", archive, exc)


# ---------------------------------------------------------------- recording one

def create_archive(conf: Mapping[str, Any], progress: Callable[[str], None] = log.info) -> Path:
    """Record the archive for this host's java and pyspark under ``<storm.local.dir>/spark/``."""
    from stormpy.extras import require

    require("spark", "stormpy spark-archive")
    key = archive_key()
    if key is None:
        raise UserError("no java found ($JAVA_HOME/bin/java or java on PATH): Spark needs Java 17")
    target = archive_path(conf, key)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(target.parent, 0o755)     # workers may run as other users
        except OSError:
            pass                               # someone else's directory: its mode is theirs
        with open(target.parent / LOCK_NAME, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UserError(f"another stormpy spark-archive is recording in {target.parent}") from None
            _remove_stale_recordings(target.parent)
            tmp = target.parent / f"{RECORDING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"
            try:
                _record(tmp, target.parent / "spark-archive.log", progress)
                _publish(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)     # only once the recording's JVM is gone (_record)
            for other in target.parent.glob(f"{PREFIX}*"):
                if not other.name.startswith(target.stem + ".") or other.name.endswith(BAD_SUFFIX):
                    other.unlink(missing_ok=True)    # another java's or pyspark's, or one set aside
    except OSError as exc:
        raise UserError(f"cannot write the Spark class archive in {target.parent}: {exc}") from None
    return target


def _remove_stale_recordings(directory: Path) -> None:
    """Recordings left by a command that was SIGKILLed (any running one is younger than its timeout)."""
    for stale in directory.glob(f"{RECORDING_PREFIX}*"):
        try:
            if time.time() - stale.stat().st_mtime > CREATE_TIMEOUT_SECS:
                stale.unlink()
        except OSError:
            pass


def _publish(tmp: Path, target: Path) -> None:
    """Make the recorded archive the one sessions find: readable by workers running as other users."""
    os.chmod(tmp, 0o644)
    # Sidecar gone first: a driver starting in between finds no archive rather than a wrong one.
    target.with_suffix(SIDECAR_SUFFIX).unlink(missing_ok=True)
    os.replace(tmp, target)     # a driver mapping the old archive keeps its (unlinked) file
    stat = target.stat()
    sidecar = {"size": stat.st_size, "inode": stat.st_ino, "java": str(_java()),
               "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    disk_layout.atomic_write(target.with_suffix(SIDECAR_SUFFIX), json.dumps(sidecar).encode())
    os.chmod(target.with_suffix(SIDECAR_SUFFIX), 0o644)     # until then 0600: other users skip it a moment


def _record(out: Path, log_file: Path, progress: Callable[[str], None]) -> None:
    """Run the recording job in a child process (its own process group, with the JVM it starts)
    and wait for the JVM's dump; on a timeout, an error or Ctrl-C the whole group is SIGKILLed,
    so no JVM is left to write a half archive after this returns."""
    started = time.monotonic()
    with open(log_file, "wb") as sink, _interrupted_by(signal.SIGTERM, signal.SIGHUP):
        child = subprocess.Popen([sys.executable, "-m", __name__, str(out)], stdout=sink, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        code: int | None = None
        try:
            while code is None:
                try:
                    code = child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    elapsed = time.monotonic() - started
                    if elapsed > CREATE_TIMEOUT_SECS:
                        raise UserError(f"recording the Spark class archive took over {CREATE_TIMEOUT_SECS} s; "
                                        f"see {log_file}") from None
                    progress(f"... {elapsed:.0f} s")
        finally:
            _kill_group(child, "recording finished" if code is not None else "recording interrupted")
    if code != 0:
        raise UserError(f"the Spark job recording the class archive failed (exit {code}); see {log_file}")
    if not out.is_file() or out.stat().st_size == 0:
        raise UserError(f"the Spark job ran but its JVM wrote no class archive (does the JDK have its base CDS "
                        f"archive, lib/server/classes.jsa?); see {log_file}")


@contextlib.contextmanager
def _interrupted_by(*signums: signal.Signals) -> Iterator[None]:
    """Turn these signals into KeyboardInterrupt meanwhile, so the recording's cleanup runs for a
    ``kill`` or a closed terminal as for Ctrl-C (their default is to exit at once)."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():    # handlers are the main thread's only
        for signum in signums:
            if signal.getsignal(signum) is not signal.SIG_IGN:     # nohup's ignored SIGHUP stays ignored
                previous[signum] = signal.signal(signum, interrupt)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _kill_group(child: subprocess.Popen[bytes], reason: str) -> None:
    """SIGKILL what is left of the recording's process group (a JVM killed so writes no archive)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
        log.debug("killed the recording's process group %d: %s", child.pid, reason)
    except ProcessLookupError:
        pass
    child.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _group_alive(child.pid):    # the JVM may outlive its parent by a moment
        time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (a zombie that nobody reaped yet does not)."""
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False


def _recording_job(out: str) -> None:
    """A local Spark job that loads what a sink's batches load (Arrow rows in, Parquet and JSON out and
    back), then stops its JVM and waits for it, so the archive is whole when this process exits."""
    import pyarrow as pa
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").appName("stormpy-spark-archive")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .config(JAVA_OPTIONS_KEY, f"-XX:ArchiveClassesAtExit={out}")
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
