"""`stormpy spark-archive` and the sessions that map its archive (stormpy.spark.class_archive).

The archive is recorded once for the module by the command the operate-cluster page shows; each
session under test runs in a child process of its own (one SparkContext a process: the Spark
tests' shared session lives in this one).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

pytest.importorskip("pyspark", reason="skipped: pyspark is in the spark extra")

from stormpy.spark import class_archive  # noqa: E402 - after the skip
from stormpy.spark.class_archive import (  # noqa: E402
    JAVA_OPTIONS_KEY,
    SIDECAR_SUFFIX,
    archive_key,
    archive_path,
    usable_archive,
    with_archive,
)

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "how-to" / "operate-cluster.md"
PAGE_CONFIG = "/etc/stormpy/storm.yaml"

# The first test waits for the module's recording (30-60 s, more on a loaded machine).
pytestmark = pytest.mark.timeout(480)

needs_java = pytest.mark.skipif(class_archive._java() is None, reason="skipped: no java (Spark needs Java 17)")

# A session started in a child process; its conf comes as JSON on argv.
SESSION = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
from stormpy.spark.session import acquire_session, release_session
conf = json.loads(sys.argv[1])
print("rows", acquire_session(conf).range(7).count(), flush=True)
release_session("test done")
"""


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
            **extra}


def _start_session(local_dir: Path, cwd: Path, java_options: str) -> subprocess.CompletedProcess[str]:
    conf = {"storm.local.dir": str(local_dir), "spark.master": "local[1]", "spark.ui.enabled": False,
            # the user's own JVM options: kept beside the archive's
            "spark.driver.extraJavaOptions": java_options}
    return subprocess.run([sys.executable, "-c", SESSION, json.dumps(conf)], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=240)


def _shared_from_archive(class_log: Path) -> int:
    """Classes the JVM took from the dynamic (top) archive, as its own class+load log says."""
    return class_log.read_text().count("source: shared objects file (top)")


def _page_command() -> str:
    blocks = re.findall(r"^```bash\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    assert blocks == [f"stormpy spark-archive --config {PAGE_CONFIG}\n"], blocks
    return blocks[0]


def _stormpy_on_path(root: Path) -> dict[str, str]:
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "stormpy").write_text(f"#!/bin/sh\nexec {sys.executable} -m stormpy.cli \"$@\"\n")
    (bin_dir / "stormpy").chmod(0o755)
    return _env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The page's command run with a scratch config (its storm.local.dir: ``<root>/storm-local``)."""
    if class_archive._java() is None:
        pytest.skip("skipped: no java (Spark needs Java 17)")
    root = tmp_path_factory.mktemp("spark-archive")
    local_dir = root / "storm-local"
    (root / "storm.yaml").write_text(f"storm.local.dir: {local_dir}\n")
    # An archive left by another java or pyspark, and a recording a SIGKILLed command left long ago.
    for name, data in (("spark-classes-0123456789abcdef.jsa", b"old"), ("spark-classes-0123456789abcdef.json", b"{}"),
                       (".recording-1-ab.jsa", b"half")):
        (local_dir / "spark").mkdir(parents=True, exist_ok=True)
        (local_dir / "spark" / name).write_bytes(data)
    os.utime(local_dir / "spark" / ".recording-1-ab.jsa", (1, 1))
    command = _page_command().replace(PAGE_CONFIG, str(root / "storm.yaml"))
    shell = subprocess.Popen(["bash", "-euo", "pipefail", "-c", command], cwd=root, env=_stormpy_on_path(root),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = shell.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        # the recording runs in a process group of its own: take the whole tree down
        for proc in [*psutil.Process(shell.pid).children(recursive=True), psutil.Process(shell.pid)]:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        out, err = shell.communicate()
    return local_dir, subprocess.CompletedProcess(shell.args, shell.returncode, out, err)


def _recorded_archive(recorded: tuple[Path, subprocess.CompletedProcess[str]]) -> Path:
    local_dir, done = recorded
    assert done.returncode == 0, done.stdout + done.stderr
    key = archive_key()
    assert key is not None
    return archive_path({"storm.local.dir": str(local_dir)}, key)


@needs_java
def test_the_pages_command_records_an_archive_and_removes_other_ones(
        recorded: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    archive = _recorded_archive(recorded)
    out = recorded[1].stdout
    assert f"wrote {archive} (" in out
    took = int(re.search(r" in (\d+) s;", out).group(1))  # type: ignore[union-attr]
    assert took < 11 or re.search(r"^\.\.\. \d+ s$", out, flags=re.M), "no progress while the job ran"
    sidecar = json.loads(archive.with_suffix(SIDECAR_SUFFIX).read_text())
    assert sidecar["size"] == archive.stat().st_size > 10_000_000 and sidecar["inode"] == archive.stat().st_ino
    assert sorted(p.name for p in archive.parent.iterdir()) == sorted([archive.name, archive.stem + ".json",
                                                                        "spark-archive.log", class_archive.LOCK_NAME])
    for path in (archive, archive.with_suffix(SIDECAR_SUFFIX)):
        assert path.stat().st_mode & 0o777 == 0o644, f"{path}: workers running as other users cannot read it"


@needs_java
def test_a_session_maps_the_archive_and_keeps_the_users_java_options(
        recorded: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    archive = _recorded_archive(recorded)
    class_log = tmp_path / "classes.log"
    run = _start_session(recorded[0], tmp_path, f"-Xlog:class+load=info:file={class_log}")
    assert run.returncode == 0 and "rows 7" in run.stdout, run.stdout + run.stderr
    assert f"started with the class archive {archive}" in run.stdout
    assert _shared_from_archive(class_log) > 5000


@needs_java
def test_a_session_without_an_archive_starts_as_before(tmp_path: Path) -> None:
    class_log = tmp_path / "classes.log"
    run = _start_session(tmp_path / "storm-local", tmp_path, f"-Xlog:class+load=info:file={class_log}")
    assert run.returncode == 0 and "rows 7" in run.stdout, run.stdout + run.stderr
    assert "class archive" not in run.stdout
    assert _shared_from_archive(class_log) == 0


@needs_java
def test_a_driver_that_dies_on_its_archive_starts_without_it_and_the_archive_is_set_aside(
        recorded: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    """A truncated archive whose sidecar was made to agree (what no stormpy run writes): HotSpot
    maps it and dies; the session must still start, and later ones not try it again."""
    good = _recorded_archive(recorded)
    broken = tmp_path / "storm-local" / "spark" / good.name
    broken.parent.mkdir(parents=True)
    with open(good, "rb") as src:
        broken.write_bytes(src.read(good.stat().st_size // 4))
    broken.with_suffix(SIDECAR_SUFFIX).write_text(json.dumps({"size": broken.stat().st_size,
                                                              "inode": broken.stat().st_ino}))
    run = _start_session(tmp_path / "storm-local", tmp_path, "-Dstormpy.test=1")
    assert run.returncode == 0 and "rows 7" in run.stdout, run.stdout + run.stderr
    assert "exited before its gateway came up" in run.stdout
    assert not broken.exists() and not broken.with_suffix(SIDECAR_SUFFIX).exists()
    assert broken.with_name(broken.name + ".bad").exists()


@needs_java
def test_a_driver_that_fails_for_its_own_reason_keeps_the_archive(
        recorded: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    """A JVM option the JVM refuses: the error reaches the caller, and the archive stays."""
    archive = _recorded_archive(recorded)
    run = _start_session(recorded[0], tmp_path, "-Xmx2gg")
    assert run.returncode != 0 and "rows" not in run.stdout
    assert "JAVA_GATEWAY_EXITED" in run.stderr, run.stderr[-3000:]
    assert archive.exists() and usable_archive({"storm.local.dir": str(recorded[0])}) == archive


def _runs(proc: psutil.Process) -> bool:
    """Alive and not a zombie (whether PID 1 reaps orphans depends on the machine)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _is_recording_jvm(proc: psutil.Process) -> bool:
    """The driver JVM that would dump the archive (not spark-class's short launcher JVM before it)."""
    try:
        return any(arg.startswith("-XX:ArchiveClassesAtExit=") for arg in proc.cmdline())
    except psutil.Error:
        return False


@needs_java
def test_an_interrupted_recording_leaves_no_jvm_and_no_file(tmp_path: Path) -> None:
    cli = subprocess.Popen([sys.executable, "-m", "stormpy.cli", "spark-archive", "-c", f"storm.local.dir={tmp_path}"],
                           env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    jvms: list[psutil.Process] = []
    while not jvms and time.monotonic() < deadline:
        time.sleep(0.2)
        jvms = [p for p in psutil.Process(cli.pid).children(recursive=True) if _is_recording_jvm(p)]
    assert jvms, "the recording's JVM never started"
    time.sleep(2)
    cli.send_signal(signal.SIGTERM)    # a kill (Ctrl-C goes the same way: KeyboardInterrupt)
    assert cli.wait(timeout=60) == 130
    deadline = time.monotonic() + 15
    while any(_runs(p) for p in jvms) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in jvms if _runs(p)], f"the recording's JVM outlived the command: {jvms}"
    time.sleep(1)
    assert not [p.name for p in (tmp_path / "spark").iterdir()
                if p.name not in ("spark-archive.log", class_archive.LOCK_NAME)]


# ---------------------------------------------------------------- without a JVM

@needs_java
def test_an_archive_is_used_only_whole(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = {"storm.local.dir": str(tmp_path)}
    key = archive_key()
    assert key is not None
    path = archive_path(conf, key)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x" * 100)
    assert usable_archive(conf) is None, "no sidecar yet: still being recorded"
    path.with_suffix(SIDECAR_SUFFIX).write_text(json.dumps({"size": 100, "inode": path.stat().st_ino}))
    assert usable_archive(conf) == path
    path.write_bytes(b"x" * 40)
    with caplog.at_level(logging.WARNING, logger=class_archive.__name__):
        assert usable_archive(conf) is None
    assert "has 40 bytes where 100 bytes were written" in caplog.text
    recording = path.with_name(".recording-1-cd.jsa")
    recording.write_bytes(b"x" * 100)
    os.replace(recording, path)     # recorded again, as the command does: its sidecar not yet written
    assert usable_archive(conf) is None


def test_an_archive_of_another_java_is_not_used_and_the_log_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    other_java = tmp_path / "jdk" / "bin" / "java"
    other_java.parent.mkdir(parents=True)
    other_java.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    key = archive_key()
    assert key is not None
    conf = {"storm.local.dir": str(tmp_path / "local")}
    path = archive_path(conf, key)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x" * 100)
    path.with_suffix(SIDECAR_SUFFIX).write_text(json.dumps({"size": 100, "inode": path.stat().st_ino}))
    assert usable_archive(conf) == path
    other_java.write_text("#!/bin/sh\n# upgraded\n")
    assert archive_key() != key
    with caplog.at_level(logging.INFO, logger=class_archive.__name__):
        assert usable_archive(conf) is None
    assert "recorded for another" in caplog.text and path.name in caplog.text
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert archive_key() is None and usable_archive(conf) is None


def test_the_archive_option_joins_the_users_and_yields_to_their_own_choice() -> None:
    archive = Path("/srv/storm-local/spark/spark-classes-k.jsa")
    extra = "spark.driver.extraJavaOptions"
    options: dict[str, Any] = {"spark.app.name": "a", extra: "-Xmx2g"}
    assert with_archive(options, archive) == {**options, JAVA_OPTIONS_KEY: f"-XX:SharedArchiveFile={archive}"}
    assert with_archive({JAVA_OPTIONS_KEY: "-Dx=1"}, archive) == {
        JAVA_OPTIONS_KEY: f"-Dx=1 -XX:SharedArchiveFile={archive}"}
    for key in (extra, JAVA_OPTIONS_KEY):
        for own in ("-Xshare:off", "-XX:SharedArchiveFile=/opt/mine.jsa", "-XX:ArchiveClassesAtExit=/tmp/a.jsa"):
            assert with_archive({key: f"-Xmx2g {own}"}, archive) is None


def test_the_command_fails_in_one_line_without_java(tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = _env(PATH=str(empty), JAVA_HOME=str(tmp_path / "no-jdk"))
    run = subprocess.run([sys.executable, "-m", "stormpy.cli", "spark-archive", "-c", f"storm.local.dir={tmp_path}"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == \
        "stormpy: error: no java found ($JAVA_HOME/bin/java or java on PATH): Spark needs Java 17"


def test_the_command_fails_in_one_line_without_pyspark(tmp_path: Path) -> None:
    hide = ("import sys; sys.modules['pyspark'] = None; from stormpy.cli import main; "
            f"main(['spark-archive', '-c', 'storm.local.dir={tmp_path}'])")
    run = subprocess.run([sys.executable, "-c", hide], env=_env(), capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        "stormpy: error: stormpy spark-archive needs the 'spark' extra (pyspark is not installed): "
        "pip install 'stormpy-streams[spark]'"]


def test_an_unwritable_directory_is_one_line(tmp_path: Path) -> None:
    if class_archive._java() is None:
        pytest.skip("skipped: no java (Spark needs Java 17)")
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = subprocess.run([sys.executable, "-m", "stormpy.cli", "spark-archive", "-c", f"storm.local.dir={blocker}"],
                         env=_env(), capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1].startswith(
        f"stormpy: error: cannot write the Spark class archive in {blocker}/spark: ")


@needs_java
def test_the_start_benchmark_runs_both_ways_and_prints_its_figures(
        recorded: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """benchmarks/spark_start.py (docs/reference/benchmarks.md) at one run of each, on the archive
    the module recorded."""
    _recorded_archive(recorded)
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "spark_start.py"), "--runs", "1",
                          "--local-dir", str(recorded[0])], env=_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "recorded" not in run.stdout, "the archive in --local-dir was not used"
    for line in ("run 1 with the archive: session ", "run 1          without: session ",
                 "bare JVM start (java -version): median ", "with the archive / without: session "):
        assert line in run.stdout, run.stdout


def test_a_second_recording_at_once_is_refused_in_one_line(tmp_path: Path) -> None:
    if class_archive._java() is None:
        pytest.skip("skipped: no java (Spark needs Java 17)")
    (tmp_path / "spark").mkdir()
    with open(tmp_path / "spark" / class_archive.LOCK_NAME, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)       # as a recording in progress holds it
        run = subprocess.run([sys.executable, "-m", "stormpy.cli", "spark-archive", "-c",
                              f"storm.local.dir={tmp_path}"], env=_env(), capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == \
        f"stormpy: error: another stormpy spark-archive is recording in {tmp_path}/spark"


def test_a_worker_looks_for_the_archive_in_its_supervisors_local_dir(tmp_path: Path) -> None:
    """A task's config is its topology's, with the default (relative) storm.local.dir; in a worker the
    archive is looked for in the supervisor's directory, which the worker's own config names."""
    look = "from stormpy.spark.class_archive import archive_dir\nprint(archive_dir({'storm.local.dir': 'storm-local'}))\n"
    in_worker = ("from stormpy.worker.worker import Worker\n"
                 "Worker({'storm.local.dir': '/srv/host-local'}, 'topo-1', 'sup-1', 6700, 'worker-1')\n" + look)
    for script, expected in ((in_worker, "/srv/host-local/spark"),
                             (look, str(tmp_path.resolve() / "storm-local" / "spark"))):
        run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(), capture_output=True,
                             text=True, timeout=60)
        assert run.returncode == 0 and run.stdout.strip() == expected, run.stdout + run.stderr
