"""The distribution as a user installs it (issue 28): ``python -m build`` makes the wheel and
sdist, the wheel goes into a clean virtualenv WITHOUT extras (no PySpark, Redis or Kafka
client), the word count runs there with ``stormpy local``, and a feature whose extra is
missing answers with one line naming it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from stormpy.extras import DISTRIBUTION
from stormpy.testing import free_port

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pyspark", "pyarrow", "pandas", "redis", "confluent_kafka")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SPARK_TOPOLOGY = textwrap.dedent('''\
    from stormpy.trident import Count, Function, PartitionedSpout, SparkState, TridentTopology


    class Words(PartitionedSpout):
        outputs = ["word"]

        def emit_partition_batch(self, txid, partition, collector):
            collector.emit(["word"])


    class ToSpark(TridentTopology):
        def build(self, conf):
            (self.new_stream("words", Words())
                 .partition_persist(SparkState(path="/tmp/never-written"), ["word"], SparkState.updater()))
    ''')


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("build", reason="python -m build needs the 'build' package (the test extra)")
    out = tmp_path_factory.mktemp("dist")
    # from a copy: setuptools writes egg-info and build/ into the source tree it builds
    source = tmp_path_factory.mktemp("source") / "stormpy"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "sparse-venv", "*.egg-info", "build", "dist", "__pycache__", "storm-local", "logs", ".venv"))
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)],
                          capture_output=True, text=True, timeout=420, env=clean_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean virtualenv holding the wheel and its core dependencies only."""
    root = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    wheel = next(dist.glob("*.whl"))
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install",
                           "--no-input", "--disable-pip-version-check", str(wheel)],
                          capture_output=True, text=True, timeout=420, env=clean_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root


def clean_env() -> dict[str, str]:
    """This environment without PYTHONPATH: nothing of the checkout may leak into the venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def run(venv: Path, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A command of the venv, with nothing of this checkout on its path."""
    env = clean_env()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=env, cwd=str(cwd))


def test_wheel_and_sdist_are_the_stormpy_streams_distribution(dist: Path) -> None:
    wheel = next(dist.glob("*.whl"))
    sdist = next(dist.glob("*.tar.gz"))
    assert wheel.name.startswith("stormpy_streams-") and sdist.name.startswith("stormpy_streams-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "stormpy/idl/storm.thrift" in names and "stormpy/cli.py" in names
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert f"Name: {DISTRIBUTION}" in metadata
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    core = [line for line in requires if "extra ==" not in line]
    assert not any(heavy in line.lower() for line in core for heavy in ("pyspark", "pyarrow", "pandas", "redis"))
    for extra in ("spark", "redis", "kafka", "connect", "test", "all"):
        assert f"Provides-Extra: {extra}" in metadata
    with tarfile.open(sdist) as tar:
        members = tar.getnames()
    assert any(m.endswith("/pyproject.toml") for m in members)
    assert any(m.endswith("/storm.thrift") for m in members)


def test_clean_venv_has_no_heavy_dependencies_and_runs_the_word_count(venv: Path, tmp_path: Path) -> None:
    probe = "import importlib.util as u, sys; print([m for m in sys.argv[1:] if u.find_spec(m)])"
    found = run(venv, str(venv / "bin" / "python"), "-c", probe, *HEAVY, cwd=tmp_path)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr
    where = run(venv, str(venv / "bin" / "python"), "-c", "import stormpy; print(stormpy.__file__)", cwd=tmp_path)
    assert where.stdout.strip().startswith(str(venv)), where.stdout + where.stderr   # the wheel, not the checkout
    proc = run(venv, "stormpy", "local", str(REPO / "examples" / "wordcount.py"), "--duration", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "no component reported an error" in proc.stdout + proc.stderr


def test_spark_state_without_the_spark_extra_is_one_line_naming_it(venv: Path, tmp_path: Path) -> None:
    topology = tmp_path / "to_spark.py"
    topology.write_text(SPARK_TOPOLOGY)
    proc = run(venv, "stormpy", "local", str(topology), "--duration", "3", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("stormpy")]   # not the INFO log lines
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("stormpy: error: SparkState needs the 'spark' extra")
    assert lines[0].endswith(f"pip install '{DISTRIBUTION}[spark]'")


def test_spark_imports_in_a_topology_file_name_the_extra(venv: Path, tmp_path: Path) -> None:
    for number, line in enumerate(["from stormpy.spark import SparkSinkBolt",
                                   "from stormpy.spark.sink import SparkSinkBolt", "import pyspark"]):
        topology = tmp_path / f"sink{number}.py"
        topology.write_text(line + "\n")
        proc = run(venv, "stormpy", "local", str(topology), cwd=tmp_path)
        lines = [text for text in proc.stderr.splitlines() if text.startswith("stormpy")]
        assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert lines[0].endswith(f"pip install '{DISTRIBUTION}[spark]'"), lines[0]


def test_the_trident_spark_example_names_the_extra(venv: Path, tmp_path: Path) -> None:
    proc = run(venv, "stormpy", "local", str(REPO / "examples" / "trident_spark.py"), "--duration", "3",
               "-c", f"tspark.output={tmp_path / 'out'}", cwd=tmp_path)
    lines = [text for text in proc.stderr.splitlines() if text.startswith("stormpy")]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0] == ("stormpy: error: SparkState needs the 'spark' extra (pyspark is not installed): "
                        f"pip install '{DISTRIBUTION}[spark]'")


def test_dev_zookeeper_without_spark_says_where_the_jars_come_from(venv: Path, tmp_path: Path) -> None:
    proc = run(venv, "stormpy", "dev-zookeeper", "-c", f"storm.zookeeper.port={free_port()}",
               "-c", f"dev.zookeeper.path={tmp_path / 'zk'}", cwd=tmp_path, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("stormpy")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"pip install '{DISTRIBUTION}[spark]'" in lines[0] and "--zookeeper-home" in lines[0]
