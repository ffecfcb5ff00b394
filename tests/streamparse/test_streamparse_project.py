"""A streamparse project run unchanged: the quickstart word count in streamparse's layout
(``config.json``, ``topologies/``, ``src/``), run by ``stormpy local`` as a user runs it, and the
pieces ``stormpy submit`` builds from it (the archive with ``src/``, config.json's Nimbus).

The fixture's components import ``from streamparse import ...``; streamparse is not installed
here, so those imports go through stormpy's aliases.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "wordcount"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "wordcount"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def stormpy(cwd: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "stormpy.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def final_totals(output: str) -> tuple[int, int, int]:
    found = re.findall(r"spout tuples emitted=(\d+) acked=(\d+) failed=(\d+)", output)
    assert found, output
    emitted, acked, failed = found[-1]
    return int(emitted), int(acked), int(failed)


def test_streamparse_is_really_absent() -> None:
    """The alias must work without streamparse: this environment must not have it."""
    result = subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                             "print(u.find_spec('streamparse'), u.find_spec('pystorm'))"],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.stdout.strip() == "None None"


def test_local_prod_environment_runs_the_quickstart_and_acks_every_tuple(project: Path) -> None:
    result = stormpy(project, "local", "topologies/wordcount.py", "--duration", "5", "-e", "prod")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    # prod: 2 spout tasks x wordcount.words.limit 400 (config.json's options), 3 count tasks + acker
    assert "with 6 executors, 6 tasks" in out, out
    assert final_totals(out) == (800, 800, 0), out
    assert "count bolt conf flag=from-class" in out        # the class attribute `config`
    assert "resolves to stormpy's compatible modules" in out
    assert out.count("resolves to stormpy's compatible modules") == 1


def test_local_beta_environment_picks_the_other_par_and_options(project: Path) -> None:
    result = stormpy(project, "local", "topologies/wordcount.py", "--duration", "3", "--environment", "beta")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "with 3 executors, 3 tasks" in out, out
    assert final_totals(out) == (100, 100, 0), out


def test_dict_par_without_environment_is_one_line_naming_the_keys(project: Path) -> None:
    result = stormpy(project, "local", "topologies/wordcount.py", "--duration", "1")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("stormpy: error:")]
    assert len(errors) == 1 and "word_spout" in errors[0] and "(beta, prod)" in errors[0] \
        and "-e/--environment" in errors[0], result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_environment_names_the_environments(project: Path) -> None:
    result = stormpy(project, "local", "topologies/wordcount.py", "-e", "dev", "--duration", "1")
    assert result.returncode == 1
    assert "environment 'dev' is not in" in result.stderr and "(envs: beta, prod)" in result.stderr


def test_running_from_elsewhere_finds_the_project_by_the_topologies_dir(project: Path) -> None:
    (project / "config.json").unlink()     # src/ next to topologies/ is enough
    result = stormpy(project.parent, "local", "wordcount/topologies/wordcount.py", "-e", "beta", "--duration", "3")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert final_totals(out)[1] == 100


def test_submit_archive_holds_src_packages_at_the_root(project: Path, tmp_path: Path, monkeypatch) -> None:
    from stormpy.client.submit import build_code_archive
    from stormpy.streamparse_compat.project import load_project

    monkeypatch.chdir(project)
    found = load_project("topologies/wordcount.py", "prod")
    assert found is not None and found.src == project / "src" and found.env_name == "prod"
    assert found.nimbus_overrides() == {"nimbus.seeds": ["localhost"], "nimbus.thrift.port": 6627}
    assert found.options()["wordcount.words.limit"] == 400
    target = tmp_path / "code.zip"
    build_code_archive(project / "topologies" / "wordcount.py", target, found.src)
    names = set(zipfile.ZipFile(target).namelist())
    assert {"wordcount.py", "bolts/wordcount.py", "bolts/__init__.py", "spouts/words.py"} <= names


def test_submit_archive_refuses_a_name_clash(project: Path, tmp_path: Path) -> None:
    from stormpy.client.submit import build_code_archive
    from stormpy.errors import UserError

    (project / "src" / "wordcount.py").write_text("# clashes with topologies/wordcount.py\n")
    with pytest.raises(UserError, match="would both be 'wordcount.py'"):
        build_code_archive(project / "topologies" / "wordcount.py", tmp_path / "code.zip", project / "src")


def test_submit_uses_config_json_nimbus(project: Path) -> None:
    """No Nimbus runs on the port config.json names: the connection error names that address."""
    config = json.loads((project / "config.json").read_text())
    config["envs"]["prod"]["nimbus"] = "127.0.0.1:1"
    (project / "config.json").write_text(json.dumps(config))
    result = stormpy(project, "submit", "topologies/wordcount.py", "-e", "prod")
    assert result.returncode == 1
    assert "127.0.0.1:1" in result.stderr, result.stderr


def test_redis_example_in_memory_topology_runs_unchanged(tmp_path: Path) -> None:
    """streamparse's examples/redis layout (top-level modules src/bolts.py and src/spouts.py,
    one environment in config.json, so no -e needed). Its spout emits without tuple ids, so
    its tuples are not tracked (acked stays 0, as in Storm); the bolts execute them all."""
    root = tmp_path / "redis"
    shutil.copytree(FIXTURE.parent / "redis", root, ignore=shutil.ignore_patterns("__pycache__"))
    result = stormpy(root, "local", "topologies/wordcount_mem.py", "--duration", "3")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    emitted = int(re.findall(r"spout tuples emitted=(\d+)", out)[-1])
    executed = int(re.findall(r"bolt tuples executed=(\d+)", out)[-1])
    assert emitted > 100 and executed == emitted, out
    assert "no component reported an error" in out
