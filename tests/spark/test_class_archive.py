"""`stormpy spark-archive` and the sessions that map its archive (stormpy.spark.class_archive).

The archive is recorded once for the module by the command the operate-cluster page shows; each
session under test runs in a child process of its own (one SparkContext a process: the Spark
tests' shared session lives in this one).
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stormpy.spark import class_archive
from stormpy.spark.class_archive import SIDECAR_SUFFIX, archive_key, archive_path, usable_archive, with_archive

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "how-to" / "operate-cluster.md"

pytestmark = pytest.mark.skipif(shutil.which("java") is None and not os.environ.get("JAVA_HOME"),
                                reason="skipped: no java (Spark needs Java 17)")

# A session started in a child process, with the class loading logged by the JVM itself.
SESSION = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
from stormpy.spark.session import acquire_session, release_session
conf = json.loads(sys.argv[1])
print("rows", acquire_session(conf).range(7).count(), flush=True)
release_session("test done")
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}


def _start_session(local_dir: Path, cwd: Path, class_log: Path) -> subprocess.CompletedProcess[str]:
    conf = {"storm.local.dir": str(local_dir), "spark.master": "local[1]", "spark.ui.enabled": False,
            # the user's own JVM options: kept beside the archive's
            "spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={class_log}"}
    return subprocess.run([sys.executable, "-c", SESSION, json.dumps(conf)], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=240)


def _shared_from_archive(class_log: Path) -> int:
    """Classes the JVM took from the dynamic (top) archive, as its own class+load log says."""
    return class_log.read_text().count("source: shared objects file (top)")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A scratch directory where the page's command ran: its storm.local.dir is ``storm-local``."""
    root = tmp_path_factory.mktemp("spark-archive")
    blocks = re.findall(r"^```bash\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    assert blocks == ["stormpy spark-archive\n"], blocks
    # An archive left by another java or pyspark: the command removes it.
    stale = root / "storm-local" / "spark" / "spark-classes-0123456789abcdef.jsa"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    stale.with_suffix(SIDECAR_SUFFIX).write_text('{"size": 3}')
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "stormpy").write_text(f"#!/bin/sh\nexec {sys.executable} -m stormpy.cli \"$@\"\n")
    (bin_dir / "stormpy").chmod(0o755)
    env = {**_env(), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", blocks[0]], cwd=root, env=env,
                          capture_output=True, text=True, timeout=400)
    return root, done


def test_the_pages_command_records_an_archive_and_removes_other_ones(
        recorded: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    root, done = recorded
    assert done.returncode == 0, done.stdout + done.stderr
    key = archive_key()
    assert key is not None
    archive = archive_path({"storm.local.dir": str(root / "storm-local")}, key)
    assert f"wrote {archive} (" in done.stdout
    assert "... 10 s" in done.stdout, "no progress while the job ran"
    assert json.loads(archive.with_suffix(SIDECAR_SUFFIX).read_text())["size"] == archive.stat().st_size > 10_000_000
    assert sorted(p.name for p in archive.parent.glob("spark-classes-*")) == [archive.name, archive.stem + ".json"]
    assert not list(archive.parent.glob(".recording-*"))


def test_a_session_maps_the_archive_and_keeps_the_users_java_options(
        recorded: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    root, done = recorded
    assert done.returncode == 0, done.stdout + done.stderr
    class_log = tmp_path / "classes.log"
    run = _start_session(root / "storm-local", tmp_path, class_log)
    assert run.returncode == 0 and "rows 7" in run.stdout, run.stdout + run.stderr
    assert "classes mapped from " in run.stdout
    assert _shared_from_archive(class_log) > 5000


def test_a_session_without_an_archive_starts_as_before(tmp_path: Path) -> None:
    class_log = tmp_path / "classes.log"
    run = _start_session(tmp_path / "storm-local", tmp_path, class_log)
    assert run.returncode == 0 and "rows 7" in run.stdout, run.stdout + run.stderr
    assert "classes mapped from" not in run.stdout
    assert _shared_from_archive(class_log) == 0


def test_a_driver_that_dies_on_its_archive_starts_without_it_and_the_archive_is_set_aside(
        recorded: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    """A truncated archive whose sidecar was made to agree (what no stormpy run writes): HotSpot
    maps it and dies of SIGBUS; the session must still start, and later ones not try it again."""
    root, done = recorded
    assert done.returncode == 0, done.stdout + done.stderr
    key = archive_key()
    assert key is not None
    good = archive_path({"storm.local.dir": str(root / "storm-local")}, key)
    broken = archive_path({"storm.local.dir": str(tmp_path / "storm-local")}, key)
    broken.parent.mkdir(parents=True)
    with open(good, "rb") as src:
        broken.write_bytes(src.read(good.stat().st_size // 4))
    broken.with_suffix(SIDECAR_SUFFIX).write_text(json.dumps({"size": broken.stat().st_size}))
    run = _start_session(tmp_path / "storm-local", tmp_path, tmp_path / "classes.log")
    assert run.returncode == 0 and "rows 7" in run.stdout, run.stdout + run.stderr
    assert "did not start with the class archive" in run.stdout
    assert not broken.exists() and not broken.with_suffix(SIDECAR_SUFFIX).exists()
    assert broken.with_name(broken.name + ".bad").exists()


# ---------------------------------------------------------------- without a JVM

def test_an_archive_is_used_only_whole(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = {"storm.local.dir": str(tmp_path)}
    key = archive_key()
    assert key is not None
    path = archive_path(conf, key)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x" * 100)
    assert usable_archive(conf) is None, "no sidecar yet: still being recorded"
    path.with_suffix(SIDECAR_SUFFIX).write_text('{"size": 100}')
    assert usable_archive(conf) == path
    path.write_bytes(b"x" * 40)
    with caplog.at_level(logging.WARNING, logger=class_archive.__name__):
        assert usable_archive(conf) is None
    assert "has 40 bytes where 100 bytes were written" in caplog.text


def test_the_archive_belongs_to_one_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = archive_key()
    other_java = tmp_path / "jdk" / "bin" / "java"
    other_java.parent.mkdir(parents=True)
    other_java.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert archive_key() not in (None, key)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert archive_key() is None


def test_the_archive_option_joins_the_users_and_yields_to_their_own_choice() -> None:
    archive = Path("/srv/storm-local/spark/spark-classes-k.jsa")
    assert with_archive({"spark.app.name": "a"}, archive) == {
        "spark.app.name": "a", "spark.driver.extraJavaOptions": f"-XX:SharedArchiveFile={archive}"}
    assert with_archive({"spark.driver.extraJavaOptions": "-Xmx2g"}, archive) == {
        "spark.driver.extraJavaOptions": f"-Xmx2g -XX:SharedArchiveFile={archive}"}
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/opt/mine.jsa"):
        assert with_archive({"spark.driver.extraJavaOptions": f"-Xmx2g {own}"}, archive) is None


def test_the_command_fails_in_one_line_without_java(tmp_path: Path) -> None:
    env = {**_env(), "PATH": os.path.dirname(sys.executable), "JAVA_HOME": str(tmp_path / "no-jdk")}
    run = subprocess.run([sys.executable, "-m", "stormpy.cli", "spark-archive", "-c", f"storm.local.dir={tmp_path}"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == \
        "stormpy: error: no java found ($JAVA_HOME/bin/java or java on PATH): Spark needs Java 17"
